"""roles/model_repository runs the release agent on the node: the real role against localhost.

The node is a temporary folder on this machine (``--connection local``, model control mode ``poll`` and
no golden gate, so no Triton is needed); the controller steps, the agent zipapp built on the controller
and every node step (``tritonops.triton.release``, the collection's module) run for real:

- a hostile model name reaches the agent's ``activate --touch`` as one argument, and no shell executes
  anything from it;
- a release id already installed with other content is pushed, refused by the agent's install, and the
  play fails naming the release folder before the link moves (check mode predicts the same failure).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tritonops import agent_bundle as bundle
from tritonops.release_format import manifest

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "model_repository"
HOSTILE = "m$(touch${IFS}PWNED)x"
OLD = 1_000_000_000  # an mtime long past


def _ansible_playbook() -> str:
    exe = Path(sys.executable).with_name("ansible-playbook")
    if exe.exists():
        return str(exe)
    found = shutil.which("ansible-playbook")
    if not found:
        pytest.skip("ansible-playbook is not installed (make venv)")
    return found


def _play(tmp: Path, name: str, tasks: list[dict[str, Any]]) -> Path:
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump([{
        "name": name, "hosts": "localhost", "connection": "local", "gather_facts": True,
        "gather_subset": ["min"], "tasks": tasks}]))
    return path


# This machine is the node: the deadman's units (Triton's drop-in, the timer) are not written into its systemd.
NO_DEADMAN = {"model_repository_recover_on_start": False, "model_repository_recover_after": 0}


def _run(tmp: Path, play: Path, extra: dict[str, Any], *flags: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    (tmp / "vars.json").write_text(json.dumps(NO_DEADMAN | extra))
    env = os.environ | {
        "HOME": str(tmp),  # ansible's remote tmp and anything a broken quote would create land here
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    res = subprocess.run([_ansible_playbook(), *flags, "-e", f"@{tmp / 'vars.json'}", str(play)],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp)
    try:
        return res, json.loads(res.stdout)
    except ValueError:
        raise AssertionError(res.stdout[-3000:] + res.stderr[-3000:]) from None


def _results(doc: Any, task: str) -> list[dict[str, Any]]:
    """Results of the role's task called ``task`` (the callback names it ``model_repository : <task>``)."""
    return [t["hosts"]["localhost"] for p in doc["plays"] for t in p["tasks"]
            if t["task"]["name"] == f"model_repository : {task}"]


# --- a hostile model name in --touch ----------------------------------------------------------------

def test_the_payload_runs_when_unquoted(tmp_path: Path) -> None:
    """Control: the name below does run a command when a shell reads it bare (so the next test can fail)."""
    subprocess.run(["/bin/sh", "-c", f"true --touch={HOSTILE}"], cwd=tmp_path, check=True)
    assert (tmp_path / "PWNED").exists()


def test_hostile_model_name_reaches_the_agent_as_one_argument(tmp_path: Path) -> None:
    cache, releases, link = tmp_path / "cache", tmp_path / "node" / "releases", tmp_path / "node" / "models"
    bundle.build(cache / "agent" / "tritonops-agent.pyz")
    model = releases / "r1" / HOSTILE
    model.mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "m"\n')
    for p in (model / "config.pbtxt", model):
        os.utime(p, (OLD, OLD))
    # The switch tasks alone, after the plan the role would have worked out for this release.
    play = _play(tmp_path, "switch", [{
        "name": "Switch with a hostile model name to (re)load",
        "ansible.builtin.include_role": {"name": "model_repository", "tasks_from": "switch.yml"},
        "vars": {
            "_model_repository_release": {"release": "r1", "path": str(tmp_path), "models": {}, "ensembles": []},
            "_model_repository_status": {"active": None, "current": None, "active_models": {}},
            "_model_repository_need_switch": True,
            "_model_repository_to_load": [HOSTILE],
            "_model_repository_to_unload": [],
        }}])
    extra = {"model_repository_controller_cache": str(cache), "model_repository_link": str(link),
             "model_repository_releases_dir": str(releases), "model_repository_model_control_mode": "poll",
             "model_repository_golden": False}
    res, doc = _run(tmp_path, play, extra)
    activate = _results(doc, "Point the model repository at the release (atomic symlink switch)")
    # The agent got the name as one argument, exactly as written: it names it when it refuses it (its
    # safe-name rule), before the link is switched; the shell ran nothing from it.
    assert res.returncode != 0, json.dumps(doc)[-3000:]
    assert f"file path {HOSTILE!r} is not allowed" in activate[0]["stderr"], activate
    assert not link.exists() and not link.is_symlink()
    assert model.stat().st_mtime == OLD
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("PWNED")) == []


