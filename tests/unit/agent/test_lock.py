"""One owner of the node folder: the lock (core/lock.py), staging folders a prune spares, the install journal.

Two agents on one node folder, an agent against a push-mode install, a holder named when the lock
times out, and an install killed (SIGKILL, in a subprocess) at each step of its two renames: the next
run leaves the last gated release installed and linked, and ``status`` lists it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_harness import agent_cmd, release_source
from tritonops.agent import releases
from tritonops.agent.cli import main
from tritonops.agent.pull import Agent
from tritonops.core import lock
from tritonops.core.names import MANIFEST_FILE
from tritonops.release import publish as pub
from tritonops.release import push
from tritonops.release_format import manifest
from tritonops.stores import open_store
from tritonops.stores.folder import FolderStore


def _agent(node: Path, store: str, keys: dict[str, Path]) -> Agent:
    (node / "releases").mkdir(parents=True, exist_ok=True)
    return Agent(open_store(store), "stable", node / "models", node / "releases", [keys["pub"]], log=lambda m: None)


def _push(tmp_path: Path, release: str, note: str, releases_dir: Path) -> Path:
    """What the role's push leaves on a node before it runs install: releases/.staging-<id>.tar."""
    staged = push.prepare(release_source(tmp_path, release, note), tmp_path / "cache", "cpu", version=release)
    tar = releases_dir / f"{releases.STAGING_PREFIX}{release}.tar"
    shutil.copyfile(staged["tarball"], tar)
    return tar


