"""Drift on pull nodes during a staged rollout (issue 44 item 3): a node the rollout does not take yet serves
what its agent decided (the release it keeps, or the rollout's previous one), which is no drift; a link
re-pointed by hand still is. The node's check and the agent decide with the same function
(agent.rollout.decide), from the agent's identity (``--agent-id``, ``--group-label``) and its trusted state.

Real components: two releases published and signed into a folder store, a rollout started with waves by the
controller's own ``rollout start``, the real agent's ``sync`` on three nodes (it verifies the pointer and
writes its trusted state), the node's ``check --channel`` as the drift_check timer runs it, the real probe
playbook for the controller (``tritonops drift``), and a stand-in Triton (test_drift_probe.FakeTriton).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_drift_probe import HEADER, SECRET, FakeTriton
from test_drift_pull import controller
from tritonops.agent import cli as agent_cli
from tritonops.agent import drift_probe as agent_drift
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.core.exitcodes import ExitCode
from tritonops.core.triton_http import SECRET_ENV
from tritonops.release import rollout as ro
from tritonops.release.publish import publish
from tritonops.release_format import node_drift, signing
from tritonops.stores import open_store

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
CHANNEL = "stable"
WAVES: list[dict[str, Any]] = [{"groups": ["canary"]}, {"percent": 100}]  # wave 0: the canary group only
ROLLOUT = "r2-stable"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """r1 on the channel; then r2 rolled out in waves (canary group first). Nodes: ``canary`` (in wave 0:
    syncs r2), ``kept`` (r1 gated before the rollout: keeps it), ``new`` (added mid-rollout with nothing
    gated: the rollout's previous release, r1)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    tmp = tmp_path_factory.mktemp("rollout")
    key, pub = signing.keygen(tmp / "keys" / "release.key", tmp / "trusted" / "release.pub")
    store = str(tmp / "store")
    r1 = publish(SAMPLE, store, CHANNEL, key, target="cpu", version="r1")
    r2 = publish(SAMPLE, store, None, key, target="cpu", version="r2", channels=[CHANNEL])

    def agent(name: str, groups: tuple[str, ...] = ()) -> Agent:
        return Agent(open_store(store), CHANNEL, tmp / name / "models", tmp / name / "releases", [pub],
                     log=lambda m: None, agent_id=name, group_labels=groups)

    assert agent("kept").sync()["release"] == "r1"
    releases.mark(tmp / "kept" / "releases", "r1", link=tmp / "kept" / "models")  # as the golden gate does
    assert ro.start(store, CHANNEL, "r2", WAVES, 0.05, pointer_args={"keys": [key]})["rollout"]["wave"] == 0
    assert agent("canary", ("canary",)).sync()["release"] == "r2"
    assert agent("kept").sync()["release"] == "r1"
    assert agent("new").sync()["release"] == "r1"

    want = agent_drift.probe(tmp / "kept" / "models", tmp / "kept" / "releases", "http://127.0.0.1:9", HEADER,
                             "")["models"]
    FakeTriton.index = [{"name": m, "version": v, "state": "READY"} for m, vs in want.items() for v in vs]
    FakeTriton.loaded = [{"name": m, "version": v} for m, vs in want.items() for v in vs]
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeTriton)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"tmp": tmp, "r1": r1["digest"], "r2": r2["digest"], "port": server.server_address[1]}
    finally:
        server.shutdown()


def check(fleet: dict[str, Any], name: str, capsys: pytest.CaptureFixture[str],
          identity: list[str] | None = None) -> tuple[int, list[dict[str, str]]]:
    """The node's timer: the agent's check with the drift_check unit's arguments (identity as the agent's)."""
    node = fleet["tmp"] / name
    os.environ[SECRET_ENV] = SECRET
    try:
        rc = agent_cli.main(["check", "--host", name, "--link", str(node / "models"), "--releases",
                             str(node / "releases"), "--port", str(fleet["port"]), "--header", HEADER,
                             "--expected", "", "--channel", CHANNEL,
                             *(identity if identity is not None else ["--agent-id", name])])
    finally:
        del os.environ[SECRET_ENV]
    return rc, json.loads(capsys.readouterr().out)["findings"]


