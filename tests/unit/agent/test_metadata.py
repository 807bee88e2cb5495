"""Signed, versioned, expiring metadata (issue 21 items 1 and 7): what a hostile mirror can no longer do.

Each test is one attack from the issue against a pull-mode agent: a folder store (the mirror's files,
which the attacker may rewrite) or a local http.server in front of it; real Ed25519 keys (openssl),
made once per module. The attacker never holds a signing key unless the test says so (a compromised
or buggy controller, to show that the node's own checks hold even then).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from agent_harness import agent_cmd, release_source
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.core.errors import ReleaseError, UsageError
from tritonops.core.keys import channel_key, manifest_key, root_key, signatures_key
from tritonops.core.names import TRUSTED_FILE
from tritonops.release import publish as pub
from tritonops.release_format import manifest, metadata, signing, trust
from tritonops.stores import open_store


@pytest.fixture(scope="module")
def named_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    out: dict[str, Path] = {}
    for name in ("release", "rogue", "new", "k1", "k2", "k3"):
        out[name], out[f"{name}.pub"] = signing.keygen(d / f"{name}.key", d / f"{name}.pub")
    return out


def _agent(tmp_path: Path, store: str, named_keys: dict[str, Path], channel: str = "stable", name: str = "node") -> Agent:
    root = tmp_path / name
    (root / "releases").mkdir(parents=True, exist_ok=True)
    return Agent(open_store(store, blob_timeout=5.0), channel, root / "models", root / "releases", [named_keys["release.pub"]],
                 log=lambda m: None)


def _publish(tmp_path: Path, store: str, named_keys: dict[str, Path], version: str, channel: str | None = "stable",
             unchecked: bool = False, **kw: object) -> dict:
    """``unchecked``: as a controller that does not check what it writes against the store's root (an older
    tritonops, a thief of a revoked key): what the node must refuse on its own."""
    if unchecked:
        with mock.patch.object(pub, "_preflight"), mock.patch.object(pub, "as_nodes"):
            return _publish(tmp_path, store, named_keys, version, channel, **kw)
    src = tmp_path / "src" / version
    return pub.publish(src if src.is_dir() else release_source(tmp_path, version, version), store, channel, kw.pop("key", named_keys["release"]),
                       target="cpu", version=version, **kw)  # type: ignore[arg-type]


def _rejected(agent: Agent, reason: str) -> float:
    return agent.metrics.get("tritonops_release_metadata_rejected_total", channel=agent.channel, reason=reason)


def _serving(agent: Agent) -> str | None:
    return releases.active_release(agent.link, agent.releases) if agent.gated() else None


def _signed_pointer(store: Path, channel: str, named_keys: list[Path], **fields: object) -> None:
    """Write a pointer signed by ``keys`` (a channel key's holder): the current one with ``fields`` changed."""
    signed = json.loads((store / channel_key(channel)).read_text())["signed"]
    signed.update(fields)
    (store / channel_key(channel)).write_bytes(trust.sign_envelope(signed, named_keys))


def test_a_replayed_older_signed_pointer_is_refused_as_a_rollback(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    old = (store / channel_key("stable")).read_bytes()  # validly signed, version 1: the mirror keeps a copy
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    _publish(tmp_path, str(store), named_keys, "r2")
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r2"
    (store / channel_key("stable")).write_bytes(old)
    out = agent.poll()
    assert out["rejected"] == "rollback" and "version 1 is older than version 2" in out["error"]
    assert _serving(agent) == "r2" and _rejected(agent, "rollback") == 1
    # ... also after a restart: the version trusted is kept in <releases>/.trusted.json
    again = _agent(tmp_path, str(store), named_keys)
    assert again.poll()["rejected"] == "rollback" and _serving(again) == "r2"
    assert json.loads((agent.releases / TRUSTED_FILE).read_text())["channels"]["stable"]["version"] == 2


def test_a_canary_pointer_or_release_is_refused_on_stable(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    _publish(tmp_path, str(store), named_keys, "r2", channel="canary")
    # The mirror serves canary's (validly signed) pointer as stable's:
    (store / channel_key("stable")).write_bytes((store / channel_key("canary")).read_bytes())
    out = agent.poll()
    assert out["rejected"] == "channel" and "for channel 'canary', not 'stable'" in out["error"]
    # A stable pointer signed by a channel key, to a release signed for canary only (mix-and-match):
    # the controller refuses to write it (promote), and the node refuses it even when written.
    with pytest.raises(UsageError, match="signed for channel\\(s\\) canary, not 'stable'"):
        pub.promote(str(store), "canary", "stable", keys=named_keys["release"])
    canary = json.loads((store / channel_key("canary")).read_text())["signed"]
    (store / channel_key("stable")).write_bytes(trust.sign_envelope(
        {**canary, "channel": "stable", "version": 5}, [named_keys["release"]]))
    out = agent.poll()
    assert (out["result"], out["step"]) == ("failed", "verify") and "signed for channel(s) canary" in out["error"]
    assert _serving(agent) == "r1" and _rejected(agent, "channel") == 2
    assert not (agent.releases / "r2").exists()


def test_a_relabelled_release_is_refused(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    r1 = _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    _publish(tmp_path, str(store), named_keys, "r2")
    agent.poll()
    # The mirror edits the pointer: {release: r9, digest: <r1's>}. Unsigned edits fail the signature ...
    doc = json.loads((store / channel_key("stable")).read_text())
    doc["signed"].update(release="r9", digest=r1["digest"], version=9)
    (store / channel_key("stable")).write_text(json.dumps(doc))
    assert agent.poll()["rejected"] == "signature"
    # ... and a signed one (a channel key's holder) fails the manifest's own release id.
    _signed_pointer(store, "stable", [named_keys["release"]], release="r9", digest=r1["digest"], version=9,
                    length=(store / manifest_key(r1["digest"])).stat().st_size)
    out = agent.poll()
    assert (out["step"], _rejected(agent, "relabel")) == ("verify", 1)
    assert "the manifest is release 'r1', the channel pointer calls it 'r9'" in out["error"]
    assert agent.status()["current"] == "r2" and not (agent.releases / "r9").exists()


def test_an_expired_pointer_freezes_the_channel_and_says_so(tmp_path: Path, named_keys: dict[str, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1", expires=3600.0)
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    assert 'tritonops_release_metadata_expired{channel="stable"} 0' in agent.metrics.render()
    # The mirror stops moving: the same pointer (304) for longer than it is valid.
    real = trust.expired
    monkeypatch.setattr(trust, "expired", lambda signed, now=None: real(signed, time.time() + 7200))
    assert agent.poll()["result"] == "not_modified"
    text = agent.metrics.render()
    assert 'tritonops_release_metadata_expired{channel="stable"} 1' in text
    assert 'tritonops_release_up_to_date{channel="stable"} 0' in text
    assert _serving(agent) == "r1" and _rejected(agent, "expired") == 1
    # A new release behind an expired pointer is not applied either; refresh is what unfreezes.
    monkeypatch.setattr(trust, "expired", real)
    _publish(tmp_path, str(store), named_keys, "r2", expires=3600.0)
    _signed_pointer(store, "stable", [named_keys["release"]], expires="2020-01-01T00:00:00Z", version=3)
    out = agent.poll()
    assert out["rejected"] == "expired" and _serving(agent) == "r1"
    refreshed = pub.refresh(str(store), "stable", keys=named_keys["release"], expires=pub.duration("7d"))
    assert refreshed["version"] == 4 and refreshed["release"] == "r2"
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r2"
    assert 'tritonops_release_metadata_expired{channel="stable"} 0' in agent.metrics.render()


class _Mirror(http.server.SimpleHTTPRequestHandler):
    endless: set[str] = set()  # paths answered with bytes that never end
    sent: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path not in self.endless:
            super().do_GET()
            return
        self.send_response(200)
        self.end_headers()  # no Content-Length: the body ends when the server says so (never)
        n = 0
        try:
            while n < (64 << 20):
                self.wfile.write(b"\0" * 65536)
                n += 65536
        except OSError:
            pass
        self.sent.append(n)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def mirror(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    folder = tmp_path / "mirror"
    folder.mkdir()
    _Mirror.endless, _Mirror.sent = set(), []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Mirror, directory=str(folder)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield folder, f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()


def test_an_endless_blob_is_cut_at_its_signed_length(tmp_path: Path, named_keys: dict[str, Path],
                                                      mirror: tuple[Path, str]) -> None:
    folder, url = mirror
    _publish(tmp_path, str(folder), named_keys, "r1")
    doc = json.loads((folder / manifest_key(pub.read_pointer(pub.open_writer(str(folder)), "stable")["digest"]))  # type: ignore[index]
                     .read_text())
    path = "mlp/1/model.py"
    _Mirror.endless = {f"/blobs/sha256/{doc['files'][path]}"}
    agent = _agent(tmp_path, url, named_keys)
    start = time.monotonic()
    out = agent.poll()
    assert (out["result"], out["step"], out["class"]) == ("failed", "verify", "refused")  # as a long manifest
    assert f"larger than the {doc['lengths'][path]} bytes allowed; stopped reading" in out["error"]
    assert _rejected(agent, "length") == 1
    assert time.monotonic() - start < 5 and not (agent.releases / "r1").exists()
    assert not list(agent.releases.glob(".staging-*"))  # the partial file went with its staging folder


def test_a_manifest_longer_than_the_signed_pointer_says_is_refused(tmp_path: Path, named_keys: dict[str, Path],
                                                                   mirror: tuple[Path, str]) -> None:
    folder, url = mirror
    r1 = _publish(tmp_path, str(folder), named_keys, "r1")
    with (folder / manifest_key(r1["digest"])).open("ab") as f:
        f.write(b" " * (1 << 20))  # the mirror pads the manifest (or serves it endlessly)
    agent = _agent(tmp_path, url, named_keys)
    out = agent.poll()
    assert (out["result"], out["step"]) == ("failed", "verify") and "larger than the" in out["error"]
    assert _rejected(agent, "length") == 1 and agent.store.requests == 2  # pointer, manifest: no signature, no blob


@pytest.mark.parametrize("what", ["manifest", "blob"])
def test_sync_refuses_an_over_long_manifest_and_an_over_long_file_alike(tmp_path: Path, named_keys: dict[str, Path],
                                                                         what: str) -> None:
    # Both are the store serving more than was signed: a refusal (exit 1, reason length), never "the store did
    # not answer" (exit 3, retried). Before, a long file exited 3 at step fetch while a long manifest exited 1.
    store = tmp_path / "store"
    r1 = _publish(tmp_path, str(store), named_keys, "r1")
    doc = json.loads((store / manifest_key(r1["digest"])).read_text())
    key = manifest_key(r1["digest"]) if what == "manifest" else f"blobs/sha256/{doc['files']['mlp/1/model.py']}"
    with (store / key).open("ab") as f:
        f.write(b" " * 4096)
    node = tmp_path / "node"
    out = agent_cmd("sync", "--store", str(store), "--channel", "stable", "--link", str(node / "models"),
                    "--releases", str(node / "releases"), "--trusted-key", str(named_keys["release.pub"]))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "metadata refused (length)" in out.stderr and "more than the" in out.stderr
    assert not (node / "releases" / "r1").exists()


def test_a_signed_manifest_without_lengths_is_never_downloaded_from(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    r1 = _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys, name="fresh")
    files = json.loads((store / manifest_key(r1["digest"])).read_text())["files"]
    old = manifest.text(files).encode()  # the format before signed lengths, validly signed
    digest = hashlib.sha256(old).hexdigest()
    (store / manifest_key(digest)).parent.mkdir(parents=True)
    (store / manifest_key(digest)).write_bytes(old)
    (store / signatures_key(digest)).write_bytes(trust.sign_detached(old, [named_keys["release"]]))
    _signed_pointer(store, "stable", [named_keys["release"]], digest=digest, length=len(old), version=2)
    before = agent.store.requests
    out = agent.poll()
    assert (out["step"], _rejected(agent, "length")) == ("verify", 1)
    assert "states no lengths, release, channels" in out["error"]
    assert agent.store.requests - before == 3 and not (agent.releases / "r1").exists()  # no blob


def test_an_unsigned_pointer_of_the_old_format_is_refused_with_the_fix(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    r1 = _publish(tmp_path, str(store), named_keys, "r1")
    (store / channel_key("stable")).write_text(json.dumps({"channel": "stable", "release": "r1",
                                                           "digest": r1["digest"]}))
    agent = _agent(tmp_path, str(store), named_keys)
    out = agent.poll()
    assert out["rejected"] == "signature" and "re-publish with this version" in out["error"]
    assert _serving(agent) is None
    # the controller migrates its own store: publish over the old pointer writes a signed version 1
    assert _publish(tmp_path, str(store), named_keys, "r2")["changed"] is True
    assert agent.poll()["result"] == "applied"


def _root(store: Path, named_keys: dict[str, Path], sign_with: list[str], roles: dict[str, list[str]],
          thresholds: dict[str, int] | None = None) -> dict:
    return pub.write_root(str(store), {r: [named_keys[f"{k}.pub"] for k in ks] for r, ks in roles.items()},
                          [named_keys[k] for k in sign_with], thresholds)


def test_a_rotated_root_is_followed_and_the_revoked_key_refused(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    before = agent.store.requests
    assert agent.poll()["result"] == "not_modified" and agent.store.requests - before == 1  # idle: one request
    # root 1: the "new" key for every role, signed by the old root key (the node's --trusted-key) and the new
    _root(store, named_keys, ["release", "new"], {"root": ["new"], "release": ["new"], "channel": ["new"]})
    _publish(tmp_path, str(store), named_keys, "r2", key=named_keys["new"])
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r2"
    assert agent.status()["trusted"]["root_version"] == 1
    # the revoked key signs a newer pointer: the controller refuses to write it (issue 34) ...
    with pytest.raises(UsageError, match=r"0 valid signature\(s\) of the 1 of 1 release key\(s\) of root version 1"):
        _publish(tmp_path, str(store), named_keys, "r3")
    # ... and the node refuses it when written anyway, now and after a restart (root 1 kept in .trusted.json)
    _publish(tmp_path, str(store), named_keys, "r3", unchecked=True)
    assert agent.poll()["rejected"] == "signature"
    assert _agent(tmp_path, str(store), named_keys).poll()["rejected"] == "signature"
    assert _serving(agent) == "r2"


def test_a_root_signed_only_by_the_new_keys_is_refused(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    # the mirror (or a thief of the new keys only) writes root 1 signed by "rogue" alone
    signed = trust.new_root({r: [named_keys["rogue.pub"]] for r in trust.ROLES}, {}, 1, time.time() + 3600)
    (store / "root").mkdir()
    (store / root_key(1)).write_bytes(trust.sign_envelope(signed, [named_keys["rogue"]]))
    with pytest.raises(ReleaseError, match=r"0 valid signature\(s\) of the 1 of 1 root key"):
        pub.write_root(str(store), {r: [named_keys["k1.pub"]] for r in trust.ROLES}, [named_keys["release"], named_keys["k1"]])
    _publish(tmp_path, str(store), named_keys, "r2", key=named_keys["rogue"])
    out = agent.poll()
    assert out["rejected"] == "signature" and "root 1" in out["error"]
    assert agent.status()["trusted"]["root_version"] == 0 and _serving(agent) == "r1"


def test_a_threshold_of_two_of_three_keys_is_needed(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    three = ["k1", "k2", "k3"]
    _root(store, named_keys, ["release", "k1", "k2"], {"root": three, "release": three, "channel": three},
          {"root": 2, "release": 2, "channel": 2})
    with pytest.raises(UsageError, match=r"1 valid signature\(s\) of the 2 of 3 release key\(s\)"):
        _publish(tmp_path, str(store), named_keys, "r2", key=[named_keys["k1"]])  # the controller refuses it (issue 34)
    _publish(tmp_path, str(store), named_keys, "r2", key=[named_keys["k1"]], unchecked=True)
    out = agent.poll()
    assert out["rejected"] == "signature" and "1 valid signature(s) of the 2 of 3 channel key(s)" in out["error"]
    _publish(tmp_path, str(store), named_keys, "r3", key=[named_keys["k1"], named_keys["k3"]])
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r3"


def test_controller_moves_are_versioned_signed_and_bound_to_listed_channels(tmp_path: Path,
                                                                           named_keys: dict[str, Path]) -> None:
    store = str(tmp_path / "store")
    _publish(tmp_path, store, named_keys, "r1", channel="canary", channels=["stable"])
    pub.promote(store, "canary", "stable", keys=named_keys["release"], expires=pub.duration("12h"))
    p = pub.read_pointer(pub.open_writer(store), "stable")
    assert p is not None and (p["version"], p["channel"], p["release"], p["root_version"]) == (1, "stable", "r1", 0)
    assert 43000 < trust.parse_time(p["expires"], "t") - time.time() <= 43200
    assert p["length"] == (tmp_path / "store" / manifest_key(p["digest"])).stat().st_size
    with pytest.raises(UsageError, match="a channel pointer is signed; give the signing key"):
        pub.rollback(store, "stable")
    for bad in ("", "7x", "-1d", "0", "infd"):
        with pytest.raises(UsageError, match="--expires"):
            pub.duration(bad)


def test_keygen_writes_a_private_key_only_to_a_new_file_never_through_a_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dangling = tmp_path / "d.key"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="exists"):
        signing.keygen(dangling, tmp_path / "d.pub")
    # A link planted at the name while openssl runs (after the up-front check) is not written through.
    real = signing._openssl
    victim, planted = tmp_path / "victim", tmp_path / "raced.key"

    def racing(args: list[str], what: str) -> object:
        out = real(args, what)
        if args[0] == "genpkey":
            planted.symlink_to(victim)
        return out

    monkeypatch.setattr(signing, "_openssl", racing)
    with pytest.raises(UsageError, match="raced.key: exists"):
        signing.keygen(planted, tmp_path / "raced.pub")
    assert not victim.exists() and not (tmp_path / "nowhere").exists()
    monkeypatch.setattr(signing, "_openssl", real)
    key, public = signing.keygen(tmp_path / "new.key", tmp_path / "new.pub")
    assert (key.stat().st_mode & 0o777, public.stat().st_mode & 0o777, key.stat().st_nlink) == (0o600, 0o644, 1)
    assert not list(tmp_path.glob(".tritonops-keygen-*")) and b"PRIVATE KEY" in key.read_bytes()


YEAR = 365 * 86400.0


def test_an_expired_root_freezes_the_channel_like_an_expired_pointer(tmp_path: Path, named_keys: dict[str, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """TUF 5.3.10: a trusted root past its expiry after the update loop is a freeze attack (the mirror keeps
    the store as it was while the keys' holders are locked out): nothing new is applied, serving goes on."""
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    _root(store, named_keys, ["release", "new"], {"root": ["new"], "release": ["new"], "channel": ["new"]})  # a year
    _publish(tmp_path, str(store), named_keys, "r2", key=named_keys["new"])
    assert agent.poll()["result"] == "applied" and agent.status()["trusted"]["root_version"] == 1
    # Two years on (the pointers, refreshed by a cron, still valid): root 1 has expired. The same pointer (304) ...
    real = trust.Root.expired
    monkeypatch.setattr(trust.Root, "expired", lambda self, now=None: real(self, time.time() + 2 * YEAR))
    assert agent.poll()["result"] == "not_modified"
    text = agent.metrics.render()
    assert 'tritonops_release_metadata_expired{channel="stable"} 1' in text
    assert 'tritonops_release_up_to_date{channel="stable"} 0' in text
    assert _serving(agent) == "r2" and _rejected(agent, "expired") == 1 and agent.status()["trusted"]["expired"]
    # ... and a new release, validly signed by root 1's keys: the controller refuses to publish it (issue 34),
    # and a node does not apply it when written anyway, now nor after a restart.
    with pytest.raises(UsageError, match="root version 1 expired at .*nodes would refuse it: expired; nothing written"):
        _publish(tmp_path, str(store), named_keys, "r3", key=named_keys["new"])
    _publish(tmp_path, str(store), named_keys, "r3", key=named_keys["new"], unchecked=True)
    out = agent.poll()
    assert out["rejected"] == "expired" and "root version 1 expired at" in out["error"] and _serving(agent) == "r2"
    again = _agent(tmp_path, str(store), named_keys)
    assert again.poll()["rejected"] == "expired" and releases.state(again.releases)["current"] == "r2"
    # Rotating the root (root 2, signed by root 1's root key: an expired root still vouches for its successor)
    # unfreezes the channel.
    pub.write_root(str(store), {r: [named_keys["new.pub"]] for r in trust.ROLES}, [named_keys["new"]], expires=3 * YEAR)
    _publish(tmp_path, str(store), named_keys, "r4", key=named_keys["new"])
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r4"
    assert 'tritonops_release_metadata_expired{channel="stable"} 0' in agent.metrics.render()
    assert agent.status()["trusted"]["root_version"] == 2


def test_a_root_expired_when_first_read_freezes_and_is_kept(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    agent = _agent(tmp_path, str(store), named_keys)
    agent.poll()
    pub.write_root(str(store), {r: [named_keys["new.pub"]] for r in trust.ROLES}, [named_keys["release"], named_keys["new"]],
                   expires=-60.0)  # root 1 expired a minute ago
    _publish(tmp_path, str(store), named_keys, "r2", key=named_keys["new"], unchecked=True)
    out = agent.poll()
    assert out["rejected"] == "expired" and "root version 1 expired at" in out["error"] and _serving(agent) == "r1"
    # Followed and kept (TUF 5.3.8: its revocation of the old key holds while the channel is frozen).
    assert agent.status()["trusted"]["root_version"] == 1
    assert _agent(tmp_path, str(store), named_keys).status()["trusted"]["root_version"] == 1


def test_a_manifest_shorter_than_its_signed_length_is_retried_never_installed(
        tmp_path: Path, named_keys: dict[str, Path], mirror: tuple[Path, str]) -> None:
    folder, url = mirror
    r1 = _publish(tmp_path, str(folder), named_keys, "r1")
    path = folder / manifest_key(r1["digest"])
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # the mirror's copy was cut (or the connection dropped)
    agent = _agent(tmp_path, url, named_keys)
    out = agent.poll()
    assert (out["result"], out["step"], out["class"], out["cause"]) == ("failed", "fetch", "retry", "store")
    assert f"{len(whole) // 2} bytes, fewer than the {len(whole)} the signed pointer states" in out["error"]
    assert _rejected(agent, "length") == 1 and _rejected(agent, "signature") == 0
    assert r1["digest"] not in agent.refused and not (agent.releases / "r1").exists()
    assert agent.store.requests == 2  # pointer, manifest: no signature, no blob
    path.write_bytes(whole)  # whole again: the retry passes
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r1"


def test_a_blob_shorter_than_its_manifest_length_is_retried_never_installed(tmp_path: Path,
                                                                            named_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    r1 = _publish(tmp_path, str(store), named_keys, "r1")
    doc = json.loads((store / manifest_key(r1["digest"])).read_text())
    rel = "mlp/1/model.py"
    blob = store / "blobs" / "sha256" / doc["files"][rel]
    whole = blob.read_bytes()
    blob.write_bytes(whole[:-10])
    agent = _agent(tmp_path, str(store), named_keys)
    out = agent.poll()
    assert (out["result"], out["step"], out["class"], out["cause"]) == ("failed", "fetch", "retry", "store")
    assert f"{len(whole) - 10} bytes, not the {doc['lengths'][rel]} the manifest states" in out["error"]
    assert r1["digest"] not in agent.refused and not (agent.releases / "r1").exists()
    assert not list(agent.releases.glob(".staging-*"))
    blob.write_bytes(whole)
    assert agent.poll()["result"] == "applied" and _serving(agent) == "r1"


def test_the_rejected_metric_help_lists_every_refusal_reason() -> None:
    """The metric's HELP names the reasons from metadata.REASONS itself, in their order (one list, not two)."""
    from tritonops.agent.exporter import HELP

    kind, text = HELP["tritonops_release_metadata_rejected_total"]
    assert kind == "counter"
    assert text.endswith(f"by reason ({', '.join(metadata.REASONS)}).")


def test_the_format_judges_the_bytes_its_caller_read(tmp_path: Path, named_keys: dict[str, Path]) -> None:
    """release_format.metadata reads nothing (issue 47): it names the root versions it needs, the caller reads
    them; the verdict is a typed record (no hidden keys in the pointer); .trusted.json is parsed and written
    back by the format, stored by the agent."""
    store = tmp_path / "store"
    _publish(tmp_path, str(store), named_keys, "r1")
    _root(store, named_keys, ["release", "new"], {"root": ["new"], "release": ["new"], "channel": ["new"]})
    _publish(tmp_path, str(store), named_keys, "r2", key=named_keys["new"])
    raw = (store / channel_key("stable")).read_bytes()
    trusted = metadata.Trusted(trust.implicit_root([named_keys["release.pub"]]))
    assert list(trusted.roots_needed(raw, "p")) == [1]
    with pytest.raises(ValueError, match="every root version"):
        trusted.check(raw, "stable", [], "p")
    checked = trusted.check(raw, "stable", [(store / root_key(1)).read_bytes()], "p")
    assert checked.root.version == 1 and checked.pointer["release"] == "r2"
    assert checked.sha256 == hashlib.sha256(trust.canonical(checked.pointer)).hexdigest()
    assert not [k for k in checked.pointer if k.startswith("_")]
    assert trusted.accept("stable", checked) and list(trusted.roots_needed(raw, "p")) == []
    again = metadata.Trusted(trust.implicit_root([named_keys["release.pub"]]), None, trusted.serialize().encode(), "t")
    assert (again.root.version, again.channels) == (1, trusted.channels)
    assert again.serialize() == trusted.serialize()
