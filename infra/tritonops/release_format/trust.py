"""Who may sign what: the root document, thresholds, and signed envelopes (after TUF's model).

Every signed document in a store (the root, channel pointers, agents' status reports) is an envelope::

    {"signed": {"type": T, "version": N, "expires": "2027-01-01T00:00:00Z", ...},
     "signatures": [{"keyid": "<sha256 of the key's DER>", "sig": "<base64 Ed25519>"}, ...]}

The signature covers ``canonical(signed)`` (sorted keys, no spaces, ASCII). A release's manifest is
signed detached (``releases/<digest>/manifest.json.sigs``, the same list of signatures) so that its
text, and hence its digest, stays what it is.

The root (``root/<N>.json``) names the keys and, per role, which of them sign and how many must:
``root`` (the next root), ``release`` (manifests), ``channel`` (pointer moves), ``report`` (agents'
status reports, optional); optionally the producers' keys whose model.sig a release must carry
(``model_signature``: agent.producer). A node starts from its ``--trusted-key`` files (``implicit_root``: every
role, threshold 1, version 0) and follows rotations: root N+1 counts only when a threshold of root N's
root keys *and* of its own signed it (``next_root``); a key root N+1 leaves out is trusted for nothing
after it (revocation). Expiry is not judged here: a caller decides (a node keeps serving what it has).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError, UsageError
from ..core.fsio import read_bounded
from . import producer, signing

ROLES = ("root", "release", "channel")  # required in every root
OPTIONAL_ROLES = ("report",)
ENVELOPE_MAX = 256 << 10  # bytes read of a pointer or report before its signatures are checked
ROOT_MAX = 256 << 10
SIGNATURES_MAX = 64  # signatures looked at in one envelope: more is an attack on the verifier
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_HEX = frozenset("0123456789abcdef")


def canonical(obj: Any) -> bytes:
    """The bytes a signature covers: sorted keys, no whitespace, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def keyid(public_pem: bytes, where: str = "key") -> str:
    """sha256 (hex) of the key's DER SubjectPublicKeyInfo: the same key always has the same id."""
    return hashlib.sha256(signing.public_key_der(public_pem, where, ReleaseError)).hexdigest()


def format_time(epoch: float) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(epoch))


def parse_time(text: Any, where: str) -> float:
    """Seconds since the epoch of ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    try:
        return float(calendar.timegm(time.strptime(str(text), TIME_FORMAT)))
    except ValueError:
        raise ReleaseError(f"{where}: expires {str(text)[:40]!r} is not YYYY-MM-DDTHH:MM:SSZ") from None


def expired(signed: dict[str, Any], now: float | None = None) -> bool:
    """True once ``signed``'s expiry has passed (a root without one never expires)."""
    if signed.get("expires") is None:
        return False
    return parse_time(signed["expires"], "expires") <= (time.time() if now is None else now)


@dataclass
class Root:
    """A trusted root: its keys (keyid -> PEM) and each role's keyids and threshold."""

    version: int
    expires: float | None
    keys: dict[str, bytes]
    roles: dict[str, tuple[tuple[str, ...], int]]
    doc: dict[str, Any] | None = None  # the signed part (None: the node's --trusted-key files)
    raw: bytes | None = field(default=None, repr=False)  # the envelope as read
    name: str | None = None  # the store (fleet) the root belongs to: root init --name; nodes' --store-name
    # Model producers' keys (keyid -> (keytype, PEM)) and whether a release must carry their model.sig (agent.producer)
    producer_keys: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    require_model_signature: bool = False

    def expired(self, now: float | None = None) -> bool:
        return self.expires is not None and self.expires <= (time.time() if now is None else now)

    def describe(self, role: str) -> str:
        ids, threshold = self.roles.get(role, ((), 0))
        return f"{threshold} of {len(ids)} {role} key(s) of root version {self.version}"


def implicit_root(trusted_keys: list[Path]) -> Root:
    """The node's ``--trusted-key`` files as a root: version 0, never expires, every role threshold 1."""
    keys: dict[str, bytes] = {}
    for path in trusted_keys:
        signing.check_public_key(Path(path))
        pem = read_bounded(Path(path), signing.PUBLIC_KEY_MAX, UsageError)
        keys[keyid(pem, str(path))] = pem
    if not keys:
        raise UsageError("--trusted-key: at least one public key is needed: an unsigned release never reaches Triton")
    ids = tuple(sorted(keys))
    return Root(0, None, keys, {r: (ids, 1) for r in (*ROLES, *OPTIONAL_ROLES)})


