"""Publishing releases into a store, and moving channel pointers (the controller's half of pull mode).

``publish`` validates a repository as Triton would load it, builds its manifest, signs it with the
operator's key, uploads every file once by content (``blobs/sha256/<hex>``), then the manifest and
its signature (``releases/<digest>/``), then moves the channel pointer (``channels/<name>.json``):
one object written last, so agents see either the old release or the whole new one. ``promote``
copies one channel's release to another, ``rollback`` moves a channel back through its history,
``status`` (status.py) reads the pointers and what each target reports it serves.

A pointer moves by compare-and-swap, so two moves at once never lose one (from the pointer or its
history): on S3 a conditional PUT (``If-Match`` the ETag read, ``If-None-Match: *`` for the first
write), retried after reading again when someone else moved it first; in a folder store, the
read-modify-write holds a lock (``channels/.lock``, :mod:`tritonops.core.lock`).

Stores: ``s3://BUCKET/PREFIX`` (boto3; credentials from boto3's chain) or a folder that a static
HTTP server publishes to air-gapped sites (agents read it over http(s)://), or ``oci://REGISTRY/REPO``
(:mod:`tritonops.stores`: ``open_writer``); reads go through the same stores the agents use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonops.core.errors import ReleaseError, StoreError, UsageError
from tritonops.core.keys import (
    CHANNELS_PREFIX,
    POINTER_MAX,
    blob_key,
    channel_key,
    id_key,
    manifest_key,
    root_key,
    signatures_key,
)
from tritonops.core.names import MANIFEST_MAX, check_release_id
from tritonops.release import canary, model_signature
from tritonops.release.push import check_repository
from tritonops.release_format import manifest, metadata, producer, records, trust
from tritonops.release_format.metadata import unverified as parse_pointer
from tritonops.stores import Store, Writer, open_writer

ROOT_EXPIRES = 365 * 86400.0  # a root (keys and thresholds) is valid a year unless rotated
EXPIRES = 30 * 86400.0  # seconds a pointer stays valid unless refreshed (--expires; "freeze" needs an expiry)
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


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
    raw = writer.get(manifest_key(digest), limit=MANIFEST_MAX)
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


def nodes_root(writer: Writer) -> trust.Root | None:
    """The root every node trusts once it has followed this store's roots: root 1 then each next one, verified
    as nodes verify them (metadata.update_root). None without a root: nodes trust their --trusted-key files,
    which the controller does not hold. A chain nodes would refuse is a UsageError naming the root."""
    n = latest_root(writer)
    if n == 0:
        return None
    where = f"{writer.url}/{root_key(1)}"
    try:
        root = trust.load_root(writer.get(root_key(1), limit=trust.ROOT_MAX), where)
        return metadata.update_root(root, [writer.get(root_key(i), limit=trust.ROOT_MAX) for i in range(2, n + 1)],
                                    writer.url)
    except StoreError:
        raise
    except ReleaseError as e:
        raise UsageError(f"{e}: nodes refuse this store's roots; nothing written") from None


def as_nodes(root: trust.Root | None, old: dict[str, Any] | None, raw: bytes, channel: str, where: str) -> None:
    """Refuse (UsageError, exit 2) a pointer that every node following ``root`` would refuse, with the node's
    own check (metadata.check_pointer) and its reason: a key the channel role does not list, a threshold not
    met, an expired root. No root: the nodes' --trusted-key files decide, unknown here."""
    if root is None:
        return
    prev = None
    if old and int(old.get("version", 0)) >= 1:
        prev = {"version": old["version"], "release": old.get("release"),
                "sha256": hashlib.sha256(trust.canonical(old)).hexdigest()}
    try:
        metadata.check_pointer(raw, channel, root, prev, where, store_name=root.name)
    except metadata.Rejected as e:
        raise UsageError(f"{e} [nodes would refuse it: {e.reason}; nothing written]") from None


Target = Callable[[dict[str, Any] | None], tuple[str, str, str]]


