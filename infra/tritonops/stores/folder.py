"""A folder store (a path, or ``file://PATH``): read by an agent on the same machine or volume, written by
the controller; the folder an HTTP mirror serves is written this way too.

A pointer's conditional read compares a size+mtime+inode stamp; every read is bounded (never a FIFO, a
device or more than its limit). Writes are a temporary file renamed (atomic for readers); a
compare-and-swap holds a lock on the object's folder (:mod:`tritonops.core.lock`).
"""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import lock, netio
from ..core.errors import StoreError, TooLong, UsageError
from ..core.fsio import read_bounded, write_atomic
from ..core.keys import METADATA_TIMEOUT, POINTER_MAX
from ..core.names import MANIFEST_MAX
from .base import Kind, StoreBase, WriterBase, download_checked, publish_forms


class FolderStore(StoreBase):
    """Reads of a folder store, and an agent's report written into it."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._stamps: dict[str, str] = {}
        parts = urllib.parse.urlsplit(url)
        self.root = Path(parts.path if parts.scheme else url)

    def get(self, key: str, limit: int = MANIFEST_MAX, conditional: bool = False) -> bytes | None:
        path = self.root / key
        try:
            st = path.stat()
        except FileNotFoundError:
            raise StoreError(f"{path}: not found") from None
        except OSError as e:
            raise StoreError(f"{path}: {e.strerror}") from None
        self.requests += 1
        stamp = f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"
        if conditional and self._stamps.get(key) == stamp:
            return None
        data = read_bounded(path, limit, StoreError)  # never a FIFO, a device or more than limit
        self._stamps[key] = stamp
        return data

    def forget(self, key: str) -> None:
        self._stamps.pop(key, None)

    def download(self, key: str, dest: Path, sha256: str, size: int,
                 on_chunk: Callable[[bytes], None] | None = None) -> int:
        path = self.root / key

        def fill(sink: Callable[[bytes], None], limit: int) -> None:
            self.requests += 1
            if not path.is_file():  # never open a FIFO (blocks) or a device (endless)
                raise StoreError(f"{path}: not found, or not a regular file")
            written = 0
            with open(path, "rb") as src:
                while chunk := src.read(min(netio.BLOB_CHUNK, limit + 1 - written)):
                    sink(chunk)
                    written += len(chunk)
                    if written > limit:
                        raise TooLong(f"{path}: more than the {limit} bytes allowed")
                    if self.cancel is not None and self.cancel.is_set():
                        raise StoreError(f"{path}: stopped (the agent is shutting down)")

        return download_checked(f"{self.url}/{key}", dest, sha256, size, on_chunk, fill)

    def put(self, key: str, data: bytes, timeout: float = METADATA_TIMEOUT, limit: int = POINTER_MAX) -> None:
        """An agent's report: written atomically (a rename)."""
        try:
            write_atomic(self.root / key, data.decode())
        except OSError as e:
            raise StoreError(f"{self.root / key}: cannot write ({e.strerror or e})") from None


class FolderWriter(WriterBase):
    """The controller's writes into a folder store (and the folder an HTTP mirror serves)."""

    def __init__(self, url: str, s3_endpoint: str | None, reader: FolderStore) -> None:
        self.url = url
        self.reader = reader
        self.root = self.reader.root
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"{url}: not a folder; publish to {publish_forms()}")

    def exists(self, key: str) -> bool:
        return (self.root / key).is_file()

    def get(self, key: str, limit: int = POINTER_MAX) -> bytes:
        return self.reader.get(key, limit=limit) or b""

    def put(self, key: str, data: bytes | Path, content_type: str = "application/octet-stream",
            on_bytes: Callable[[int], None] | None = None) -> None:
        """A temporary file renamed into place; ``on_bytes`` is told the size of a file once it is copied."""
        dest = self.root / key
        tmp = dest.with_name(f".{dest.name}.partial")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, Path):
                shutil.copyfile(data, tmp)
                if on_bytes:
                    on_bytes(tmp.stat().st_size)
            else:
                tmp.write_bytes(data)
            tmp.chmod(0o644)
            tmp.replace(dest)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"{dest}: cannot write ({e.strerror or e})") from None

    def delete(self, key: str) -> None:
        try:
            (self.root / key).unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"{self.root / key}: cannot remove ({e.strerror or e})") from None

    def check_exists(self) -> None:
        if not self.root.is_dir():
            raise UsageError(f"{self.url}: no such store: the folder does not exist (tritonops release publish "
                             "makes one)")

    def names(self, prefix: str, suffix: str = ".json") -> list[str]:
        folder = self.root / prefix
        return sorted(prefix + p.name for p in folder.glob(f"*{suffix}") if p.is_file()) if folder.is_dir() else []

    def swap(self, key: str, change: Callable[[bytes | None], bytes | None], what: str = "move",
             content_type: str = "application/json") -> bytes | None:
        """Under a lock on the object's folder: read, ``change``, write."""
        folder = (self.root / key).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"{folder}: cannot write ({e.strerror or e})") from None
        with lock.held(folder, f"tritonops release {what}"):
            dest = self.root / key
            new = change(self.reader.get(key, limit=POINTER_MAX) if dest.is_file() else None)
            if new is not None:
                self.put(key, new, content_type)
            return new


KIND = Kind("folder", ("", "file"), "a folder", reports=True, reads=FolderStore, writes=FolderWriter)
