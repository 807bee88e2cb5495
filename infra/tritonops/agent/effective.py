"""What a node really runs, against what the triton_server role rendered: the unit as systemd runs it
(drop-ins included), the running process's arguments and user, and Triton's live security posture.

The role writes the desired state next to its configuration (``EXPECTED_FILE``), rendered from the
same template as the unit's arguments: ``unit_args`` as the unit holds them (the admin arguments as
the ``$TRITON_SERVER_ADMIN_ARGS`` reference), ``args`` as the process receives them (the admin
header's value redacted). Nothing here ever holds the secret: a running process's arguments are
redacted as soon as they are read.

Every other property of the unit is compared too, whatever its name. Each role that changes Triton's
unit (triton_server: the unit; model_repository and release_agent: their deadman drop-ins) records
``systemctl show`` once systemd has loaded its change (roles/triton_server/tasks/record_unit.yml:
``UNIT_RECORD`` next to ``EXPECTED_FILE``), with what changes at run time left out (``RUNTIME``: state,
PIDs, timestamps, accounting counters, the orderings other units add; ``EXEC_RUNTIME``: each command's
last run). The live ``systemctl show`` is compared with that record: a drop-in that sets anything the
roles do not is a finding (``unit:<Property>``), and so is the drop-in itself (``unit:DropInPaths``).
The project's own drop-ins (``tritonops-*.conf``) and the distribution's are expected when recorded;
any other drop-in is a finding even when it was already there when a role recorded.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError
from ..core.triton_cli import GRPC_PORT, HTTP_PORT, RESTRICTED_FLAGS, flag_of, restricted_groups, value_of
from . import posture

EXPECTED_FILE = "/etc/tritonserver/expected.json"  # roles/triton_server: _triton_server_expected_file
REDACTED = "<redacted>"
ADMIN_API = "model-repository"  # the category of repository index and load
_EXEC_ARGV = re.compile(r"argv\[\]=(.*?) ; ignore_errors=")
UNIT_RECORD = "expected-unit.json"  # next to EXPECTED_FILE: roles/triton_server/tasks/record_unit.yml
# What systemd fills in at run time, never compared; roles/triton_server/tasks/record_unit.yml holds the
# same names and pattern (_triton_server_unit_runtime, _triton_server_unit_exec_runtime) to record with.
RUNTIME = (
    # state and its bookkeeping
    "ActiveState", "SubState", "LoadError", "Result", "CleanResult", "ReloadResult", "NRestarts", "Job",
    "FreezerState", "ConditionResult", "AssertResult", "Conditions", "Asserts", "NeedDaemonReload", "Refs",
    "Markers", "StatusText", "StatusErrno", "StatusBusError", "StatusVarlinkError", "InvocationID",
    "ActivationDetails", "RestartUSecNext", "[A-Za-z]*Timestamp(Monotonic)?",
    # the running process
    "MainPID", "ControlPID", "ExecMainPID", "ExecMainCode", "ExecMainStatus", "UID", "GID", "ControlGroup",
    "ControlGroupId", "NFileDescriptorStore", "Effective[A-Za-z]*",
    # accounting counters
    "MemoryCurrent", "MemoryAvailable", "MemoryPeak", "MemorySwapCurrent", "MemorySwapPeak", "MemoryZSwapCurrent",
    "CPUUsageNSec", "TasksCurrent", "IO(Read|Write)(Bytes|Operations)", "IP(Ingress|Egress)(Bytes|Packets)",
    # what other units add (an After= of another unit is a Before= here)
    "Before", "After", "WantedBy", "RequiredBy", "RequisiteOf", "BoundBy", "UpheldBy", "ConsistsOf",
    "ConflictedBy", "TriggeredBy", "OnFailureOf", "OnSuccessOf", "ReloadPropagatedFrom", "StopPropagatedFrom",
    "References", "ReferencedBy", "SliceOf")
RUNTIME_PROPERTIES = f"^({'|'.join(RUNTIME)})$"
EXEC_RUNTIME = " ; start_time=[^}]*}"  # an Exec* command's last run (start/stop time, pid, exit code)
# Dependency lists are sets: systemd prints them in hash order, which differs between a daemon-reload and
# a boot (seen: "Requires=sysinit.target system.slice" then "system.slice sysinit.target"), so their
# words are sorted before they are recorded or compared (record_unit.yml: _triton_server_unit_sets).
UNORDERED_PROPERTIES = ("^(Names|Requires|Requisite|Wants|BindsTo|PartOf|Upholds|Conflicts|OnFailure|OnSuccess|"
                        "Triggers|PropagatesReloadTo|PropagatesStopTo|JoinsNamespaceOf|RequiresMountsFor|"
                        "WantsMountsFor)$")
_RUNTIME = re.compile(RUNTIME_PROPERTIES)
_EXEC_RUN = re.compile(EXEC_RUNTIME)
_UNORDERED = re.compile(UNORDERED_PROPERTIES)
# Drop-ins expected when a role recorded them: the project's own (model_repository's and release_agent's
# deadman, named tritonops-*.conf in the unit's folder) and the distribution's (under /usr/lib, /lib).
OWN_DROP_IN = re.compile(r"^/etc/systemd/system/[^/]+\.service\.d/tritonops-[^/]*\.conf$")
VENDOR_DROP_IN = re.compile(r"^/(usr/)?lib/systemd/system/[^/]+\.d/[^/]+\.conf$")
DETAIL_MAX = 300

Finding = dict[str, str]


def redact(args: list[str]) -> list[str]:
    """``--http-restricted-api=APIS:HEADER=VALUE`` -> ``...:HEADER=<redacted>``; other arguments unchanged."""
    out = []
    for a in args:
        flag, eq, value = a.partition("=")
        if eq and flag in RESTRICTED_FLAGS and "=" in value.partition(":")[2]:
            a = f"{flag}={value.partition(':')[0]}:{value.partition(':')[2].partition('=')[0]}={REDACTED}"
        out.append(a)
    return out


def triton_args(argv: list[str]) -> list[str]:
    """The arguments after the ``tritonserver`` binary (native) or image command (container unit)."""
    last = max((i for i, a in enumerate(argv) if os.path.basename(a) == "tritonserver"), default=-1)
    return redact(argv[last + 1:])


def read_expected(path: Path) -> dict[str, Any]:
    """The role's expected state; ValueError naming the file and field when it is unusable."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror}); the triton_server role writes it") from None
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    for field, kind in (("service", str), ("unit_args", list), ("args", list)):
        if not isinstance(doc, dict) or not isinstance(doc.get(field), kind):
            raise ValueError(f"{path}: field {field!r} missing or not a {kind.__name__}")
    return dict(doc)