def move_pointer(writer: Writer, channel: str, release: str, digest: str, note: str,
                 target: Target | None = None, rollout: dict[str, Any] | None = None, *,
                 keys: list[Path] | None = None, expires: float = EXPIRES, force: bool = False) -> dict[str, Any]:
    """Point ``channel`` at a release (one object written: atomic for readers); keep a history.

    The write is a compare-and-swap (:meth:`Writer.swap`): a move made meanwhile by someone else is
    read again and kept in the history. ``target``, when given, picks (release, digest, note) from the
    pointer as it is at the time of the write (rollback: "the one before the current one").
    ``rollout`` (tritonops.release_format.waves) goes into the pointer; a move without one ends any rollout.

    The pointer is a signed envelope (agent.trust; role "channel", signed by ``keys``): its version is
    the old one's + 1, it expires ``expires`` seconds from now, and it states the manifest's length and
    the store's latest root version. A release whose manifest does not list ``channel`` is refused.
    ``force`` writes a new version even when nothing else changed (refresh: a new expiry).
    """
    key = channel_key(channel)
    if not keys:
        raise UsageError(f"channel {channel!r}: a channel pointer is signed; give the signing key (--key)")
    seen: dict[str, Any] = {}
    root = nodes_root(writer)

    def change(raw: bytes | None) -> bytes | None:
        old = None if raw is None else _old_pointer(raw, f"{writer.url}/{key}")
        rel, dig, why = target(old) if target else (release, digest, note)
        seen.update(old=old, release=rel, digest=dig)
        same = old is not None and old["digest"] == dig and old["release"] == rel
        if same and (old or {}).get("rollout") == rollout and not force and (old or {}).get("version", 0) >= 1:
            return None
        length = _release_length(writer, channel, rel, dig)
        _producer_as_nodes(writer, root, rel, dig)
        doc = records.next_pointer(channel, old, rel, dig, why, length, root, rollout, expires, time.time())
        seen["doc"] = doc
        signed = trust.sign_envelope(doc, list(keys))
        as_nodes(root, old, signed, channel, f"{writer.url}/{key}")  # nothing is written that nodes refuse
        return signed

    if writer.swap(key, change, what=note) is None:
        return {**(seen["old"] or {}), "changed": False}
    old = seen["old"]
    return {**seen["doc"], "changed": True, "previous": old["release"] if old else None}


def _producer_as_nodes(writer: Writer, root: trust.Root | None, release: str, digest: str) -> None:
    """A pointer about to name a release under a root that names producer keys: the release's model.sig, read
    from the store, checked as nodes check it before they install (agent.producer); a release they would refuse
    (an unsigned one a rollback or promote picks under a requiring root) is a UsageError, nothing written."""
    if root is None or not root.producer_keys:
        return
    files = manifest.parse_release(writer.get(manifest_key(digest), limit=MANIFEST_MAX), writer.url)["files"]
    if not producer.needed(root, files):
        return
    name = producer.SIGNATURE_FILE
    raw = writer.get(blob_key(files[name]), limit=producer.BUNDLE_MAX) if name in files else None
    try:
        producer.check(raw, files, root.producer_keys, f"{writer.url}: release {release}")
    except ReleaseError as e:
        raise UsageError(f"{e} [nodes would refuse it: signature; nothing written]") from None


def _claim(writer: Writer, release: str, digest: str) -> bool:
    """Claim ``ids/<release>.json`` for ``digest`` with a conditional write (a compare-and-swap: If-None-Match
    on S3, the folder's lock): a second publish of other content under the same id is refused, even at the
    same moment; the same content again finds its own claim. True when this call made the claim."""
    key = id_key(release)

    def claim(old: bytes | None) -> bytes | None:
        if old is None:
            return records.id_record(release, digest)
        known = records.id_digest(old, f"{writer.url}/{key}")
        if known != digest:
            raise ReleaseError(f"{writer.url}: release id {release!r} was published with other content "
                               f"(digest {known[:16]}, now {digest[:16]}); use a new id")
        return None

    return writer.swap(key, claim, what=f"release id {release}") is not None


def _keys(keys: Path | list[Path] | None) -> list[Path]:
    return [] if keys is None else [Path(keys)] if isinstance(keys, (str, Path)) else [Path(k) for k in keys]


