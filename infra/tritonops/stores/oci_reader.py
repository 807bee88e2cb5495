"""The agent's reads from an ``oci://REGISTRY/REPO`` store: what :class:`store.Store` does for that kind.

``Store("oci://...")`` holds one of these. Blobs (files, a release's manifest) are read by digest,
bounded and checked like any store's; a pointer, a root, an id record or a release's signatures from
the artifact its tag names, conditionally (``If-None-Match`` the manifest's digest: an idle poll is one
request answered 304). Registry auth and the CA to trust come from the environment
(``TRITONOPS_REGISTRY_AUTH``, ``TRITONOPS_REGISTRY_CA``; :mod:`oci`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core import netio
from ..core.errors import StoreError, TooLong
from . import oci_api as oci


class RegistryReader:
    """Reads of one registry repository holding releases (see :mod:`oci` for the layout) for ``store``,
    whose ``requests`` it counts and whose ``cancel`` it obeys."""

    def __init__(self, store: Any) -> None:
        self.url = store.url
        self.timeout = store.timeout
        self.registry = oci.Registry(self.url, owner=store)
        self._validators: dict[str, str] = {}

    def blob(self, key: str, headers: dict[str, str], limit: int, deadline: float,
             sink: Callable[[bytes], None] | None = None) -> netio.Response:
        """A blob's GET (the registry may redirect it to its storage: followed without credentials)."""
        kind, ref, _ = oci.locate(key)
        if kind != "blob":
            raise StoreError(f"{self.url}/{key}: not a blob")
        return self.registry.request("GET", f"blobs/{ref}", headers=headers, limit=limit, deadline=deadline,
                                     sink=sink, what=f"{self.url}/{key}")

    def _blob_bytes(self, key: str, digest: str, limit: int) -> bytes:
        resp = self.blob(key, {}, limit, self.timeout)
        if resp.status != 200:
            raise StoreError(f"{self.url}/{key}: HTTP {resp.status} {netio.reason(resp.status)}")
        if oci.digest_of(resp.body) != digest:
            raise StoreError(f"{self.url}/{key}: content sha256 {oci.digest_of(resp.body)[7:23]} is not the "
                             f"{digest[7:23]} asked for")
        return resp.body

    def get(self, key: str, limit: int, conditional: bool) -> bytes | None:
        """A blob by digest (checked), or the document of the artifact a tag names; None when
        ``conditional`` and the tag names the same manifest as at the last read."""
        kind, ref, media = oci.locate(key)
        where = f"{self.url}/{key}"
        if kind == "blob":
            return self._blob_bytes(key, ref, limit)
        etag = self._validators.get(key) if conditional else None
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
                raise TooLong(f"{where}: the document is larger than the {limit} bytes allowed")
            digest = str(layer["digest"])
            data = self._blob_bytes(f"blobs/sha256/{digest.removeprefix('sha256:')}", digest, limit)
        if len(data) > limit:
            raise TooLong(f"{where}: the document is larger than the {limit} bytes allowed")
        digest = resp.headers.get("Docker-Content-Digest") or oci.digest_of(resp.body)
        self._validators[key] = resp.headers.get("ETag") or f'"{digest}"'
        return data

    def forget(self, key: str) -> None:
        self._validators.pop(key, None)
