"""Bounded HTTP requests: the one way the agent talks to a store, STS, a credentials endpoint or Triton.

``request`` sends one request and reads its answer under three limits that urllib alone does not give:

* **one overall deadline** (connect, headers and the whole body together, redirects included): urllib's
  ``timeout`` applies to each socket operation, so a server that trickles one byte a second never
  ends. A watchdog thread shuts the connection's socket down when the deadline passes (or when the
  ``cancel`` event is set: SIGTERM ends a fetch at once), which wakes any blocked read;
* **a byte cap** on the body: a ``Content-Length`` over it is refused before reading, an endless body
  after ``limit + 1`` bytes;
* **redirects within the same origin only** (scheme, host, port), with the headers computed again for
  the new URL: a redirect to another origin is refused, so credentials (``Authorization``,
  ``X-Amz-Security-Token``, the SigV4 headers, an admin token) never reach another host.

Every failure raises the caller's error class with a message naming the URL (no query, no user info),
never a traceback. Non-2xx answers are returned (with a short, capped body), not raised: the caller
decides what a 304 or a 404 means.
"""

from __future__ import annotations

import contextlib
import functools
import http
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any

from .errors import ReleaseError, StoreError, TooLong

CHUNK = 64 << 10  # bytes per read of a small answer (a pointer, a manifest, an error)
BLOB_CHUNK = 1 << 20  # bytes per read of a file's download: fewer, larger reads (store.download)
ERROR_BODY_MAX = 64 << 10  # bytes read of a non-2xx answer (an error message, never a payload)
MAX_REDIRECTS = 5
_TICK = 0.05  # seconds: how often the watchdog looks at the cancel event
_REDIRECTS = (301, 302, 303, 307, 308)

Headers = Mapping[str, str] | Callable[[str], Mapping[str, str]]


@dataclass
class Response:
    status: int
    headers: Message
    url: str
    body: bytes = b""
    size: int = 0  # bytes read (also when they went to a sink)


def safe_url(url: str) -> str:
    """The URL without query or user info, for messages."""
    p = urllib.parse.urlsplit(url)
    if not p.netloc:
        return url[:120]
    return urllib.parse.urlunsplit((p.scheme, p.netloc.rpartition("@")[2], p.path, "", ""))


def reason(status: int) -> str:
    """HTTP's phrase for a status ("Not Found"), or "" for one it does not name."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port): what a redirect must keep for the request's headers to follow it."""
    p = urllib.parse.urlsplit(url)
    try:
        port = p.port
    except ValueError:
        port = -1
    default = {"http": 80, "https": 443}.get(p.scheme.lower())
    return p.scheme.lower(), (p.hostname or "").lower(), port if port is not None else default


class _Watch:
    """Shuts the request's sockets down at the deadline or when ``cancel`` is set (in its own thread)."""

    def __init__(self, seconds: float, cancel: threading.Event | None) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.cancel = cancel
        self.fired: str | None = None
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="netio-deadline", daemon=True)
        self._thread.start()

    def left(self) -> float:
        return max(self.end - time.monotonic(), 0.001)

    def attach(self, sock: socket.socket) -> None:
        # A duplicate of the descriptor: a TLS wrap detaches the original object, and shutting the
        # connection down through any descriptor of it wakes a read blocked on another.
        with self._lock:
            dup = sock.dup()
            self._socks.append(dup)
            fired = self.fired
        if fired:
            self._shutdown()

    def _run(self) -> None:
        while not self._done.wait(min(_TICK if self.cancel is not None else self.seconds,
                                      max(self.end - time.monotonic(), 0.0))):
            if self.cancel is not None and self.cancel.is_set():
                self.fired = "cancelled"
                break
            if time.monotonic() >= self.end:
                self.fired = "deadline"
                break
        else:
            return
        self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            self.fired = self.fired or "cancelled"

    def close(self) -> None:
        self._done.set()
        with self._lock:
            for s in self._socks:
                s.close()
            self._socks.clear()


def _connection_class(base: type[http.client.HTTPConnection], watch: _Watch) -> Callable[..., Any]:
    """``base`` whose socket is registered with the watchdog and whose connect is bounded by the deadline."""
    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        kwargs["timeout"] = min(kwargs.get("timeout") or watch.seconds, watch.left())
        conn = base(host, **kwargs)
        create = conn._create_connection  # type: ignore[attr-defined]

        def connect(address: Any, timeout: Any = None, source_address: Any = None) -> socket.socket:
            sock = create(address, min(timeout or watch.seconds, watch.left()), source_address)
            watch.attach(sock)
            return sock

        conn._create_connection = connect  # type: ignore[attr-defined]
        return conn
    return make


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self.watch = watch

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection_class(http.client.HTTPConnection, self.watch), req)


@functools.lru_cache(maxsize=1)
def _system_context() -> ssl.SSLContext:
    """The system's CAs (SSL_CERT_FILE / SSL_CERT_DIR honoured), loaded once: not on every request."""
    return ssl.create_default_context()


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context or _system_context())
        self.watch = watch

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection_class(http.client.HTTPSConnection, self.watch), req,
                            context=self._context)  # type: ignore[attr-defined]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:  # request() follows them itself
        return None