def publish(source: Path, to: str, channel: str | None, signing_key: Path | list[Path], target: str | None = None,
            version: str | None = None, config_name: str | None = None, s3_endpoint: str | None = None,
            progress: Callable[[int, int], None] | None = None, channels: list[str] | None = None,
            expires: float = EXPIRES,
            channel_keys: list[Path] | None = None, producer_keys: list[Path] | None = None) -> dict[str, Any]:
    """Validate, sign, upload (each file once, by content), then move the channel pointer.

    The manifest states every file's length, the release id and the channels it may be served on
    (``channels``, plus ``channel``); it is signed by ``signing_key`` (one or several: role "release"),
    the pointer by ``channel_keys`` (default: the same keys; role "channel"), valid ``expires`` seconds.
    ``progress(done, total)`` is told the bytes of the release's files done so far, as they upload (a file
    already in the store, or the same content as another file, is done at once)."""
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
    writer = open_writer(to, s3_endpoint)
    root = nodes_root(writer)
    signed, unverified = _model_signature(source, files, producer_keys, root)
    if version:
        check_release_id(version)
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
    _preflight(root, writer, text, signature, channel, release, digest, _keys(channel_keys) or release_keys, expires)
    new: list[str] = []  # what this run wrote that was not there before: removed again if it fails
    if _claim(writer, release, digest):  # one id, one content: whoever comes second with other content is refused
        new.append(id_key(release))
    try:
        counts = _upload(writer, source, files, lengths, new, progress)
        for key, data in ((signatures_key(digest), signature), (manifest_key(digest), text)):
            if not writer.exists(key):
                new.append(key)
            writer.put(key, data, "application/json")
        out: dict[str, Any] = {"release": release, "digest": digest, "store": to, "files": len(files), **counts,
                               "models": manifest.models(files), "warnings": warnings,
                               "model_signature": signed, "model_signature_unverified": unverified}
        if channel:
            moved = move_pointer(writer, channel, release, digest, f"publish {source.name}",
                                 keys=_keys(channel_keys) or release_keys, expires=expires)
            out.update(channel=channel, changed=moved["changed"], previous=moved.get("previous"))
    except BaseException:
        _remove_new(writer, new)
        raise
    return out


def _upload(writer: Writer, source: Path, files: dict[str, str], lengths: dict[str, int], new: list[str],
            progress: Callable[[int, int], None] | None) -> dict[str, Any]:
    """Each file once, by content; a blob already in the store (shared with another release) is left as it
    is. The key of each blob uploaded is appended to ``new`` as soon as its upload starts; ``progress`` is
    told the bytes done of the files' total (:func:`publish`)."""
    uploaded = skipped = duplicates = 0
    seen: set[str] = set()
    total, done = sum(lengths[rel] for rel in files), 0

    def sent(n: int) -> None:  # a chunk of the file uploading (the writer's callback; never past that file)
        nonlocal done
        done = min(done + n, end)
        if progress:
            progress(done, total)

    for rel, sha in sorted(files.items()):
        end = done + lengths[rel]
        if sha in seen:  # the same content as a file before it in this release: one blob serves both
            duplicates += 1
        elif writer.exists(blob_key(sha)):
            skipped += 1
        else:
            new.append(blob_key(sha))
            writer.put(blob_key(sha), source / rel, on_bytes=sent)
            uploaded += 1
        seen.add(sha)
        done = end
        if progress:
            progress(done, total)
    return {"uploaded": uploaded, "already_there": skipped, "duplicates": duplicates}


def _remove_new(writer: Writer, keys: list[str]) -> None:
    """After a failed publish: remove what it wrote that was not there before (its blobs no other release
    had, its manifest, its id claim), so that no partial release stays behind. A blob that was there
    before is never in ``keys``. Best effort: the failure that got here is what the caller reports."""
    for key in reversed(keys):
        with contextlib.suppress(ReleaseError):
            writer.delete(key)