def test_nodes_the_rollout_takes_or_keeps_are_in_sync(fleet: dict[str, Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert check(fleet, "canary", capsys, ["--agent-id", "canary", "--group-label", "canary"]) == (ExitCode.OK, [])
    assert check(fleet, "kept", capsys) == (ExitCode.OK, [])  # r1 gated, not targeted: keeps it
    assert check(fleet, "new", capsys) == (ExitCode.OK, [])  # nothing gated: the rollout's previous, r1


def test_the_agents_identity_decides_a_canary_without_its_label_is_held_on_the_previous(
        fleet: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    rc, found = check(fleet, "canary", capsys, ["--agent-id", "canary"])
    assert (rc, found) == (ExitCode.FINDINGS, [{"resource": "release", "detail": (
        f"serving r2 ({fleet['r2'][:12]}), marked current none; channel {CHANNEL} points to r2 ({fleet['r2'][:12]}, "
        f"version 2, verified by the release agent); rollout {ROLLOUT} at wave 0 keeps this node on r1 "
        f"({fleet['r1'][:12]})")}])


def test_a_kept_node_re_pointed_by_hand_is_drift_naming_what_the_rollout_keeps(
        fleet: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    node = fleet["tmp"] / "kept"
    shutil.copytree(node / "releases" / "r1", node / "releases" / "by-hand")
    os.replace(node / "models", fleet["tmp"] / "models.kept")
    (node / "models").symlink_to("releases/by-hand")
    try:
        rc, found = check(fleet, "kept", capsys)
    finally:
        (node / "models").unlink()
        os.replace(fleet["tmp"] / "models.kept", node / "models")
        shutil.rmtree(node / "releases" / "by-hand")
    assert (rc, found) == (ExitCode.FINDINGS, [{"resource": "release", "detail": (
        f"serving by-hand ({fleet['r1'][:12]}), marked current r1; channel {CHANNEL} points to r2 "
        f"({fleet['r2'][:12]}, version 2, verified by the release agent); rollout {ROLLOUT} at wave 0 keeps this "
        f"node on r1 ({fleet['r1'][:12]})")}])
    assert check(fleet, "kept", capsys) == (ExitCode.OK, [])


def test_a_halt_keeps_a_node_of_a_reached_wave_on_its_release(fleet: dict[str, Any]) -> None:
    """``kept`` as a canary (wave 0 takes it): behind while the rollout runs, in sync once it halted."""
    node = fleet["tmp"] / "kept"
    probe = agent_drift.probe(node / "models", node / "releases", "http://127.0.0.1:9", HEADER, "", None, CHANNEL,
                              ("kept", ("canary",)))
    assert [f["detail"].split("; ")[1] for f in node_drift.channel_findings(probe)] == [
        f"channel {CHANNEL} points to r2 ({fleet['r2'][:12]}, version 2, verified by the release agent)"]
    probe["channel"]["rollout"]["halted"] = True
    assert node_drift.channel_findings(probe) == []


def test_a_bad_agent_id_is_a_usage_error_naming_the_option(fleet: dict[str, Any],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    rc = agent_cli.main(["check", "--link", "x", "--releases", "x", "--channel", CHANNEL, "--agent-id", "a b"])
    assert rc == ExitCode.USAGE and json.loads(capsys.readouterr().out)["error"].startswith("--agent-id")


def test_the_controller_passes_the_agents_group_labels_to_the_probe(fleet: dict[str, Any],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``tritonops drift`` on the canary node, its group labels from the release_agent role's variable: in
    sync, as the node's own check says (without the label, the probe would find it held on r1: above)."""
    if not Path(sys.executable).with_name("ansible-playbook").exists() and shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed (make venv)")
    tmp, node = fleet["tmp"], fleet["tmp"] / "canary"
    inventory = tmp / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    settings = {"drift_hosts": "localhost", "release_agent_channel": CHANNEL,
                "release_agent_model_link": str(node / "models"), "release_agent_releases_dir": str(node / "releases"),
                "release_agent_python": sys.executable, "release_agent_controller_cache": str(tmp / "agent"),
                "release_agent_triton_url": f"http://127.0.0.1:{fleet['port']}", "release_agent_admin_header": HEADER,
                "release_agent_admin_secret": SECRET, "drift_expected_state": "",
                "release_agent_group_labels": ["canary"]}
    (tmp / "settings.json").write_text(json.dumps(settings))
    monkeypatch.delenv("POD_NAME", raising=False)
    rc, found, out = controller({"tmp": tmp, "inventory": inventory})
    assert (rc, found) == (ExitCode.OK, []), out