def parse_envelope(raw: bytes, where: str, type_: str) -> dict[str, Any]:
    """The envelope's shape, checked before any signature is: bounded, JSON, ``signed`` + ``signatures``."""
    if raw is None or len(raw) > ENVELOPE_MAX:
        raise ReleaseError(f"{where}: more than {ENVELOPE_MAX} bytes; not a signed {type_} document")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ReleaseError(f"{where}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("signed"), dict) or not isinstance(
            doc.get("signatures"), list):
        raise ReleaseError(f"{where}: not a signed {type_} document {{'signed': {{...}}, 'signatures': [...]}} "
                           "(written before signed metadata? publish or refresh it with this version)")
    _signatures(doc["signatures"], where)
    return doc


def _signatures(sigs: Any, where: str) -> list[tuple[str, bytes]]:
    if not isinstance(sigs, list) or len(sigs) > SIGNATURES_MAX:
        raise ReleaseError(f"{where}: signatures must be a list of at most {SIGNATURES_MAX}")
    out = []
    for i, s in enumerate(sigs):
        kid, sig = (s.get("keyid"), s.get("sig")) if isinstance(s, dict) else (None, None)
        if not isinstance(kid, str) or len(kid) != 64 or not set(kid) <= _HEX:
            raise ReleaseError(f"{where}: signatures[{i}].keyid is not a sha256 hex key id")
        try:
            raw = base64.b64decode(str(sig), validate=True)
        except (binascii.Error, ValueError):
            raise ReleaseError(f"{where}: signatures[{i}].sig is not base64") from None
        if len(raw) != 64:
            raise ReleaseError(f"{where}: signatures[{i}].sig is {len(raw)} bytes, not an Ed25519 signature (64)")
        out.append((kid, raw))
    return out


def _verify_one(data: bytes, sig: bytes, pem: bytes) -> bool:
    with tempfile.TemporaryDirectory(prefix="tritonops-trust-") as tmp:
        key, src, sigfile = Path(tmp) / "key.pem", Path(tmp) / "data", Path(tmp) / "sig"
        key.write_bytes(pem)
        src.write_bytes(data)
        sigfile.write_bytes(sig)
        r = signing._openssl(["pkeyutl", "-verify", "-pubin", "-inkey", str(key), "-rawin", "-in", str(src),
                              "-sigfile", str(sigfile)], "verify")
        return r.returncode == 0


def _count(data: bytes, sigs: list[tuple[str, bytes]], role: str, root: Root, where: str) -> list[str]:
    """The distinct keyids of ``role`` whose signature over ``data`` verifies; raise below the threshold."""
    if role not in root.roles:
        raise ReleaseError(f"{where}: root version {root.version} names no {role!r} role")
    ids, threshold = root.roles[role]
    good: list[str] = []
    for kid, sig in sigs:
        if kid in ids and kid not in good and _verify_one(data, sig, root.keys[kid]):
            good.append(kid)
            if len(good) >= threshold:
                return good
    raise ReleaseError(f"{where}: {len(good)} valid signature(s) of the {root.describe(role)} needed "
                       f"({threshold}); signed by {', '.join(k[:12] for k, _ in sigs) or 'no key'}; "
                       f"the {role} role's keys: {', '.join(k[:12] for k in ids)}")


