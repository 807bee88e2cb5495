"""The release agent without Triton: stores, signatures, fetch/install/switch, refusals, the deadman.

The tests that take ``store_kind`` run against every kind of store, one suite: a folder, the folder as an
http.server mirror on 127.0.0.1 (the air-gapped path), S3 (moto_server) and an OCI registry (Debian's
docker-registry with TLS and htpasswd); the last two are integration-tier. The S3 path with real Tritons
runs in tests/integration/test_release_pull.py.
"""

from __future__ import annotations

import datetime
import functools
import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import SAMPLE, StoreUnderTest, moto_releases_bucket, release_source
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.core.errors import ReleaseError
from tritonops.release import publish as pub
from tritonops.release_format import manifest, signing
from tritonops.release_format.golden_gate import read_golden
from tritonops.stores import open_store
from tritonops.stores.aws_credentials import sigv4_headers


@pytest.fixture(scope="module")
def rogue_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private key no node trusts."""
    d = tmp_path_factory.mktemp("rogue")
    return signing.keygen(d / "rogue.key", d / "rogue.pub")[0]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=["folder", "mirror", pytest.param("s3", marks=pytest.mark.integration),
                        pytest.param("oci", marks=pytest.mark.integration)])
def store_kind(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StoreUnderTest]:
    """The store the tests below run against: a folder, the folder as an HTTP mirror, S3 (moto_server) and an
    OCI registry (docker-registry on loopback, TLS and htpasswd: tests/oci_registry.py, reached with a docker
    config.json)."""
    if request.param == "mirror":
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path)))
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        yield StoreUnderTest("mirror", tmp_path, f"http://127.0.0.1:{srv.server_port}")
        srv.shutdown()
        srv.server_close()
        return
    if request.param == "s3":
        moto_releases_bucket(request, monkeypatch)
        yield StoreUnderTest("s3", tmp_path)
        return
    if request.param == "oci":
        reg = request.getfixturevalue("oci_registry")
        monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(reg.config))
        monkeypatch.setenv("TRITONOPS_REGISTRY_CA", str(reg.ca))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the publisher's tag locks
        yield StoreUnderTest("oci", tmp_path, reg)
        return
    yield StoreUnderTest("folder", tmp_path)


def _agent(tmp_path: Path, store: str, keys: dict[str, Path], name: str = "node") -> Agent:
    root = tmp_path / name
    (root / "releases").mkdir(parents=True, exist_ok=True)
    return Agent(open_store(store), "stable", root / "models", root / "releases", [keys["pub"]], log=lambda m: None)


def test_publish_then_poll_installs_switches_and_marks(tmp_path: Path, keys: dict[str, Path],
                                                      store_kind: StoreUnderTest) -> None:
    out = pub.publish(release_source(tmp_path, "a"), store_kind.url, "stable", keys["key"], target="cpu", version="r1")
    store_kind.settle()
    assert (out["uploaded"], out["changed"]) == (out["files"] - out["already_there"] - out["duplicates"], True)
    agent = _agent(tmp_path, store_kind.reader(), keys)
    result = agent.poll()
    assert result["result"] == "applied" and result["release"] == "r1"
    distinct = len(set(manifest.tree_files(SAMPLE).values()))
    challenge = 1 if store_kind.kind == "oci" else 0  # the registry's first answer: 401, the credentials it wants
    assert agent.store.requests == 3 + distinct + challenge  # pointer, manifest, signature, each distinct file once
    assert os.readlink(agent.link) == "releases/r1"
    assert releases.state(agent.releases)["digest"] == out["digest"]
    assert manifest.verify(agent.releases / "r1") == manifest.tree_files(release_source(tmp_path, "again"))
    before = agent.store.requests
    assert agent.poll()["result"] == "not_modified"
    assert agent.store.requests - before == 1  # an idle poll: the pointer, read conditionally
    assert 'tritonops_release_up_to_date{channel="stable"} 1' in agent.metrics.render()


def test_second_release_downloads_only_what_changed(tmp_path: Path, keys: dict[str, Path],
                                                    store_kind: StoreUnderTest) -> None:
    store = store_kind.url
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store_kind.reader(), keys)
    agent.poll()
    out = pub.publish(release_source(tmp_path, "b", "two"), store, "stable", keys["key"], target="cpu", version="r2")
    assert out["uploaded"] == 1
    result = agent.poll()
    assert (result["result"], result["reused"], result["loaded"]) == ("applied", out["files"] - 1, [])
    assert result["downloaded"] == (tmp_path / "src" / "b" / "mlp" / "1" / "model.py").stat().st_size


def test_a_release_signed_by_another_key_is_refused_before_any_file_is_fetched(
        tmp_path: Path, keys: dict[str, Path], rogue_key: Path, store_kind: StoreUnderTest) -> None:
    store = store_kind.url
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store_kind.reader(), keys)
    agent.poll()
    before = agent.store.requests
    # The pointer's signature is good (a channel key), the manifest's is not: refused before any blob.
    pub.publish(release_source(tmp_path, "b", "evil"), store, "stable", rogue_key, target="cpu", version="r2",
                channel_keys=[keys["key"]])
    store_kind.settle()
    result = agent.poll()
    assert (result["result"], result["step"]) == ("failed", "verify")
    assert "0 valid signature(s) of the 1 of 1 release key(s)" in result["error"]
    assert agent.store.requests - before == 3  # pointer, manifest, signature: no blob
    assert not (agent.releases / "r2").exists() and releases.active_release(agent.link, agent.releases) == "r1"
    assert agent.poll()["result"] == "not_modified"  # refused once, not retried every poll
    assert 'tritonops_release_failures_total{channel="stable",class="refused",step="verify"} 1' in agent.metrics.render()


def test_a_tampered_file_in_the_store_fails_the_fetch_and_leaves_nothing(tmp_path: Path, keys: dict[str, Path],
                                                                        store_kind: StoreUnderTest) -> None:
    pub.publish(release_source(tmp_path, "a"), store_kind.url, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store_kind.reader(), keys)
    agent.poll()
    src = release_source(tmp_path, "b", "tampered")
    changed = src / "mlp" / "1" / "model.py"  # tampered with in the store, keeping its signed length
    pub.publish(src, store_kind.url, "stable", keys["key"], target="cpu", version="r2")
    store_kind.tamper(manifest.sha256_file(changed), b"#" * changed.stat().st_size)
    result = agent.poll()
    assert (result["result"], result["step"]) == ("failed", "fetch")
    assert "content sha256" in result["error"]
    assert agent.poll()["step"] == "fetch"  # retried (the store may be repaired), never installed
    assert sorted(p.name for p in agent.releases.iterdir()) == [".trusted.json", "current.json", "r1"]


def test_a_failed_fetch_is_retried_and_the_target_reports_it_is_behind(tmp_path: Path, keys: dict[str, Path],
                                                                       store_kind: StoreUnderTest) -> None:
    pub.publish(release_source(tmp_path, "a"), store_kind.url, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store_kind.reader(), keys)
    agent.poll()
    src = release_source(tmp_path, "b", "two")
    pub.publish(src, store_kind.url, "stable", keys["key"], target="cpu", version="r2")
    blob = manifest.sha256_file(src / "mlp" / "1" / "model.py")
    store_kind.hide(blob)  # the object store loses it for a while
    assert agent.poll()["step"] == "fetch"
    assert 'tritonops_release_up_to_date{channel="stable"} 0' in agent.metrics.render()
    store_kind.hide(blob, back=True)
    assert agent.poll()["result"] == "applied"
    assert os.readlink(agent.link) == "releases/r2"


def test_a_reused_release_id_is_refused_by_publish_and_by_the_node(tmp_path: Path, keys: dict[str, Path],
                                                                    store_kind: StoreUnderTest) -> None:
    store = store_kind.url
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    with pytest.raises(ReleaseError, match="release id 'r1' was published with other content"):
        pub.publish(release_source(tmp_path, "b", "other"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store_kind.reader(), keys)
    agent.poll()
    # A second store (another team, a restored bucket) reusing the id with other content:
    other = store_kind.other("other-store")  # its pointer version 2 (> the 1 this node trusts): no rollback
    pub.publish(release_source(tmp_path, "c0", "zero"), other, "stable", keys["key"], target="cpu", version="r0")
    pub.publish(release_source(tmp_path, "c", "other"), other, "stable", keys["key"], target="cpu", version="r1")
    agent.store = open_store(store_kind.reader(other))
    result = agent.poll()
    assert (result["result"], result["step"]) == ("failed", "verify")
    assert "already installed with other content" in result["error"]


def test_rollback_and_promote_move_pointers_with_history(tmp_path: Path, keys: dict[str, Path],
                                                         store_kind: StoreUnderTest) -> None:
    store = store_kind.url
    r1 = pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1",
                     channels=["canary"])
    pub.publish(release_source(tmp_path, "b", "two"), store, "stable", keys["key"], target="cpu", version="r2")
    back = pub.rollback(store, "stable", keys=keys["key"])
    assert (back["release"], back["digest"], back["previous"]) == ("r1", r1["digest"], "r2")
    with pytest.raises(ReleaseError, match="no earlier release r9"):
        pub.rollback(store, "stable", release="r9", keys=keys["key"])
    assert pub.promote(store, "stable", "canary", keys=keys["key"])["release"] == "r1"
    with pytest.raises(ReleaseError, match="channel 'nope' does not exist"):
        pub.promote(store, "nope", "stable", keys=keys["key"])
    assert pub.read_pointer(pub.open_writer(store), "stable")["version"] == 3  # type: ignore[index]  # r1, r2, r1


def _switched_in_ungated(tmp_path: Path, keys: dict[str, Path]) -> Agent:
    """r1 gated and serving, r2 fetched and its link switched, its gate never run."""
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store, keys)
    agent.poll()
    pub.publish(release_source(tmp_path, "b", "two"), store, "stable", keys["key"], target="cpu", version="r2")
    p2 = pub.read_pointer(agent.store, "stable")
    assert p2 is not None
    agent.fetch("r2", p2["digest"], p2["length"])
    releases.activate(agent.link, agent.releases, "r2")
    return agent


def test_deadman_reverts_a_release_that_never_passed_its_gate(tmp_path: Path, keys: dict[str, Path]) -> None:
    agent = _switched_in_ungated(tmp_path, keys)  # ...and the controller dies before the gate
    assert releases.recover(agent.link, agent.releases) == {"changed": True, "active": "r1", "reverted": "r2"}
    assert os.readlink(agent.link) == "releases/r1"
    assert releases.recover(agent.link, agent.releases)["changed"] is False


def test_hand_made_models_at_the_link_are_kept_outside_releases_and_never_pruned(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store, keys)
    (agent.link / "handmade").mkdir(parents=True)
    (agent.releases / "notes").mkdir()
    agent.poll()
    aside = list(agent.link.parent.glob("models.preexisting-*"))
    assert len(aside) == 1 and (aside[0] / "handmade").is_dir()
    assert releases.prune(agent.link, agent.releases, keep=1)["removed"] == []
    assert (agent.releases / "notes").is_dir()


def test_http_mirror_idle_poll_is_one_conditional_request(tmp_path: Path, keys: dict[str, Path]) -> None:
    mirror = tmp_path / "mirror"
    pub.publish(release_source(tmp_path, "a"), str(mirror), "stable", keys["key"], target="cpu", version="r1")
    old = (datetime.datetime.now() - datetime.timedelta(minutes=5)).timestamp()
    os.utime(mirror / "channels" / "stable.json", (old, old))
    codes: list[int] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            codes.append(int(code))

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(mirror)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        agent = _agent(tmp_path, f"http://127.0.0.1:{srv.server_port}", keys)
        assert agent.poll()["result"] == "applied"
        codes.clear()
        assert agent.poll()["result"] == "not_modified"
        assert codes == [304]
    finally:
        srv.shutdown()


def test_sigv4_signature_matches_botocore() -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.UTC)
    env = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
           "AWS_SESSION_TOKEN": "token/with+chars="}
    url = "https://models.s3.eu-west-1.amazonaws.com/fleet/channels/stable.json"
    ours = sigv4_headers(url, "eu-west-1", now=now, env=env)
    req = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": ours["x-amz-content-sha256"],
                                                     "X-Amz-Date": ours["x-amz-date"],
                                                     "X-Amz-Security-Token": env["AWS_SESSION_TOKEN"]})
    req.context["timestamp"] = ours["x-amz-date"]
    auth = S3SigV4Auth(Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]), "s3", "eu-west-1")
    signature = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    assert ours["Authorization"].endswith(f"Signature={signature}")
    assert sigv4_headers(url, "eu-west-1", now=now, env={}) == {}


def test_golden_files_are_read_bounded(tmp_path: Path) -> None:
    fifo = tmp_path / "golden.json"
    os.mkfifo(fifo)
    with pytest.raises(ReleaseError, match="not a regular file"):
        read_golden(fifo)  # returns at once: no hang on a FIFO
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(ReleaseError, match="cannot open"):
        read_golden(link)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(17 << 20)
    with pytest.raises(ReleaseError, match="more than"):
        read_golden(big)
    (tmp_path / "bad.json").write_text(json.dumps({"cases": "x"}))
    with pytest.raises(ReleaseError, match="expected"):
        read_golden(tmp_path / "bad.json")


def _oldest_python() -> str | None:
    """Python 3.10 (Ubuntu 22.04 on JetPack, the agent's floor) when this machine has one."""
    import subprocess

    for cand in [*sorted(Path("/root/.pyenv/versions").glob("3.10.*/bin/python3")), shutil.which("python3.10")]:
        if cand and subprocess.run([str(cand), "-c", "import sys; assert sys.version_info[:2] == (3, 10)"],
                                   capture_output=True).returncode == 0:
            return str(cand)
    return None


@pytest.mark.skipif(_oldest_python() is None, reason="no Python 3.10 on this machine")
def test_the_shipped_zipapp_syncs_a_release_with_python_3_10(tmp_path: Path, keys: dict[str, Path]) -> None:
    import subprocess

    from tritonops import agent_bundle as bundle

    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = bundle.build(tmp_path / "tritonops-agent.pyz")
    (tmp_path / "node" / "releases").mkdir(parents=True)
    out = subprocess.run([str(_oldest_python()), "-I", str(agent), "sync", "--store", store, "--channel", "stable",
                          "--link", str(tmp_path / "node" / "models"), "--releases", str(tmp_path / "node" / "releases"),
                          "--trusted-key", str(keys["pub"])], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["release"] == "r1"
    assert os.readlink(tmp_path / "node" / "models") == "releases/r1"
    # and the SigV4 path (datetime, hmac) imports and signs on that interpreter
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tritonops_agent.stores.aws_credentials import sigv4_headers; "
            "print(sigv4_headers('https://b.s3.us-east-1.amazonaws.com/k', 'us-east-1', "
            "env={'AWS_ACCESS_KEY_ID': 'a', 'AWS_SECRET_ACCESS_KEY': 'b'})['Authorization'][:16])")
    sig = subprocess.run([str(_oldest_python()), "-I", "-c", code, str(agent)], capture_output=True, text=True)
    assert sig.stdout.strip() == "AWS4-HMAC-SHA256", sig.stderr


def test_recover_with_grace_leaves_a_switch_in_progress_alone(tmp_path: Path, keys: dict[str, Path]) -> None:
    agent = _switched_in_ungated(tmp_path, keys)
    assert releases.recover(agent.link, agent.releases, grace=600)["changed"] is False
    old = os.lstat(agent.link).st_mtime - 3600
    os.utime(agent.link, (old, old), follow_symlinks=False)
    assert releases.recover(agent.link, agent.releases, grace=600)["reverted"] == "r2"


@pytest.mark.parametrize("content", ["", "{", "[]", "\x00\x01"])
def test_a_corrupt_current_json_is_unknown_state_not_a_crash(tmp_path: Path, keys: dict[str, Path],
                                                              content: str) -> None:
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store, keys)
    agent.poll()
    (agent.releases / releases.STATE_FILE).write_text(content)
    st = releases.state(agent.releases)
    assert st["current"] is None and "unreadable" in st["error"]
    assert releases.status(agent.link, agent.releases)["active"] == "r1"
    assert releases.mark(agent.releases, "r1")["changed"] is True
    assert releases.state(agent.releases)["current"] == "r1" and "error" not in releases.state(agent.releases)


