"""The node folder's one owner: an exclusive lock (``flock``) on ``<releases>/.lock``.

Every command that changes the releases folder or the models link (pull's poll cycle, install,
activate, mark, prune, recover, sync, and so the Ansible ``release`` module, which runs them) takes
it. A second taker waits up to a bounded timeout (``TRITONOPS_LOCK_TIMEOUT`` seconds, default 60, or
the caller's) and then fails with :class:`LockBusy`, whose message names the holder (pid, command and
start time, which the holder writes into the lock file). The lock is re-entrant within one thread, so
a poll cycle that holds it calls install, activate and prune without deadlocking; another thread of
the same process waits like another process does. The file is removed when the lock is let go (the
folder holds nothing new at rest); a taker checks it still holds the file that is at the path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import ReleaseError

LOCK_FILE = ".lock"
DEFAULT_TIMEOUT = 60.0
POLL = 0.05  # seconds between tries while waiting


class LockBusy(ReleaseError):
    """Another process (or thread) held the node folder for longer than the timeout; nothing was changed."""


_guard = threading.Lock()
_held: dict[tuple[str, int], list] = {}  # (folder, thread id) -> [fd, depth]


def default_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get("TRITONOPS_LOCK_TIMEOUT", DEFAULT_TIMEOUT)))
    except ValueError:
        return DEFAULT_TIMEOUT


def holder(releases: Path) -> str:
    """Who holds the lock, as its holder wrote it (``pid 12 (install) since 2026-...``), or ``unknown``."""
    try:
        doc = json.loads((Path(releases) / LOCK_FILE).read_text() or "{}")
        return f"pid {doc['pid']} on {doc.get('host', '?')} ({doc.get('command', '?')}) since {doc.get('since', '?')}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "an unknown process"


def _open(path: Path) -> int:
    try:
        return os.open(str(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except PermissionError:  # made by another user (root's push, the service's pull): flock works read-only
        return os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _acquire(releases: Path, command: str, timeout: float) -> int:
    path = releases / LOCK_FILE
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = _open(path)
        except OSError as e:
            raise ReleaseError(f"{path}: cannot open the node folder's lock ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise ReleaseError(f"{path}: cannot lock ({e.strerror})") from None
            if time.monotonic() >= deadline:
                raise LockBusy(f"{path}: the node folder is held by {holder(releases)}, for more than {timeout:g} s "
                               f"(--lock-timeout / TRITONOPS_LOCK_TIMEOUT); {command}: nothing was changed") from None
            time.sleep(POLL)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the last holder removed the file as it let go: take the one now at the path
            os.close(fd)
            continue
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        return fd


@contextlib.contextmanager
def held(releases: Path, command: str, timeout: float | None = None) -> Iterator[bool]:
    """Hold the node folder's lock (re-entrant within a thread); yields True when this call took it
    (the outermost holder), False when it re-entered. A folder that does not exist yet is not locked:
    there is nothing in it to protect."""
    releases = Path(releases)
    if not releases.is_dir():
        yield False
        return
    key = (os.path.realpath(releases), threading.get_ident())
    with _guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
    if entry is not None:
        try:
            yield False
        finally:
            with _guard:
                entry[1] -= 1
        return
    fd = _acquire(releases, command, default_timeout() if timeout is None else timeout)
    entry = [fd, 1]
    with _guard:
        _held[key] = entry
    try:
        yield True
    finally:
        with _guard:
            del _held[key]
        with contextlib.suppress(OSError):
            os.unlink(releases / LOCK_FILE)  # still ours: takers only hold a file that is at the path
        os.close(fd)  # lets go of the flock


def is_held(releases: Path) -> bool:
    """Whether this thread holds the node folder's lock."""
    return (os.path.realpath(releases), threading.get_ident()) in _held
