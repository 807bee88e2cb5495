"""Publishing releases into a store, and moving channel pointers (the controller's half of pull mode).

``publish`` validates a repository as Triton would load it, builds its manifest, signs it with the
operator's key, uploads every file once by content (``blobs/sha256/<hex>``), then the manifest and
its signature (``releases/<digest>/``), then moves the channel pointer (``channels/<name>.json``):
one object written last, so agents see either the old release or the whole new one. ``promote``
copies one channel's release to another, ``rollback`` moves a channel back through its history,
``status`` reads the pointers and what each target reports it serves.

A pointer moves by compare-and-swap, so two moves at once never lose one (from the pointer or its
history): on S3 a conditional PUT (``If-Match`` the ETag read, ``If-None-Match: *`` for the first
write), retried after reading again when someone else moved it first; in a folder store, the
read-modify-write holds a lock (``channels/.lock``, :mod:`tritonops.agent.lock`).

Stores: ``s3://BUCKET/PREFIX`` (boto3; credentials from boto3's chain) or a folder that a static
HTTP server publishes to air-gapped sites (agents read it over http(s)://). The layout is
``tritonops.agent.store``'s; reads go through the same ``Store`` class the agents use.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonops.agent import lock, manifest, metadata, netio, trust
from tritonops.agent.errors import ReleaseError, StoreError, UsageError
from tritonops.agent.metadata import unverified as parse_pointer
from tritonops.agent.releases import check_release_id
from tritonops.agent.store import POINTER_MAX, Store, blob_key, channel_key, manifest_key, root_key, signatures_key
from tritonops.release import canary
from tritonops.release.push import check_repository

HISTORY = 20
ROOT_EXPIRES = 365 * 86400.0  # a root (keys and thresholds) is valid a year unless rotated
EXPIRES = 30 * 86400.0  # seconds a pointer stays valid unless refreshed (--expires; "freeze" needs an expiry)
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
SWAP_TRIES = 8  # conditional writes of one pointer before giving up (each after reading it again)
TARGET_METRICS_MAX = 16 << 20  # bytes read from one target's /metrics
TARGET_TIMEOUT = 10.0  # seconds for one target's whole /metrics page


class Writer:
    """Writes into a store; reads go through the agent's ``Store``. An ``oci://`` store is written by
    :class:`tritonops.release.oci_writer.RegistryWriter`."""

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
            from tritonops.release.oci_writer import RegistryWriter

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
        if self.reader.kind == "oci":
            return self.reader.get(key, limit=limit) or b""
        if self.reader.kind == "file":
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

    def put(self, key: str, data: bytes | Path, content_type: str = "application/octet-stream") -> None:
        """One object; a folder store writes a temporary file and renames it (atomic for readers)."""
        if self.reader.kind == "oci":
            return self.oci.put(key, data)
        if self.reader.kind == "file":
            dest = self.root / key
            tmp = dest.with_name(f".{dest.name}.partial")
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(data, Path):
                    shutil.copyfile(data, tmp)
                else:
                    tmp.write_bytes(data)
                tmp.chmod(0o644)
                tmp.replace(dest)
            except OSError as e:
                raise StoreError(f"{dest}: cannot write ({e.strerror or e})") from None
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if isinstance(data, Path):
                self.client.upload_file(str(data), self.bucket, self._key(key), ExtraArgs={"ContentType": content_type})
            else:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as e:
            raise StoreError(f"{self.url}/{key}: upload failed: {e}") from None


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


def duration(text: str, option: str = "--expires") -> float:
    """Seconds of ``7d``, ``12h``, ``30m`` or ``90s`` (a bare number: seconds)."""
    t = str(text).strip().lower()
    unit = _UNITS.get(t[-1:])
    try:
        value = float(t[:-1] if unit else t) * (unit or 1.0)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{option} {text!r}: expected a duration such as 30d, 12h, 30m or 90s")
    return value


def latest_root(writer: Writer) -> int:
    """The highest root/<N>.json in the store (0: none, the nodes trust their --trusted-key files)."""
    n = 0
    while writer.exists(root_key(n + 1)):
        n += 1
    return n


def _release_length(writer: Writer, channel: str, release: str, digest: str) -> int:
    """The manifest's length, once it is known to be release ``release`` signed for ``channel``."""
    where = f"{writer.url}/{manifest_key(digest)}"
    raw = writer.get(manifest_key(digest), limit=manifest.MANIFEST_MAX)
    doc = manifest.parse_release(raw, where)
    if doc["release"] != release:
        raise ReleaseError(f"{where}: the manifest is release {doc['release']!r}, not {release!r}")
    if channel not in doc["channels"]:
        raise UsageError(f"{where}: release {release!r} is signed for channel(s) {', '.join(doc['channels'])}, "
                         f"not {channel!r}; publish it again with --for-channel {channel} (a new release id)")
    return len(raw)


