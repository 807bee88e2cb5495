"""The node cache: release files by sha256, shared by the agents of one node (standard library only).

Layout of the cache folder (``--cache``)::

    blobs/<sha256>          a file whose content has that sha256 (checked again on every read)
    fill/<sha256>/          the fill lock of one blob (lock.py's ``.lock``) and its partial download
    pins/<name>.json        {"blobs": [...]}: blobs a serving release uses; its mtime is its heartbeat
    .lock                   the cache's lock (lock.py): eviction, pins

* **Verified on read.** :meth:`Cache.copy_to` hashes the copy it makes (a kernel copy, then one read of the
  copy: the bytes the caller gets are the ones checked), :meth:`Cache.verified` the blob itself;
  a blob whose sha256 is not its name (a bit flip, a torn write from before a crash) is deleted and
  reported as a miss, so the caller fetches it again: a corrupted blob is never served.
* **Filled once.** :meth:`Cache.fill` holds the blob's fill lock while it downloads, into
  ``fill/<sha256>/part`` (or into the caller's release file, hashed as it arrives, and ``part`` a hard
  link to it: the release and the blob share one inode, no byte written twice; a kernel copy where the
  cache is on another filesystem) and renames it into ``blobs/`` once its sha256 checked out: a blob
  appears only whole. A second filler of the same blob (another pod, the prefetcher, a thread of
  ``cache serve``) waits on the lock and then finds the blob there: the store is read once.
* **Crash order.** Nothing is fsynced (the page cache writes back as for any file, a release's own
  files included): a power cut can leave a blob's name over torn or missing bytes, which its next read
  finds (every read hashes, the daemon's before it sends and its client's again) and deletes: the
  blob is fetched again, never served. A crash costs at most a refetch, not a wrong byte. A shared
  inode changes nothing there: chmod, chown or a write to the release file shows in the blob, and a
  changed byte fails the blob's next check as a bit flip would.
* **Reboot.** A partial download lives only under ``fill/``; :meth:`Cache.clean` (run when a cache is
  opened) removes the partials whose fill lock nobody holds (their filler died).
* **Quota, least recently used.** Each read sets the blob's mtime (its last use: atime is often off).
  After a fill, while the blobs total more than the quota, the least recently used are deleted, never a
  pinned one (a pin file younger than ``pin_ttl`` names it) nor one being filled or read under its lock.
  Pinned blobs over the quota stay (the cache is over quota until a pin goes; logged).
* **Pins expire.** An agent serving a release writes ``pins/<agent id>.json`` and touches it at each
  poll; the prefetcher pins the channel's releases under ``channel-<name>``. A pin not touched for
  ``pin_ttl`` seconds (default 1 hour: a pod gone, a channel no longer followed) counts for nothing and
  is deleted at the next eviction. A pod keeps its own copy of its release (an emptyDir), so an evicted
  blob only costs the next pod on the node a download, never a serving pod its files.

A cache never fails a release: every error here is logged by the caller and the store is read instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..core import lock
from ..core.errors import ReleaseError
from ..core.fsio import write_atomic
from ..core.keys import blob_key
from ..release_format import manifest
from ..stores import Store

PIN_TTL = 3600.0  # seconds a pin counts without being touched
FILL_TIMEOUT = 3600.0  # seconds a filler waits for another filler of the same blob
_SHA = re.compile(r"^[0-9a-f]{64}$")
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class CacheError(ReleaseError):
    """The cache could not be used (the caller reads the store instead)."""


def mirror_key(sha256: str, length: int) -> str:
    """A blob's key at a node's cache daemon (cache_daemon.py): the store's, and the length its signed
    manifest states (what the daemon fills a miss under)."""
    return f"{blob_key(sha256)}/{int(length)}"


def open_cache(root: Path, quota: int | None, log: Callable[[str], None]) -> Cache | None:
    """The node cache at ``root``, or None where it cannot be used (logged): a cache never fails a release."""
    try:
        return Cache(root, quota, log=log)
    except CacheError as e:
        log(f"{e}; reading the store")
        return None


def fetch_through(cache: Cache | None, mirror: Store | None, sha256: str, out: Path, length: int,
                  download: Callable[[Path], int], log: Callable[[str], None]) -> tuple[str, int]:
    """One file of a release into ``out``: from the node ``cache`` (filled with ``download`` on a miss, once
    per node), else the node's cache daemon (``mirror``), else ``download`` (the store); returns where it
    came from (cached, downloaded or mirrored) and the bytes read from the store. A cache or mirror that
    fails is logged and passed over (it never fails a release); a store that fails raises."""
    if cache is not None:
        try:
            if cache.copy_to(sha256, out):
                return "cached", 0
            _, n = cache.fill(sha256, download, into=out)
            return ("downloaded", n) if n else ("cached", 0)
        except (CacheError, lock.LockBusy, OSError) as e:
            log(f"node cache {cache}: {e}; reading the store")
    elif mirror is not None:
        try:
            mirror.download(mirror_key(sha256, length), out, sha256, size=length)
            return "mirrored", 0
        except ReleaseError as e:
            log(f"node cache {mirror}: {e}; reading the store")
    return "downloaded", download(out)


def _sha(h: str) -> str:
    if not _SHA.match(h):
        raise CacheError(f"{h[:70]!r}: not a sha256 (64 lowercase hex digits)")
    return h


class RateLimit:
    """A token bucket: ``pace(chunk)`` (bytes, or their count) sleeps so that no more than ``rate`` bytes per
    second pass on average, with bursts of at most ``burst`` bytes (default one second's worth). Shared by
    the threads of one prefetcher: the bound is the node's. ``clock`` and ``sleep`` are for tests."""

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0:
            raise ValueError(f"rate: {rate} bytes/s; give a positive number")
        self.rate, self.burst = float(rate), float(burst if burst is not None else rate)
        self.clock, self.sleep = clock, sleep
        self.tokens, self.last = self.burst, clock()
        self._lock = threading.Lock()

    def __call__(self, chunk: bytes | int) -> None:
        n = chunk if isinstance(chunk, int) else len(chunk)
        with self._lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate) - n
            self.last = now
            wait = -self.tokens / self.rate if self.tokens < 0 else 0.0
            if wait:
                self.sleep(wait)


