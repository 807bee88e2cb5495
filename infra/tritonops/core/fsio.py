"""Bounded reads and atomic writes: how the agent and the controller touch files.

``read_bounded`` reads a regular file of at most N bytes, refusing a FIFO, a device, a folder, an
oversized file (and a symbolic link on request) with an error naming the file, instead of blocking or
filling memory. ``write_atomic`` writes, fsyncs and renames in the same folder, so readers never see
half a file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import ReleaseError, StoreError, TooLong


def read_bounded(path: Path, limit: int, error: type[ReleaseError] = ReleaseError, follow: bool = True) -> bytes:
    """A regular file's bytes, at most ``limit`` of them: a FIFO, a device, a folder or an oversized
    file is refused (raising ``error`` naming the file) instead of blocking or filling memory; so is a
    symbolic link unless ``follow``."""
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        raise error(f"{path}: not found") from None
    except OSError as e:
        raise error(f"{path}: cannot open ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO, device or socket"
        raise error(f"{path}: {kind}, not a regular file")
    too_long = TooLong if error is StoreError else error  # a store's object over its length (a subclass keeps its own)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise too_long(f"{path}: {st.st_size} bytes, more than the {limit} allowed")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise error(f"{path}: cannot read ({e.strerror})") from None
    if len(data) > limit:
        raise too_long(f"{path}: more than the {limit} bytes allowed")
    return data


def write_atomic(path: Path, content: str, mode: int = 0o644) -> Path:
    """Write, fsync and rename in the same folder: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        dir_fd = os.open(str(path.parent), os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
