"""What every store kind is: the protocols its reader and its writer follow, its registry entry
(:class:`Kind`), and the sha256- and length-checked download all kinds share.

A kind is one module of this package (``folder``, ``http``, ``s3``, ``oci``) that reads (the agents':
:class:`Store`) and, where it can be written, writes (the controller's: :class:`Writer`); ``stores.KINDS``
lists them and ``stores.open_store`` / ``stores.open_writer`` pick one by the URL's scheme.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ..core import netio
from ..core.errors import StoreError, UsageError
from ..core.keys import BLOB_TIMEOUT, CHANNELS_PREFIX, METADATA_TIMEOUT

SWAP_TRIES = 8  # conditional writes of one pointer before giving up (each after reading it again)


class Store(Protocol):
    """An agent's reads of one store (and its one write: a status report, where the kind allows it)."""

    url: str
    kind: Kind
    requests: int  # the requests (or folder reads) made so far
    timeout: float
    blob_timeout: float
    cancel: threading.Event | None

    def get(self, key: str, limit: int = ..., conditional: bool = False) -> bytes | None:
        """The object's bytes; None when ``conditional`` and unchanged since the last read."""

    def forget(self, key: str) -> None:
        """Drop ``key``'s validators: its next conditional read is a full one."""

    def download(self, key: str, dest: Path, sha256: str, size: int,
                 on_chunk: Callable[[bytes], None] | None = None) -> int:
        """Stream an object into ``dest``, checking its sha256 and length; the bytes written."""

    def put(self, key: str, data: bytes, timeout: float = ..., limit: int = ...) -> None:
        """Write one object (an agent's status report); a UsageError where agents may not write."""


class Writer(Protocol):
    """The controller's access to one store: reads with its own credentials, writes, compare-and-swap."""

    url: str

    @property
    def reader(self) -> Store:
        """The store as agents read it."""

    def exists(self, key: str) -> bool: ...

    def get(self, key: str, limit: int = ...) -> bytes: ...

    def put(self, key: str, data: bytes | Path, content_type: str = "application/octet-stream",
            on_bytes: Callable[[int], None] | None = None) -> None: ...

    def delete(self, key: str) -> None: ...

    def check_exists(self) -> None: ...

    def names(self, prefix: str, suffix: str = ".json") -> list[str]: ...

    def missing_channel(self, channel: str) -> UsageError: ...

    def swap(self, key: str, change: Callable[[bytes | None], bytes | None], what: str = "move",
             content_type: str = "application/json") -> bytes | None: ...


@dataclass(frozen=True)
class Kind:
    """One store kind in the registry.

    ``schemes``: the URL schemes that open it (``""``: a plain path); ``form``: how its URLs are written in
    messages; ``reports``: whether agents write their status reports into it; ``ports``: the TCP port a pod
    opens to it per scheme when the URL names none (its network policy's egress; none: not for pods);
    ``settings``: the model service's ``release`` settings only this kind takes (ReleaseSource fields);
    ``reads``: its Store class (``url`` + Store's keyword arguments); ``writes``: its Writer (``url``,
    ``s3_endpoint`` and the Store that reads it), None where the controller writes it another way
    (``writes_as``: how)."""

    name: str
    schemes: tuple[str, ...]
    form: str
    reports: bool
    reads: Callable[..., Store]
    writes: Callable[[str, str | None, Any], Writer] | None = None
    writes_as: str = ""
    ports: Mapping[str, int] = field(default_factory=dict)
    settings: tuple[str, ...] = ()


def download_checked(where: str, dest: Path, sha256: str, size: int, on_chunk: Callable[[bytes], None] | None,
                     fill: Callable[[Callable[[bytes], None], int], None]) -> int:
    """The download every kind does: ``fill(sink, limit)`` streams the object into ``sink`` (never more than
    ``limit`` bytes); it is written to ``dest``, hashed, counted, and removed again unless it is ``size``
    bytes with that sha256. ``on_chunk(chunk)`` is called after each chunk is hashed (its write may lag).

    A file larger than one chunk is written by a second thread (:class:`WriteBehind`) while this one
    receives and hashes the next chunks (a socket's read, sha256 and a file's write each release the GIL;
    hashing on the second thread instead was slower, writing there faster: docs/time-to-serve.md)."""
    if type(size) is not int or size < 0:
        raise StoreError(f"{where}: no signed length to download it under")
    h = hashlib.sha256()
    written = 0
    try:
        with open(dest, "wb") as out, WriteBehind(out, threaded=size > netio.BLOB_CHUNK) as write:
            def sink(chunk: bytes) -> None:
                nonlocal written
                h.update(chunk)
                write(chunk)
                written += len(chunk)
                if on_chunk is not None:
                    on_chunk(chunk)

            fill(sink, size)
    except StoreError:
        unlink(dest)
        raise
    except OSError as e:
        unlink(dest)
        raise StoreError(f"{where}: {e.strerror or e}") from None
    except BaseException:
        unlink(dest)
        raise
    if written != size:
        unlink(dest)
        raise StoreError(f"{where}: {written} bytes, not the {size} the manifest states")
    if h.hexdigest() != sha256:
        unlink(dest)
        raise StoreError(f"{where}: content sha256 {h.hexdigest()[:16]} is not the {sha256[:16]} asked for")
    return written