def test_a_source_with_a_link_leaving_it_is_refused(tmp_path: Path, keys: dict[str, Path]) -> None:
    src = release_source(tmp_path, "a")
    (tmp_path / "secret.txt").write_text("not for the fleet")
    (src / "mlp" / "1" / "extra.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ReleaseError, match="extra.txt: a symbolic link to .*, outside the repository"):
        pub.publish(src, str(tmp_path / "store"), "stable", keys["key"], target="cpu", version="r1")
    assert not (tmp_path / "store").exists()


def test_install_refuses_a_tarball_larger_than_the_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tarfile
    from collections import namedtuple

    src = release_source(tmp_path, "a")
    tarball = tmp_path / "r1.tar"
    with tarfile.open(tarball, "w") as tf:
        tf.add(src, arcname=".")
    (tmp_path / "releases").mkdir()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, (1 << 30) - (1 << 20), 1 << 20))
    with pytest.raises(ReleaseError, match=r"unpacking needs \d+ MiB, 1 MiB free"):
        releases.install(tmp_path / "releases", tmp_path / "releases" / ".staging-r1", "r1", tarball)
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == []  # staging and tarball cleaned up


def test_ready_stays_up_while_the_next_release_is_switched_in(tmp_path: Path, keys: dict[str, Path]) -> None:
    store = str(tmp_path / "store")
    agent = _agent(tmp_path, store, keys)
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    assert agent.ready() is False  # nothing tried yet
    agent.poll()
    assert agent.ready() is True
    pub.publish(release_source(tmp_path, "b", "two"), store, "stable", keys["key"], target="cpu", version="r2")
    p2 = pub.read_pointer(agent.store, "stable")
    assert p2 is not None
    agent.fetch("r2", p2["digest"], p2["length"])
    releases.activate(agent.link, agent.releases, "r2")
    agent.switching = True  # between activate and the gate: the gated models still serve
    assert agent.ready() is True
    agent.switching = False  # a switch nobody finishes (the deadman's case)
    assert agent.ready() is False


def test_the_sidecar_is_ready_after_its_first_poll_not_after_a_random_delay(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    # run() polls once before the delay that spreads a fleet: with a 1-hour interval the pod is ready at once
    # (it waited up to one interval after its gate passed: 18-28 s of a played dev pod's 21-31 s start).
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path, store, keys)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(3600.0,), kwargs={"stop": stop}, daemon=True)
    runner.start()
    try:
        for _ in range(100):
            if agent.ready():
                break
            stop.wait(0.05)
        assert agent.ready() is True and os.readlink(agent.link) == "releases/r1"
    finally:
        stop.set()
        runner.join(timeout=10)
    assert not runner.is_alive()
