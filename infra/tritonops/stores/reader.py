"""Reading a release store: S3 (SigV4, or anonymous), HTTP(S), or a folder.

S3 requests are signed with the credentials ``aws_credentials.from_env`` finds, in botocore's order:
static ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``; MinIO, Ceph), then
IRSA (``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``, STS AssumeRoleWithWebIdentity), then EKS Pod
Identity (``AWS_CONTAINER_CREDENTIALS_FULL_URI`` + ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``); none of
them: anonymous. Temporary credentials are refreshed before they expire; a failure to get them is a
``CredentialsError`` (a StoreError: exit 3, retry later).

A store's layout (its keys) and the caps and timeouts of its reads are :mod:`tritonops.core.keys`'s.
Everything but the pointers is immutable. Pointers are read with conditional requests (ETag /
If-None-Match, Last-Modified / If-Modified-Since; a size+mtime stamp for folders), so an idle poll
costs one small request that answers 304. Every read is bounded in size (``limit``: a pointer or a
root by a fixed cap before it is verified, a manifest by the length its signed pointer states, a blob
by the length its signed manifest states) and in time (one overall deadline per request: ``timeout``
for metadata, ``blob_timeout`` for a file), follows redirects only within the store's origin and is
ended at once by ``cancel`` (the agent's SIGTERM); see :mod:`netio`.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from ..core import netio
from ..core.errors import StoreError, TooLong, UsageError
from ..core.fsio import read_bounded, write_atomic
from ..core.keys import BLOB_TIMEOUT, METADATA_TIMEOUT, POINTER_MAX
from ..core.names import MANIFEST_MAX
from . import aws_credentials
from .aws_credentials import Credentials, sigv4_headers


class Store:
    """Read-only access to a store URL: ``s3://bucket/prefix``, ``http(s)://host/path``, a folder, or
    ``oci://registry/repo`` (an OCI registry: its reads are :class:`oci_store.RegistryReader`'s)."""

    def __init__(self, url: str, s3_endpoint: str | None = None, timeout: float = METADATA_TIMEOUT,
                 blob_timeout: float = BLOB_TIMEOUT, cancel: threading.Event | None = None) -> None:
        """``timeout``: the overall deadline (connect, headers, body) of a pointer, manifest or signature
        read; ``blob_timeout`` that of one file's download; ``cancel``: set it to end a request at once."""
        if not url.strip():
            raise UsageError("store: empty; expected s3://BUCKET/PREFIX, http(s)://HOST/PATH or a folder")
        url = url.rstrip("/") or url
        self.url = url
        self.timeout, self.blob_timeout, self.cancel = timeout, blob_timeout, cancel
        self._validators: dict[str, dict[str, str]] = {}
        self.requests = 0
        self.credentials: aws_credentials.Provider | None = None  # found on the first S3 request
        self._credentials_lock = threading.Lock()
        self._credentials_found = False
        parts = urllib.parse.urlsplit(url)
        self.kind = parts.scheme or "file"
        if self.kind == "s3":
            self.bucket, self.prefix = parts.netloc, parts.path.strip("/")
            if not self.bucket:
                raise UsageError(f"{url}: expected s3://BUCKET/PREFIX")
            self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            endpoint = s3_endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            # Path-style on a given endpoint (S3-compatible stores), virtual-hosted on AWS.
            self.base = (f"{endpoint.rstrip('/')}/{self.bucket}" if endpoint
                         else f"https://{self.bucket}.s3.{self.region}.amazonaws.com")
        elif self.kind in ("http", "https"):
            self.base = url.rstrip("/")
        elif self.kind == "file":
            self.root = Path(parts.path if parts.scheme else url)
        elif self.kind == "oci":
            from .oci_reader import RegistryReader

            self.oci = RegistryReader(self)
        else:
            raise UsageError(f"{url}: store URLs are s3://BUCKET/PREFIX, http(s)://HOST/PATH, oci://REGISTRY/REPO "
                             "or a folder")

    def __str__(self) -> str:
        return self.url

    # --- requests ----------------------------------------------------------------------------

    def _http_url(self, key: str) -> str:
        if self.kind == "s3":
            return f"{self.base}/{urllib.parse.quote('/'.join(p for p in (self.prefix, key) if p))}"
        return f"{self.base}/{urllib.parse.quote(key)}"

    def _credentials(self) -> Credentials | None:
        """The S3 signing credentials, from the chain in aws_credentials (found once, refreshed as needed)."""
        with self._credentials_lock:
            if not self._credentials_found:
                self.credentials = aws_credentials.from_env()
                self._credentials_found = True
        return self.credentials.get() if self.credentials else None

    def _request(self, key: str, headers: dict[str, str], limit: int, deadline: float,
                 sink: Callable[[bytes], None] | None = None, chunk_size: int = netio.CHUNK) -> netio.Response:
        """One GET of ``key`` under a deadline and a byte cap; a same-origin redirect is signed again for
        its URL, a redirect to another origin refused (netio)."""
        if self.kind == "oci":
            return self.oci.blob(key, headers, limit, deadline, sink)
        url = self._http_url(key)
        creds = self._credentials() if self.kind == "s3" else None

        def sign(target: str) -> dict[str, str]:
            if self.kind != "s3":
                return headers
            return {**headers, **sigv4_headers(target, self.region, credentials=creds, env={})}

        self.requests += 1
        return netio.request(url, what=f"{self.url}/{key}", headers=sign, deadline=deadline, limit=limit,
                             error=StoreError, sink=sink, cancel=self.cancel, chunk_size=chunk_size)

    def get(self, key: str, limit: int = MANIFEST_MAX, conditional: bool = False) -> bytes | None:
        """The object's bytes; None when ``conditional`` and unchanged since the last read."""
        where = f"{self.url}/{key}"
        if self.kind == "oci":
            return self.oci.get(key, limit, conditional)
        if self.kind == "file":
            path = self.root / key
            try:
                st = path.stat()
            except FileNotFoundError:
                raise StoreError(f"{path}: not found") from None
            except OSError as e:
                raise StoreError(f"{path}: {e.strerror}") from None
            self.requests += 1
            stamp = f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"
            if conditional and self._validators.get(key, {}).get("stamp") == stamp:
                return None
            data = read_bounded(path, limit, StoreError)  # never a FIFO, a device or more than limit
            self._validators[key] = {"stamp": stamp}
            return data
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
            raise StoreError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}")
        validators = {}
        if resp.headers.get("ETag"):
            validators["etag"] = resp.headers["ETag"]
        if resp.headers.get("Last-Modified") and _settled(resp.headers["Last-Modified"]):
            validators["modified"] = resp.headers["Last-Modified"]
        self._validators[key] = validators
        return resp.body

    def forget(self, key: str) -> None:
        """Drop ``key``'s validators: its next conditional read is a full one (it was read but not acted on)."""
        self._validators.pop(key, None)
        if self.kind == "oci":
            self.oci.forget(key)

    def download(self, key: str, dest: Path, sha256: str, size: int,
                 on_chunk: Callable[[bytes], None] | None = None) -> int:
        """Stream an object into ``dest``, checking its sha256 on the way; returns the bytes written.

        Never more than ``size`` bytes (the length the signed manifest states: reading stops there);
        over HTTP(S) and S3 within ``blob_timeout`` seconds in all. ``on_chunk(chunk)`` is called after
        each chunk is written (a bandwidth bound, cache.RateLimit; the node cache daemon's pass-through)."""
        if type(size) is not int or size < 0:
            raise StoreError(f"{self.url}/{key}: no signed length to download it under")
        limit = size
        h = hashlib.sha256()
        written = 0
        where = f"{self.url}/{key}"
        try:
            with open(dest, "wb") as out:
                def sink(chunk: bytes) -> None:
                    nonlocal written
                    h.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
                    if on_chunk is not None:
                        on_chunk(chunk)

                if self.kind == "file":
                    self.requests += 1
                    path = self.root / key
                    if not path.is_file():  # never open a FIFO (blocks) or a device (endless)
                        raise StoreError(f"{path}: not found, or not a regular file")
                    with open(path, "rb") as src:
                        for chunk in iter(lambda: src.read(min(netio.BLOB_CHUNK, limit + 1 - written)), b""):
                            sink(chunk)
                            if written > limit:
                                raise TooLong(f"{path}: more than the {limit} bytes allowed")
                            if self.cancel is not None and self.cancel.is_set():
                                raise StoreError(f"{path}: stopped (the agent is shutting down)")
                else:
                    resp = self._request(key, {}, limit, self.blob_timeout, sink=sink, chunk_size=netio.BLOB_CHUNK)
                    if not 200 <= resp.status < 300:
                        raise StoreError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}")
        except StoreError:
            _unlink(dest)
            raise
        except OSError as e:
            _unlink(dest)
            raise StoreError(f"{where}: {e.strerror or e}") from None
        if written != size:
            _unlink(dest)
            raise StoreError(f"{where}: {written} bytes, not the {size} the manifest states")
        if h.hexdigest() != sha256:
            _unlink(dest)
            raise StoreError(f"{where}: content sha256 {h.hexdigest()[:16]} is not the {sha256[:16]} asked for")
        return written


