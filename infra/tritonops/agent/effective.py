"""What a node really runs, against what the triton_server role rendered: the unit as systemd runs it
(drop-ins included), the running process's arguments and user, and Triton's live security posture.

The role writes the desired state next to its configuration (``EXPECTED_FILE``), rendered from the
same template as the unit's arguments: ``unit_args`` as the unit holds them (the admin arguments as
the ``$TRITON_SERVER_ADMIN_ARGS`` reference), ``args`` as the process receives them (the admin
header's value redacted). Nothing here ever holds the secret: a running process's arguments are
redacted as soon as they are read.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
from pathlib import Path
from typing import Any

from . import posture
from .errors import ReleaseError

EXPECTED_FILE = "/etc/tritonserver/expected.json"  # roles/triton_server: _triton_server_expected_file
REDACTED = "<redacted>"
RESTRICTED_FLAGS = ("--http-restricted-api", "--grpc-restricted-protocol")
ADMIN_API = "model-repository"  # the category of repository index and load
_EXEC_ARGV = re.compile(r"argv\[\]=(.*?) ; ignore_errors=")

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


def systemd_show(service: str) -> dict[str, str]:
    """The unit's properties as systemd runs it (drop-ins merged); ReleaseError when systemd cannot say."""
    props = ["ExecStart", "User", "MainPID", "DropInPaths", "ActiveState"]
    try:
        out = subprocess.run(["systemctl", "show", service, *[f"--property={p}" for p in props]],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReleaseError(f"systemctl show {service}: {e}") from None
    if out.returncode != 0:
        raise ReleaseError(f"systemctl show {service}: exit {out.returncode}: {out.stderr.strip()[:300]}")
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def state(service: str) -> dict[str, Any]:
    """The unit as systemd runs it and the running process (arguments redacted), JSON-able."""
    show = systemd_show(service)
    unit = {"exec_start": [triton_args(m.split()) for m in _EXEC_ARGV.findall(show.get("ExecStart", ""))],
            "user": show.get("User", ""), "drop_ins": show.get("DropInPaths", "").split(),
            "active": show.get("ActiveState", "")}
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


def _flag(arg: str) -> str:
    return arg.partition("=")[0]


def compare_args(where: str, expected: list[str], actual: list[str]) -> list[Finding]:
    """One finding per flag whose values differ (missing, changed, or not in the role's unit)."""
    flags = sorted({_flag(a) for a in expected} | {_flag(a) for a in actual})
    findings = []
    for flag in flags:
        want = sorted(a for a in expected if _flag(a) == flag)
        have = sorted(a for a in actual if _flag(a) == flag)
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


def compare(expected: dict[str, Any], now: dict[str, Any]) -> list[Finding]:
    """Findings of the unit (drop-ins included) and the running process against the role's state."""
    unit, process = now["unit"], now["process"]
    drop_ins = f" (drop-ins: {', '.join(unit['drop_ins'])})" if unit["drop_ins"] else ""
    findings: list[Finding] = []
    if len(unit["exec_start"]) != 1:
        findings.append({"resource": "unit:ExecStart",
                         "detail": f"{len(unit['exec_start'])} command lines, the role writes one{drop_ins}"})
    else:
        for f in compare_args("unit", expected["unit_args"], unit["exec_start"][0]):
            findings.append({**f, "detail": f["detail"] + drop_ins})
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

def _arg(args: list[str], flag: str, default: str = "") -> str:
    return next((a.partition("=")[2] for a in reversed(args) if _flag(a) == flag), default)


def _loopback(address: str) -> str:
    """Where the node reaches an address Triton listens on (a wildcard: loopback)."""
    if address in ("", "0.0.0.0", "::"):  # noqa: S104 - an address read, not bound
        return "127.0.0.1"
    return f"[{address}]" if ":" in address else address


def restricts(args: list[str], flag: str) -> bool:
    """The arguments restrict the repository API (index, load) behind a header."""
    return any(ADMIN_API in a.partition("=")[2].partition(":")[0].split(",") for a in args if _flag(a) == flag)


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
    http = _arg(args, "--allow-http", "true") == "true"
    grpc = _arg(args, "--allow-grpc", "true") == "true"
    return {
        "http_url": (f"http://{_loopback(_arg(args, '--http-address'))}:{_arg(args, '--http-port', '8000')}"
                     if http else None),
        "restricted_http": restricts(args, "--http-restricted-api"),
        "grpc": (_loopback(_arg(args, "--grpc-address")).strip("[]"), int(_arg(args, "--grpc-port", "8001")))
        if grpc else None,
        "restricted_grpc": restricts(args, "--grpc-restricted-protocol"),
        "grpc_tls": _arg(args, "--grpc-use-ssl", "false") == "true",
    }


def host_findings(expected_file: Path) -> list[Finding]:
    """Everything this module checks on a node, from the role's expected-state file.

    A missing or broken file is a finding (the role writes it); systemd not answering is a failed
    check (ReleaseError).
    """
    try:
        expected = read_expected(expected_file)
    except ValueError as e:
        return [{"resource": "triton:expected-state", "detail": str(e)}]
    findings = compare(expected, state(expected["service"]))
    if not any(f["resource"] == "process" for f in findings):
        findings += posture_findings(**expected_posture(expected["args"]))
    return findings