class WriteBehind:
    """Chunks written to ``out`` by a second thread (``threaded``), in order, at most ``ahead`` behind the
    calls (which then wait); leaving the ``with`` block waits for the last write. A write's error (a full
    disk) is raised by the next call, so the download stops, or on leaving. Not ``threaded``: each chunk is
    written at once (a small file: a thread would cost more than it saves)."""

    def __init__(self, out: BinaryIO, threaded: bool = True, ahead: int = 8) -> None:
        self.out = out
        self.error: OSError | None = None
        self._chunks: queue.Queue[bytes | None] = queue.Queue(ahead)
        self._thread = threading.Thread(target=self._run, name="write-behind", daemon=True) if threaded else None

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            if self.error is None:
                try:
                    self.out.write(chunk)
                except OSError as e:
                    self.error = e

    def __call__(self, chunk: bytes) -> None:
        if self._thread is None:
            self.out.write(chunk)
            return
        if self.error is not None:
            raise self.error
        self._chunks.put(chunk)

    def __enter__(self) -> WriteBehind:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self._thread is not None:
            self._chunks.put(None)
            self._thread.join()
            if self.error is not None and kind is None:
                raise self.error


KINDS: list[Kind] = []  # the registry: filled by the package (stores/__init__.py) in the order messages list them


def _join(forms: list[str]) -> str:
    return f"{', '.join(forms[:-1])} or {forms[-1]}" if len(forms) > 1 else forms[0]


def forms(network: bool = False) -> str:
    """Every kind's URL form, for messages: ``s3://BUCKET/PREFIX, ... or a folder`` (``network``: only the
    kinds a pod reaches over the network)."""
    return _join([k.form for k in KINDS if k.ports or not network])


def publish_forms() -> str:
    """Where the controller publishes, for messages."""
    return _join([k.form for k in KINDS if k.writes] + [f"{k.writes_as} ({k.form})" for k in KINDS if k.writes_as])


def kind_of(url: str) -> Kind:
    """The kind of store ``url`` names; a UsageError naming the known forms for any other."""
    scheme = urllib.parse.urlsplit(url).scheme
    for kind in KINDS:
        if scheme in kind.schemes:
            return kind
    raise UsageError(f"{url}: store URLs are {forms()}")


class StoreBase:
    """What every kind's Store holds: its URL and kind, its deadlines, its cancel event, its request count."""

    def __init__(self, url: str, s3_endpoint: str | None = None, timeout: float = METADATA_TIMEOUT,
                 blob_timeout: float = BLOB_TIMEOUT, cancel: threading.Event | None = None) -> None:
        """``timeout``: the overall deadline (connect, headers, body) of a pointer, manifest or signature
        read; ``blob_timeout`` that of one file's download; ``cancel``: set it to end a request at once."""
        self.url, self.kind = url, kind_of(url)
        self.timeout, self.blob_timeout, self.cancel = timeout, blob_timeout, cancel
        self.requests = 0

    def __str__(self) -> str:
        return self.url


def read_only(store: Store) -> UsageError:
    """The error for an agent's report to a store kind agents may not write."""
    able = _join([k.form for k in KINDS if k.reports])
    return UsageError(f"{store}: {store.kind.form} is read-only to agents; reports need {able}")


def download_response(where: str, dest: Path, sha256: str, size: int, on_chunk: Callable[[bytes], None] | None,
                      get: Callable[[Callable[[bytes], None], int], netio.Response]) -> int:
    """:func:`download_checked` of one HTTP GET: ``get(sink, limit)`` streams the body into ``sink``; an
    answer other than 2xx is a StoreError."""
    def fill(sink: Callable[[bytes], None], limit: int) -> None:
        resp = get(sink, limit)
        if not 200 <= resp.status < 300:
            raise StoreError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}")

    return download_checked(where, dest, sha256, size, on_chunk, fill)


def unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class WriterBase:
    """What every kind's writer shares: its name, the channel listing's error, a store that must exist."""

    url: str

    def __str__(self) -> str:
        return self.url

    def names(self, prefix: str, suffix: str = ".json") -> list[str]:
        raise NotImplementedError

    def check_exists(self) -> None:
        """A store that is not there answers for itself on its first read (a folder overrides this)."""

    def missing_channel(self, channel: str) -> UsageError:
        """The error for a channel the store does not hold, naming the ones it does."""
        there = [k.removeprefix(CHANNELS_PREFIX).removesuffix(".json") for k in self.names(CHANNELS_PREFIX)]
        return UsageError(f"{self.url}: channel {channel!r} does not exist (channels there: "
                          f"{', '.join(there) or 'none'})")