def _read(resp: Any, limit: int, sink: Callable[[bytes], None] | None, watch: _Watch, what: str,
          error: type[ReleaseError], chunk_size: int) -> tuple[bytes, int]:
    length = resp.headers.get("Content-Length")
    too_long = TooLong if error is StoreError else error  # a store's answer over its length (a subclass keeps its own)
    if length and length.strip().isdigit() and int(length) > limit:
        raise too_long(f"{what}: the answer announces {int(length)} bytes, larger than the {limit} allowed")
    parts: list[bytes] = []
    got = 0
    while True:
        watch.check()
        if watch.fired:
            break
        chunk = resp.read(min(chunk_size, limit + 1 - got))
        if not chunk:
            break
        got += len(chunk)
        if got > limit:
            raise too_long(f"{what}: the answer is larger than the {limit} bytes allowed; stopped reading")
        if sink is not None:
            sink(chunk)
        else:
            parts.append(chunk)
    return b"".join(parts), got


def request(url: str, *, what: str | None = None, headers: Headers | None = None, data: Any = None,
            method: str = "GET", deadline: float, limit: int, error: type[ReleaseError] = ReleaseError,
            sink: Callable[[bytes], None] | None = None, cancel: threading.Event | None = None,
            redirects: bool = True, proxies: dict[str, str] | None = None,
            context: ssl.SSLContext | None = None, foreign_redirects: bool = False,
            chunk_size: int = CHUNK) -> Response:
    """Send one request (following same-origin redirects); its answer, the body read under ``limit``.

    ``headers`` is a mapping or a function of the URL (a signature is computed again for a redirect's
    URL). A 2xx body goes to ``sink`` when one is given, else into ``Response.body``; of any other
    status only the first ``ERROR_BODY_MAX`` bytes are read. ``proxies``: None uses the environment's
    (``HTTPS_PROXY`` ...), ``{}`` none; ``context``: the TLS context (default: the system's CAs).
    ``foreign_redirects``: follow a redirect to another origin too (an OCI registry's blob to its storage),
    sending none of ``headers`` there or after (a presigned URL carries its own authorization), never
    from https to http. ``data``: bytes, or a file object (with a Content-Length header) for an upload.
    ``chunk_size``: bytes per read of the body (BLOB_CHUNK for a file's download).
    Raises ``error`` naming ``what`` (default: the URL, no query) when the deadline passes, ``cancel``
    is set, the body is over ``limit``, a redirect leaves the origin, or the connection fails (the
    socket's or TLS's own exception as its ``__cause__``, for a caller that knows what fixes it).
    """
    what = what or safe_url(url)
    start = origin(url)
    watch = _Watch(deadline, cancel)
    handlers: list[Any] = [_HTTP(watch), _HTTPS(watch, context), _NoRedirect()]
    if proxies is not None:
        handlers.append(urllib.request.ProxyHandler(proxies))
    opener = urllib.request.build_opener(*handlers)
    foreign = False
    try:
        for _hop in range(MAX_REDIRECTS + 1):
            hdrs = {} if foreign else dict(headers(url) if callable(headers) else (headers or {}))
            req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
            try:
                try:
                    resp = opener.open(req, timeout=min(deadline, watch.left()))
                except urllib.error.HTTPError as e:
                    resp = e
                with resp:
                    status = resp.code if isinstance(resp, urllib.error.HTTPError) else resp.status
                    if redirects and status in _REDIRECTS and resp.headers.get("Location"):
                        new = urllib.parse.urljoin(url, resp.headers["Location"])
                        if origin(new) != start and foreign_redirects and (
                                start[0] == "http" or origin(new)[0] == "https"):
                            foreign = True  # to the registry's storage: no credential of ours goes there
                        elif origin(new) != start:
                            raise error(f"{what}: redirected to {safe_url(new)}, another origin: not followed "
                                        "(credentials and tokens are never sent to another host)")
                        url = new
                        if status == 303:
                            method, data = "GET", None
                        continue
                    if method == "HEAD":  # no body, whatever length it announces
                        body, size = b"", 0
                    elif 200 <= status < 300:
                        body, size = _read(resp, limit, sink, watch, what, error, chunk_size)
                    else:  # an error message: its start is enough, the rest is never read
                        body = resp.read(ERROR_BODY_MAX) if status != 304 else b""
                        size = len(body)
            except ReleaseError:
                raise
            except (OSError, http.client.HTTPException, ValueError) as e:
                if watch.fired:
                    break
                reason = getattr(e, "reason", None) or e
                raise error(f"{what}: {reason}") from (reason if isinstance(reason, BaseException) else e)
            if watch.fired:
                break
            return Response(status, resp.headers, url, body, size)
        else:
            raise error(f"{what}: more than {MAX_REDIRECTS} redirects")
    finally:
        watch.close()
    if watch.fired == "cancelled":
        raise error(f"{what}: stopped (the agent is shutting down)")
    raise error(f"{what}: no complete answer within the {deadline:g}s deadline (connect, headers and body)")

