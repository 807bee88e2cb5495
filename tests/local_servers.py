"""Local servers for tests: a server process waited for until it answers on 127.0.0.1 (moto_server and the like),
and a folder store over HTTP that counts its blob requests."""

from __future__ import annotations

import collections
import contextlib
import functools
import http.server
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path


@contextlib.contextmanager
def serving(argv: Sequence[str], url: str, what: str, timeout: float = 30,
            context: ssl.SSLContext | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv``; yield the process once ``url`` answers (any HTTP status; an https URL checked with
    ``context``); terminate it afterwards."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(url, timeout=1, context=context).close()
                break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{what} did not start") from None
                time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class CountingStore(http.server.SimpleHTTPRequestHandler):
    """A folder store over HTTP that counts its blob requests by sha256 (``counts``; each server its own
    subclass, see :func:`counting_store`) and may answer each one ``delay`` seconds late."""

    counts: collections.Counter[str] = collections.Counter()
    delay = 0.0

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/blobs/"):
            type(self).counts[self.path.rstrip("/").split("/")[3]] += 1  # /blobs/sha256/<hex>
            time.sleep(self.delay)
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def counting_store(folder: Path, host: str = "127.0.0.1") -> Iterator[tuple[str, type[CountingStore]]]:
    """Serve ``folder`` (a published store) on ``host``; yield its URL and its handler class (``counts``, ``delay``)."""
    handler = type("Store", (CountingStore,), {"counts": collections.Counter()})
    srv = http.server.ThreadingHTTPServer((host, 0), functools.partial(handler, directory=str(folder)))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://{host}:{srv.server_port}", handler
    finally:
        srv.shutdown()
        srv.server_close()