def put(store: Store, key: str, data: bytes, timeout: float = METADATA_TIMEOUT, limit: int = POINTER_MAX) -> None:
    """Write one object into the store the agent reads: a folder (atomic rename) or S3 (a SigV4 PUT within
    ``timeout`` seconds, reading at most ``limit`` bytes of its answer)."""
    if store.kind == "file":
        try:
            write_atomic(store.root / key, data.decode())
        except OSError as e:
            raise StoreError(f"{store.root / key}: cannot write ({e.strerror or e})") from None
        return
    if store.kind != "s3":
        raise UsageError(f"{store}: an HTTP mirror or a registry is read-only to agents; reports need an s3:// or "
                         "folder store")
    url = store._http_url(key)  # noqa: SLF001 - the store's own addressing, shared with its reads
    creds = store._credentials()  # noqa: SLF001
    payload = hashlib.sha256(data).hexdigest()

    def sign(target: str) -> dict[str, str]:
        return {"Content-Type": "application/json",
                **sigv4_headers(target, store.region, credentials=creds, env={}, method="PUT", payload_hash=payload)}

    resp = netio.request(url, what=f"{store}/{key}", headers=sign, data=data, method="PUT",
                         deadline=timeout, limit=limit, error=StoreError, cancel=store.cancel)
    if not 200 <= resp.status < 300:
        raise StoreError(f"{store}/{key}: PUT answered HTTP {resp.status} {netio.reason(resp.status)}")


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _settled(last_modified: str) -> bool:
    """Last-Modified has one-second resolution: trust it for If-Modified-Since only when the object has
    not changed in the last two seconds (a second write in the same second would otherwise be missed)."""
    try:
        when = email.utils.parsedate_to_datetime(last_modified).timestamp()
    except (TypeError, ValueError):
        return False
    return when < time.time() - 2
