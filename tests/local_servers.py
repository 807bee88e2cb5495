"""Start a local server process for a test and wait until it answers on 127.0.0.1 (moto_server and the like)."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence


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