def _model_signature(source: Path, files: dict[str, str], producer_keys: list[Path] | None,
                     root: trust.Root | None) -> tuple[dict[str, Any] | None, str | None]:
    """A producer's model.sig before anything is written: (what verified, the warning that nothing did).

    Verified with ``producer_keys`` (--model-signature) by the model_signing library; and, when the store's root
    names producer keys, as nodes verify it before they install (agent.producer: required by the root, or a
    model.sig the release carries): a release nodes would refuse is refused here. Otherwise never shipped
    silently: refused when the files no longer match it, a warning that its signer was not checked when they do."""
    signed = model_signature.verify(source, producer_keys, files) if producer_keys is not None else None
    if root is not None:
        where = f"{source} (root version {root.version}" + (
            " requires producer signatures)" if root.require_model_signature else " names producer keys)")
        try:
            kid = producer.require(root, source, files, where)
        except ReleaseError as e:
            raise ReleaseError(f"{e} [nodes would refuse it; nothing written]") from None
        if kid is not None:
            return signed or {"repository": str(source), "signature": str(source / model_signature.SIGNATURE_FILE),
                              "producer_key": f"{kid[:16]} (root version {root.version})",
                              "files": len(set(files) - {model_signature.SIGNATURE_FILE})}, None
    return signed, None if signed is not None else model_signature.unverified(source, files)


def _preflight(root: trust.Root | None, writer: Writer, text: bytes, signature: bytes, channel: str | None,
               release: str, digest: str, keys: list[Path], expires: float) -> None:
    """Before the first upload: the manifest's signatures and the channel pointer to be, judged as nodes judge
    them against the store's ``root`` (UsageError naming the role and the keys otherwise; nothing written)."""
    if root is None:
        return
    where = f"{writer.url}/{manifest_key(digest)}"
    try:
        trust.verify_detached(text, signature, "release", root, f"{where}.sigs")
    except ReleaseError as e:
        raise UsageError(f"{e} [nodes would refuse it: signature; nothing written]") from None
    if channel:
        doc = records.next_pointer(channel, None, release, digest, "publish", len(text), root, None, expires,
                                   time.time())
        as_nodes(root, None, trust.sign_envelope(doc, keys), channel, f"{writer.url}/{channel_key(channel)}")


def promote(to: str, source_channel: str, channel: str, s3_endpoint: str | None = None,
            gate: canary.Gate | None = None, *, keys: Path | list[Path] | None = None,
            expires: float = EXPIRES) -> dict[str, Any]:
    """Point ``channel`` at ``source_channel``'s release.

    With ``gate`` (an :class:`tritonops.release.canary.Gate`) the pointer moves only if Prometheus
    shows the canary no worse than stable; otherwise :class:`~tritonops.release.canary.PromotionRefused`
    (a ReleaseError carrying the figures) and nothing is written. The result then holds the report.
    """
    writer = open_writer(to, s3_endpoint)
    writer.check_exists()
    channel_key(channel)
    src = read_pointer(writer, source_channel)
    if src is None:
        raise writer.missing_channel(source_channel)
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
    writer = open_writer(to, s3_endpoint)
    writer.check_exists()
    cur = read_pointer(writer, channel)
    if cur is None:
        raise writer.missing_channel(channel)

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
    writer = open_writer(to, s3_endpoint)
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
               first: bool | None = None, trusted_keys: list[Path] | None = None,
               name: str | None = None, producer_keys: list[Path] | None = None,
               require_model_signature: bool | None = None) -> dict[str, Any]:
    """Write the store's next root, ``root/<N+1>.json``: ``keys`` maps each role (root, release, channel,
    report) to its public key files, ``thresholds`` each role to how many must sign. ``sign_with`` must hold
    a threshold of the current root's root keys (for root 1: the key(s) nodes trust today, their
    --trusted-key) and of the new root's: nodes follow it only then, and it is checked as they check it
    (metadata.update_root) before it is written. Root 1 is checked against ``trusted_keys`` (the nodes'
    --trusted-key files) or, without them, against the keys that signed the store's channel pointers.
    ``first``: True refuses when a root exists (init), False when none does (rotate). Create-only: a root
    version is never rewritten, but for one case: ``root init --trusted-key`` over a ``root/1.json`` (the
    only root) that those keys did not sign, which therefore no node ever followed, replaces it.
    ``producer_keys`` (EC public keys) go into the root with ``require_model_signature`` (agent.producer); without
    them a rotation keeps the current root's producer keys (and its requirement, unless ``require_model_signature``
    says otherwise)."""
    writer = open_writer(to, s3_endpoint)
    version = latest_root(writer) + 1
    unfollowed = None
    if first is True and version == 2 and trusted_keys:
        unfollowed = _unfollowed_root1(writer, trust.implicit_root(list(trusted_keys)))
        version = 1 if unfollowed is not None else version
    if first is True and version > 1:
        raise UsageError(f"{to}: root/{version - 1}.json exists already; use tritonops release root rotate")
    if first is False and version == 1:
        raise UsageError(f"{to}: no root yet; use tritonops release root init")
    current = nodes_root(writer) if version > 1 else None
    signed = trust.new_root(keys, thresholds or {}, version, time.time() + expires,
                            name if name is not None else (current.name if current else None),
                            _producers(current, producer_keys, require_model_signature))
    raw = trust.sign_envelope(signed, list(sign_with))
    where = f"{to}/{root_key(version)}"
    current = current if version > 1 else _nodes_anchor(writer, trusted_keys, sign_with)
    try:
        if current is None:  # a new store: its own root keys; the old ones are the nodes' --trusted-key files
            trust.load_root(raw, where)
        else:  # as nodes check it: signed by a threshold of the root they trust and by its own root keys
            metadata.update_root(current, [raw], to)
    except ReleaseError as e:
        raise UsageError(f"{e} [nodes would refuse root {version}; nothing written]") from None

    def create(old: bytes | None) -> bytes:
        if old is not None and old != unfollowed:
            raise UsageError(f"{where}: exists already (written meanwhile?); a root version is never rewritten")
        return raw

    writer.swap(root_key(version), create, what=f"root {version}")
    block = signed.get("model_signature")
    return {"store": to, "root_version": version, "expires": signed["expires"], "replaced": unfollowed is not None,
            "roles": {r: {"keyids": v["keyids"], "threshold": v["threshold"]} for r, v in signed["roles"].items()},
            "model_signature": block and {"required": block["required"], "keyids": sorted(block["keys"])}}


