"""The agent's reads from an ``oci://REGISTRY/REPO`` store: :class:`store.Store`'s interface over :mod:`oci`.

``Store("oci://...")`` makes one of these. Blobs (files, a release's manifest) are read by digest,
bounded and checked like any store's; a pointer, a root, an id record or a release's signatures from
the artifact its tag names, conditionally (``If-None-Match`` the manifest's digest: an idle poll is one
request answered 304). Registry auth and the CA to trust come from the environment
(``TRITONOPS_REGISTRY_AUTH``, ``TRITONOPS_REGISTRY_CA``; :mod:`oci`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import netio, oci
from .errors import StoreError
from .manifest import MANIFEST_MAX
from .store import BLOB_TIMEOUT, METADATA_TIMEOUT, Store


class RegistryStore(Store):
    """Read-only access to an OCI registry repository holding releases (see :mod:`oci` for the layout)."""

    def __init__(self, url: str, s3_endpoint: str | None = None, timeout: float = METADATA_TIMEOUT,
                 blob_timeout: float = BLOB_TIMEOUT, cancel: threading.Event | None = None) -> None:
        self.url = url.rstrip("/")
        self.kind = "oci"
        self.timeout, self.blob_timeout = timeout, blob_timeout
        self._validators: dict[str, dict[str, str]] = {}
        self.registry = oci.Registry(self.url, cancel=cancel)

    @property
    def requests(self) -> int:
        return self.registry.requests

    @requests.setter
    def requests(self, value: int) -> None:
        self.registry.requests = value

    @property
    def cancel(self) -> threading.Event | None:
        return self.registry.cancel

    @cancel.setter
    def cancel(self, value: threading.Event | None) -> None:
        self.registry.cancel = value

    def _request(self, key: str, headers: dict[str, str], limit: int, deadline: float,
                 sink: Callable[[bytes], None] | None = None) -> netio.Response:
        """A blob's GET (the registry may redirect it to its storage: followed without credentials)."""
        kind, ref, _ = oci.locate(key)
        if kind != "blob":
            raise StoreError(f"{self.url}/{key}: not a blob")
        return self.registry.request("GET", f"blobs/{ref}", headers=headers, limit=limit, deadline=deadline,
                                     sink=sink, what=f"{self.url}/{key}")

    def get(self, key: str, limit: int = MANIFEST_MAX, conditional: bool = False) -> bytes | None:
        """A blob by digest (checked), or the document of the artifact a tag names; None when
        ``conditional`` and the tag names the same manifest as at the last read."""
        kind, ref, media = oci.locate(key)
        where = f"{self.url}/{key}"
        if kind == "blob":
            data = super().get(key, limit)
            if data is not None and oci.digest_of(data) != ref:
                raise StoreError(f"{where}: content sha256 {oci.digest_of(data)[7:23]} is not the {ref[7:23]} "
                                 "asked for")
            return data
        etag = self._validators.get(key, {}).get("etag") if conditional else None
        resp = self.registry.manifest(ref, oci.OCI_MANIFEST_MAX, self.timeout, etag)
        if resp.status == 304 and conditional:
            return None
        if resp.status == 404:
            raise StoreError(f"{where}: not found (no tag {ref} in {self.registry.repo})")
        if resp.status != 200:
            raise StoreError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}")
        layer, data = oci.layer_bytes(resp.body, media, f"{self.url}:{ref}")
        if data is None:  # not embedded (written by another tool): the blob, by its digest
            if layer is None or layer["size"] > limit:
                raise StoreError(f"{where}: the document is larger than the {limit} bytes allowed")
            data = super().get(f"blobs/sha256/{str(layer['digest']).removeprefix('sha256:')}", limit)
        if len(data or b"") > limit:
            raise StoreError(f"{where}: the document is larger than the {limit} bytes allowed")
        digest = resp.headers.get("Docker-Content-Digest") or oci.digest_of(resp.body)
        self._validators[key] = {"etag": resp.headers.get("ETag") or f'"{digest}"'}
        return data
