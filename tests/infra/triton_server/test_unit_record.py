"""The triton_server role's record of the unit as systemd runs it (tasks/service.yml, "Record the unit
as systemd runs it for the drift check") is what the drift check compares with: the role's own task,
run by ansible-playbook on this machine against a real ``systemctl show`` output
(tests/unit/drift/data/systemctl_show_tritonserver.txt, two ExecStartPre commands added), gives the
record effective.unit_properties gives, and a second run rewrites nothing (the role stays idempotent).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tritonops.agent import effective

# Two ansible-playbook runs: about 5-9 s on 2 busy cores.
pytestmark = [pytest.mark.unit, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
SHOW = REPO / "tests" / "unit" / "drift" / "data" / "systemctl_show_tritonserver.txt"
TASK = "Record the unit as systemd runs it for the drift check"
PRE = ("ExecStartPre={ path=/usr/bin/podman ; argv[]=/usr/bin/podman rm --force tritonserver ; ignore_errors=yes ; "
       "start_time=[Tue 2026-12-01 09:00:00 UTC] ; stop_time=[Tue 2026-12-01 09:00:01 UTC] ; pid=812 ; code=exited ; "
       "status=0/0 }\nExecStartPre={ path=/bin/true ; argv[]=/bin/true ; ignore_errors=no ; start_time=[n/a] ; "
       "stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n")


def test_the_roles_record_is_the_agents_and_idempotent(tmp_path: Path) -> None:
    show = SHOW.read_text() + PRE
    tasks = yaml.safe_load((REPO / "roles" / "triton_server" / "tasks" / "service.yml").read_text())
    task = next(t for t in tasks if t["name"] == TASK)
    task["ansible.builtin.copy"] = {k: v for k, v in task["ansible.builtin.copy"].items() if k not in ("owner", "group")}
    record = tmp_path / "expected-unit.json"
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars_files": [str(REPO / "roles" / "triton_server" / "vars" / "main.yml")],
             "vars": {"_triton_server_show": {"stdout_lines": show.splitlines()}}, "tasks": [task]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    exe = Path(sys.executable).with_name("ansible-playbook")

    def converge() -> dict[str, int]:
        res = subprocess.run([str(exe), "-i", "localhost,", str(tmp_path / "play.yml"),
                              "-e", f"_triton_server_unit_properties_file={record}"],
                             capture_output=True, text=True, timeout=120,
                             env={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "PATH": "/usr/bin:/bin",
                                  "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"})
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        return dict(json.loads(res.stdout)["stats"]["localhost"])

    assert converge()["changed"] == 1
    assert json.loads(record.read_text()) == effective.unit_properties(effective.parse_show(show))
    assert "pid=812" not in record.read_text() and '"MainPID"' not in record.read_text()
    assert converge()["changed"] == 0