def _old_pointer(raw: bytes, where: str) -> dict[str, Any]:
    """The pointer being replaced; one in the unsigned format before signed metadata is read as version 0
    (the controller migrates its own store; agents refuse that format)."""
    try:
        return parse_pointer(raw, where)
    except StoreError as e:
        if metadata.UNSIGNED not in str(e):
            raise
    doc = json.loads(raw.decode("utf-8"))
    return {**{k: doc[k] for k in ("release", "digest", "published", "note") if k in doc},
            "version": 0, "history": [h for h in doc.get("history", []) if isinstance(h, dict)]}


def read_pointer(store: Store | Writer, channel: str) -> dict[str, Any] | None:
    try:
        raw = store.get(channel_key(channel), limit=POINTER_MAX)
    except ReleaseError as e:
        if "not found" in str(e) or "HTTP 404" in str(e):
            return None
        raise
    return parse_pointer(raw or b"", f"{store}/{channel_key(channel)}")


Target = Callable[[dict[str, Any] | None], tuple[str, str, str]]


def move_pointer(writer: Writer, channel: str, release: str, digest: str, note: str,
                 target: Target | None = None, rollout: dict[str, Any] | None = None, *,
                 keys: list[Path] | None = None, expires: float = EXPIRES, force: bool = False) -> dict[str, Any]:
    """Point ``channel`` at a release (one object written: atomic for readers); keep a history.

    The write is a compare-and-swap (:meth:`Writer.swap`): a move made meanwhile by someone else is
    read again and kept in the history. ``target``, when given, picks (release, digest, note) from the
    pointer as it is at the time of the write (rollback: "the one before the current one").
    ``rollout`` (tritonops.agent.rollout) goes into the pointer; a move without one ends any rollout.

    The pointer is a signed envelope (agent.trust; role "channel", signed by ``keys``): its version is
    the old one's + 1, it expires ``expires`` seconds from now, and it states the manifest's length and
    the store's latest root version. A release whose manifest does not list ``channel`` is refused.
    ``force`` writes a new version even when nothing else changed (refresh: a new expiry).
    """
    key = channel_key(channel)
    if not keys:
        raise UsageError(f"channel {channel!r}: a channel pointer is signed; give the signing key (--key)")
    seen: dict[str, Any] = {}
    root_version = latest_root(writer)

    def change(raw: bytes | None) -> bytes | None:
        old = None if raw is None else _old_pointer(raw, f"{writer.url}/{key}")
        rel, dig, why = target(old) if target else (release, digest, note)
        seen.update(old=old, release=rel, digest=dig)
        same = old is not None and old["digest"] == dig and old["release"] == rel
        if same and (old or {}).get("rollout") == rollout and not force and (old or {}).get("version", 0) >= 1:
            return None
        length = _release_length(writer, channel, rel, dig)
        # A rollout's next wave (or its halt) is the same release: no new history entry.
        history = ([{k: old[k] for k in ("release", "digest", "published", "note") if k in old}]
                   if old and not same else [])
        history += (old or {}).get("history", [])
        now = time.time()
        doc = {"type": "channel", "channel": channel, "version": int((old or {}).get("version", 0)) + 1,
               "expires": trust.format_time(now + expires), "release": rel, "digest": dig, "length": length,
               "root_version": root_version, "note": why, "published": trust.format_time(now),
               "history": history[:HISTORY]}
        if rollout is not None:
            doc["rollout"] = rollout
        seen["doc"] = doc
        return trust.sign_envelope(doc, list(keys))

    if writer.swap(key, change, what=note) is None:
        return {**(seen["old"] or {}), "changed": False}
    old = seen["old"]
    return {**seen["doc"], "changed": True, "previous": old["release"] if old else None}