class Cache:
    """A node cache folder (see the module's docstring). ``quota``: bytes of blobs to keep (None: no limit)."""

    def __init__(self, root: Path, quota: int | None = None, pin_ttl: float = PIN_TTL,
                 log: Callable[[str], None] = print) -> None:
        self.root, self.quota, self.pin_ttl, self.log = Path(root), quota, pin_ttl, log
        try:
            for sub in ("blobs", "fill", "pins"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            self.clean()
        except (OSError, ReleaseError) as e:
            raise CacheError(f"{self.root}: cannot use as a node cache ({getattr(e, 'strerror', None) or e})") from None

    def __str__(self) -> str:
        return str(self.root)

    def blob(self, sha256: str) -> Path:
        return self.root / "blobs" / _sha(sha256)

    @contextlib.contextmanager
    def _filling(self, sha256: str, timeout: float) -> Iterator[Path]:
        folder = self.root / "fill" / _sha(sha256)
        folder.mkdir(exist_ok=True)
        with lock.held(folder, f"fill {sha256[:12]}", timeout):
            yield folder

    # --- reads ------------------------------------------------------------------------------------

    def copy_to(self, sha256: str, dest: Path) -> bool:
        """Copy the blob into ``dest`` and check the sha256 of what ``dest`` holds (manifest.copy_verified: a
        kernel copy, one hash): True on a hit; False when absent or corrupted (then deleted, and ``dest``
        removed)."""
        path = self.blob(sha256)
        try:
            actual = manifest.copy_verified(path, dest)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                os.unlink(dest)
            return False
        except OSError as e:
            raise CacheError(f"{path}: {e.strerror or e}") from None
        if actual != sha256:
            os.unlink(dest)
            self._drop_corrupt(sha256, path)
            return False
        self._touch(path)
        return True

    def verified(self, sha256: str) -> Path | None:
        """The blob's path once its content checked out (and its use recorded), else None (absent, or
        corrupted and deleted)."""
        path = self.blob(sha256)
        try:
            actual = manifest.sha256_file(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CacheError(f"{path}: {e.strerror or e}") from None
        if actual != sha256:
            self._drop_corrupt(sha256, path)
            return None
        self._touch(path)
        return path

    def _touch(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            os.utime(path)  # its last use, for eviction

    def _drop_corrupt(self, sha256: str, path: Path) -> None:
        """Delete a blob whose content is not its name (unless a filler replaced it meanwhile)."""
        with self._filling(sha256, FILL_TIMEOUT), contextlib.suppress(FileNotFoundError):
            if manifest.sha256_file(path) != sha256:
                os.unlink(path)
                self.log(f"node cache {self.root}: {sha256[:12]} was corrupted: deleted, fetched again")

    # --- fills ------------------------------------------------------------------------------------

    def fill(self, sha256: str, download: Callable[[Path], int], timeout: float = FILL_TIMEOUT,
             into: Path | None = None) -> tuple[Path, int]:
        """The blob in the cache: (its path, bytes ``download`` fetched: 0 when it was there). ``download(part)``
        writes the blob's bytes into ``part`` checking their sha256 (Store.download does) and returns their
        count; it runs under the blob's fill lock, so a second filler waits and finds the blob there.
        ``into``: the caller's copy, made under the lock (no eviction in between): a blob found in the cache is
        checked as it is copied (copy_to); on a miss ``download`` writes ``into`` (its one hash) and the cache's
        blob is a hard link to those checked bytes (checked again on every read), not a second download,
        write or hash of them."""
        with self._filling(sha256, timeout) as folder:
            if into is not None and self.copy_to(sha256, into):
                return self.blob(sha256), 0
            found = None if into is not None else self.verified(sha256)
            if found is not None:
                return found, 0
            part = folder / "part"
            try:
                if into is not None:
                    n = download(into)
                    _link_or_copy(into, part)
                else:
                    n = download(part)
                # No fsync: a blob torn by a power cut fails its check on the next read (deleted, fetched again).
                os.replace(part, self.blob(sha256))
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(part)
        self.evict(keep={sha256})
        return self.blob(sha256), n

    def clean(self) -> list[str]:
        """Remove partial downloads whose filler is gone (a crash, a reboot): those whose fill lock is free."""
        removed = []
        for folder in sorted((self.root / "fill").iterdir()):
            part = folder / "part"
            if not part.exists():
                continue
            try:
                with lock.held(folder, "clean", 0), contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
                    removed.append(folder.name)
            except lock.LockBusy:
                continue  # a live filler
        return removed

    # --- pins and eviction ------------------------------------------------------------------------

    def pin(self, name: str, blobs: Iterable[str]) -> None:
        """Pin ``blobs`` under ``name`` (replacing its pin): evicted by nobody while it is touched."""
        if not _PIN.match(name):
            raise CacheError(f"pin {name[:60]!r}: use letters, digits, '.', '_' or '-'")
        with lock.held(self.root, f"pin {name}"):
            write_atomic(self.root / "pins" / f"{name}.json",
                         json.dumps({"blobs": sorted({_sha(b) for b in blobs})}) + "\n")

    def touch_pin(self, name: str) -> bool:
        """A serving agent's heartbeat: False when the pin is gone (expired and deleted: pin again)."""
        try:
            os.utime(self.root / "pins" / f"{name}.json")
            return True
        except FileNotFoundError:
            return False

    def pinned(self) -> set[str]:
        """Blobs named by a live pin; stale pins (not touched for pin_ttl) are deleted."""
        out: set[str] = set()
        now = time.time()
        for path in (self.root / "pins").glob("*.json"):
            try:
                if now - path.stat().st_mtime > self.pin_ttl:
                    os.unlink(path)
                    self.log(f"node cache {self.root}: pin {path.stem} expired (not touched for {self.pin_ttl:g} s)")
                    continue
                out.update(b for b in json.loads(path.read_text())["blobs"] if _SHA.match(b))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or damaged: it pins nothing
        return out

    def usage(self) -> int:
        return sum(st.st_size for _, st in self._blobs())

    def _blobs(self) -> list[tuple[Path, os.stat_result]]:
        out = []
        for path in (self.root / "blobs").iterdir():
            with contextlib.suppress(FileNotFoundError):
                out.append((path, path.stat()))
        return out

    def evict(self, keep: Iterable[str] = ()) -> list[str]:
        """Delete least recently used blobs until the quota holds; never a pinned blob, one in ``keep``, or
        one under its fill lock. Returns the hashes deleted."""
        if self.quota is None:
            return []
        removed: list[str] = []
        with lock.held(self.root, "evict"):
            blobs = self._blobs()
            total = sum(st.st_size for _, st in blobs)
            if total <= self.quota:
                return []
            spare = self.pinned() | set(keep)
            for path, st in sorted(blobs, key=lambda b: b[1].st_mtime):
                if total <= self.quota:
                    break
                if path.name in spare:
                    continue
                try:
                    with self._filling(path.name, 0):
                        os.unlink(path)
                except (lock.LockBusy, FileNotFoundError):
                    continue
                total -= st.st_size
                removed.append(path.name)
            if total > self.quota:
                self.log(f"node cache {self.root}: {total} bytes kept, over the quota of {self.quota}: "
                         "pinned or in use")
        return removed


def _link_or_copy(src: Path, dest: Path) -> None:
    """``dest`` a hard link to ``src`` (no byte copied), else (another filesystem, or links refused) a kernel copy."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dest)  # a dead filler's partial
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
