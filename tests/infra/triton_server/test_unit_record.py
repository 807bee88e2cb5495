"""The record of Triton's unit the drift check compares with (roles/triton_server/tasks/record_unit.yml),
run for real: ansible-playbook on this machine includes the triton_server role's record_unit tasks as
each role does (include_role tasks_from record_unit), with a ``systemctl`` on PATH that prints a real
``systemctl show tritonserver.service`` (tests/unit/drift/data/systemctl_show_tritonserver.txt) as it
stands at each role's turn.

A first converge of ansible/edge.yml in push mode: triton_server's turn sees the unit alone, then
model_repository's turn sees it with the deadman drop-in, and rewrites the record. A second converge:
every turn sees the unit as the first left it (Triton restarted meanwhile: other PIDs, timestamps, the
ExecStartPre's last run) and writes nothing. The record is what effective.unit_properties makes of the
last turn of the first converge; a turn where systemd has not loaded the unit's files yet
(NeedDaemonReload=yes) and a check-mode run write nothing.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from tritonops.agent import effective

# Three ansible-playbook runs: about 10 s on 2 busy cores.
pytestmark = [pytest.mark.unit, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the record is root's (copy with owner root)")]

REPO = Path(__file__).resolve().parents[3]
SHOW = (REPO / "tests" / "unit" / "drift" / "data" / "systemctl_show_tritonserver.txt").read_text()
BIN = Path(sys.executable).parent
DROP_IN = "/etc/systemd/system/tritonserver.service.d/tritonops-model-repository.conf"
RECOVER = ("/usr/bin/python3 /usr/local/lib/tritonops-model-repository/tritonops-agent.pyz recover --link "
           "/var/lib/triton/models --releases /var/lib/triton/releases --grace ${TRITONOPS_RECOVER_GRACE}")
NEVER_RAN = "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
RAN = ("start_time=[Wed 2026-12-02 01:00:00 UTC] ; stop_time=[Wed 2026-12-02 01:00:01 UTC] ; pid=911 ; "
       "code=exited ; status=0/0 }")


def show(changes: dict[str, list[str]]) -> str:
    """The real output with properties replaced or added (a list: one line per value, as systemctl
    prints ExecStartPre= and EnvironmentFiles=)."""
    lines = [line for line in SHOW.splitlines() if line.partition("=")[0] not in changes]
    lines += [f"{k}={v}" for k, values in changes.items() for v in values]
    return "\n".join(sorted(lines)) + "\n"


BARE = show({"NeedDaemonReload": ["no"]})


def with_drop_in(last_run: str = NEVER_RAN, **more: list[str]) -> str:
    """The unit once model_repository's deadman drop-in is loaded (its ExecStartPre= with "+")."""
    env = effective.parse_show(SHOW)["Environment"]
    return show({"NeedDaemonReload": ["no"], "DropInPaths": [DROP_IN],
                 "Environment": [f"{env} TRITONOPS_RECOVER_GRACE=0"],
                 "EnvironmentFiles": ["/etc/tritonserver/tritonserver.env (ignore_errors=no)",
                                      "/run/tritonops-model-repository.switch (ignore_errors=yes)"],
                 "ExecStartPre": [f"{{ path=/usr/bin/python3 ; argv[]={RECOVER} ; ignore_errors=no ; {last_run}"],
                 "ExecStartPreEx": [f"{{ path=/usr/bin/python3 ; argv[]={RECOVER} ; flags=privileged ; {last_run}"],
                 **more})


RESTARTED = with_drop_in(RAN, MainPID=["4242"], ExecMainPID=["4242"], NRestarts=["1"],
                         InvocationID=["0123456789abcdef0123456789abcdef"],
                         ActiveEnterTimestamp=["Wed 2026-12-02 01:00:02 UTC"],
                         Before=["shutdown.target multi-user.target tritonops-drift-check.service other.service"])
# A drop-in written, systemd not reloaded yet: systemctl shows the unit as loaded before.
NOT_RELOADED = with_drop_in(NeedDaemonReload=["yes"], LimitNOFILE=["65536"])


@pytest.fixture
def converge(tmp_path: Path) -> Callable[..., dict[str, int]]:
    """Run the roles' turns (each a ``systemctl show`` output) as one converge: its stats ({"changed": n})."""
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "systemctl"
    # Each call prints the next turn's output (show-1.txt, show-2.txt, ...).
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "show tritonserver.service" ] || exit 2\nd=$FAKE_SHOW_DIR\n'
                    'n=$(($(cat "$d/calls") + 1)); echo "$n" > "$d/calls"; cat "$d/show-$n.txt"\n')
    (tmp_path / "calls").write_text("0")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [{
        "name": "A role's turn: record Triton's unit",
        "ansible.builtin.include_role": {"name": "triton_server", "tasks_from": "record_unit"},
        "loop": "{{ range(turns | int) | list }}"}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    count = 0

    def run(*turns: str, check: bool = False) -> dict[str, int]:
        nonlocal count
        calls = count
        for text in turns:
            count += 1
            (tmp_path / f"show-{count}.txt").write_text(text)
        res = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), *(["--check"] * check),
             "-e", json.dumps({"turns": len(turns), "_triton_server_conf_dir": str(tmp_path),
                               "ansible_python_interpreter": sys.executable})],
            capture_output=True, text=True, timeout=120,
            env={"PATH": f"{tmp_path / 'bin'}:{BIN}:/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
                 "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "FAKE_SHOW_DIR": str(tmp_path), "ANSIBLE_LOCALHOST_WARNING": "false",
                 "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false", "HOME": str(tmp_path)})
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        # Each turn read the unit once (in check mode: none did).
        assert (tmp_path / "calls").read_text().strip() == str(calls if check else count)
        count = int((tmp_path / "calls").read_text())
        return dict(json.loads(res.stdout)["stats"]["localhost"])

    return run


def test_the_record_after_every_role_is_the_converged_unit_and_a_second_converge_writes_nothing(
        converge: Callable[..., dict[str, int]], tmp_path: Path) -> None:
    record = tmp_path / "expected-unit.json"
    # First converge: triton_server writes the record, model_repository rewrites it with its drop-in.
    assert converge(BARE, with_drop_in())["changed"] == 2
    first = record.read_text()
    assert json.loads(first) == effective.unit_properties(effective.parse_show(with_drop_in()))
    assert json.loads(first)["DropInPaths"] == DROP_IN and "pid=" not in first and '"MainPID"' not in first
    # Second converge (Triton restarted in between), and a turn before systemd reloaded a change.
    assert converge(RESTARTED, RESTARTED, NOT_RELOADED)["changed"] == 0
    assert record.read_text() == first
    # The drift check agrees with the record on the restarted unit: the project's drop-in is no drift.
    assert effective.compare_properties(json.loads(first), effective.live_properties(
        effective.parse_show(RESTARTED))) == []
    # Check mode records nothing, even where the unit differs.
    assert converge(BARE, check=True)["changed"] == 0
    assert record.read_text() == first