def read_unit_record(path: Path) -> dict[str, str]:
    """The unit's properties a role recorded; ValueError naming the file when it is unusable."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror}); the triton_server, model_repository and "
                         "release_agent roles write it (tasks/record_unit.yml)") from None
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise ValueError(f"{path}: not an object of property names to strings")
    return dict(doc)


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show`` output as {property: value}; a property listed more than once (one line per
    ExecStartPre= command) holds its values one a line."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key] = f"{props[key]}\n{value}" if key in props else value
    return props


def unit_properties(show: dict[str, str]) -> dict[str, str]:
    """What the roles record and the check compares: run-time properties left out, every Exec* command's
    last run cut off, dependency lists sorted (what record_unit.yml does with the same three patterns)."""
    return {k: " ".join(sorted(v.split())) if _UNORDERED.match(k) else _EXEC_RUN.sub(" }", v)
            for k, v in show.items() if not _RUNTIME.match(k)}


def live_properties(show: dict[str, str]) -> dict[str, str]:
    """``unit_properties`` as a finding may hold them (the admin header's value redacted)."""
    return {k: _shown(v) for k, v in unit_properties(show).items()}


def systemd_show(service: str) -> dict[str, str]:
    """Every property of the unit as systemd runs it (drop-ins merged); ReleaseError when systemd cannot say."""
    try:
        out = subprocess.run(["systemctl", "show", service], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReleaseError(f"systemctl show {service}: {e}") from None
    if out.returncode != 0:
        raise ReleaseError(f"systemctl show {service}: exit {out.returncode}: {out.stderr.strip()[:300]}")
    return parse_show(out.stdout)


def unit_state(show: dict[str, str]) -> dict[str, Any]:
    """The unit as ``systemctl show`` says systemd runs it (arguments redacted), JSON-able."""
    return {"exec_start": [triton_args(m.split()) for m in _EXEC_ARGV.findall(show.get("ExecStart", ""))],
            "user": show.get("User", ""), "drop_ins": show.get("DropInPaths", "").split(),
            "active": show.get("ActiveState", ""), "properties": live_properties(show)}


def state(service: str) -> dict[str, Any]:
    """The unit as systemd runs it and the running process (arguments redacted), JSON-able."""
    show = systemd_show(service)
    unit = unit_state(show)
    pid = int(show.get("MainPID") or 0)
    process = None
    if pid > 0:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            pass
        else:
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                user = str(uid)
            process = {"pid": pid, "args": triton_args([a.decode(errors="replace") for a in argv]), "user": user}
    return {"unit": unit, "process": process}


def compare_args(where: str, expected: list[str], actual: list[str]) -> list[Finding]:
    """One finding per flag whose values differ (missing, changed, or not in the role's unit)."""
    flags = sorted({flag_of(a) for a in expected} | {flag_of(a) for a in actual})
    findings = []
    for flag in flags:
        want = sorted(a for a in expected if flag_of(a) == flag)
        have = sorted(a for a in actual if flag_of(a) == flag)
        if want == have:
            continue
        if not have:
            detail = f"missing (the role says {' '.join(want)})"
        elif not want:
            detail = f"{' '.join(have)} is not in the role's unit"
        else:
            detail = f"{' '.join(have)}, the role says {' '.join(want)}"
        findings.append({"resource": f"{where}:{flag}", "detail": detail})
    return findings


def _shown(value: str) -> str:
    """A property's value as a finding may hold it: the admin header's value redacted."""
    return "\n".join(" ".join(redact(line.split(" "))) for line in value.split("\n"))


def _clip(value: str) -> str:
    value = value.replace("\n", " | ") or "(empty)"
    return value if len(value) <= DETAIL_MAX else value[:DETAIL_MAX] + "..."


def _difference(have: str, want: str) -> str:
    """A property's live value against the recorded one; one listed a line per value (ExecStartPre=,
    EnvironmentFiles=) as the values added and dropped, so a long command the roles set does not hide
    the one a drop-in adds."""
    if "\n" not in have + want or not have or not want:
        return f"{_clip(have)}, the role's unit has {_clip(want)}"
    lines, recorded = have.split("\n"), want.split("\n")
    added = [v for v in lines if v not in recorded]
    dropped = [v for v in recorded if v not in lines]
    told = [f"{what} {_clip(' | '.join(values))}" for what, values in (("adds", added), ("drops", dropped)) if values]
    n = len(recorded)
    return f"{', '.join(told) or 'the same in another order: ' + _clip(have)}; the role's unit has {n} " \
           f"value{'s' if n > 1 else ''}"


def foreign_drop_ins(paths: list[str]) -> list[str]:
    """The drop-ins that are neither the project's own (``tritonops-*.conf``) nor the distribution's."""
    return [p for p in paths if not OWN_DROP_IN.match(p) and not VENDOR_DROP_IN.match(p)]


def compare_properties(recorded: dict[str, str] | None, live: dict[str, str], drop_ins: str = "",
                       skip: tuple[str, ...] = ()) -> list[Finding]:
    """One finding per property whose live value differs from what the roles recorded (an absent property
    is an empty one: ``systemctl show`` leaves empty ones out); ``recorded`` None: no record to compare
    with, only the drop-ins are judged.

    DropInPaths is a finding too when a drop-in that is not the project's was there when a role recorded
    (``foreign_drop_ins``): a record is no baseline for those. An Exec*Ex property (the same commands,
    their prefixes as flags) is reported only when its twin without Ex is not (a ``+`` prefix shows in
    ExecStartEx alone).
    """
    if recorded is None:
        recorded = {"DropInPaths": " ".join(p for p in live.get("DropInPaths", "").split()
                                            if p not in foreign_drop_ins([p]))}
        live = {"DropInPaths": live.get("DropInPaths", "")}
    recorded = live_properties(recorded)
    differ = {prop for prop in (recorded.keys() | live.keys()) if recorded.get(prop, "") != live.get(prop, "")}
    findings = []
    for prop in sorted(differ - set(skip)):
        if prop.startswith("Exec") and prop.endswith("Ex") and (prop[:-2] in differ or prop[:-2] in skip):
            continue
        findings.append({"resource": f"unit:{prop}",
                         "detail": _difference(live.get(prop, ""), recorded.get(prop, "")) + drop_ins})
    foreign = foreign_drop_ins(recorded.get("DropInPaths", "").split())
    if foreign and "DropInPaths" not in differ:
        findings.append({"resource": "unit:DropInPaths",
                         "detail": f"{_clip(' '.join(foreign))}: not the project's (tritonops-*.conf), already "
                                   "there when the roles recorded the unit"})
        findings.sort(key=lambda f: f["resource"])
    return findings


def compare(expected: dict[str, Any], now: dict[str, Any],
            properties: dict[str, str] | None = None) -> list[Finding]:
    """Findings of the unit (drop-ins included) and the running process against the role's state;
    ``properties``: the unit's properties the roles recorded (every other one compared with them; None:
    no record, only drop-ins that are not the project's are findings)."""
    unit, process = now["unit"], now["process"]
    drop_ins = f" (drop-ins: {', '.join(unit['drop_ins'])})" if unit["drop_ins"] else ""
    findings: list[Finding] = []
    if len(unit["exec_start"]) != 1:
        findings.append({"resource": "unit:ExecStart",
                         "detail": f"{len(unit['exec_start'])} command lines, the role writes one{drop_ins}"})
    else:
        for f in compare_args("unit", expected["unit_args"], unit["exec_start"][0]):
            findings.append({**f, "detail": f["detail"] + drop_ins})
    # ExecStart as a whole (the binary, its flags) only when its arguments alone did not tell.
    # User: compared below where the role sets one (not for the container unit, which runs as root).
    skip = (("ExecStart",) if findings else ()) + (("User",) if expected.get("user") else ())
    live = unit.get("properties") or {"DropInPaths": " ".join(unit["drop_ins"])}
    findings += compare_properties(properties, live, drop_ins, skip)
    want_user = expected.get("user")
    if want_user and unit["user"] != want_user:
        findings.append({"resource": "unit:User", "detail": f"{unit['user'] or 'root'}, the role says "
                                                            f"{want_user}{drop_ins}"})
    if process is None:
        findings.append({"resource": "process", "detail": f"{expected['service']} is not running "
                                                          f"({unit['active'] or 'unknown'})"})
        return findings
    findings += compare_args("process", expected["args"], process["args"])
    if want_user and process["user"] != want_user:
        findings.append({"resource": "process:user", "detail": f"pid {process['pid']} runs as {process['user']}, "
                                                               f"the role says {want_user}"})
    return findings


# --- live posture -----------------------------------------------------------------------------------

def _loopback(address: str) -> str:
    """Where the node reaches an address Triton listens on (a wildcard: loopback)."""
    if address in ("", "0.0.0.0", "::"):  # noqa: S104 - an address read, not bound
        return "127.0.0.1"
    return f"[{address}]" if ":" in address else address


def restricts(args: list[str], flag: str) -> bool:
    """The arguments restrict the repository API (index, load) behind a header."""
    return ADMIN_API in restricted_groups(args, flag)


def posture_findings(http_url: str | None, restricted_http: bool, grpc: tuple[str, int] | None,
                     restricted_grpc: bool, grpc_tls: bool) -> list[Finding]:
    """Admin calls without the header must be refused where restricted; gRPC speaks TLS when configured.

    An endpoint that does not answer at all is left to the index check (it reports Triton unreachable).
    """
    findings: list[Finding] = []
    if http_url and restricted_http:
        for call, answer in posture.http_admin_answers(http_url).items():
            if answer is True:
                findings.append({"resource": f"posture:http-{call}",
                                 "detail": f"{http_url} serves repository {call} without the admin header"})
    if grpc:
        host, port = grpc
        got = posture.grpc_posture(host, port, grpc_tls)
        where = f"{host}:{port}"
        if restricted_grpc and got["index"] == posture.ANSWERED:
            findings.append({"resource": "posture:grpc-index",
                             "detail": f"gRPC {where} serves RepositoryIndex without the admin header"})
        if grpc_tls and got["plaintext"] is not None:
            findings.append({"resource": "posture:grpc-tls",
                             "detail": f"gRPC {where} answers without TLS; the role configures TLS"})
        if grpc_tls and got["error"] and "WRONG_VERSION_NUMBER" in got["error"]:
            findings.append({"resource": "posture:grpc-tls",
                             "detail": f"gRPC {where} does not speak TLS; the role configures TLS"})
        if not grpc_tls and got["error"] and not got["unreachable"]:
            findings.append({"resource": "posture:grpc-tls",
                             "detail": f"gRPC {where} does not answer in plaintext ({got['error']})"})
    return findings


def expected_posture(args: list[str]) -> dict[str, Any]:
    """Where and how to check the posture, from the arguments the role gives Triton."""
    http = value_of(args, "--allow-http", "true") == "true"
    grpc = value_of(args, "--allow-grpc", "true") == "true"
    http_port, grpc_port = value_of(args, "--http-port", str(HTTP_PORT)), value_of(args, "--grpc-port", str(GRPC_PORT))
    return {
        "http_url": f"http://{_loopback(value_of(args, '--http-address'))}:{http_port}" if http else None,
        "restricted_http": restricts(args, RESTRICTED_FLAGS[0]),
        "grpc": (_loopback(value_of(args, "--grpc-address")).strip("[]"), int(grpc_port)) if grpc else None,
        "restricted_grpc": restricts(args, RESTRICTED_FLAGS[1]),
        "grpc_tls": value_of(args, "--grpc-use-ssl", "false") == "true",
    }


def host_findings(expected_file: Path) -> list[Finding]:
    """Everything this module checks on a node, from the role's expected-state file.

    A missing or broken file (the expected state, the record of the unit next to it) is a finding (the
    roles write them); systemd not answering is a failed check (ReleaseError).
    """
    try:
        expected = read_expected(expected_file)
    except ValueError as e:
        return [{"resource": "triton:expected-state", "detail": str(e)}]
    findings: list[Finding] = []
    properties = None
    try:
        properties = read_unit_record(expected_file.with_name(UNIT_RECORD))
    except ValueError as e:
        findings.append({"resource": "triton:expected-unit", "detail": str(e)})
    findings += compare(expected, state(expected["service"]), properties)
    if not any(f["resource"] == "process" for f in findings):
        findings += posture_findings(**expected_posture(expected["args"]))
    return findings
