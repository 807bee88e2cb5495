"""Writing into a store (the controller's side): an S3 bucket with boto3, or the folder an HTTP mirror serves.

Reads go through the agents' own :class:`tritonops.stores.reader.Store`; a channel pointer (or any object
that must never lose a concurrent write) moves by compare-and-swap (:meth:`Writer.swap`): on S3 a
conditional PUT (``If-Match`` the ETag read, ``If-None-Match: *`` for the first write), in a folder a lock
(:mod:`tritonops.core.lock`).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..core import lock
from ..core.errors import StoreError, UsageError
from ..core.keys import POINTER_MAX
from .reader import Store

SWAP_TRIES = 8  # conditional writes of one pointer before giving up (each after reading it again)


class Writer:
    """Writes into a store; reads go through the agent's ``Store``. An ``oci://`` store is written by
    :class:`tritonops.stores.oci_writer.RegistryWriter`."""

    def __init__(self, url: str, s3_endpoint: str | None = None) -> None:
        self.url = url
        self.reader = Store(url, s3_endpoint=s3_endpoint)
        if self.reader.kind == "s3":
            import boto3

            # A session of its own, not boto3's process-wide default: that one resolves credentials once
            # and keeps them, so a second publish in the same process (a long-lived controller, a test
            # run) would sign with whatever the environment held at the first.
            self.client = boto3.session.Session().client("s3", endpoint_url=s3_endpoint or None)
            self.bucket, self.prefix = self.reader.bucket, self.reader.prefix
        elif self.reader.kind == "file":
            self.root = self.reader.root
            if self.root.exists() and not self.root.is_dir():
                raise UsageError(f"{url}: not a folder; publish to s3://BUCKET/PREFIX or to a folder")
        elif self.reader.kind == "oci":
            from .oci_writer import RegistryWriter

            self.oci = RegistryWriter(self.reader)
        else:
            raise UsageError(f"{url}: publish to s3://BUCKET/PREFIX, oci://REGISTRY/REPO or to the folder an HTTP "
                             "server publishes")

    def __str__(self) -> str:
        return self.url

    def _key(self, key: str) -> str:
        return "/".join(p for p in (self.prefix, key) if p)

    def exists(self, key: str) -> bool:
        if self.reader.kind == "oci":
            return self.oci.exists(key)
        if self.reader.kind == "file":
            return (self.root / key).is_file()
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise StoreError(f"{self.url}/{key}: {e}") from None
        except BotoCoreError as e:
            raise StoreError(f"{self.url}/{key}: {e}") from None

    def get(self, key: str, limit: int = POINTER_MAX) -> bytes:
        """An object's bytes, read with the controller's credentials (boto3's chain for S3)."""
        if self.reader.kind in ("file", "oci"):
            return self.reader.get(key, limit=limit) or b""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            data = bytes(body.read(limit + 1))
        except ClientError as e:
            missing = e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey")
            raise StoreError(f"{self.url}/{key}: {'not found' if missing else e}") from None
        except BotoCoreError as e:
            raise StoreError(f"{self.url}/{key}: {e}") from None
        if len(data) > limit:
            raise StoreError(f"{self.url}/{key}: more than {limit} bytes")
        return data

    def put(self, key: str, data: bytes | Path, content_type: str = "application/octet-stream",
            on_bytes: Callable[[int], None] | None = None) -> None:
        """One object; a folder store writes a temporary file and renames it (atomic for readers).
        ``on_bytes`` is told each number of bytes of a file sent as it goes (a folder: once, when copied)."""
        if self.reader.kind == "oci":
            return self.oci.put(key, data, on_bytes)
        if self.reader.kind == "file":
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
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if isinstance(data, Path):
                self.client.upload_file(str(data), self.bucket, self._key(key), ExtraArgs={"ContentType": content_type},
                                        Callback=on_bytes)
            else:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as e:
            raise StoreError(f"{self.url}/{key}: upload failed: {e}") from None

    def delete(self, key: str) -> None:
        """Remove one object (a publish's own uploads, after it failed). A registry keeps an unreferenced blob
        until its garbage collection: nothing names it, so no node reads it."""
        if self.reader.kind == "oci":
            return
        if self.reader.kind == "file":
            try:
                (self.root / key).unlink(missing_ok=True)
            except OSError as e:
                raise StoreError(f"{self.root / key}: cannot remove ({e.strerror or e})") from None
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (BotoCoreError, ClientError) as e:
            raise StoreError(f"{self.url}/{key}: cannot remove: {e}") from None

    def check_exists(self) -> None:
        """A folder store must be there (an S3 bucket or prefix that is not answers for itself on first read)."""
        if self.reader.kind == "file" and not self.root.is_dir():
            raise UsageError(f"{self.url}: no such store: the folder does not exist (tritonops release publish "
                             "makes one)")

    def names(self, prefix: str, suffix: str = ".json") -> list[str]:
        """The keys directly under ``prefix`` (``channels/``, ``reports/stable/``) ending in ``suffix``, sorted."""
        if self.reader.kind == "oci":
            return self.oci.names(prefix, suffix)
        if self.reader.kind == "file":
            folder = self.root / prefix
            return sorted(prefix + p.name for p in folder.glob(f"*{suffix}") if p.is_file()) if folder.is_dir() else []
        from botocore.exceptions import BotoCoreError, ClientError

        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                              Prefix=self._key(prefix)):
                keys += [prefix + o["Key"].rsplit("/", 1)[-1] for o in page.get("Contents", [])
                         if o["Key"].endswith(suffix)]
        except (BotoCoreError, ClientError) as e:
            raise StoreError(f"{self.url}/{prefix}: cannot list it: {e}") from None
        return sorted(keys)

    def missing_channel(self, channel: str) -> UsageError:
        """The error for a channel the store does not hold, naming the ones it does."""
        there = [k.removeprefix("channels/").removesuffix(".json") for k in self.names("channels/")]
        return UsageError(f"{self.url}: channel {channel!r} does not exist (channels there: "
                          f"{', '.join(there) or 'none'})")

    def swap(self, key: str, change: Callable[[bytes | None], bytes | None], what: str = "move",
             content_type: str = "application/json") -> bytes | None:
        """Read-modify-write of one object that never loses a concurrent write: ``change`` gets the
        current bytes (None when absent) and returns the new ones (None: nothing to write); it may be
        called again with newer bytes when someone else wrote first. Returns what was written."""
        if self.reader.kind == "oci":
            return self.oci.swap(key, change, what, SWAP_TRIES)
        if self.reader.kind == "file":
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
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(SWAP_TRIES):
            try:
                try:
                    got = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
                    old, etag = bytes(got["Body"].read(POINTER_MAX + 1)), got["ETag"]
                except ClientError as e:
                    if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                        raise
                    old, etag = None, None
                if old is not None and len(old) > POINTER_MAX:
                    raise StoreError(f"{self.url}/{key}: more than {POINTER_MAX} bytes")
                new = change(old)
                if new is None:
                    return None
                cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=new, ContentType=content_type,
                                       **cond)
                return new
            except ClientError as e:
                err = e.response.get("Error", {}).get("Code")
                if err not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise StoreError(f"{self.url}/{key}: {e}") from None
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # someone else moved it: read again
            except BotoCoreError as e:
                raise StoreError(f"{self.url}/{key}: {e}") from None
        raise StoreError(f"{self.url}/{key}: moved by someone else on each of {SWAP_TRIES} tries while this {what} "
                         "was being written; nothing was written, run it again")
