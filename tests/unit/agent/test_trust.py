"""agent/trust.py with real Ed25519 keys (openssl): envelopes, thresholds, root rotation and revocation."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from tritonops.core.errors import ReleaseError, UsageError
from tritonops.release_format import signing, trust

YEAR = 365 * 86400


@pytest.fixture(scope="module")
def trust_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Five key pairs, made once: a, b, c (a threshold set), old, new (a rotation)."""
    d = tmp_path_factory.mktemp("keys")
    return {n: signing.keygen(d / f"{n}.key", d / f"{n}.pub") for n in ("a", "b", "c", "old", "new")}


def pub(trust_keys: dict[str, tuple[Path, Path]], *names: str) -> list[Path]:
    return [trust_keys[n][1] for n in names]


def priv(trust_keys: dict[str, tuple[Path, Path]], *names: str) -> list[Path]:
    return [trust_keys[n][0] for n in names]


def channel_doc(version: int = 1, expires: float | None = None, **extra: object) -> dict:
    return {"type": "channel", "version": version, "expires": trust.format_time(expires or time.time() + 3600),
            "channel": "stable", **extra}


def root_doc(trust_keys: dict, version: int, root: tuple[str, ...], channel: tuple[str, ...], threshold: int = 1) -> dict:
    return trust.new_root({"root": pub(trust_keys, *root), "release": pub(trust_keys, *channel), "channel": pub(trust_keys, *channel)},
                          {"root": 1, "channel": threshold, "release": threshold}, version, time.time() + YEAR)


def test_envelope_signed_by_a_trusted_key_verifies_and_any_change_is_refused(trust_keys):
    root = trust.implicit_root(pub(trust_keys, "a"))
    raw = trust.sign_envelope(channel_doc(release="r1"), priv(trust_keys, "a"))
    assert trust.verify(raw, "channel", root, "p", "channel")["release"] == "r1"
    env = json.loads(raw)
    env["signed"]["release"] = "r9"  # relabel under the same signature
    with pytest.raises(ReleaseError, match="0 valid signature"):
        trust.verify(json.dumps(env).encode(), "channel", root, "p", "channel")
    with pytest.raises(ReleaseError, match="0 valid signature"):  # signed by a key the node does not trust
        trust.verify(trust.sign_envelope(channel_doc(), priv(trust_keys, "b")), "channel", root, "p", "channel")


@pytest.mark.parametrize(("signers", "ok"), [(("a",), False), (("a", "a"), False), (("a", "c"), True),
                                             (("a", "b", "c"), True), (("old", "new"), False)])
def test_threshold_counts_distinct_keys_of_the_role(trust_keys, signers, ok):
    root = trust.load_root(trust.sign_envelope(root_doc(trust_keys, 1, ("a",), ("a", "b", "c"), threshold=2),
                                               priv(trust_keys, "a")), "root.json")
    doc = channel_doc()  # one document: a second channel_doc() may fall in the next second and sign other bytes
    env = json.loads(trust.sign_envelope(doc, priv(trust_keys, signers[0])))
    for extra in signers[1:]:  # the same key twice must count once
        env["signatures"] += json.loads(trust.sign_envelope(doc, priv(trust_keys, extra)))["signatures"]
    raw = json.dumps(env).encode()
    if ok:
        assert trust.verify(raw, "channel", root, "p", "channel")["type"] == "channel"
    else:
        with pytest.raises(ReleaseError, match=r"of the 2 of 3 channel key\(s\)"):
            trust.verify(raw, "channel", root, "p", "channel")


@pytest.mark.parametrize(("change", "match"), [
    ({"type": "root"}, "type 'root', expected 'channel'"),
    ({"version": 0}, "version .0. is not an integer >= 1"),
    ({"version": True}, "is not an integer >= 1"),
    ({"version": "2"}, "is not an integer >= 1"),
    ({"expires": "tomorrow"}, "is not YYYY-MM-DDTHH:MM:SSZ"),
])
def test_signed_fields_are_checked_after_the_signature(trust_keys, change, match):
    root = trust.implicit_root(pub(trust_keys, "a"))
    raw = trust.sign_envelope({**channel_doc(), **change}, priv(trust_keys, "a"))
    with pytest.raises(ReleaseError, match=match):
        trust.verify(raw, "channel", root, "p", "channel")


@pytest.mark.parametrize(("raw", "match"), [
    (b"x" * (trust.ENVELOPE_MAX + 1), "more than"),
    (b"{not json", "not valid JSON"),
    (b'{"release": "r1", "digest": "00"}', "written before signed metadata"),
    (b'{"signed": {}, "signatures": [{"keyid": "zz", "sig": ""}]}', r"signatures\[0\].keyid"),
    (b'{"signed": {}, "signatures": [{"keyid": "' + b"a" * 64 + b'", "sig": "!!"}]}', "not base64"),
    (b'{"signed": {}, "signatures": [{"keyid": "' + b"a" * 64 + b'", "sig": "AAAA"}]}', "3 bytes"),
])
def test_malformed_envelopes_are_refused_before_any_signature_check(trust_keys, raw, match):
    with pytest.raises(ReleaseError, match=match):
        trust.verify(raw, "channel", trust.implicit_root(pub(trust_keys, "a")), "p", "channel")


