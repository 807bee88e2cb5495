"""The release_agent role on a production node refuses the implicit --trusted-key root, and passes
--store-name to the agent when one is set. Runs the role's own preflight and argv (roles/release_agent
vars) with ansible-playbook against localhost in --check mode, no fact gathering: nothing on this
machine can change.
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

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
KEY = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEArd3ZsceT96LiUfzMpEFzF9zqlt3aqqbLNgW6Z+pmw4k=\n-----END PUBLIC KEY-----\n"
GOOD = {"release_agent_store_url": "s3://releases/edge", "release_agent_admin_secret": "unit-test.admin-secret-0123",
        "release_agent_trusted_keys": [{"name": "release", "content": KEY}], "release_agent_group": "root"}


def _run(tmp_path: Path, overrides: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The role's preflight, then its pull argv: (exit code, ansible's JSON result)."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.exists() and not shutil.which("ansible-playbook"):
        pytest.skip("ansible-playbook is not installed (make venv)")
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Preflight and argv", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Preflight", "ansible.builtin.include_role": {"name": "release_agent",
                                                                         "tasks_from": "preflight", "public": True}},
                  {"name": "Argv", "ansible.builtin.debug": {"var": "_release_agent_pull_argv"}}],
    }]))
    (tmp_path / "vars.json").write_text(json.dumps(GOOD | overrides))
    env = os.environ | {
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    res = subprocess.run([str(exe) if exe.exists() else "ansible-playbook", "--check", "-e",
                          f"@{tmp_path / 'vars.json'}", "-e", f"ansible_python_interpreter={sys.executable}",
                          str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, timeout=180,
                         cwd=tmp_path)
    return res.returncode, json.loads(res.stdout)


def _failed_message(out: dict[str, Any]) -> str:
    tasks = [t for play in out["plays"] for t in play["tasks"]]
    failed = [t["hosts"]["localhost"] for t in tasks if t["hosts"]["localhost"].get("failed")]
    assert len(failed) == 1, failed
    return str(failed[0].get("msg", ""))


def _argv(out: dict[str, Any]) -> list[str]:
    tasks = [t for play in out["plays"] for t in play["tasks"] if t["task"]["name"] == "Argv"]
    return list(tasks[0]["hosts"]["localhost"]["_release_agent_pull_argv"])


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"release_agent_production": True}, "is required when release_agent_production is true"),
    ({"release_agent_store_name": "fleet\n"}, "release_agent_store_name must be 1-128 characters"),
    ({"release_agent_store_name": "x" * 129}, "release_agent_store_name must be 1-128 characters"),
], ids=["production-without-a-store-name", "a-newline", "too-long"])
def test_production_refuses_the_implicit_trusted_key_root(tmp_path: Path, overrides: dict[str, Any],
                                                          needle: str) -> None:
    code, out = _run(tmp_path, overrides)
    assert code != 0 and needle in _failed_message(out)
    assert out["stats"]["localhost"]["changed"] == 0


def test_the_store_name_reaches_the_agent_and_production_takes_it(tmp_path: Path) -> None:
    from tritonops.agent.cli import parser

    code, out = _run(tmp_path, {"release_agent_production": True, "release_agent_store_name": "edge fleet-a"})
    assert code == 0, out["stats"]
    argv = _argv(out)
    assert parser().parse_args(argv[1:]).store_name == "edge fleet-a"  # the agent's own parser reads it
    code, out = _run(tmp_path, {})  # not production: the keys alone still run (the agent warns at start)
    assert code == 0 and "--store-name" not in _argv(out)
