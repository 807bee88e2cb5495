"""A node's cache daemon: ``cache serve`` (the node cache as a read-through blob mirror) and the prefetcher.

In Kubernetes one runs per node (a DaemonSet, k8s/stacks/triton/node_cache.py) with the cache folder on
the node; the Triton pods reach it through a Service with ``internalTrafficPolicy: Local`` (their own
node's daemon, never another's) and mount nothing of the node: their ``release-sync`` reads each file
from it (``--cache-url``) and the store only when it does not answer.

* ``GET /blobs/sha256/<hex>/<length>`` (cache.mirror_key: the store's key and the length the client's
  signed manifest states; the agent's HTTP store reader is the client): the blob, verified before it is
  sent (cache.Cache.verified); on a miss filled from the store first under that length (at most
  ``max_blob``), once however many pods ask together (the fill lock), its sha256 checked as it arrives.
  The client checks the sha256 and the length again: a daemon is trusted with nothing.
* ``GET /ready`` 200 once the cache is usable; ``GET /status`` the warm state of each followed channel
  (release_format.records.cache_status: what ``release rollout advance --cache-url`` waits on).
* The prefetcher (:func:`prefetch`) follows channels like an agent (the signed pointer verified against
  the trusted root, then the signed manifest) and fills the cache with the channel's release and the
  one its staged rollout names as previous (what a new pod of the channel may install), at most
  ``--max-rate`` bytes/s, pins them (``channel-<name>``) and records ``warm/<channel>.json``: a new node
  warms as soon as its daemon starts, a published release before any pod asks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError
from ..core.fsio import write_atomic
from ..core.keys import blob_key
from ..stores import Store
from . import trusted_state
from .cache import Cache, RateLimit
from .pull import Agent

PREFIX = "/blobs/sha256/"
_BLOB = re.compile(r"^[0-9a-f]{64}/[0-9]{1,15}$")


def serve(address: str, cache: Cache, store: Store, max_blob: int,
          status: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """Serve the cache on HOST:PORT (threads); returns the server (serve_forever is the caller's)."""
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def _text(self, code: int, text: str, ctype: str = "text/plain") -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/ready":
                self._text(200, "ready\n")
            elif self.path == "/status":
                self._text(200, json.dumps(status(), indent=2, sort_keys=True) + "\n", "application/json")
            elif self.path.startswith(PREFIX) and _BLOB.match(self.path[len(PREFIX):]):
                sha256, length = self.path[len(PREFIX):].split("/")
                self._blob(sha256, int(length))
            else:
                self._text(404, "not found\n")

        def _head(self, size: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()

        def _blob(self, sha256: str, length: int) -> None:
            if length > max_blob:
                self._text(413, f"{sha256}: {length} bytes, more than the {max_blob} this cache fills\n")
                return
            try:
                path = cache.verified(sha256) or self._pass_through(sha256, length)
                if path is None:
                    return
                f = open(path, "rb")  # noqa: SIM115 - kept open while sent: an eviction cannot cut it
            except (ReleaseError, OSError) as e:
                self._text(502, f"{sha256}: {e}\n")
                return
            with f:
                self._head(os.fstat(f.fileno()).st_size)
                shutil.copyfileobj(f, self.wfile, 1 << 20)

        def _pass_through(self, sha256: str, length: int) -> Path | None:
            """A miss: the store's bytes go to the client as they arrive and into the cache (the store read
            once, the client not waiting for the whole file). None once sent; the blob's path when another
            filler had it meanwhile (then sent from the cache). A store that fails midway cuts the response
            short, which the client refuses (its length and sha256 checks), as it would a bad blob."""
            state = {"sent": False, "client": True}

            def tee(chunk: bytes) -> None:
                if not state["sent"]:
                    self._head(length)
                    state["sent"] = True
                if state["client"]:
                    try:
                        self.wfile.write(chunk)
                    except OSError:  # the client left: the fill goes on for the next one
                        state["client"] = False

            try:
                path, _ = cache.fill(sha256, lambda part: store.download(blob_key(sha256), part, sha256, size=length,
                                                                         on_chunk=tee))
            except (ReleaseError, OSError):
                if state["sent"]:
                    self.close_connection = True
                    return None
                raise
            return None if state["sent"] else path

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)  # noqa: S104 - the node's pods' port
    server.daemon_threads = True
    return server


class Prefetcher:
    """Keeps one channel's releases in the cache (see the module's docstring)."""

    def __init__(self, cache: Cache, store: Store, channel: str, trusted_keys: list[Path],
                 rate: float | None = None, store_name: str | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.cache, self.store, self.channel, self.log = cache, store, channel, log
        self.pace = RateLimit(rate) if rate else None
        self.rate = rate
        # The agent's pointer and manifest checks, with its trusted state in the cache folder.
        self.agent = Agent(store, channel, cache.root / "channels" / channel / "models",
                           cache.root / "channels" / channel, trusted_keys, store_name=store_name, log=log,
                           agent_id=f"prefetch-{channel}")
        self.warm: dict[str, Any] = {"channel": channel, "warm": False}

    def targets(self) -> list[tuple[str, str, int]]:
        p = self.agent.pointer
        assert p is not None
        out = [(str(p["release"]), str(p["digest"]), int(p["length"]))]
        prev = (p.get("rollout") or {}).get("previous") if isinstance(p.get("rollout"), dict) else None
        if isinstance(prev, dict) and {"release", "digest", "length"} <= set(prev):
            out.append((str(prev["release"]), str(prev["digest"]), int(prev["length"])))
        return out

    def once(self) -> dict[str, Any]:
        """Read the pointer; fill what it names. The same releases as the last pass: touch the pin only
        (unless it expired meanwhile: a paused daemon fills and pins again)."""
        self.agent._read_pointer(conditional=self.warm["warm"])
        if self.agent.trusted.dirty:
            self.agent._save_trust()
        targets = self.targets()
        digests = [t[1] for t in targets]
        if self.warm.get("digests") == digests and self.cache.touch_pin(f"channel-{self.channel}"):
            return self.warm
        start, fetched, blobs, releases = time.monotonic(), 0, set(), []
        for release, digest, length in targets:
            _, doc, _ = trusted_state.fetch_manifest(self.store, digest, length, release, self.channel,
                                                     self.agent.trusted.root)
            for rel, h in sorted(doc["files"].items()):
                size = int(doc["lengths"][rel])
                if self.rate:  # the file's deadline covers its paced download
                    self.store.blob_timeout = max(self.store.blob_timeout, 2 * size / self.rate + 60)
                _, n = self.cache.fill(h, lambda part, h=h, size=size: self.store.download(  # type: ignore[misc]
                    blob_key(h), part, h, size=size, on_chunk=self.pace))
                fetched += n
                blobs.add(h)
            releases.append(release)
        self.cache.pin(f"channel-{self.channel}", blobs)
        self.warm = {"channel": self.channel, "warm": True, "releases": releases, "digests": digests,
                     "fetched_bytes": fetched, "seconds": round(time.monotonic() - start, 3), "at": time.time()}
        write_atomic(self.cache.root / "warm" / f"{self.channel}.json", json.dumps(self.warm, sort_keys=True) + "\n")
        self.log(json.dumps(self.warm, sort_keys=True))
        return self.warm

    def run(self, interval: float, stop: threading.Event) -> None:
        """Prefetch every ``interval`` seconds until ``stop``; a failed pass is logged and tried again."""
        while not stop.is_set():
            try:
                self.once()
            except (ReleaseError, OSError) as e:
                self.warm = {**self.warm, "warm": False, "digests": None, "error": str(e)}
                self.log(f"prefetch {self.channel}: {e}")
            stop.wait(interval)
