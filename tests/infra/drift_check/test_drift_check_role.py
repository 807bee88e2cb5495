"""roles/drift_check: argument_specs identical to defaults, prefixed variables, README table in sync, and the
service unit runs the release agent's check with every value quoted for systemd."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

ROLE = Path(__file__).resolve().parents[3] / "roles" / "drift_check"


def _defaults() -> dict[str, Any]:
    return dict(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()))


def _options() -> dict[str, Any]:
    return dict(yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"])


def test_every_default_is_documented_with_the_same_value() -> None:
    opts = _options()
    assert set(opts) == set(_defaults())
    for name, value in _defaults().items():
        assert opts[name]["default"] == value, name


def test_public_variables_are_prefixed() -> None:
    assert all(name.startswith("drift_check_") for name in _defaults())


def test_readme_lists_every_variable() -> None:
    readme = (ROLE / "README.md").read_text()
    for name in _defaults():
        assert f"`{name}`" in readme, name


HOSTILE_LABEL = "edge 1 $HOME ${PATH} 50%n it's \"q\" back\\slash $(touch PWNED)"


PULL = {"release_agent_enabled": True, "release_agent_channel": "edge-1", "release_agent_group_labels": ["canary", "lab"]}


@pytest.fixture(scope="module", params=["push", "pull"])
def unit(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The service unit as the role's template task renders it (ansible-playbook, localhost), with a
    host label and paths that systemd would split or expand if they were not quoted for it; on a push
    node, and on a pull node (release_agent_enabled: its channel goes to the check)."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.exists():
        pytest.skip("ansible-playbook is not installed (make venv)")
    tmp = tmp_path_factory.mktemp(f"drift-unit-{request.param}")
    out = tmp / "tritonops-drift-check.service"
    play = [{"name": "Render", "hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "Role defaults and preflight",
         "ansible.builtin.include_role": {"name": "drift_check", "tasks_from": "preflight.yml", "public": True}},
        {"name": "Render the unit", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "drift-check.service.j2"), "dest": str(out), "mode": "0644"}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    extra = {"drift_check_host_label": HOSTILE_LABEL, "drift_check_install_dir": "/opt/trit ops",
             "drift_check_admin_header": "x-admin key", "ansible_python_interpreter": sys.executable,
             **(PULL if request.param == "pull" else {})}
    (tmp / "vars.json").write_text(json.dumps(extra))
    env = os.environ | {"ANSIBLE_ROLES_PATH": str(ROLE.parent), "ANSIBLE_LOCALHOST_WARNING": "false",
                        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    res = subprocess.run([str(exe), "-e", f"@{tmp / 'vars.json'}", str(tmp / "play.yml")], capture_output=True,
                         text=True, env=env, cwd=tmp, timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert not (tmp / "PWNED").exists()
    return out


def _exec_start(unit_text: str) -> list[str]:
    """ExecStart as systemd splits it, for the escapes the template writes: double quotes with \\ and \",
    $$ for a literal $ and %% for a literal % (systemd.service(5), "Command lines"; systemd.unit(5), "Specifiers")."""
    line = next(x for x in unit_text.splitlines() if x.startswith("ExecStart="))
    words = shlex.split(line.removeprefix("ExecStart="))
    assert all("$" not in w.replace("$$", "") and "%" not in w.replace("%%", "") for w in words), words
    return [w.replace("$$", "$").replace("%%", "%") for w in words]


def test_unit_runs_the_agents_check_with_every_value_one_argument(unit: Path) -> None:
    argv = _exec_start(unit.read_text())
    assert argv[:3] == ["/usr/bin/python3", "/opt/trit ops/tritonops-agent.pyz", "check"]
    opts = dict(zip(argv[3::2], argv[4::2], strict=True))
    pull = {"--channel": PULL["release_agent_channel"]} if "pull" in unit.parent.name else {}
    # The release agent's group labels, each one argument, as the agent's own parser reads them (a rollout's
    # group waves decide what the node should serve).
    from tritonops.agent.cli import parser

    assert parser().parse_args(argv[2:]).group_label == (PULL["release_agent_group_labels"] if pull else [])
    if pull:
        opts.pop("--group-label")
    assert opts == {"--host": HOSTILE_LABEL, "--link": "/var/lib/triton/models",
                    "--releases": "/var/lib/triton/releases", "--port": "8000", "--header": "x-admin key",
                    "--textfile": "/var/lib/prometheus/node-exporter", **pull}


def test_unit_passes_systemd_analyze(unit: Path) -> None:
    """systemd's own parser accepts the quoting (unbalanced quotes or unknown escapes make it fail)."""
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed")
    res = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_unit_treats_drift_as_success_and_keeps_the_secret_out() -> None:
    unit = (ROLE / "templates" / "drift-check.service.j2").read_text()
    assert "SuccessExitStatus=1" in unit
    assert "EnvironmentFile=/etc/default/" in unit and "admin_secret" not in unit