def _id_record(writer: Writer, to: str, release: str) -> dict[str, Any] | None:
    """ids/<release>.json: the digest an id was first published with (None: a new id)."""
    id_key = f"ids/{release}.json"
    if not writer.exists(id_key):
        return None
    try:
        known = json.loads(writer.get(id_key) or b"{}")
        assert isinstance(known, dict)
    except (ValueError, RecursionError, AssertionError):
        raise StoreError(f"{to}/{id_key}: not a release id record {{'release', 'digest'}}") from None
    return known


def _keys(keys: Path | list[Path] | None) -> list[Path]:
    return [] if keys is None else [Path(keys)] if isinstance(keys, (str, Path)) else [Path(k) for k in keys]


def publish(source: Path, to: str, channel: str | None, signing_key: Path | list[Path], target: str | None = None,
            version: str | None = None, config_name: str | None = None, s3_endpoint: str | None = None,
            progress: Any = None, channels: list[str] | None = None, expires: float = EXPIRES,
            channel_keys: list[Path] | None = None) -> dict[str, Any]:
    """Validate, sign, upload (each file once, by content), then move the channel pointer.

    The manifest states every file's length, the release id and the channels it may be served on
    (``channels``, plus ``channel``); it is signed by ``signing_key`` (one or several: role "release"),
    the pointer by ``channel_keys`` (default: the same keys; role "channel"), valid ``expires`` seconds."""
    source = Path(source)
    if not source.is_dir():
        raise UsageError(f"{source}: not a model repository folder")
    allowed = sorted({*(channels or ()), *([channel] if channel else [])})
    for c in allowed:
        channel_key(c)  # a bad name is refused before anything is uploaded
    release_keys = _keys(signing_key)
    for k in release_keys:
        trust.public_pem(k)  # a missing or unreadable key is refused (naming it) before anything else is read
    files, warnings = check_repository(source, target, config_name)
    writer = Writer(to, s3_endpoint)
    known = _id_record(writer, to, check_release_id(version)) if version else None
    if not allowed:
        raise UsageError("publish: name the channel(s) the release may be served on (--channel or --for-channel)")
    lengths = manifest.tree_lengths(source, files)
    # The default id names the content and the channels it is signed for (publishing it for other channels
    # is another release): the first 16 hex digits of the manifest's sha256 with the id left out.
    default = hashlib.sha256(manifest.text(files, lengths, "", allowed).encode()).hexdigest()[:16]
    release = check_release_id(version or default)
    text = manifest.text(files, lengths, release, allowed).encode()
    digest = hashlib.sha256(text).hexdigest()
    signature = trust.sign_detached(text, release_keys)
    id_key = f"ids/{release}.json"
    known = known if version else _id_record(writer, to, release)
    if known is not None and known.get("digest") != digest:
        raise ReleaseError(f"{to}: release id {release!r} was published with other content "
                           f"(digest {str(known.get('digest'))[:16]}, now {digest[:16]}); use a new id")
    uploaded = skipped = duplicates = 0
    seen: set[str] = set()
    for i, (rel, sha) in enumerate(sorted(files.items()), 1):
        if sha in seen:  # the same content as a file before it in this release: one blob serves both
            duplicates += 1
        elif writer.exists(blob_key(sha)):
            skipped += 1
        else:
            writer.put(blob_key(sha), source / rel)
            uploaded += 1
        seen.add(sha)
        if progress:
            progress(i, len(files), rel)
    writer.put(signatures_key(digest), signature, "application/json")
    writer.put(manifest_key(digest), text, "application/json")
    writer.put(id_key, json.dumps({"release": release, "digest": digest}).encode(), "application/json")
    out: dict[str, Any] = {"release": release, "digest": digest, "store": to, "files": len(files),
                           "uploaded": uploaded, "already_there": skipped, "duplicates": duplicates,
                           "models": manifest.models(files), "warnings": warnings}
    if channel:
        moved = move_pointer(writer, channel, release, digest, f"publish {source.name}",
                             keys=_keys(channel_keys) or release_keys, expires=expires)
        out.update(channel=channel, changed=moved["changed"], previous=moved.get("previous"))
    return out


