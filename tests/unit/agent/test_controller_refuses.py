"""The controller refuses what the nodes would refuse (issue 34 items 1 and 3), through the real CLI.

Each test is one operator mistake from the issue, run with ``tritonops release ...`` (typer's CliRunner)
against a folder store, with real Ed25519 keys (openssl); where a node is involved it is the built agent
zipapp (``python -I tritonops-agent.pyz sync``), as a pod's init container runs it. Every refusal is exit 2,
names the role and the key ids, and leaves the store byte for byte as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_harness import cli, key_pairs, release_source
from tritonops import agent_bundle as bundle
from tritonops.core.keys import channel_key
from tritonops.release_format import trust

ROLES = ("root", "release", "channel")


@pytest.fixture(scope="module")
def rotation_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return key_pairs(tmp_path_factory.mktemp("keys"), "old", "new", "rogue")


@pytest.fixture(scope="module")
def agent_pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bundle.build(tmp_path_factory.mktemp("pyz") / "tritonops-agent.pyz")


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()
            and not p.name.startswith(".")}


def sync(pyz: Path, store: Path, node: Path, trusted: Path, *extra: str) -> subprocess.CompletedProcess:
    (node / "releases").mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-I", str(pyz), "sync", "--store", str(store), "--channel", "stable",
                           "--link", str(node / "models"), "--releases", str(node / "releases"),
                           "--trusted-key", str(trusted), *extra], capture_output=True, text=True, timeout=120)


def publish(tmp_path: Path, store: Path, release: str, *keyfiles: Path, channel: str = "stable") -> tuple[int, str]:
    src = tmp_path / "src" / release
    if not src.is_dir():
        src = release_source(tmp_path, release, release)
    return cli("release", "publish", src, "--store", store, "--channel", channel, "--for-channel", "stable",
               "--release", release, "--target", "cpu", *(a for k in keyfiles for a in ("--key", k)))


def root_keys(rotation_keys: dict[str, Path], name: str) -> list[object]:
    return [a for r in ROLES for a in (f"--{r}-key", rotation_keys[f"{name}.pub"])]


@pytest.fixture
def rooted(tmp_path: Path, rotation_keys: dict[str, Path]) -> Path:
    """A store whose nodes trust "old"; root 1 hands every role to "new"; r1 on stable, r2 on canary."""
    store = tmp_path / "store"
    assert publish(tmp_path, store, "r0", rotation_keys["old"])[0] == 0
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"),
                    "--sign-with", rotation_keys["old"], "--sign-with", rotation_keys["new"])
    assert code == 0, out
    assert publish(tmp_path, store, "r1", rotation_keys["new"])[0] == 0
    assert publish(tmp_path, store, "r2", rotation_keys["new"], channel="canary")[0] == 0
    return store


def test_promote_with_a_key_the_channel_role_does_not_list_is_refused_and_nodes_keep_syncing(
        tmp_path: Path, rotation_keys: dict[str, Path], rooted: Path, agent_pyz: Path) -> None:
    before = snapshot(rooted)
    code, out = cli("release", "promote", "canary", "stable", "--store", rooted, "--key", rotation_keys["rogue"])
    kid = trust.keyid(rotation_keys["new.pub"].read_bytes())[:12]
    rogue = trust.keyid(rotation_keys["rogue.pub"].read_bytes())[:12]
    assert code == 2, out
    assert "channel key(s) of root version 1" in out and f"signed by {rogue}" in out and kid in out
    assert "nothing written" in out and snapshot(rooted) == before
    for command in (("rollback", "stable"), ("rollout", "start", "--channel", "stable", "--release", "r2",
                                             "--waves", "50,100")):
        code, out = cli("release", *command, "--store", rooted, "--key", rotation_keys["rogue"])
        assert code == 2 and "channel key(s) of root version 1" in out, out
        assert snapshot(rooted) == before
    # a new pod's init container still syncs the good stable pointer
    done = sync(agent_pyz, rooted, tmp_path / "node", rotation_keys["old.pub"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["release"] == "r1"
    assert cli("release", "promote", "canary", "stable", "--store", rooted, "--key", rotation_keys["new"])[0] == 0


def test_publish_under_an_expired_root_is_refused_before_any_upload(tmp_path: Path, rotation_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    assert publish(tmp_path, store, "r0", rotation_keys["old"])[0] == 0
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--expires", "1s",
                    "--sign-with", rotation_keys["old"], "--sign-with", rotation_keys["new"])
    assert code == 0, out
    import time

    time.sleep(1.1)
    before = snapshot(store)
    code, out = publish(tmp_path, store, "r5", rotation_keys["new"])
    assert code == 2 and "root version 1 expired at" in out and "nothing written" in out, out
    assert snapshot(store) == before  # not one blob uploaded
    code, out = cli("release", "root", "rotate", "--store", store, *root_keys(rotation_keys, "new"), "--sign-with", rotation_keys["new"])
    assert code == 0, out
    assert publish(tmp_path, store, "r5", rotation_keys["new"])[0] == 0


def test_root_init_without_the_key_nodes_trust_is_refused(tmp_path: Path, rotation_keys: dict[str, Path],
                                                          agent_pyz: Path) -> None:
    store = tmp_path / "store"
    assert publish(tmp_path, store, "r0", rotation_keys["old"])[0] == 0
    before = snapshot(store)
    old = trust.keyid(rotation_keys["old.pub"].read_bytes())[:12]
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--sign-with", rotation_keys["new"])
    assert code == 2 and f"trust {old} today" in out and "channels/stable.json" in out, out
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--sign-with", rotation_keys["new"],
                    "--trusted-key", rotation_keys["old.pub"])
    assert code == 2 and "0 valid signature(s) of the 1 of 1 root key(s) of root version 0" in out, out
    assert old in out and "nodes would refuse root 1; nothing written" in out
    assert snapshot(store) == before and not (store / "root").exists()
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"),
                    "--sign-with", rotation_keys["old"], "--sign-with", rotation_keys["new"], "--trusted-key", rotation_keys["old.pub"])
    assert code == 0, out
    assert publish(tmp_path, store, "r1", rotation_keys["new"])[0] == 0
    done = sync(agent_pyz, store, tmp_path / "node", rotation_keys["old.pub"])
    assert done.returncode == 0 and json.loads(done.stdout)["release"] == "r1", done.stderr
    assert "warning: channel stable: no signed root trusted yet" in done.stderr  # the --trusted-key files only
    again = sync(agent_pyz, store, tmp_path / "node", rotation_keys["old.pub"])  # root 1 kept: roles and thresholds
    assert again.returncode == 0 and "no signed root trusted yet" not in again.stderr


def test_rotate_refuses_an_unknown_role_and_a_root_the_current_threshold_did_not_sign(
        tmp_path: Path, rotation_keys: dict[str, Path], rooted: Path) -> None:
    before = snapshot(rooted)
    code, out = cli("release", "root", "rotate", "--store", rooted, *root_keys(rotation_keys, "new"), "--threshold", "chanel=2",
                    "--sign-with", rotation_keys["new"])
    assert code == 2 and "'chanel' is not a role" in out, out
    code, out = cli("release", "root", "rotate", "--store", rooted, *root_keys(rotation_keys, "rogue"),
                    "--sign-with", rotation_keys["rogue"])
    new = trust.keyid(rotation_keys["new.pub"].read_bytes())[:12]
    assert code == 2 and "root key(s) of root version 1" in out and new in out and "nothing written" in out, out
    assert snapshot(rooted) == before


def test_keygen_never_replaces_a_file_nor_writes_through_a_link(tmp_path: Path, rotation_keys: dict[str, Path]) -> None:
    existing = tmp_path / "release.pub"
    existing.write_bytes(rotation_keys["old.pub"].read_bytes())
    code, out = cli("release", "keygen", tmp_path / "other.key", existing)
    assert code == 2 and "release.pub: exists" in out and existing.read_bytes() == rotation_keys["old.pub"].read_bytes()
    link, victim = tmp_path / "link.pub", tmp_path / "victim"
    link.symlink_to(victim)
    code, out = cli("release", "keygen", tmp_path / "third.key", link)
    assert code == 2 and "link.pub: exists" in out and link.is_symlink() and not victim.exists()
    private = tmp_path / "mine.key"
    private.write_bytes(rotation_keys["old"].read_bytes())
    code, out = cli("release", "keygen", tmp_path / "fourth.key", private)
    assert code == 2 and private.read_bytes() == rotation_keys["old"].read_bytes()
    assert not any((tmp_path / f).exists() for f in ("other.key", "third.key", "fourth.key"))


def test_rotation_ends_the_freeze_a_revoked_key_set_with_version_10_to_the_9(
        tmp_path: Path, rotation_keys: dict[str, Path], rooted: Path, agent_pyz: Path) -> None:
    """TUF 5.3.11: the channel role's keys change in root 2, so the node forgets the version 10**9 that the
    revoked key ("new") had signed and follows the new keys' pointers (logged)."""
    node = tmp_path / "node"
    good = (rooted / channel_key("stable")).read_bytes()
    signed = json.loads(good)["signed"]
    # the holder of "new" (later revoked) hands a mirror a pointer at version 10**9; the node takes it
    (rooted / channel_key("stable")).write_bytes(trust.sign_envelope({**signed, "version": 10**9}, [rotation_keys["new"]]))
    assert sync(agent_pyz, rooted, node, rotation_keys["old.pub"]).returncode == 0
    trusted = json.loads((node / "releases" / ".trusted.json").read_text())
    assert trusted["channels"]["stable"]["version"] == 10**9
    # the operator rotates "new" out of the channel role and publishes r3 (the mirror serves the real pointer)
    (rooted / channel_key("stable")).write_bytes(good)
    code, out = cli("release", "root", "rotate", "--store", rooted, "--root-key", rotation_keys["new.pub"],
                    "--release-key", rotation_keys["rogue.pub"], "--channel-key", rotation_keys["rogue.pub"], "--sign-with", rotation_keys["new"])
    assert code == 0, out
    code, out = publish(tmp_path, rooted, "r3", rotation_keys["rogue"])
    assert code == 0, out
    done = sync(agent_pyz, rooted, node, rotation_keys["old.pub"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["release"] == "r3"
    assert "forgot the trusted stable version 1000000000 (TUF 5.3.11)" in done.stderr
    trusted = json.loads((node / "releases" / ".trusted.json").read_text())
    assert trusted["channels"]["stable"]["version"] < 10**9


def test_a_node_of_one_store_refuses_another_stores_metadata_under_the_same_keys(
        tmp_path: Path, rotation_keys: dict[str, Path], agent_pyz: Path) -> None:
    """Two fleets sharing key files: each root names its store (root init --name), every pointer carries it,
    and a node run with --store-name refuses the other store's pointer (a mirror serving it, or a mix-up)."""
    for name, release in (("fleet-a", "r1"), ("fleet-b", "r2")):
        store = tmp_path / name
        assert publish(tmp_path, store, "r0", rotation_keys["old"])[0] == 0
        code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--name", name,
                        "--sign-with", rotation_keys["old"], "--sign-with", rotation_keys["new"])
        assert code == 0, out
        assert publish(tmp_path, store, release, rotation_keys["new"])[0] == 0
    assert json.loads((tmp_path / "fleet-b" / channel_key("stable")).read_text())["signed"]["store"] == "fleet-b"
    done = sync(agent_pyz, tmp_path / "fleet-a", tmp_path / "a", rotation_keys["old.pub"], "--store-name", "fleet-a")
    assert done.returncode == 0 and json.loads(done.stdout)["release"] == "r1", done.stderr
    assert "no signed root trusted yet" not in done.stderr  # a named store: nothing installs under the implicit root
    # fleet-b's store where fleet-a's nodes look: same keys, valid signatures, refused
    done = sync(agent_pyz, tmp_path / "fleet-b", tmp_path / "b", rotation_keys["old.pub"], "--store-name", "fleet-a")
    assert done.returncode != 0 and "not 'fleet-a' that this node is configured for" in done.stdout + done.stderr
    assert not (tmp_path / "b" / "models").exists()
    # rotate keeps the name; the fleet's own nodes follow it
    code, out = cli("release", "root", "rotate", "--store", tmp_path / "fleet-a", *root_keys(rotation_keys, "new"),
                    "--sign-with", rotation_keys["new"])
    assert code == 0, out
    assert json.loads((tmp_path / "fleet-a" / "root" / "2.json").read_text())["signed"]["name"] == "fleet-a"


def test_a_root_1_no_node_followed_is_replaced_by_root_init_with_the_nodes_keys(
        tmp_path: Path, rotation_keys: dict[str, Path], agent_pyz: Path) -> None:
    """The outage of issue 34: root 1 written (by an older tritonops) without the key nodes trust. Every node
    refuses it, so none followed it: root init with the nodes' --trusted-key replaces it, and they follow."""
    store = tmp_path / "store"
    assert publish(tmp_path, store, "r0", rotation_keys["old"])[0] == 0
    (store / "root").mkdir()
    bad = trust.sign_envelope(trust.new_root({r: [rotation_keys["new.pub"]] for r in ROLES}, {}, 1, 2e9), [rotation_keys["new"]])
    (store / "root" / "1.json").write_bytes(bad)
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--sign-with", rotation_keys["old"],
                    "--sign-with", rotation_keys["new"])
    assert code == 2 and "exists already" in out, out  # without --trusted-key: nothing to tell it by
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--sign-with", rotation_keys["old"],
                    "--sign-with", rotation_keys["new"], "--trusted-key", rotation_keys["old.pub"])
    assert code == 0 and "root version 1 replaced: no node followed the one before" in out, out
    assert (store / "root" / "1.json").read_bytes() != bad
    code, out = cli("release", "root", "init", "--store", store, *root_keys(rotation_keys, "new"), "--sign-with", rotation_keys["old"],
                    "--sign-with", rotation_keys["new"], "--trusted-key", rotation_keys["old.pub"])
    assert code == 2 and "exists already" in out, out  # a root 1 nodes follow is never replaced
    assert publish(tmp_path, store, "r1", rotation_keys["new"])[0] == 0
    done = sync(agent_pyz, store, tmp_path / "node", rotation_keys["old.pub"])
    assert done.returncode == 0 and json.loads(done.stdout)["release"] == "r1", done.stderr
