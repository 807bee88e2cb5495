"""The node's effective state against the triton_server role's expected state (infra/tritonops/agent/effective.py):
argument comparison, redaction, what the posture checks aim at. The real unit, process and Triton are
proven on a Podman node (tests/infra/drift_check) and against a real tritonserver
(tests/integration/test_drift_triton.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tritonops.agent import effective

BINARY = "/opt/tritonserver/lib/python3.11/site-packages/pytriton/tritonserver/bin/tritonserver"
UNIT_ARGS = ["--model-repository=/var/lib/triton/models", "--model-control-mode=explicit", "--http-port=8000",
             "--grpc-port=8001", "--http-address=0.0.0.0", "--grpc-address=0.0.0.0", "$TRITON_SERVER_ADMIN_ARGS"]
ADMIN = ["--http-restricted-api=model-repository,statistics:triton-admin-key=<redacted>",
         "--grpc-restricted-protocol=model-repository,statistics:triton-admin-key=<redacted>"]
EXPECTED = {"service": "tritonserver.service", "user": "triton", "unit_args": UNIT_ARGS, "args": UNIT_ARGS[:-1] + ADMIN}
SECRET = "s3cr3t=with-equals"


def _running(args: list[str], user: str = "triton") -> dict[str, Any]:
    return {"pid": 4242, "user": user, "args": effective.triton_args([BINARY, *args])}


def _state(unit_args: list[str] = UNIT_ARGS, unit_user: str = "triton", drop_ins: tuple[str, ...] = (),
           process: dict[str, Any] | None = None) -> dict[str, Any]:
    running = [a.replace("<redacted>", SECRET) for a in EXPECTED["args"]]
    return {"unit": {"exec_start": [effective.triton_args([BINARY, *unit_args])], "user": unit_user,
                     "drop_ins": list(drop_ins), "active": "active"},
            "process": process if process is not None else _running(running)}


def test_as_rendered_is_clean_and_the_secret_is_redacted() -> None:
    state = _state()
    assert effective.compare(EXPECTED, state) == []
    assert SECRET not in json.dumps(state)


def test_drop_in_without_restricted_flags_and_another_mode() -> None:
    """A drop-in resets ExecStart: poll mode, no $TRITON_SERVER_ADMIN_ARGS; the process still runs the old one."""
    tampered = [a.replace("explicit", "poll") for a in UNIT_ARGS[:-1]]
    state = _state(tampered, drop_ins=("/etc/systemd/system/tritonserver.service.d/override.conf",))
    found = {f["resource"]: f["detail"] for f in effective.compare(EXPECTED, state)}
    # No record of the unit to compare with: a drop-in that is not the project's is drift all the same.
    assert set(found) == {"unit:--model-control-mode", "unit:$TRITON_SERVER_ADMIN_ARGS", "unit:DropInPaths"}
    assert found["unit:--model-control-mode"].startswith("--model-control-mode=poll, the role says")
    assert "override.conf" in found["unit:--model-control-mode"]
    # Restarted: the process runs it too, without the restricted-API flags.
    state["process"] = _running(tampered)
    found = {f["resource"] for f in effective.compare(EXPECTED, state)}
    assert found >= {"process:--model-control-mode", "process:--http-restricted-api",
                     "process:--grpc-restricted-protocol"}


def test_two_command_lines_are_reported() -> None:
    state = _state()
    state["unit"]["exec_start"].append(["--model-repository=/tmp"])
    assert [f["resource"] for f in effective.compare(EXPECTED, state)] == ["unit:ExecStart"]


def test_another_user_and_a_stopped_service() -> None:
    running = [a.replace("<redacted>", SECRET) for a in EXPECTED["args"]]
    state = _state(unit_user="root", process=_running(running, user="root"))
    assert [f["resource"] for f in effective.compare(EXPECTED, state)] == ["unit:User", "process:user"]
    stopped = _state()
    stopped["process"] = None
    stopped["unit"]["active"] = "inactive"
    assert effective.compare(EXPECTED, stopped) == [
        {"resource": "process", "detail": "tritonserver.service is not running (inactive)"}]
    # The container unit runs as root and hands the user to the engine: no user to compare.
    assert effective.compare({**EXPECTED, "user": None}, _state(unit_user="", process=_running(running, "root"))) == []


def test_container_unit_arguments_follow_the_image_command() -> None:
    argv = ["/usr/bin/podman", "--remote", "run", "--name", "tritonserver", "--user", "999:999",
            "nvcr.io/nvidia/tritonserver:24.10-py3", "tritonserver", "--model-control-mode=explicit",
            f"--http-restricted-api=model-repository:k={SECRET}"]
    assert effective.triton_args(argv) == ["--model-control-mode=explicit",
                                           "--http-restricted-api=model-repository:k=<redacted>"]


def test_expected_posture_from_the_roles_arguments() -> None:
    args = EXPECTED["args"] + ["--grpc-use-ssl=true"]
    assert effective.expected_posture(args) == {
        "http_url": "http://127.0.0.1:8000", "restricted_http": True, "grpc": ("127.0.0.1", 8001),
        "restricted_grpc": True, "grpc_tls": True}
    plain = ["--allow-grpc=false", "--http-address=10.1.2.3", "--http-port=9000",
             "--http-restricted-api=statistics:k=<redacted>"]
    assert effective.expected_posture(plain) == {
        "http_url": "http://10.1.2.3:9000", "restricted_http": False, "grpc": None, "restricted_grpc": False,
        "grpc_tls": False}


def test_missing_or_broken_expected_file_is_a_finding(tmp_path: Path) -> None:
    missing = effective.host_findings(tmp_path / "expected.json")
    assert [f["resource"] for f in missing] == ["triton:expected-state"]
    assert "triton_server role writes it" in missing[0]["detail"]
    (tmp_path / "expected.json").write_text(json.dumps({"service": "tritonserver.service", "args": []}))
    with pytest.raises(ValueError, match="field 'unit_args' missing"):
        effective.read_expected(tmp_path / "expected.json")
