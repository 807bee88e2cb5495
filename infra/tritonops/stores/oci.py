"""An OCI registry store (``oci://REGISTRY/REPO``): read by agents, written by the controller, over
:mod:`.oci_api` (the registry's HTTP client; the store's layout in its repository is described there).

**Reads.** Blobs (files, a release's manifest) are read by digest, bounded and checked like any store's;
a pointer, a root, an id record or a release's signatures from the artifact its tag names, conditionally
(``If-None-Match`` the manifest's digest: an idle poll is one request answered 304). Registry auth and the
CA to trust come from the environment (``TRITONOPS_REGISTRY_AUTH``, ``TRITONOPS_REGISTRY_CA``). Agents
write no reports into a registry.

**Writes.**

Blobs are uploaded once by digest (a HEAD first: a file already in the repository is not sent again);
a release's manifest becomes an artifact (``artifactType`` :data:`oci.RELEASE_TYPE`) tagged
``release-<digest>`` whose layers are its manifest, its signatures and every file, titled with its
path; pointers, roots and id records are small artifacts tagged ``channel-NAME``, ``root-N``, ``id-ID``.

**Moving a tag.** The OCI distribution API has no compare-and-swap for tags: a registry may ignore
``If-Match`` on a manifest PUT. A move (:meth:`OciWriter.swap`) therefore (1) holds a lock on the
controller for that tag (``$XDG_CACHE_HOME/tritonops/registry-locks``), (2) sends ``If-Match`` the
manifest digest it read (``If-None-Match: *`` for the first write) and reads again on a 412, where a
registry implements it, and (3) reads the tag back after writing: another manifest there means someone
moved it meanwhile, and the move is made again on top of theirs. What stays the operator's rule: one
controller moves a given channel at a time (a CI concurrency group); two controllers writing within
the same moment can still lose one move from the history. Agents never go back either way: every
pointer version is signed and must grow.
"""

from __future__ import annotations

import io
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import lock, netio
from ..core.errors import StoreError, TooLong
from ..core.keys import BLOB_TIMEOUT, CHANNELS_PREFIX, METADATA_TIMEOUT, POINTER_MAX, SIGNATURE_MAX
from ..core.names import MANIFEST_FILE, MANIFEST_MAX
from ..release_format import manifest
from . import oci_api as api
from .base import SWAP_TRIES, Kind, StoreBase, WriterBase, download_response, read_only


class OciStore(StoreBase):
    """An agent's reads of one registry repository holding releases; counts its ``requests`` and obeys
    ``cancel``."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.registry = api.Registry(url, owner=self)
        self._validators: dict[str, str] = {}


    def blob(self, key: str, headers: dict[str, str], limit: int, deadline: float,
             sink: Callable[[bytes], None] | None = None) -> netio.Response:
        """A blob's GET (the registry may redirect it to its storage: followed without credentials)."""
        kind, ref, _ = api.locate(key)
        if kind != "blob":
            raise StoreError(f"{self.url}/{key}: not a blob")
        return self.registry.request("GET", f"blobs/{ref}", headers=headers, limit=limit, deadline=deadline,
                                     sink=sink, what=f"{self.url}/{key}")

    def _blob_bytes(self, key: str, digest: str, limit: int) -> bytes:
        resp = self.blob(key, {}, limit, self.timeout)
        if resp.status != 200:
            raise StoreError(f"{self.url}/{key}: HTTP {resp.status} {netio.reason(resp.status)}")
        if api.digest_of(resp.body) != digest:
            raise StoreError(f"{self.url}/{key}: content sha256 {api.digest_of(resp.body)[7:23]} is not the "
                             f"{digest[7:23]} asked for")
        return resp.body

    def get(self, key: str, limit: int = MANIFEST_MAX, conditional: bool = False) -> bytes | None:
        """A blob by digest (checked), or the document of the artifact a tag names; None when
        ``conditional`` and the tag names the same manifest as at the last read."""
        kind, ref, media = api.locate(key)
        where = f"{self.url}/{key}"
        if kind == "blob":
            return self._blob_bytes(key, ref, limit)
        etag = self._validators.get(key) if conditional else None
        resp = self.registry.manifest(ref, api.OCI_MANIFEST_MAX, self.timeout, etag)
        if resp.status == 304 and conditional:
            return None
        if resp.status == 404:
            raise StoreError(f"{where}: not found (no tag {ref} in {self.registry.repo})")
        if resp.status != 200:
            raise StoreError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}")
        layer, data = api.layer_bytes(resp.body, media, f"{self.url}:{ref}")
        if data is None:  # not embedded (written by another tool): the blob, by its digest
            if layer is None or layer["size"] > limit:
                raise TooLong(f"{where}: the document is larger than the {limit} bytes allowed")
            digest = str(layer["digest"])
            data = self._blob_bytes(f"blobs/sha256/{digest.removeprefix('sha256:')}", digest, limit)
        if len(data) > limit:
            raise TooLong(f"{where}: the document is larger than the {limit} bytes allowed")
        digest = resp.headers.get("Docker-Content-Digest") or api.digest_of(resp.body)
        self._validators[key] = resp.headers.get("ETag") or f'"{digest}"'
        return data

    def forget(self, key: str) -> None:
        self._validators.pop(key, None)

    def download(self, key: str, dest: Path, sha256: str, size: int,
                 on_chunk: Callable[[bytes], None] | None = None) -> int:
        """A blob by digest, within ``blob_timeout`` seconds, never more than ``size`` bytes."""
        return download_response(f"{self.url}/{key}", dest, sha256, size, on_chunk,
                                 lambda sink, limit: self.blob(key, {}, limit, self.blob_timeout, sink=sink))

    def put(self, key: str, data: bytes, timeout: float = METADATA_TIMEOUT, limit: int = POINTER_MAX) -> None:
        raise read_only(self)