# --- a release id reused for other content ----------------------------------------------------------

@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A node where release ``r1`` (the sample repository) is installed, active and current."""
    tmp = tmp_path_factory.mktemp("mr-node")
    play = _play(tmp, "release", [{"name": "Release", "ansible.builtin.include_role": {"name": "model_repository"}}])
    base: dict[str, Any] = {"model_repository_source": "local", "model_repository_local_path": str(SAMPLE),
            "model_repository_version": "r1", "model_repository_target": "cpu",
            "model_repository_link": str(tmp / "node" / "models"),
            "model_repository_releases_dir": str(tmp / "node" / "releases"),
            "model_repository_owner": "root", "model_repository_group": "root",
            "model_repository_model_control_mode": "poll", "model_repository_golden": False,
            "model_repository_controller_cache": str(tmp / "cache")}
    res, doc = _run(tmp, play, base)
    assert res.returncode == 0, json.dumps(doc)[-3000:]
    assert os.readlink(base["model_repository_link"]) == "releases/r1"
    # Another repository, published under the same release id from another controller (its own cache).
    other = tmp / "other"
    shutil.copytree(SAMPLE, other, ignore=shutil.ignore_patterns("__pycache__"))
    golden = other / "mlp" / "golden.json"
    golden.write_text(json.dumps(json.loads(golden.read_text()), indent=4) + "\n")
    return {"tmp": tmp, "play": play, "base": base, "other": other}


@pytest.mark.parametrize("check", [False, True], ids=["converge", "check-mode"])
def test_reused_release_id_is_refused_before_the_switch(node: dict[str, Any], check: bool) -> None:
    tmp, base = node["tmp"], node["base"]
    releases = Path(base["model_repository_releases_dir"])
    before = manifest.read(releases / "r1")
    extra = base | {"model_repository_local_path": str(node["other"]),
                    "model_repository_controller_cache": str(tmp / f"cache-other-{check}")}
    res, doc = _run(tmp, node["play"], extra, *(["--check"] if check else []))
    assert res.returncode != 0
    status = _results(doc, "Read the node's releases and the models Triton has loaded")[0]["agent"]
    assert (status["release_conflict"], status["release_verified"]) == (True, False)
    plan = _results(doc, "Work out the plan")[0]["ansible_facts"]
    assert plan["_model_repository_need_push"] is True
    failed = [r for p in doc["plays"] for t in p["tasks"] for r in [t["hosts"]["localhost"]] if r.get("failed")]
    assert len(failed) == 1, failed
    msg = failed[0]["msg"]
    assert "was not installed" in msg and str(releases / "r1") in msg and "other content" in msg, msg
    if not check:
        install = _results(doc, "Unpack, verify the checksums on the node and move the release into place")
        assert install[0]["error"] in msg
    # Nothing switched, nothing replaced, nothing left behind.
    assert _results(doc, "Point the model repository at the release (atomic symlink switch)") == []
    assert os.readlink(base["model_repository_link"]) == "releases/r1"
    assert manifest.read(releases / "r1") == before and manifest.verify(releases / "r1") == before
    assert sorted(p.name for p in releases.iterdir()) == ["current.json", "r1"]


def test_an_invalid_release_fails_on_the_controller_naming_the_file(node: dict[str, Any]) -> None:
    """The controller's stage (the release_stage action, in the Ansible worker) refuses a config Triton's
    schema rejects: one failed task naming the file, no traceback, and the node is not touched."""
    tmp, base = node["tmp"], node["base"]
    broken = tmp / "broken"
    shutil.copytree(SAMPLE, broken, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = broken / "mlp" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "\nmax_batch_size: -oops\n")
    releases = Path(base["model_repository_releases_dir"])
    before = manifest.read(releases / "r1")
    res, doc = _run(tmp, node["play"], base | {"model_repository_local_path": str(broken),
                                                "model_repository_version": "r-broken",
                                                "model_repository_controller_cache": str(tmp / "cache-broken")})
    assert res.returncode != 0
    failed = [r for p in doc["plays"] for t in p["tasks"] for r in [t["hosts"]["localhost"]] if r.get("failed")]
    assert len(failed) == 1, failed
    stage = _results(doc, "Validate, checksum and stage the release, and build the release agent, on the controller")
    assert stage and stage[0].get("failed"), json.dumps(doc)[-3000:]
    assert "mlp/config.pbtxt" in stage[0]["msg"] and "Traceback" not in json.dumps(stage[0]), stage[0]
    assert _results(doc, "Read the node's releases and the models Triton has loaded") == []  # the node: untouched
    assert os.readlink(base["model_repository_link"]) == "releases/r1"
    assert manifest.read(releases / "r1") == before and sorted(p.name for p in releases.iterdir()) == ["current.json", "r1"]


@pytest.mark.parametrize("check", [False, True], ids=["converge", "check-mode"])
def test_status_with_a_triton_that_does_not_answer(node: dict[str, Any], check: bool) -> None:
    """release status with triton_url: Triton's index in the same module run; a Triton that does not
    answer fails the task naming the URL, except in check mode (a stopped Triton the play would start),
    where the releases are still read and index_error says why."""
    tmp, base = node["tmp"], node["base"]
    bundle.build(tmp / "agent-status.pyz")
    play = _play(tmp, f"status-{check}", [{
        "name": "Status and index", "register": "st", "ignore_errors": True,
        "tritonops.triton.release": {
            "command": "status", "agent_src": str(tmp / "agent-status.pyz"), "link": base["model_repository_link"],
            "releases": base["model_repository_releases_dir"], "triton_url": "http://127.0.0.1:9",
            "admin_secret": "do-not-print-me"}}])
    res, doc = _run(tmp, play, {}, *(["--check"] if check else []))
    (out,) = [t["hosts"]["localhost"] for p in doc["plays"] for t in p["tasks"] if t["task"]["name"] == "Status and index"]
    assert "do-not-print-me" not in res.stdout + res.stderr
    assert out["agent"]["active"] == "r1" and "index" not in out
    if check:
        assert not out.get("failed") and "http://127.0.0.1:9/v2/repository/index" in out["index_error"], out
    else:
        assert out.get("failed") and "http://127.0.0.1:9/v2/repository/index" in out["msg"], out


# --- the deadman's paths go into unit files -------------------------------------------------------

def test_a_path_the_deadmans_units_cannot_hold_is_refused_before_the_node_changes(tmp_path: Path) -> None:
    play = _play(tmp_path, "release", [{"name": "Release", "ansible.builtin.include_role": {"name": "model_repository"}}])
    link = tmp_path / "node dir" / "models"
    res, doc = _run(tmp_path, play, {
        "model_repository_source": "local", "model_repository_local_path": str(SAMPLE),
        "model_repository_link": str(link), "model_repository_releases_dir": str(tmp_path / "releases"),
        "model_repository_controller_cache": str(tmp_path / "cache"), "model_repository_model_control_mode": "poll",
        "model_repository_recover_on_start": True})
    assert res.returncode != 0
    failed = [t for t in _results(doc, "Check the deadman's paths and bounds (they reach Triton's drop-in and the "
                                        "timer's units)") if t.get("failed")]
    assert failed and f"model_repository_link ({link})" in failed[0]["msg"], json.dumps(doc)[-3000:]
    assert not (tmp_path / "releases").exists() and not (tmp_path / "cache").exists()
