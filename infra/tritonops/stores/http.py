"""An HTTP(S) store: a mirror (any web server) serving the folder a controller publishes; read-only.

Pointers are read with conditional requests (ETag / If-None-Match, Last-Modified / If-Modified-Since),
so an idle poll costs one small request that answers 304. Every read is bounded in size (``limit``) and
in time (one overall deadline per request: ``timeout`` for metadata, ``blob_timeout`` for a file),
follows redirects only within the store's origin and is ended at once by ``cancel``; see :mod:`netio`.
:mod:`.s3` reads the same way, its requests signed.
"""

from __future__ import annotations

import email.utils
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import netio
from ..core.errors import StoreError
from ..core.keys import METADATA_TIMEOUT, POINTER_MAX
from ..core.names import MANIFEST_MAX
from .base import Kind, StoreBase, download_response, read_only


class HttpStore(StoreBase):
    """Reads of an ``http(s)://HOST/PATH`` store."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._validators: dict[str, dict[str, str]] = {}
        self.base = url.rstrip("/")

    def _http_url(self, key: str) -> str:
        return f"{self.base}/{urllib.parse.quote(key)}"

    def _signer(self, headers: dict[str, str]) -> Callable[[str], dict[str, str]]:
        """The headers of one request, for each URL it goes to (S3 signs them; a redirect again)."""
        return lambda target: headers

    def _request(self, key: str, headers: dict[str, str], limit: int, deadline: float,
                 sink: Callable[[bytes], None] | None = None, chunk_size: int = netio.CHUNK) -> netio.Response:
        """One GET of ``key`` under a deadline and a byte cap; a same-origin redirect is signed again for
        its URL, a redirect to another origin refused (netio)."""
        sign = self._signer(headers)
        self.requests += 1
        return netio.request(self._http_url(key), what=f"{self.url}/{key}", headers=sign, deadline=deadline,
                             limit=limit, error=StoreError, sink=sink, cancel=self.cancel, chunk_size=chunk_size)

    def get(self, key: str, limit: int = MANIFEST_MAX, conditional: bool = False) -> bytes | None:
        headers: dict[str, str] = {}
        old = self._validators.get(key, {}) if conditional else {}
        if "etag" in old:  # If-None-Match wins; some servers misread both together
            headers["If-None-Match"] = old["etag"]
        elif "modified" in old:
            headers["If-Modified-Since"] = old["modified"]
        resp = self._request(key, headers, limit, self.timeout)
        if resp.status == 304 and conditional:
            return None
        if not 200 <= resp.status < 300:
            raise StoreError(f"{self.url}/{key}: HTTP {resp.status} {netio.reason(resp.status)}")
        validators = {}
        if resp.headers.get("ETag"):
            validators["etag"] = resp.headers["ETag"]
        if resp.headers.get("Last-Modified") and _settled(resp.headers["Last-Modified"]):
            validators["modified"] = resp.headers["Last-Modified"]
        self._validators[key] = validators
        return resp.body

    def forget(self, key: str) -> None:
        self._validators.pop(key, None)

    def download(self, key: str, dest: Path, sha256: str, size: int,
                 on_chunk: Callable[[bytes], None] | None = None) -> int:
        """Within ``blob_timeout`` seconds in all, never more than ``size`` bytes."""
        return download_response(f"{self.url}/{key}", dest, sha256, size, on_chunk, lambda sink, limit: self._request(
            key, {}, limit, self.blob_timeout, sink=sink, chunk_size=netio.BLOB_CHUNK))

    def put(self, key: str, data: bytes, timeout: float = METADATA_TIMEOUT, limit: int = POINTER_MAX) -> None:
        raise read_only(self)


def _settled(last_modified: str) -> bool:
    """Last-Modified has one-second resolution: trust it for If-Modified-Since only when the object has
    not changed in the last two seconds (a second write in the same second would otherwise be missed)."""
    try:
        when = email.utils.parsedate_to_datetime(last_modified).timestamp()
    except (TypeError, ValueError):
        return False
    return when < time.time() - 2


KIND = Kind("http", ("http", "https"), "http(s)://HOST/PATH", reports=False, reads=HttpStore,
            writes_as="the folder an HTTP server publishes", ports={"http": 80, "https": 443})