class OciWriter(WriterBase):
    """The controller's writes of releases, pointers and roots into one registry repository."""

    def __init__(self, url: str, s3_endpoint: str | None, reader: OciStore) -> None:
        self.url = url
        self.reader = reader
        self.registry = self.reader.registry
        self._signatures: dict[str, bytes] = {}  # a release's signatures, written just before its manifest
        self._pushed: set[str] = set()

    def get(self, key: str, limit: int = POINTER_MAX) -> bytes:
        return self.reader.get(key, limit=limit) or b""

    def delete(self, key: str) -> None:
        """Nothing: a registry keeps an unreferenced blob until its garbage collection (nothing names it,
        so no node reads it)."""

    def exists(self, key: str) -> bool:
        kind, ref, _ = api.locate(key)
        return self.registry.exists("blob" if kind == "blob" else "manifest", ref, METADATA_TIMEOUT, push=True)

    def _blob(self, data: bytes | Path, digest: str | None = None,
              on_bytes: Callable[[int], None] | None = None) -> str:
        """Upload one blob unless the repository has it; its digest."""
        digest = api.digest_of(data) if isinstance(data, bytes) else digest or "sha256:" + manifest.sha256_file(data)
        if digest in self._pushed or self.registry.exists("blob", digest, METADATA_TIMEOUT, push=True):
            self._pushed.add(digest)
            return digest
        if isinstance(data, Path):
            try:
                with _Counted(data.open("rb", buffering=0), on_bytes) if on_bytes else data.open("rb") as fh:
                    self.registry.push_blob(digest, fh, data.stat().st_size, BLOB_TIMEOUT)
            except OSError as e:
                raise StoreError(f"{data}: cannot read ({e.strerror or e})") from None
        else:
            self.registry.push_blob(digest, io.BytesIO(data), len(data), METADATA_TIMEOUT)
        self._pushed.add(digest)
        return digest

    def put(self, key: str, data: bytes | Path, content_type: str = "application/octet-stream",
            on_bytes: Callable[[int], None] | None = None) -> None:
        """A file's blob; a release's manifest as its artifact; a pointer, root or id record as a tag."""
        kind, ref, media = api.locate(key)
        if kind == "blob" and key.startswith("blobs/"):
            self._blob(data, ref, on_bytes)
            return
        raw = data.read_bytes() if isinstance(data, Path) else data
        if kind == "blob":  # a release's manifest: its blob, then the release artifact naming every file
            self._blob(raw)
            self._release(ref.removeprefix("sha256:"), raw)
        elif media == api.SIGNATURES_LAYER:
            self._signatures[ref.removeprefix("release-")] = raw
            self._blob(raw)
        else:
            self.registry.put_manifest(ref, self._document(key, raw), METADATA_TIMEOUT)

    def _document(self, key: str, raw: bytes) -> bytes:
        """The small artifact that carries one pointer, root or id record (also embedded in its descriptor)."""
        self._blob(raw)
        self._blob(b"{}")
        layer = api.descriptor(api.DOCUMENT_LAYER, raw, title=key.rsplit("/", 1)[-1], embed=True)
        return api.image_manifest(api.METADATA_TYPE, [layer], {api.KEY_ANNOTATION: key})

    def _release(self, digest: str, raw: bytes) -> None:
        """Tag ``release-<digest>``: the manifest, its signatures and every file of the release as layers."""
        doc = manifest.parse_release(raw, f"{self.url}/releases/{digest}")
        sigs = self._signatures.pop(digest, None)
        if sigs is None and self.registry.exists("manifest", f"release-{digest}", METADATA_TIMEOUT, push=True):
            # the manifest written again: its signatures kept
            sigs = self.reader.get(f"releases/{digest}/manifest.json.sigs", limit=SIGNATURE_MAX)
        self._blob(b"{}")
        layers = [api.descriptor(api.MANIFEST_LAYER, raw, title=MANIFEST_FILE)]
        if sigs is not None:  # none: an unsigned release, which every agent refuses
            layers.append(api.descriptor(api.SIGNATURES_LAYER, sigs, title=MANIFEST_FILE + ".sigs", embed=True))
        layers += [{"mediaType": api.FILE_LAYER, "digest": f"sha256:{sha}", "size": doc["lengths"][rel],
                    "annotations": {api.TITLE: rel}} for rel, sha in sorted(doc["files"].items())]
        notes = {api.KEY_ANNOTATION: f"releases/{digest}/manifest.json", "io.tritonops.release": doc["release"],
                 "io.tritonops.digest": digest}
        self.registry.put_manifest(f"release-{digest}", api.image_manifest(api.RELEASE_TYPE, layers, notes),
                                   METADATA_TIMEOUT)

    def names(self, prefix: str, suffix: str = ".json") -> list[str]:
        """The channel keys (``channels/NAME.json``) the repository's ``channel-NAME`` tags stand for; a
        registry keeps no status reports (a UsageError for ``reports/``)."""
        if prefix != CHANNELS_PREFIX or suffix != ".json":
            api.locate(prefix + "x" + suffix)  # the registry's own refusal of what it cannot hold
            return []
        resp = self.registry.request("GET", "tags/list?n=10000", limit=api.OCI_MANIFEST_MAX, deadline=METADATA_TIMEOUT)
        if resp.status == 404:
            return []
        if resp.status != 200:
            raise StoreError(f"{self.url}: cannot list the tags: HTTP {resp.status}")
        try:
            tags = json.loads(resp.body).get("tags") or []
        except (ValueError, AttributeError):
            raise StoreError(f"{self.url}: the tag list is not JSON") from None
        return sorted(f"{CHANNELS_PREFIX}{t[len('channel-'):]}.json" for t in tags
                      if isinstance(t, str) and t.startswith("channel-"))

    def _current(self, tag: str) -> tuple[str | None, bytes | None]:
        """The digest of the manifest ``tag`` names now and its document (None, None: no such tag)."""
        resp = self.registry.manifest(tag, api.OCI_MANIFEST_MAX, METADATA_TIMEOUT)
        if resp.status == 404:
            return None, None
        if resp.status != 200:
            raise StoreError(f"{self.url}:{tag}: HTTP {resp.status}")
        _, data = api.layer_bytes(resp.body, api.DOCUMENT_LAYER, f"{self.url}:{tag}")
        return resp.headers.get("Docker-Content-Digest") or api.digest_of(resp.body), data

    def swap(self, key: str, change: Callable[[bytes | None], bytes | None], what: str = "move",
             content_type: str = "application/json") -> bytes | None:
        """Move a tag (see the module's rule): conditional where the registry honours it, read back always."""
        _, tag, _ = api.locate(key)
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tritonops" / "registry-locks"
        folder = folder / self.registry.host.replace(":", "_") / self.registry.repo.replace("/", "_") / tag
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"{folder}: cannot make the lock folder ({e.strerror or e})") from None
        with lock.held(folder, f"tritonops release {what}"):
            for attempt in range(SWAP_TRIES):
                current, old = self._current(tag)
                if current is not None and old is None:
                    raise StoreError(f"{self.url}:{tag}: the document is not embedded; not written by tritonops")
                new = change(old)
                if new is None:
                    return None
                raw = self._document(key, new)
                status = self.registry.put_manifest(tag, raw, METADATA_TIMEOUT, if_match=f'"{current}"' if current
                                                    else None, create=current is None)
                if status != 412 and self._current(tag)[0] == api.digest_of(raw):
                    return new
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # someone else moved it: read again
        raise StoreError(f"{self.url}:{tag}: moved by someone else on each of {SWAP_TRIES} tries while this {what} "
                         "was being written; run it again")



class _Counted(io.BufferedReader):
    """A file being uploaded that tells ``on_bytes`` each chunk's size as the HTTP client reads it."""

    def __init__(self, raw: io.RawIOBase | io.FileIO, on_bytes: Callable[[int], None]) -> None:
        super().__init__(raw)
        self.on_bytes = on_bytes

    def read(self, size: int | None = -1, /) -> bytes:
        chunk = super().read(size)
        if chunk:
            self.on_bytes(len(chunk))
        return chunk


KIND = Kind("oci", ("oci",), "oci://REGISTRY/REPO", reports=False, reads=OciStore, writes=OciWriter,
            ports={"oci": 443})  # the registry speaks https
