"""Run one bad-input case in a forked child and classify what happened.

Each case runs in its own process (forked from an interpreter that has already imported the CLIs, so
a case costs milliseconds), in its own session and working folder, under a memory limit and a
timeout. The parent classifies the outcome:

    clean      the expected exit code, no traceback, and the message names the file or field
    vague      the expected exit code and no traceback, but the message names neither
    traceback  an exception escaped (the real CLI would print a Python traceback)
    wrong_exit another exit code than the scheme asks for, or a false pass (exit 0)
    hang       ran past the timeout, or past the memory limit (an unbounded read)
    lost_file  an input that existed before the case was changed, replaced or removed

Used by the strict tests (tests/unit/badinput/test_badinput_commands.py: every case must be clean)
and by the report (tests/benchmarks/badinput_report.py: the count per class).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import resource
import select
import signal
import stat
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLASSES = ("clean", "vague", "traceback", "wrong_exit", "hang", "lost_file")
TIMEOUT_S = 5.0
MEMORY_HEADROOM = 1536 << 20  # bytes of address space a case may add to the forked interpreter


@dataclass(frozen=True)
class Case:
    """One bad input: ``argv`` of ``cli`` ("tritonops", "agent", "devkit") or a library ``call``.

    ``argv`` items may hold ``{tmp}`` (the case's folder, built by ``setup``) and ``{port}`` (a
    loopback port nobody listens on). ``names``: one of these must appear in the message (the file,
    field or option the error is about). ``owner``: whose code handles it.
    """

    id: str
    argv: tuple[str, ...] = ()
    cli: str = "tritonops"
    expect: int = 2
    names: tuple[str, ...] = ()
    setup: Callable[[Path], None] | None = None
    call: Callable[[Path], Any] | None = None
    raises: tuple[type[BaseException], ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    owner: str = "A"
    consumes: tuple[str, ...] = ()  # inputs the command removes by design (a push area it installs from)


@dataclass
class Outcome:
    case: str
    klass: str
    code: int | None
    detail: str
    seconds: float


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed): type and content digest or link target."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):  # noqa: B023
                        h.update(chunk)
                out[rel] = "file:" + h.hexdigest()
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = f"special:{stat.S_IFMT(st.st_mode)}"
    return out


def _invoke(case: Case, tmp: Path, port: int) -> dict[str, Any]:
    """In the child: run the case, return code, output and the escaped exception (if any)."""
    argv = [a.format(tmp=tmp, port=port) for a in case.argv]
    os.environ.update(case.env)
    if case.call is not None:
        try:
            case.call(tmp)
        except case.raises as e:
            return {"code": case.expect, "out": f"{type(e).__name__}: {e}", "exc": None}
        except BaseException as e:  # noqa: BLE001 - classified by the parent
            return {"code": None, "out": "", "exc": _exc(e)}
        return {"code": 0, "out": "returned without an error", "exc": None}
    if case.cli == "agent":
        from tritonops.agent.cli import main

        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:  # noqa: BLE001
            return {"code": None, "out": out.getvalue() + err.getvalue(), "exc": _exc(e)}
        return {"code": int(code), "out": out.getvalue() + err.getvalue(), "exc": None}
    from click.testing import CliRunner

    command = devkit_command() if case.cli == "devkit" else tritonops_command()
    result = CliRunner().invoke(command, argv, prog_name=case.cli, catch_exceptions=True)
    text = result.stdout + (result.stderr if result.stderr_bytes is not None else "")
    exc = None if result.exception is None or isinstance(result.exception, SystemExit) else result.exception
    return {"code": result.exit_code, "out": text,
            "exc": _exc(exc, result.exc_info) if exc is not None else None}


@functools.cache
def tritonops_command() -> Any:
    """The click command behind ``tritonops``, built once (call it before forking: each case saves ~0.1 s)."""
    import typer.main
    from tritonops.cli import app

    return typer.main.get_command(app)


@functools.cache
def devkit_command() -> Any:
    """The click command behind ``python -m devkit`` (the development kit: Podman hosts, the demo)."""
    import typer.main
    from devkit.__main__ import app

    return typer.main.get_command(app)


def _exc(e: BaseException, exc_info: Any = None) -> str:
    tb = "".join(traceback.format_exception(*exc_info)) if exc_info else "".join(traceback.format_exception(e))
    return f"{type(e).__name__}: {e}\n{tb[-1500:]}"


def run(case: Case, base: Path, timeout: float = TIMEOUT_S) -> Outcome:
    """Build the case's folder under ``base``, run it in a child, classify."""
    tmp = base / case.id
    tmp.mkdir(parents=True)
    (tmp / "cwd").mkdir()
    if case.setup:
        case.setup(tmp)
    before = snapshot(tmp)
    port = closed_port()
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setsid()
            os.chdir(tmp / "cwd")
            with open("/proc/self/status") as f:
                vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
            resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_HEADROOM, resource.RLIM_INFINITY))
            try:
                res = _invoke(case, tmp, port)
            except MemoryError:
                res = {"code": None, "out": "", "exc": "MemoryError", "oom": True}
            except BaseException as e:  # noqa: BLE001 - the case itself is broken: say so
                res = {"code": None, "out": "", "exc": f"the case could not run: {_exc(e)}"}
            data = json.dumps(res).encode()
            with os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(w)
    chunks: list[bytes] = []
    deadline = start + timeout
    timed_out = False
    with os.fdopen(r, "rb", buffering=0) as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([f], [], [], left)
            if not ready:
                continue
            chunk = f.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the child's session: anything it started goes with it
    os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    changed = _changed(before, snapshot(tmp), case.consumes)
    if timed_out:
        return Outcome(case.id, "hang", None, f"no answer after {timeout:.0f}s", seconds)
    try:
        res = json.loads(b"".join(chunks).decode())
    except ValueError:
        return Outcome(case.id, "hang", None, "the child died without an answer (memory limit?)", seconds)
    return Outcome(case.id, *_classify(case, res, changed, tmp), seconds)


def _changed(before: dict[str, str], after: dict[str, str], consumed: tuple[str, ...] = ()) -> list[str]:
    return sorted(k for k, v in before.items() if after.get(k) != v and not k.startswith(consumed or ("\0",)))


def _classify(case: Case, res: dict[str, Any], changed: list[str], tmp: Path) -> tuple[str, int | None, str]:
    code, out, exc = res.get("code"), res.get("out", ""), res.get("exc")
    first = " | ".join(line.strip() for line in out.strip().splitlines()[:3])[:300]
    if changed:
        return "lost_file", code, f"changed or removed: {', '.join(changed[:5])}"
    if res.get("oom") or (exc or "").startswith("MemoryError"):
        return "hang", code, "ran out of memory (an unbounded read)"
    if exc or "Traceback (most recent call last)" in out:
        return "traceback", code, (exc or out).strip().splitlines()[0][:300]
    if code != case.expect:
        return "wrong_exit", code, f"exit {code}, expected {case.expect}: {first}"
    flat = "".join(out.split()).lower()  # a message wrapped at the terminal's width still names the file
    if case.names and not any("".join(n.format(tmp=tmp).split()).lower() in flat for n in case.names):
        return "vague", code, f"message names none of {list(case.names)}: {first}"
    return "clean", code, first
