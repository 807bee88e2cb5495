"""The drift check sees what runs: tamper with a converged node and see each change reported.

Molecule only (these tests change the node; they never run against a real fleet): the node runs Triton
from the triton_server role (which writes the expected state), a release from model_repository and
the drift_check timer. Each test changes one thing, runs the check, and puts the node back:

- a model loaded by hand through the repository API with its own files (Triton's index omits it);
- a drop-in that replaces ExecStart with a command line without the restricted-API flags and with
  another model control mode: reported in the unit (before a restart), then in the running process
  and the live posture (admin APIs answer without the header, HTTP and gRPC) once Triton restarts;
- Triton running as another user (a drop-in setting User=root);
- a drop-in setting what the roles never set (Environment=, LimitNOFILE=, ExecStartPre=): each property
  reported by its name, against the record of the unit the roles wrote once systemd had loaded their
  changes (/etc/tritonserver/expected-unit.json), and the drop-in itself, with no restart.

The project's own drop-in (model_repository's deadman, tritonops-model-repository.conf) is in that
record: the converged node is clean.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
from gpuhost_helpers import role_defaults
from node_helpers import journal
from tritonops.agent.drift_probe import TEXTFILE_NAME
from tritonops.observability.metrics import DRIFT_METRIC

pytestmark = pytest.mark.skipif(not os.environ.get("MOLECULE_INVENTORY_FILE"),
                                reason="changes the node: molecule scenarios only")

DEFAULTS = role_defaults("drift_check")
SERVICE = DEFAULTS["drift_check_service_name"]
AGENT = f"{DEFAULTS['drift_check_install_dir']}/tritonops-agent.pyz"
TRITON = "tritonserver"
DROP_IN = f"/etc/systemd/system/{TRITON}.service.d/zz-drift-test.conf"
OWN_DROP_IN = f"/etc/systemd/system/{TRITON}.service.d/tritonops-model-repository.conf"
RECORD = "/etc/tritonserver/expected-unit.json"
TEXTFILE = f"/var/lib/prometheus/node-exporter/{TEXTFILE_NAME}"

# Runs on the node with the drift check's environment (its admin secret): waits until Triton is ready,
# then loads what the release holds (a restarted Triton in explicit mode starts with no model), or
# loads/unloads one model with its own files.
NODE_API = r"""
import base64, json, os, sys, time, urllib.request
URL, H = "http://127.0.0.1:8000", {"triton-admin-key": os.environ["TRITONOPS_ADMIN_SECRET"],
                                   "Content-Type": "application/json"}
def call(path, body=None, method="POST"):
    req = urllib.request.Request(URL + path, data=None if body is None else json.dumps(body).encode(),
                                 headers=H, method=method)
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read()
        return json.loads(raw) if raw.strip() else None
deadline = time.time() + 240
while True:
    try:
        call("/v2/health/ready", method="GET"); break
    except Exception:
        if time.time() > deadline: raise
        time.sleep(2)
what = sys.argv[1]
if what == "reload":
    for m in call("/v2/repository/index", {}):
        if m.get("state") != "READY":
            call(f"/v2/repository/models/{m['name']}/load", {})
