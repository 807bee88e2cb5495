"""The node's trusted metadata: which root and which channel pointers it has trusted (issue 21 item 1).

Its one job is to decide whether a channel pointer read from a store may be acted on, after TUF's
client workflow, and to remember what it trusted in ``<releases>/.trusted.json`` (written atomically;
read at start)::

    {"root": "<the trusted root's envelope, when rotated past the --trusted-key files>",
     "channels": {"stable": {"version": 12, "digest": "<hex>", "release": "r7",
                             "expires": "2027-01-01T00:00:00Z", "sha256": "<hex of the signed part>"}}}

A pointer is refused (:class:`Rejected`, with a reason the agent counts in
``tritonops_release_metadata_rejected_total``) when its signatures do not reach the ``channel`` role's
threshold of the trusted root (``signature``), it names another channel (``channel``), its version is
below the one trusted or equal with other content (``rollback``), or it has expired (``expired``: the
node keeps serving its gated release, "freeze"). A pointer naming a newer ``root_version`` makes the
node verify ``root/<N>.json`` one version at a time first (rotation, revocation). The manifest checks
(``length``, ``relabel``, ``channel``) are :func:`verify_manifest`'s.

It judges bytes and returns a verdict; it reads nothing (python-tuf's ``trusted_metadata_set``): the
caller reads the pointer, the root versions :meth:`Trusted.roots_needed` names, the manifest and its
signatures, and the ``.trusted.json`` record (the agent: ``tritonops.agent.trusted_state``; the
controller: ``tritonops.release.publish``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..core.errors import ReleaseError, StoreError
from . import manifest, records, trust

TRUSTED_MAX = 4 << 20
ROOTS_PER_POINTER = 64  # root versions followed for one pointer (a pointer naming root 10**9 costs 64 reads at most)
REASONS = ("rollback", "expired", "channel", "relabel", "signature", "length", "store")
UNSIGNED = ("an unsigned channel pointer (the format before signed metadata); re-publish with this version "
            "(tritonops release publish, or refresh)")


class Checked(NamedTuple):
    """A channel pointer that may be acted on: its checked signed fields, the root it verified with and
    the sha256 of its canonical signed part (what :meth:`Trusted.accept` remembers)."""

    pointer: dict[str, Any]
    root: trust.Root
    sha256: str


class Rejected(ReleaseError):
    """Metadata the node will not act on; ``reason`` is one of REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Truncated(Rejected, StoreError):
    """A manifest shorter than the length its signed pointer states: counted as a ``length`` refusal, but
    classed as the store's fault (a cut or dropped download passes on retry), so it is retried with
    backoff, never refused for ever; nothing of it is installed."""

    def __init__(self, message: str) -> None:
        super().__init__("length", message)


class Unreadable(Rejected, StoreError):
    """A pointer that is not one at all (not JSON, not an envelope, the unsigned old format): the store's
    fault (exit 3, as any unusable object in a store), counted as a ``signature`` refusal."""

    def __init__(self, message: str) -> None:
        super().__init__("signature", message)


