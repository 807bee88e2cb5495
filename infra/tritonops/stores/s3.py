"""An S3 store (``s3://BUCKET/PREFIX``; any S3-compatible endpoint): read by agents with SigV4 and the
standard library, written by the controller with boto3 (imported inside the functions that write, so
the node never loads it).

Agents sign with the credentials ``aws_credentials.from_env`` finds, in botocore's order: static
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``; MinIO, Ceph), then IRSA
(``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``, STS AssumeRoleWithWebIdentity), then EKS Pod
Identity (``AWS_CONTAINER_CREDENTIALS_FULL_URI`` + ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``); none of
them: anonymous. Temporary credentials are refreshed before they expire; a failure to get them is a
``CredentialsError`` (a StoreError: exit 3, retry later). Reads are :mod:`.http`'s, signed.

A pointer moves by compare-and-swap (:meth:`S3Writer.swap`): a conditional PUT (``If-Match`` the ETag
read, ``If-None-Match: *`` for the first write).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import netio
from ..core.errors import StoreError, UsageError
from ..core.keys import METADATA_TIMEOUT, POINTER_MAX
from . import aws_credentials
from .aws_credentials import Credentials, sigv4_headers
from .base import SWAP_TRIES, Kind, WriterBase
from .http import HttpStore


class S3Store(HttpStore):
    """Reads of an ``s3://BUCKET/PREFIX`` store (path-style on a given endpoint, virtual-hosted on AWS),
    and an agent's report PUT into it."""

    def __init__(self, url: str, s3_endpoint: str | None = None, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.credentials: aws_credentials.Provider | None = None  # found on the first request
        self._credentials_lock = threading.Lock()
        self._credentials_found = False
        parts = urllib.parse.urlsplit(url)
        self.bucket, self.prefix = parts.netloc, parts.path.strip("/")
        if not self.bucket:
            raise UsageError(f"{url}: expected {KIND.form}")
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        endpoint = s3_endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        # Path-style on a given endpoint (S3-compatible stores), virtual-hosted on AWS.
        self.base = (f"{endpoint.rstrip('/')}/{self.bucket}" if endpoint
                     else f"https://{self.bucket}.s3.{self.region}.amazonaws.com")

    def _http_url(self, key: str) -> str:
        return f"{self.base}/{urllib.parse.quote('/'.join(p for p in (self.prefix, key) if p))}"

    def _credentials(self) -> Credentials | None:
        """The signing credentials, from the chain in aws_credentials (found once, refreshed as needed)."""
        with self._credentials_lock:
            if not self._credentials_found:
                self.credentials = aws_credentials.from_env()
                self._credentials_found = True
        return self.credentials.get() if self.credentials else None

    def _signer(self, headers: dict[str, str]) -> Callable[[str], dict[str, str]]:
        creds = self._credentials()
        return lambda target: {**headers, **sigv4_headers(target, self.region, credentials=creds, env={})}

    def put(self, key: str, data: bytes, timeout: float = METADATA_TIMEOUT, limit: int = POINTER_MAX) -> None:
        """An agent's report: a SigV4 PUT within ``timeout`` seconds, reading at most ``limit`` bytes of its
        answer."""
        creds = self._credentials()
        payload = hashlib.sha256(data).hexdigest()

        def sign(target: str) -> dict[str, str]:
            return {"Content-Type": "application/json",
                    **sigv4_headers(target, self.region, credentials=creds, env={}, method="PUT",
                                    payload_hash=payload)}

        resp = netio.request(self._http_url(key), what=f"{self}/{key}", headers=sign, data=data, method="PUT",
                             deadline=timeout, limit=limit, error=StoreError, cancel=self.cancel)
        if not 200 <= resp.status < 300:
            raise StoreError(f"{self}/{key}: PUT answered HTTP {resp.status} {netio.reason(resp.status)}")


class S3Writer(WriterBase):
    """The controller's access to an S3 store, with boto3 and its credential chain."""

    def __init__(self, url: str, s3_endpoint: str | None, reader: S3Store) -> None:
        self.url = url
        self.reader = reader
        import boto3

        # A session of its own, not boto3's process-wide default: that one resolves credentials once
        # and keeps them, so a second publish in the same process (a long-lived controller, a test
        # run) would sign with whatever the environment held at the first.
        self.client = boto3.session.Session().client("s3", endpoint_url=s3_endpoint or None)
        self.bucket, self.prefix = self.reader.bucket, self.reader.prefix

    def _key(self, key: str) -> str:
        return "/".join(p for p in (self.prefix, key) if p)

    def exists(self, key: str) -> bool:
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
        """An object's bytes, read with the controller's credentials (boto3's chain)."""
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
        """One object; ``on_bytes`` is told each number of bytes of a file sent as it goes."""
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
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (BotoCoreError, ClientError) as e:
            raise StoreError(f"{self.url}/{key}: cannot remove: {e}") from None

    def names(self, prefix: str, suffix: str = ".json") -> list[str]:
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

    def swap(self, key: str, change: Callable[[bytes | None], bytes | None], what: str = "move",
             content_type: str = "application/json") -> bytes | None:
        """A conditional PUT (If-Match the ETag read; If-None-Match: * at first), read again on a conflict."""
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


KIND = Kind("s3", ("s3",), "s3://BUCKET/PREFIX", reports=True, reads=S3Store, writes=S3Writer, ports={"s3": 443},
            settings=("s3_endpoint", "region", "credentials_secret", "reports"))