elif what == "load-by-hand":
    root = "/var/lib/triton/models/mlp"
    files = {f"file:1/{n}": base64.b64encode(open(f"{root}/1/{n}", "rb").read()).decode()
             for n in os.listdir(f"{root}/1") if os.path.isfile(f"{root}/1/{n}")}
    config = {"name": "by_hand", "backend": "python", "max_batch_size": 8,
              "input": [{"name": "features", "data_type": "TYPE_FP32", "dims": [16]}],
              "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [4]}]}
    call("/v2/repository/models/by_hand/load", {"parameters": {"config": json.dumps(config), **files}})
elif what == "unload-by-hand":
    call("/v2/repository/models/by_hand/unload", {})
"""


def node_api(host: Any, what: str) -> None:
    out = host.run(f"set -a; . /etc/default/{SERVICE}; python3 -c {shlex.quote(NODE_API)} {what}")
    assert out.rc == 0, out.stdout + out.stderr + journal(host, TRITON)


def check(host: Any) -> dict[str, str]:
    """The agent's check run by hand as root: {resource: detail}."""
    out = host.run(f"set -a; . /etc/default/{SERVICE}; python3 {AGENT} check --host tampered")
    assert out.rc in (0, 1), out.stdout + out.stderr
    return {f["resource"]: f["detail"] for f in json.loads(out.stdout)["findings"]}


def service_count(host: Any) -> int:
    """The timer's service (in its sandbox) run now: the findings its textfile metric counts."""
    ran = host.run(f"systemctl start {SERVICE}.service")
    assert ran.rc == 0, ran.stderr + journal(host, SERVICE)
    m = re.search(rf'^{DRIFT_METRIC}{{source="models",host=".*"}} (\d+)$', host.file(TEXTFILE).content_string, re.M)
    assert m, host.file(TEXTFILE).content_string
    return int(m.group(1))


def restart_with(host: Any, drop_in: str | None) -> None:
    """Write (or remove) the test drop-in, reload systemd, restart Triton, load the release again."""
    if drop_in is None:
        host.run(f"rm -f {DROP_IN}")
    else:
        host.run(f"mkdir -p {os.path.dirname(DROP_IN)} && printf '%s' {shlex.quote(drop_in)} > {DROP_IN}")
    assert host.run("systemctl daemon-reload").rc == 0
    assert host.run(f"systemctl restart {TRITON}").rc == 0, journal(host, TRITON)
    node_api(host, "reload")


@pytest.fixture(scope="module", autouse=True)
def converged(host: Any) -> None:
    if not host.service(TRITON).is_running:
        pytest.skip("no Triton on this node")


def test_converged_node_is_clean(host: Any) -> None:
    assert check(host) == {}
    assert service_count(host) == 0, journal(host, SERVICE)


def test_the_record_is_the_unit_with_the_projects_drop_in(host: Any) -> None:
    """The roles' record (taken last by model_repository, after its drop-in): root's, no run-time state,
    no secret, the deadman's drop-in in it, and the live unit agrees with it property by property."""
    from tritonops.agent import effective

    record = host.file(RECORD)
    assert (record.user, record.group, record.mode) == ("root", "root", 0o644)
    text = record.content_string
    assert "molecule-only" not in text
    recorded = json.loads(text)
    assert not {"MainPID", "InvocationID", "ActiveEnterTimestamp", "NeedDaemonReload"} & recorded.keys()
    assert recorded["DropInPaths"] == OWN_DROP_IN and "recover --link" in recorded["ExecStartPre"], recorded
    live = effective.live_properties(effective.parse_show(host.check_output(f"systemctl show {TRITON}.service")))
    assert effective.compare_properties(recorded, live) == []


@pytest.fixture
def by_hand(host: Any) -> Iterator[None]:
    node_api(host, "load-by-hand")
    yield
    node_api(host, "unload-by-hand")


def test_model_loaded_by_hand_is_reported(host: Any, by_hand: None) -> None:
    found = check(host)
    assert list(found) == ["model:by_hand"], found
    assert "loaded with its own files" in found["model:by_hand"]


def _exec_start_without_restrictions(host: Any) -> str:
    """The unit's own command line, in poll mode and without the restricted-API flags."""
    show = host.check_output(f"systemctl show {TRITON} -p ExecStart --value")
    argv = re.search(r"argv\[\]=(.*?) ; ignore_errors=", show)
    assert argv, show
    words = [w.replace("--model-control-mode=explicit", "--model-control-mode=poll")
             for w in argv.group(1).split() if w != "$TRITON_SERVER_ADMIN_ARGS"]
    return " ".join(words)


@pytest.fixture
def exec_start_drop_in(host: Any) -> Iterator[str]:
    drop_in = f"[Service]\nExecStart=\nExecStart={_exec_start_without_restrictions(host)}\n"
    host.run(f"mkdir -p {os.path.dirname(DROP_IN)} && printf '%s' {shlex.quote(drop_in)} > {DROP_IN}")
    assert host.run("systemctl daemon-reload").rc == 0
    yield drop_in
    restart_with(host, None)


def test_drop_in_replacing_exec_start_is_reported(host: Any, exec_start_drop_in: str) -> None:
    # Not restarted yet: the unit as systemd would run it differs, the process still runs the role's.
    found = check(host)
    assert set(found) == {"unit:--model-control-mode", "unit:$TRITON_SERVER_ADMIN_ARGS", "unit:DropInPaths"}, found
    assert "--model-control-mode=poll, the role says --model-control-mode=explicit" in found["unit:--model-control-mode"]
    assert DROP_IN in found["unit:--model-control-mode"]
    # Restarted: the process runs it, and the admin APIs answer anyone (HTTP index and load, gRPC).
    restart_with(host, exec_start_drop_in)
    found = check(host)
    assert set(found) >= {
        "unit:--model-control-mode", "process:--model-control-mode", "process:--http-restricted-api",
        "process:--grpc-restricted-protocol", "posture:http-index", "posture:http-load", "posture:grpc-index"}, found
    assert not any("molecule-only" in d for d in found.values())  # the admin secret never in a finding
    # The timer's own run (sandboxed) sees the same.
    assert service_count(host) == len(found), journal(host, SERVICE)


@pytest.fixture
def as_root(host: Any) -> Iterator[None]:
    restart_with(host, "[Service]\nUser=root\nGroup=root\n")
    yield
    restart_with(host, None)


def test_triton_running_as_another_user_is_reported(host: Any, as_root: None) -> None:
    found = check(host)
    assert set(found) == {"unit:User", "unit:Group", "unit:DropInPaths", "process:user"}, found
    assert found["process:user"].endswith("runs as root, the role says triton")
    assert found["unit:Group"].startswith("root, the role's unit has triton"), found


# Properties the roles never set; LimitNOFILE= sets the soft limit too. The deadman's drop-in sets an
# Environment= and an ExecStartPre= of its own: these add to them.
FOREIGN = "[Service]\nEnvironment=GRPC_TRACE=all\nLimitNOFILE=65536\nExecStartPre=/bin/true\n"


@pytest.fixture
def foreign_drop_in(host: Any) -> Iterator[None]:
    host.run(f"mkdir -p {os.path.dirname(DROP_IN)} && printf '%s' {shlex.quote(FOREIGN)} > {DROP_IN}")
    assert host.run("systemctl daemon-reload").rc == 0
    yield
    host.run(f"rm -f {DROP_IN}")
    assert host.run("systemctl daemon-reload").rc == 0


def test_drop_in_setting_what_the_roles_never_set_is_reported(host: Any, foreign_drop_in: None) -> None:
    found = check(host)
    assert set(found) == {"unit:Environment", "unit:LimitNOFILE", "unit:LimitNOFILESoft", "unit:ExecStartPre",
                          "unit:DropInPaths"}, found
    assert "GRPC_TRACE=all" in found["unit:Environment"] and DROP_IN in found["unit:Environment"], found
    assert found["unit:LimitNOFILE"].startswith("65536, the role's unit has "), found
    # Added to the deadman's own ExecStartPre (the role's unit has that one).
    assert found["unit:ExecStartPre"].startswith("adds { path=/bin/true ; argv[]=/bin/true ; ignore_errors=no }; "
                                                 "the role's unit has 1 value"), found
    assert found["unit:DropInPaths"].startswith(f"{OWN_DROP_IN} {DROP_IN}, the role's unit has {OWN_DROP_IN}"), found
    # The timer's own run (sandboxed) sees the same.
    assert service_count(host) == len(found), journal(host, SERVICE)