def promote(to: str, source_channel: str, channel: str, s3_endpoint: str | None = None,
            gate: canary.Gate | None = None, *, keys: Path | list[Path] | None = None,
            expires: float = EXPIRES) -> dict[str, Any]:
    """Point ``channel`` at ``source_channel``'s release.

    With ``gate`` (an :class:`tritonops.release.canary.Gate`) the pointer moves only if Prometheus
    shows the canary no worse than stable; otherwise :class:`~tritonops.release.canary.PromotionRefused`
    (a ReleaseError carrying the figures) and nothing is written. The result then holds the report.
    """
    writer = Writer(to, s3_endpoint)
    channel_key(channel)
    src = read_pointer(writer, source_channel)
    if src is None:
        raise UsageError(f"{to}: channel {source_channel!r} does not exist")
    if not _keys(keys):
        raise UsageError(f"channel {channel!r}: a channel pointer is signed; give the signing key (--key)")
    _release_length(writer, channel, src["release"], src["digest"])  # not signed for it: refused before the gate
    report = None
    if gate is not None:
        report = canary.check(gate)
    moved = move_pointer(writer, channel, src["release"], src["digest"], f"promote from {source_channel}",
                         keys=_keys(keys), expires=expires)
    out = {"channel": channel, "release": src["release"], "digest": src["digest"], "changed": moved["changed"],
           "previous": moved.get("previous")}
    if report is not None:
        out["gate"] = report
    return out


def rollback(to: str, channel: str, release: str | None = None, s3_endpoint: str | None = None, *,
             keys: Path | list[Path] | None = None, expires: float = EXPIRES) -> dict[str, Any]:
    """Move ``channel`` back: to its previous release, or to ``release`` from its history."""
    writer = Writer(to, s3_endpoint)
    cur = read_pointer(writer, channel)
    if cur is None:
        raise UsageError(f"{to}: channel {channel!r} does not exist")

    def choose(now: dict[str, Any] | None) -> tuple[str, str, str]:
        now = now or cur  # the pointer as it is when written (moved meanwhile: back from there)
        earlier = [h for h in now.get("history", []) if h.get("digest") != now["digest"]]
        pick = next((h for h in earlier if release in (None, h.get("release"))), None)
        if pick is None:
            have = ", ".join(h.get("release", "?") for h in earlier) or "none"
            raise UsageError(f"{to}: channel {channel!r} has no earlier release {release or ''} (history: {have})")
        return pick["release"], pick["digest"], f"rollback from {now['release']}"

    if not _keys(keys):
        raise UsageError(f"channel {channel!r}: a channel pointer is signed; give the signing key (--key)")
    choose(cur)  # refused before anything is written
    moved = move_pointer(writer, channel, "", "", "rollback", target=choose, keys=_keys(keys), expires=expires)
    return {"channel": channel, "release": moved["release"], "digest": moved["digest"], "changed": moved["changed"],
            "previous": moved.get("previous", cur["release"])}


def refresh(to: str, channel: str, s3_endpoint: str | None = None, *, keys: Path | list[Path] | None = None,
            expires: float = EXPIRES) -> dict[str, Any]:
    """Re-sign the channel's release as it is, with a new version and expiry (a cron's job: the pointer of
    a channel that does not move would otherwise expire and freeze its nodes)."""
    writer = Writer(to, s3_endpoint)
    if read_pointer(writer, channel) is None:
        raise UsageError(f"{to}: channel {channel!r} does not exist")

    def same(now: dict[str, Any] | None) -> tuple[str, str, str]:
        assert now is not None
        return now["release"], now["digest"], str(now.get("note") or "refresh")

    def keep_rollout() -> dict[str, Any] | None:
        p = read_pointer(writer, channel)
        return (p or {}).get("rollout")

    moved = move_pointer(writer, channel, "", "", "refresh", target=same, rollout=keep_rollout(), keys=_keys(keys),
                         expires=expires, force=True)
    return {"channel": channel, "release": moved["release"], "digest": moved["digest"], "version": moved["version"],
            "expires": moved["expires"], "changed": moved["changed"]}