def test_rotation_is_followed_when_old_and_new_root_keys_sign_and_revokes_what_it_leaves_out(trust_keys):
    start = trust.implicit_root(pub(trust_keys, "old"))  # a node configured with --trusted-key old.pub
    doc1 = root_doc(trust_keys, 1, ("new",), ("new",))
    root1 = trust.next_root(start, trust.sign_envelope(doc1, priv(trust_keys, "old", "new")), "root/1.json")
    assert root1.version == 1 and set(root1.roles["channel"][0]) == {trust.keyid(trust_keys["new"][1].read_bytes())}
    # A pointer signed by the revoked key is refused after the rotation, one by the new key accepted.
    with pytest.raises(ReleaseError, match="0 valid signature"):
        trust.verify(trust.sign_envelope(channel_doc(), priv(trust_keys, "old")), "channel", root1, "p", "channel")
    assert trust.verify(trust.sign_envelope(channel_doc(), priv(trust_keys, "new")), "channel", root1, "p", "channel")
    # Signed only by the new keys (a mirror inventing a root), or only by the old: refused.
    with pytest.raises(ReleaseError, match="root key"):
        trust.next_root(start, trust.sign_envelope(doc1, priv(trust_keys, "new")), "root/1.json")
    with pytest.raises(ReleaseError, match="its own root keys"):
        trust.next_root(start, trust.sign_envelope(doc1, priv(trust_keys, "old")), "root/1.json")
    # Versions are followed one at a time.
    doc3 = root_doc(trust_keys, 3, ("new",), ("new",))
    with pytest.raises(ReleaseError, match="version 3, expected 2"):
        trust.next_root(root1, trust.sign_envelope(doc3, priv(trust_keys, "new")), "root/3.json")
    assert trust.load_root(root1.raw, "state").keys == root1.keys


def test_root_documents_are_checked_field_by_field(trust_keys):
    start = trust.implicit_root(pub(trust_keys, "a"))
    doc = root_doc(trust_keys, 1, ("a",), ("a",))
    bad_id = dict(doc, keys={"0" * 64: next(iter(doc["keys"].values()))})
    with pytest.raises(ReleaseError, match="is not the sha256 of its key"):
        trust.next_root(start, trust.sign_envelope(bad_id, priv(trust_keys, "a")), "r")
    over = dict(doc, roles={**doc["roles"], "channel": {**doc["roles"]["channel"], "threshold": 2}})
    with pytest.raises(ReleaseError, match="roles.channel.threshold must be an integer from 1 to 1"):
        trust.next_root(start, trust.sign_envelope(over, priv(trust_keys, "a")), "r")
    extra = dict(doc, roles={**doc["roles"], "admin": doc["roles"]["root"]})
    with pytest.raises(ReleaseError, match="roles.admin: unknown role"):
        trust.next_root(start, trust.sign_envelope(extra, priv(trust_keys, "a")), "r")
    with pytest.raises(UsageError, match="no keys for role"):
        trust.new_root({"root": pub(trust_keys, "a")}, {}, 1, time.time())


def test_detached_signatures_over_a_manifest(trust_keys):
    root = trust.implicit_root(pub(trust_keys, "a", "b"))
    text = b'{"algorithm": "sha256", "files": {}}\n'
    sigs = trust.sign_detached(text, priv(trust_keys, "b"))
    assert trust.verify_detached(text, sigs, "release", root, "m") == [trust.keyid(trust_keys["b"][1].read_bytes())]
    with pytest.raises(ReleaseError, match="0 valid signature"):
        trust.verify_detached(text + b" ", sigs, "release", root, "m")
    forged = json.dumps([{"keyid": trust.keyid(trust_keys["a"][1].read_bytes()),
                          "sig": base64.b64encode(bytes(64)).decode()}]).encode()
    with pytest.raises(ReleaseError, match="0 valid signature"):
        trust.verify_detached(text, forged, "release", root, "m")


def test_expiry_is_reported_not_enforced_by_verify(trust_keys):
    root = trust.implicit_root(pub(trust_keys, "a"))
    past = trust.sign_envelope(channel_doc(expires=time.time() - 10), priv(trust_keys, "a"))
    signed = trust.verify(past, "channel", root, "p", "channel")
    assert trust.expired(signed) and not trust.expired(channel_doc())
    assert not trust.expired(signed, now=time.time() - 3600)


def test_implicit_root_refuses_what_is_not_a_public_key(trust_keys, tmp_path):
    with pytest.raises(UsageError, match="a private key"):
        trust.implicit_root([trust_keys["a"][0]])
    with pytest.raises(UsageError, match="at least one public key"):
        trust.implicit_root([])
