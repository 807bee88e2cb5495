"""Drift on a pull node (issue 44 item 3): the release served against the one the node's release agent last
verified its channel's signed pointer to name, the same verdict from the node's ``check --channel`` (its
timer) and from the controller (``tritonops drift``, the host's mode from its vars or ``-e``).

Real components: a release published and signed into a folder store, the real agent's ``sync`` (it verifies
the pointer and writes its trusted state), the real probe playbook against localhost, and a stand-in Triton
that answers the repository index with the admin header only (test_drift_probe.FakeTriton).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_drift_probe import HEADER, SECRET, local_inventory, serve_triton
from tritonops.agent import cli as agent_cli
from tritonops.agent import drift_probe as agent_drift
from tritonops.cli import app
from tritonops.core.exitcodes import ExitCode
from tritonops.core.names import TRUSTED_FILE
from tritonops.core.triton_http import SECRET_ENV
from tritonops.release.publish import publish
from tritonops.release_format import node_drift, signing
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "model_repository"
CHANNEL = "stable"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A pull node on localhost: the channel's release synced by the agent, Triton (stand-in) serving it."""
    if not Path(sys.executable).with_name("ansible-playbook").exists() and shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed (make venv)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    tmp = tmp_path_factory.mktemp("pull")
    (tmp / "trusted").mkdir()
    key, pub = signing.keygen(tmp / "keys" / "release.key", tmp / "trusted" / "release.pub")
    store, link, rels = tmp / "store", tmp / "node" / "models", tmp / "node" / "releases"
    published = publish(SAMPLE, str(store), CHANNEL, key, target="cpu")
    rc = agent_cli.main(["sync", "--link", str(link), "--releases", str(rels), "--store", str(store),
                         "--channel", CHANNEL, "--trusted-key", str(pub)])
    assert rc == 0
    want = agent_drift.probe(link, rels, "http://127.0.0.1:9", HEADER, "")["models"]  # by the release's configs
    server, inventory = serve_triton(want), local_inventory(tmp)
    # The node's settings as its inventory would hold them, but for the mode: that comes with -e.
    settings = {"drift_hosts": "localhost", "release_agent_channel": CHANNEL, "release_agent_model_link": str(link),
                "release_agent_releases_dir": str(rels), "release_agent_python": sys.executable,
                "release_agent_controller_cache": str(tmp / "agent"),
                "release_agent_triton_url": f"http://127.0.0.1:{server.server_address[1]}",
                "release_agent_admin_header": HEADER, "release_agent_admin_secret": SECRET,
                "drift_expected_state": ""}  # no systemd unit here: the unit checks have their own tests
    (tmp / "settings.json").write_text(json.dumps(settings))
    try:
        yield {"tmp": tmp, "inventory": inventory, "settings": settings, "release": published["release"],
               "digest": published["digest"], "link": link, "releases": rels, "port": server.server_address[1]}
    finally:
        server.shutdown()


def node_check(node: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, str]]]:
    """The node's timer: the agent's check with the drift_check unit's arguments, the secret from its env."""
    os.environ[SECRET_ENV] = SECRET
    try:
        rc = agent_cli.main(["check", "--host", "localhost", "--link", str(node["link"]), "--releases",
                             str(node["releases"]), "--port", str(node["port"]), "--header", HEADER,
                             "--expected", "", "--channel", CHANNEL])
    finally:
        del os.environ[SECRET_ENV]
    return rc, json.loads(capsys.readouterr().out)["findings"]


def controller(node: dict[str, Any]) -> tuple[int, list[dict[str, str]], str]:
    """``tritonops drift --source models``: the settings from an @FILE, the mode from -e, as a user gives them."""
    os.chdir(node["tmp"])  # @FILE relative to where tritonops runs (ansible-playbook runs in the project folder)
    try:
        res = CliRunner().invoke(app, ["drift", "-i", str(node["inventory"]), "--source", "models", "--json",
                                       "-e", "@settings.json", "--extra-vars", "release_agent_enabled=true"])
    finally:
        os.chdir(REPO)
    results = json.loads(res.stdout)["results"] if res.stdout.startswith("{") else []
    assert [r["hosts"] for r in results] == [["localhost"]], res.output
    return res.exit_code, [{"resource": f["resource"], "detail": f["detail"]}
                           for r in results for f in r["findings"]], res.output


def test_in_sync_both_say_clean_then_a_re_pointed_link_both_say_the_same_drift(
        node: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # As molecule's verify runs it: profile_tasks prints its recap after the JSON report (not part of it).
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    assert node_check(node, capsys) == (ExitCode.OK, [])
    rc, found, out = controller(node)
    assert (rc, found) == (ExitCode.OK, []), out

    # Out of band: the link re-pointed at another folder (the same files, another release id).
    other = node["releases"] / "by-hand"
    shutil.copytree(node["releases"] / node["release"], other)
    os.replace(node["link"], node["tmp"] / "models.kept")
    node["link"].symlink_to("releases/by-hand")
    try:
        rc_node, on_node = node_check(node, capsys)
        rc_ctl, on_ctl, out = controller(node)
    finally:
        node["link"].unlink()
        os.replace(node["tmp"] / "models.kept", node["link"])
        shutil.rmtree(other)
    assert (rc_node, rc_ctl) == (ExitCode.FINDINGS, ExitCode.FINDINGS), out
    assert on_node == on_ctl == [{"resource": "release", "detail": (
        f"serving by-hand ({node['digest'][:12]}), marked current none; channel {CHANNEL} points to "
        f"{node['release']} ({node['digest'][:12]}, version 1, verified by the release agent)")}]
    assert node_check(node, capsys) == (ExitCode.OK, [])


def test_a_channel_release_the_agent_never_verified_is_drift(node: dict[str, Any]) -> None:
    """No trusted pointer (the agent never polled), or another one than what serves (it refused it)."""
    probe = agent_drift.probe(node["link"], node["releases"], "http://127.0.0.1:9", HEADER, "", None, "edge")
    assert node_drift.channel_findings(probe) == [{"resource": "release", "detail": (
        f"channel edge: the release agent has verified no pointer of it yet; serving {node['release']}")}]
    trusted = json.loads((node["releases"] / TRUSTED_FILE).read_text())
    probe = agent_drift.probe(node["link"], node["releases"], "http://127.0.0.1:9", HEADER, "", None, CHANNEL)
    assert node_drift.channel_findings(probe) == []
    entry = trusted["channels"][CHANNEL]
    refused = {**probe, "channel": {"name": CHANNEL, "release": "r2", "digest": "f" * 64, "version": entry["version"] + 1}}
    assert [f["detail"].split("; ")[1] for f in node_drift.channel_findings(refused)] == [
        f"channel {CHANNEL} points to r2 (ffffffffffff, version {entry['version'] + 1}, verified by the release agent)"]


def test_a_damaged_trusted_state_is_one_finding_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / TRUSTED_FILE).write_text("{not json")
    view = agent_drift.channel_view(tmp_path, CHANNEL)
    assert node_drift.channel_findings({"channel": view, "active": None}) == [{"resource": "release", "detail": (
        f"channel {CHANNEL}: {tmp_path / TRUSTED_FILE}: unreadable, or not the release agent's trusted state")}]


def test_extra_vars_file_that_is_missing_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["drift", "-i", str(tmp_path), "--source", "models", "-e", "@nope.yml"])
    assert res.exit_code == ExitCode.USAGE
    assert "--extra-vars @nope.yml: not found, or not a file" in res.output
    assert "Traceback" not in res.stdout + res.stderr