def write_root(to: str, keys: dict[str, list[Path]], sign_with: list[Path], thresholds: dict[str, int] | None = None,
               expires: float = ROOT_EXPIRES, s3_endpoint: str | None = None,
               first: bool | None = None) -> dict[str, Any]:
    """Write the store's next root, ``root/<N+1>.json``: ``keys`` maps each role (root, release, channel,
    report) to its public key files, ``thresholds`` each role to how many must sign. ``sign_with`` must hold
    a threshold of the current root's root keys (for root 1: the key(s) nodes trust today, their
    --trusted-key) and of the new root's: nodes follow it only then. ``first``: True refuses when a root
    exists (init), False when none does (rotate). Create-only: a root version is never rewritten."""
    writer = Writer(to, s3_endpoint)
    version = latest_root(writer) + 1
    if first is True and version > 1:
        raise UsageError(f"{to}: root/{version - 1}.json exists already; use tritonops release root rotate")
    if first is False and version == 1:
        raise UsageError(f"{to}: no root yet; use tritonops release root init")
    signed = trust.new_root(keys, thresholds or {}, version, time.time() + expires)
    raw = trust.sign_envelope(signed, list(sign_with))
    where = f"{to}/{root_key(version)}"
    if version > 1:  # checked as nodes will check it: signed by the old root's root keys and its own
        prev = trust.load_root(writer.get(root_key(version - 1), limit=trust.ROOT_MAX), f"{to}/{root_key(version - 1)}")
        trust.next_root(prev, raw, where)
    else:
        trust.load_root(raw, where)  # its own root keys; the old ones are the nodes' --trusted-key files

    def create(old: bytes | None) -> bytes:
        if old is not None:
            raise UsageError(f"{where}: exists already (written meanwhile?); a root version is never rewritten")
        return raw

    writer.swap(root_key(version), create, what=f"root {version}")
    return {"store": to, "root_version": version, "expires": signed["expires"],
            "roles": {r: {"keyids": v["keyids"], "threshold": v["threshold"]} for r, v in signed["roles"].items()}}


def _parse_metrics(text: str) -> list[dict[str, Any]]:
    """The tritonops_release_info / _channel_info / _up_to_date series of one target's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("tritonops_release_") and s.name.endswith(("_info", "_up_to_date")):
                out.append({"name": s.name, "value": float(s.value), **s.labels})
    return out


def status(to: str, channels: list[str], targets: list[str], s3_endpoint: str | None = None) -> dict[str, Any]:
    """Each channel's release, and which release each target (an agent's /metrics URL) serves."""
    import urllib.parse

    for url in targets:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"--agent-url {url!r}: expected an agent's http(s)://HOST:PORT/metrics URL")
    reader = Store(to, s3_endpoint=s3_endpoint)
    # S3 with the controller's credentials (boto3's chain), not the agents' environment variables.
    store: Store | Writer = Writer(to, s3_endpoint) if reader.kind in ("s3", "file") else reader
    out: dict[str, Any] = {"store": to, "channels": {}, "targets": []}
    for c in channels:
        p = read_pointer(store, c)
        out["channels"][c] = None if p is None else {k: p.get(k) for k in ("release", "digest", "published", "note",
                                                                          "version", "expires")}
    for url in targets:
        row: dict[str, Any] = {"target": url}
        try:  # one deadline for the whole page, however slowly it trickles
            resp = netio.request(url, deadline=TARGET_TIMEOUT, limit=TARGET_METRICS_MAX)
            if resp.status != 200:
                raise ReleaseError(f"{netio.safe_url(url)}: HTTP {resp.status}")
            series = _parse_metrics(resp.body.decode(errors="replace"))
        except (ReleaseError, ValueError) as e:  # unreachable, slow, too big, or not a metrics page
            row["error"] = str(e)
            out["targets"].append(row)
            continue
        for s in series:
            if s["name"] == "tritonops_release_info":
                row.update(channel=s.get("channel"), release=s.get("release"), digest=s.get("digest"))
            elif s["name"] == "tritonops_release_up_to_date":
                row["up_to_date"] = s["value"] == 1
        out["targets"].append(row)
    return out