def test_two_agents_at_once_on_one_node_folder_both_apply_and_refuse_nothing(
        tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    real = FolderStore.download

    def slow(self: FolderStore, key: str, dest: Path, sha256: str, size: int) -> int:
        time.sleep(0.03)  # both agents are mid-fetch at once
        return real(self, key, dest, sha256, size)

    monkeypatch.setattr(FolderStore, "download", slow)
    node = tmp_path / "node"
    agents = [_agent(node, store, keys), _agent(node, store, keys)]
    results: list[Any] = [None, None]

    def poll(i: int) -> None:
        try:
            results[i] = agents[i].poll()
        except Exception as e:  # noqa: BLE001 - a traceback is a failure too
            results[i] = e

    threads = [threading.Thread(target=poll, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r["result"] for r in results] == ["applied", "applied"], results
    assert sorted(r["downloaded"] == 0 for r in results) == [False, True]  # the second reused the first's
    assert agents[0].refused == agents[1].refused == {}
    st = releases.status(node / "models", node / "releases")
    assert (st["active"], st["current"], st["releases"]) == ("r1", "r1", ["r1"])
    # no staging, no journal, the lock let go; the trusted metadata (metadata.py) stays
    assert [p.name for p in (node / "releases").glob(".*")] == [".trusted.json"]


def test_a_push_staging_tarball_survives_a_concurrent_pull_agents_prune(
        tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path / "node", store, keys)
    tar = _push(tmp_path, "p2", "pushed", agent.releases)  # the role copied it; its install comes next
    assert agent.poll()["result"] == "applied"  # ...which prunes
    assert tar.is_file()
    rc = main(["install", "--link", str(agent.link), "--releases", str(agent.releases), "--release", "p2",
               "--staging", str(agent.releases / ".staging-p2"), "--tarball", str(tar)])
    assert rc == 0 and "p2" in releases.list_releases(agent.releases)
    # A leftover nobody has touched for STAGING_GRACE seconds (a killed run's) is still pruned.
    (agent.releases / ".staging-r9").mkdir()
    monkeypatch.setattr(releases, "STAGING_GRACE", 0.0)
    assert ".staging-r9" in releases.prune(agent.link, agent.releases, keep=3)["removed"]


def test_a_poll_waits_for_a_push_install_then_fails_naming_the_holder_and_retries(
        tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "a"), store, "stable", keys["key"], target="cpu", version="r1")
    agent = _agent(tmp_path / "node", store, keys)
    monkeypatch.setenv("TRITONOPS_LOCK_TIMEOUT", "0.2")
    taken, done = threading.Event(), threading.Event()

    def push_install() -> None:
        with lock.held(agent.releases, "tritonops-agent install"):
            taken.set()
            done.wait(10)

    t = threading.Thread(target=push_install)
    t.start()
    assert taken.wait(5)
    try:
        out = agent.poll()
    finally:
        done.set()
        t.join(5)
    assert (out["result"], out["step"]) == ("failed", "lock"), out
    assert f"held by pid {os.getpid()} on " in out["error"] and "(tritonops-agent install) since 20" in out["error"]
    assert "more than 0.2 s" in out["error"] and not (agent.releases / "r1").exists()
    assert agent.poll()["result"] == "applied"  # not refused: tried again at the next poll


def test_a_command_waits_a_bounded_time_for_another_process_and_names_it(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    rel = tmp_path / "releases"
    rel.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tritonops.core import lock\n"
         f"with lock.held({str(rel)!r}, 'tritonops-agent recover'):\n print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        start = time.monotonic()
        rc = main(["prune", "--link", str(tmp_path / "models"), "--releases", str(rel), "--keep", "1",
                   "--lock-timeout", "0.3"])
        waited = time.monotonic() - start
    finally:
        holder.communicate("", timeout=10)
    err = json.loads(capsys.readouterr().out.splitlines()[0])["error"]
    assert rc == 3 and 0.3 <= waited < 3
    assert err.startswith(f"{rel / '.lock'}: the node folder is held by pid {holder.pid} ")
    assert "(tritonops-agent recover)" in err and "prune: nothing was changed" in err
    assert main(["prune", "--link", str(tmp_path / "models"), "--releases", str(rel), "--keep", "1",
                 "--lock-timeout", "0.3"]) == 0  # let go when the holder ended
    assert not (rel / ".lock").exists()


def test_the_lock_is_reentrant_in_a_thread_and_exclusive_across_threads(tmp_path: Path) -> None:
    rel = tmp_path / "releases"
    (rel / "r1").mkdir(parents=True)
    (rel / "r1" / MANIFEST_FILE).write_text(manifest.text({}))
    with releases.locked(rel, "pull stable", timeout=0.2):
        assert releases.mark(rel, "r1")["changed"]  # no deadlock: the cycle's own steps re-enter
        errors: list[str] = []

        def other() -> None:
            try:
                with lock.held(rel, "another", timeout=0.1):
                    errors.append("taken twice")
            except lock.LockBusy as e:
                errors.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join(5)
        assert len(errors) == 1 and "held by pid" in errors[0] and "(pull stable)" in errors[0], errors
    assert not lock.is_held(rel)


@pytest.fixture(scope="module")
def r1_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A push tarball of release r1 (prepared once: validating the sample takes a while)."""
    tmp = tmp_path_factory.mktemp("push")
    return Path(push.prepare(release_source(tmp, "r1"), tmp / "cache", "cpu", version="r1")["tarball"])


@pytest.mark.parametrize("step", ["install-journal", "install-aside", "install-swap", "install-cleanup"])
def test_an_install_killed_at_any_step_leaves_the_gated_release_installed_and_linked(
        tmp_path: Path, step: str, r1_tar: Path) -> None:
    rel, link = tmp_path / "node" / "releases", tmp_path / "node" / "models"
    rel.mkdir(parents=True)
    layout = ["--link", str(link), "--releases", str(rel)]
    tar = shutil.copyfile(r1_tar, rel / ".staging-r1.tar")
    assert releases.install(rel, rel / ".staging-r1", "r1", tarball=tar)["changed"]
    releases.activate(link, rel, "r1")
    releases.mark(rel, "r1")
    good = manifest.read(rel / "r1")
    (rel / "r1" / "mlp" / "1" / "model.py").write_text("drifted on the node\n")  # the push repairs it...
    tar = shutil.copyfile(r1_tar, rel / ".staging-r1.tar")
    install = ["install", *layout, "--release", "r1", "--staging", str(rel / ".staging-r1"), "--tarball", str(tar)]
    killed = agent_cmd(*install, crash=step)  # ...and is killed at this step
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "a change was interrupted" in json.loads(agent_cmd("status", *layout).stdout)["journal"]
    nxt = agent_cmd("recover", *layout)  # the next run (boot, the agent's start, any changing command)
    assert nxt.returncode == 0, nxt.stdout + nxt.stderr
    st = json.loads(agent_cmd("status", *layout).stdout)
    assert (st["active"], st["current"], st["releases"]) == ("r1", "r1", ["r1"]) and "journal" not in st, st
    assert link.resolve().is_dir() and not (rel / releases.JOURNAL_FILE).exists()
    assert not [p for p in rel.glob(".staging-*") if p.is_dir()]
    if step != "install-journal":  # killed after the verified copy was renamed aside: it is what is in place
        assert manifest.verify(rel / "r1") == good
    assert agent_cmd(*install).returncode == 0  # and the push, run again, completes
    assert manifest.verify(link) == good


def test_a_copy_left_aside_by_an_agent_without_the_journal_is_renamed_back(tmp_path: Path, r1_tar: Path) -> None:
    rel, link = tmp_path / "releases", tmp_path / "models"
    rel.mkdir()
    releases.install(rel, rel / ".staging-r1", "r1", tarball=shutil.copyfile(r1_tar, rel / ".staging-r1.tar"))
    releases.activate(link, rel, "r1")
    releases.mark(rel, "r1")
    os.rename(rel / "r1", rel / ".staging-damaged-r1")  # what a kill between the renames used to leave
    assert releases.recover(link, rel)["changed"] is False
    st = releases.status(link, rel)
    assert (st["active"], st["current"], st["releases"]) == ("r1", "r1", ["r1"]) and link.resolve().is_dir()