def _producers(current: trust.Root | None, keys: list[Path] | None, required: bool | None) -> dict[str, Any] | None:
    """The next root's ``model_signature`` part: the keys given, else the current root's; required as told, else
    as the current root has it."""
    if keys:
        return producer.block(keys, bool(required), UsageError)
    block = (current.doc or {}).get("model_signature") if current else None
    if block is None:
        if required:
            raise UsageError("--require-model-signature: name the producers' public key(s) with --producer-key")
        return None
    return {**block, "required": block["required"] if required is None else required}


def _unfollowed_root1(writer: Writer, anchor: trust.Root) -> bytes | None:
    """The bytes of ``root/1.json`` when nodes trusting ``anchor`` (their --trusted-key files) refuse it: no node
    followed it, so a root 1 they accept may replace it (the repair of a root init signed with the wrong keys)."""
    raw = writer.get(root_key(1), limit=trust.ROOT_MAX)
    try:
        metadata.update_root(anchor, [raw], writer.url)
    except metadata.Rejected:
        return raw
    return None


def _nodes_anchor(writer: Writer, trusted_keys: list[Path] | None, sign_with: list[Path]) -> trust.Root | None:
    """What nodes trust before root 1 (version 0): their --trusted-key files when given; else the keys that
    signed this store's channel pointers (nodes took those), as far as ``sign_with`` holds them; None for a
    store without pointers (nothing to check against)."""
    if trusted_keys:
        return trust.implicit_root(list(trusted_keys))
    signers: dict[str, str] = {}
    for key in writer.names(CHANNELS_PREFIX):
        try:
            env = trust.parse_envelope(writer.get(key, limit=POINTER_MAX), f"{writer.url}/{key}", "channel")
        except ReleaseError:
            continue  # the unsigned old format: no key to learn from
        signers.update({s["keyid"]: key for s in env["signatures"]})
    if not signers:
        return None
    mine = {trust.keyid(pem := trust.public_pem(k), str(k)): pem for k in sign_with}
    known = {kid: pem for kid, pem in mine.items() if kid in signers}
    if not known:
        raise UsageError(f"{writer.url}: root 1 signed by {', '.join(k[:12] for k in mine)}; the nodes of this "
                         f"store trust {', '.join(sorted(k[:12] for k in signers))} today (the signers of "
                         f"{', '.join(sorted(set(signers.values())))}): add one of those to --sign-with, or name "
                         "the nodes' --trusted-key files [nodes would refuse root 1; nothing written]")
    ids = tuple(sorted(known))
    return trust.Root(0, None, known, {r: (ids, 1) for r in (*trust.ROLES, *trust.OPTIONAL_ROLES)})