def verify(raw: bytes, role: str, root: Root, where: str, type_: str) -> dict[str, Any]:
    """The ``signed`` part of an envelope once a threshold of ``role``'s keys in ``root`` signed it, its
    type is ``type_``, its version an integer >= 1 and its expiry a time. Expiry is the caller's call."""
    doc = parse_envelope(raw, where, type_)
    signed = doc["signed"]
    try:
        data = canonical(signed)
    except ValueError:
        raise ReleaseError(f"{where}: the signed part holds a value JSON cannot state (NaN, Infinity)") from None
    _count(data, _signatures(doc["signatures"], where), role, root, where)
    if signed.get("type") != type_:
        raise ReleaseError(f"{where}: type {str(signed.get('type'))[:40]!r}, expected {type_!r}")
    v = signed.get("version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ReleaseError(f"{where}: version {str(v)[:40]!r} is not an integer >= 1")
    if "expires" not in signed:
        raise ReleaseError(f"{where}: expires missing (every signed document expires)")
    parse_time(signed["expires"], where)
    return signed


def verify_detached(data: bytes, sigs_raw: bytes, role: str, root: Root, where: str) -> list[str]:
    """The keyids of ``role`` whose signatures (a JSON list of {"keyid", "sig"}) cover ``data``."""
    if len(sigs_raw) > ENVELOPE_MAX:
        raise ReleaseError(f"{where}: more than {ENVELOPE_MAX} bytes of signatures")
    try:
        sigs = json.loads(sigs_raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ReleaseError(f"{where}: not valid JSON ({str(e)[:200]})") from None
    return _count(data, _signatures(sigs, where), role, root, where)


def _root_from_signed(signed: dict[str, Any], where: str, raw: bytes | None) -> Root:
    keys_doc, roles_doc = signed.get("keys"), signed.get("roles")
    if not isinstance(keys_doc, dict) or not keys_doc:
        raise ReleaseError(f"{where}: keys must map key ids to {{'keytype': 'ed25519', 'public': PEM}}")
    keys: dict[str, bytes] = {}
    for kid, k in keys_doc.items():
        if not isinstance(k, dict) or k.get("keytype") != "ed25519" or not isinstance(k.get("public"), str):
            raise ReleaseError(f"{where}: keys[{str(kid)[:16]!r}] must be {{'keytype': 'ed25519', 'public': PEM}}")
        pem = k["public"].encode()
        if keyid(pem, f"{where}: keys[{str(kid)[:16]!r}].public") != kid:
            raise ReleaseError(f"{where}: keys[{str(kid)[:16]!r}] is not the sha256 of its key's DER")
        keys[kid] = pem
    if not isinstance(roles_doc, dict):
        raise ReleaseError(f"{where}: roles missing")
    roles: dict[str, tuple[tuple[str, ...], int]] = {}
    for name in (*ROLES, *OPTIONAL_ROLES):
        r = roles_doc.get(name)
        if r is None and name in OPTIONAL_ROLES:
            continue
        ids, threshold = (r.get("keyids"), r.get("threshold")) if isinstance(r, dict) else (None, None)
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i in keys for i in ids):
            raise ReleaseError(f"{where}: roles.{name}.keyids must list key ids defined in keys")
        if (not isinstance(threshold, int) or isinstance(threshold, bool)
                or not 1 <= threshold <= len(set(ids))):
            raise ReleaseError(f"{where}: roles.{name}.threshold must be an integer from 1 to "
                               f"{len(set(ids))} (its distinct keys)")
        roles[name] = (tuple(sorted(set(ids))), threshold)
    unknown = sorted(set(roles_doc) - set(ROLES) - set(OPTIONAL_ROLES))
    if unknown:
        raise ReleaseError(f"{where}: roles.{unknown[0]}: unknown role (roles: {', '.join((*ROLES, *OPTIONAL_ROLES))})")
    store = signed.get("name")
    if store is not None and (not isinstance(store, str) or not 0 < len(store) <= 128):
        raise ReleaseError(f"{where}: name {str(store)[:40]!r} is not a store name (1-128 characters)")
    producers, required = producer.parse_block(signed.get("model_signature"), where)
    return Root(signed["version"], parse_time(signed["expires"], where), keys, roles, signed, raw, store,
                producers, required)


def next_root(root: Root, raw_next: bytes, where: str) -> Root:
    """Root N+1, trusted because a threshold of root N's root keys and of its own signed it."""
    if len(raw_next) > ROOT_MAX:
        raise ReleaseError(f"{where}: more than {ROOT_MAX} bytes")
    signed = verify(raw_next, "root", root, where, "root")
    new = _root_from_signed(signed, where, raw_next)
    verify(raw_next, "root", new, f"{where} (its own root keys)", "root")
    if new.version != root.version + 1:
        raise ReleaseError(f"{where}: version {new.version}, expected {root.version + 1} (roots are followed one "
                           "version at a time)")
    return new


def load_root(raw: bytes, where: str) -> Root:
    """A root the node trusted before (its own state file): checked against its own root keys."""
    signed = parse_envelope(raw, where, "root")["signed"]
    if not isinstance(signed.get("version"), int):
        raise ReleaseError(f"{where}: version is not an integer")
    root = _root_from_signed(signed, where, raw)
    verify(raw, "root", root, where, "root")
    return root


# --- the controller's side: signing with private keys ------------------------------------------------

def public_pem(private_key: Path) -> bytes:
    """The PEM public key of a private key file (its keyid names the signature)."""
    if not Path(private_key).is_file():
        raise UsageError(f"{private_key}: signing key not found, or not a regular file "
                         "(tritonops release keygen writes one)")
    r = signing._openssl(["pkey", "-in", str(private_key), "-pubout"], str(private_key))
    if r.returncode != 0:
        raise UsageError(f"{private_key}: not a private key openssl can read: {r.stderr.strip()[:300]}")
    return r.stdout.encode()


def _sign_all(data: bytes, private_keys: list[Path]) -> list[dict[str, str]]:
    if not private_keys:
        raise UsageError("signing: at least one private key is needed")
    out, seen = [], set()
    for k in private_keys:
        kid = keyid(public_pem(k), str(k))
        if kid not in seen:
            seen.add(kid)
            out.append({"keyid": kid, "sig": base64.b64encode(signing.sign(data, Path(k))).decode()})
    return out


def sign_envelope(signed: dict[str, Any], private_keys: list[Path]) -> bytes:
    """The envelope of ``signed``, signed by each key (JSON, indented, trailing newline)."""
    sigs = _sign_all(canonical(signed), private_keys)
    return (json.dumps({"signed": signed, "signatures": sigs}, indent=2, sort_keys=True) + "\n").encode()


def sign_detached(data: bytes, private_keys: list[Path]) -> bytes:
    """Signatures over ``data`` (a manifest's text): a JSON list of {"keyid", "sig"}."""
    return (json.dumps(_sign_all(data, private_keys), indent=2) + "\n").encode()


def new_root(keys: dict[str, list[Path]], thresholds: dict[str, int], version: int, expires: float,
             name: str | None = None, model_signature: dict[str, Any] | None = None) -> dict[str, Any]:
    """The signed part of a root: ``keys`` maps each role to its public key files; ``name`` the store's;
    ``model_signature`` the producers' keys and whether their signature is required (:func:`producer.block`)."""
    unknown = sorted(set(thresholds) - set(keys)) + sorted(set(keys) - set(ROLES) - set(OPTIONAL_ROLES))
    if unknown:
        known = ", ".join((*ROLES, *OPTIONAL_ROLES))
        raise UsageError(f"root: role {unknown[0]!r} " + ("is not a role" if unknown[0] not in (*ROLES, *OPTIONAL_ROLES)
                                                          else "has a --threshold but no keys") + f" (roles: {known})")
    missing = [r for r in ROLES if r not in keys]
    if missing:
        raise UsageError(f"root: no keys for role(s) {', '.join(missing)} (every root names root, release, channel)")
    all_keys: dict[str, dict[str, str]] = {}
    roles: dict[str, dict[str, Any]] = {}
    for role, paths in keys.items():
        if role not in ROLES + OPTIONAL_ROLES:
            raise UsageError(f"root: unknown role {role!r} (roles: {', '.join((*ROLES, *OPTIONAL_ROLES))})")
        ids = []
        for p in paths:
            signing.check_public_key(Path(p), f"--{role}-key")
            pem = read_bounded(Path(p), signing.PUBLIC_KEY_MAX, UsageError)
            kid = keyid(pem, str(p))
            all_keys[kid] = {"keytype": "ed25519", "public": pem.decode()}
            ids.append(kid)
        threshold = thresholds.get(role, 1)
        if not 1 <= threshold <= len(set(ids)):
            raise UsageError(f"root: the {role} threshold {threshold} needs from 1 to {len(set(ids))} (its keys)")
        roles[role] = {"keyids": sorted(set(ids)), "threshold": threshold}
    doc = {"type": "root", "version": version, "expires": format_time(expires), "keys": all_keys, "roles": roles}
    if name is not None:
        doc["name"] = name
    if model_signature is not None:
        doc["model_signature"] = model_signature
    return doc