def unverified(raw: bytes, where: str) -> dict[str, Any]:
    """A pointer's signed part without checking its signatures (the controller reading its own store,
    the stack's preflight); StoreError for anything that is not one, UNSIGNED for the old format."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise StoreError(f"{where}: not valid JSON; expected a signed channel pointer") from None
    if isinstance(doc, dict) and "signed" not in doc and "release" in doc:
        raise StoreError(f"{where}: {UNSIGNED}")
    try:
        env = trust.parse_envelope(raw, where, "channel")
    except ReleaseError as e:
        raise StoreError(str(e)) from None
    return records.parse_pointer(env["signed"], where)


def check_manifest(raw: bytes, pointer: dict[str, Any], channel: str, where: str) -> dict[str, Any]:
    """A release's manifest (already read under the pointer's length, its digest and signatures checked)
    against the pointer that named it: lengths stated, the same release id, this channel allowed."""
    if len(raw) != pointer["length"]:
        raise Rejected("length", f"{where}: {len(raw)} bytes, not the {pointer['length']} the signed pointer states")
    try:
        doc = manifest.parse_release(raw, where)
    except ReleaseError as e:
        raise Rejected("length", str(e)) from None
    if doc["release"] != pointer["release"]:
        raise Rejected("relabel", f"{where}: the manifest is release {doc['release']!r}, the channel pointer calls "
                                  f"it {pointer['release']!r} (relabelled): refused")
    if channel not in doc["channels"]:
        raise Rejected("channel", f"{where}: release {doc['release']!r} is signed for channel(s) "
                                  f"{', '.join(doc['channels'])}, not {channel!r}: refused")
    return doc


def check_length(raw: bytes, length: int, where: str) -> None:
    """:class:`Truncated` when a manifest read under its signed ``length`` came back shorter (checked before
    the digest: the cause is the length, not a signature)."""
    if len(raw) < length:
        raise Truncated(f"{where}: {len(raw)} bytes, fewer than the {length} the signed pointer states "
                        "(a cut download? retried)")


def verify_manifest(raw: bytes, sigs: bytes, digest: str, length: int, release: str, channel: str,
                    root: trust.Root, where: str) -> tuple[dict[str, Any], list[str]]:
    """A release's manifest (read under the pointer's signed ``length``) and its detached signatures judged:
    its sha256 the pointer's ``digest``, signed by a threshold of the root's ``release`` keys, and checked by
    :func:`check_manifest`: (its parsed fields, the keyids that signed it). Rejected when it does not hold,
    :class:`Truncated` when fewer than ``length`` bytes came. Pure: the caller read both."""
    check_length(raw, length, where)
    if hashlib.sha256(raw).hexdigest() != digest:
        raise Rejected("signature", f"{where}: sha256 of the manifest is not the digest the channel names")
    try:
        signers = trust.verify_detached(raw, sigs, "release", root, f"{where}.sigs")
    except ReleaseError as e:
        raise Rejected("signature", str(e)) from None
    return check_manifest(raw, {"length": length, "release": release}, channel, where), signers


def changed_roles(old: trust.Root, new: trust.Root) -> set[str]:
    """The roles whose keys or threshold differ between two roots."""
    return {r for r in set(old.roles) | set(new.roles) if old.roles.get(r) != new.roles.get(r)}


def update_root(root: trust.Root, raws: list[bytes], where: str) -> trust.Root:
    """The root reached from ``root`` through ``raws`` (root N+1, N+2, ... as read), each version signed by a
    threshold of the one before and of its own root keys (:func:`trust.next_root`); Rejected
    (``signature``) at the first that does not hold, and then none of them is trusted. Pure: no I/O."""
    for raw in raws:
        try:
            root = trust.next_root(root, raw, f"{where}: root {root.version + 1}")
        except StoreError:
            raise
        except ReleaseError as e:
            raise Rejected("signature", str(e)) from None
    return root


def check_pointer(raw: bytes, channel: str, root: trust.Root, prev: dict[str, Any] | None, where: str,
                  now: float | None = None, store_name: str | None = None) -> Checked:
    """A channel pointer judged as a node judges it against ``root`` (already updated: :func:`update_root`)
    and ``prev``, the entry the node trusts for the channel (``{"version", "sha256"}``, None for none): its
    checked fields with the root and sha256 (:class:`Checked`); Rejected with the reason otherwise. Pure: no
    I/O; the node (:meth:`Trusted.check`) and the controller before every write (tritonops.release.publish)
    call it."""
    if root.expired(now):  # after the update loop, however the root was reached (TUF 5.3.10): freeze
        raise Rejected("expired", f"{where}: root version {root.version} expired at "
                                  f"{trust.format_time(root.expires or 0)}; nothing new is applied, the gated "
                                  "release keeps serving (the store needs tritonops release root rotate)")
    try:
        signed = records.parse_pointer(trust.verify(raw, "channel", root, where, "channel"), where)
    except ReleaseError as e:
        raise Rejected("signature", str(e)) from None
    if signed["channel"] != channel:
        raise Rejected("channel", f"{where}: a pointer for channel {signed['channel']!r}, not {channel!r}: refused")
    if store_name is not None and (root.name != store_name or signed.get("store") != store_name):
        raise Rejected("store", f"{where}: metadata of store {signed.get('store') or root.name or '(unnamed)'!r} "
                                f"(root version {root.version} named {root.name or 'none'}), not {store_name!r} "
                                "that this node is configured for (--store-name): refused")
    sha = hashlib.sha256(trust.canonical(signed)).hexdigest()
    if prev and signed["version"] < prev["version"]:
        raise Rejected("rollback", f"{where}: version {signed['version']} is older than version "
                                   f"{prev['version']} ({prev.get('release')}) that this node trusts: refused")
    if prev and signed["version"] == prev["version"] and sha != prev.get("sha256"):
        raise Rejected("rollback", f"{where}: version {signed['version']} with other content than the "
                                   "version this node trusts: refused")
    if trust.expired(signed, now):
        raise Rejected("expired", f"{where}: expired at {signed['expires']} (version {signed['version']}); "
                                  "the gated release keeps serving (the channel needs tritonops release refresh)")
    return Checked(signed, root, sha)


class Trusted:
    """The root and the per-channel pointer versions this node trusts: ``root`` (the --trusted-key files'
    implicit root at first), then the record ``state`` (``<releases>/.trusted.json``'s bytes, None for none;
    :meth:`serialize` writes it) read at ``where``."""

    def __init__(self, root: trust.Root, store_name: str | None = None, state: bytes | None = None,
                 where: str = "") -> None:
        self.store_name = store_name  # --store-name: the name every root and pointer must carry
        self.root = root
        self.channels: dict[str, dict[str, Any]] = {}
        self.dirty = False
        self.resets: list[str] = []  # what a root rotation made the node forget (the agent logs it)
        if state is not None:
            self._parse(state, where)

    def _parse(self, state: bytes, where: str) -> None:
        try:
            doc = json.loads(state.decode("utf-8"))
        except (ValueError, RecursionError):
            raise ReleaseError(f"{where}: not valid JSON; the node's trusted metadata is damaged (remove the "
                               "file to trust the --trusted-key files again, losing rollback protection)") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("channels", {}), dict):
            raise ReleaseError(f"{where}: expected {{'root': ..., 'channels': {{NAME: {{'version', ...}}}}}}")
        if doc.get("root"):
            root = trust.load_root(str(doc["root"]).encode(), f"{where}: root")
            if root.version >= 1:
                self.root = root
        for name, c in doc.get("channels", {}).items():
            if not isinstance(c, dict) or not records.is_int(c.get("version"), 1):
                raise ReleaseError(f"{where}: channels.{name}.version is not an integer >= 1")
            self.channels[str(name)] = dict(c)

    def serialize(self) -> str:
        """The record :meth:`__init__` parses (the caller writes it atomically, under the node folder's lock)."""
        doc = {"root": self.root.raw.decode() if self.root.version >= 1 and self.root.raw else None,
               "channels": self.channels}
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"

    def expired(self, channel: str, now: float | None = None) -> bool:
        """The pointer trusted for ``channel``, or the trusted root, has expired (freeze: nothing new is applied)."""
        return self.frozen_reason(channel, now) is not None

    def frozen_reason(self, channel: str, now: float | None = None) -> str | None:
        """Why nothing new may be applied on ``channel`` (an expired root or pointer); None when nothing expired."""
        if self.root.expired(now):
            return f"root version {self.root.version} expired at {trust.format_time(self.root.expires or 0)}"
        c = self.channels.get(channel)
        if c is not None and trust.expired(c, now):
            return f"version {c['version']} expired at {c['expires']}"
        return None

    def roots_needed(self, raw: bytes, where: str) -> range:
        """The root versions past the trusted one that the pointer ``raw`` names (at most ROOTS_PER_POINTER):
        the caller reads ``root/<N>.json`` for each, in order, and hands the bytes to :meth:`check`.
        :class:`Unreadable` for what is not a pointer, Rejected (``signature``) past the bound."""
        try:
            want = unverified(raw, where)["root_version"]
        except StoreError as e:
            raise Unreadable(str(e)) from None
        if want - self.root.version > ROOTS_PER_POINTER:
            raise Rejected("signature", f"{where}: root_version {want} is more than {ROOTS_PER_POINTER} "
                                        f"versions past the trusted root {self.root.version}")
        return range(self.root.version + 1, want + 1)

    def check(self, raw: bytes, channel: str, roots: Sequence[bytes], where: str,
              now: float | None = None) -> Checked:
        """The pointer judged once it may be acted on; Rejected otherwise. ``roots``: the bytes of each root
        version :meth:`roots_needed` names, as read. Nothing is remembered until :meth:`accept`, but a root
        rotation the pointer names (each version verified) is, even when it has expired (``dirty``: save it).

        The deciding is :func:`update_root` and :func:`check_pointer`, pure functions of bytes already read
        that the controller runs too before it writes anything."""
        if len(roots) != len(self.roots_needed(raw, where)):
            raise ValueError(f"{where}: check needs the bytes of every root version roots_needed names")
        if roots:
            self.rotate(update_root(self.root, list(roots), where))
        return check_pointer(raw, channel, self.root, self.channels.get(channel), where, now, self.store_name)

    def rotate(self, root: trust.Root) -> None:
        """Trust ``root`` from now on, expired or not (TUF 5.3.8: its revocations hold even while the channel
        is frozen), and forget the pointer versions of every channel when the ``channel`` role's keys or
        threshold changed (TUF 5.3.11): what a revoked key vouched for (a version of 10**9) binds no more."""
        if root.version <= self.root.version:
            return
        if changed_roles(self.root, root) & {"channel"} and self.channels:
            forgot = ", ".join(f"{c} version {e.get('version')}" for c, e in sorted(self.channels.items()))
            self.resets.append(f"root version {root.version} changed the channel role's keys or threshold: "
                               f"forgot the trusted {forgot} (TUF 5.3.11)")
            self.channels = {}
        self.root, self.dirty = root, True

    def accept(self, channel: str, checked: Checked) -> bool:
        """Trust a pointer :meth:`check` passed (and the root it was verified with); True when that changed
        the state (then :meth:`serialize` and write it)."""
        pointer, root = checked.pointer, checked.root
        entry = {"version": pointer["version"], "digest": pointer["digest"], "release": pointer["release"],
                 "expires": pointer["expires"], "sha256": checked.sha256}
        if "rollout" in pointer:  # signed with it: the drift check decides by it as the agent does (rollout.decide)
            entry["rollout"] = pointer["rollout"]
        changed = False
        if root.version > self.root.version:
            self.rotate(root)
            changed = True
        if self.channels.get(channel) != entry:
            self.channels[channel] = entry
            changed = True
        self.dirty = self.dirty or changed
        return changed
