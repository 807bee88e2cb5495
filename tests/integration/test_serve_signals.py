"""`tritonops serve` as a user runs it: a signal stops tritonserver and nothing is left behind.

The real wheel tritonserver serves an empty repository (it starts in a few seconds). TMPDIR points at a
folder of the test's own, so the temporary folder serve makes is the only thing that can appear there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
TRITONOPS = Path(sys.executable).parent / "tritonops"


def _children(pid: int) -> list[int]:
    """Live processes whose parent is pid (zombies do not count: they run nothing)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _default_signals() -> None:
    """serve as started from a terminal: under `nohup` or a non-interactive shell's `&` the test runner
    inherits SIGHUP or SIGINT ignored, and serve rightly leaves an ignored signal ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


class Serve:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp / "tmp"
        self.tmp.mkdir()
        repo = tmp / "empty-repository"
        repo.mkdir()
        self.proc = subprocess.Popen([str(TRITONOPS), "serve", str(repo)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(self.tmp)},
                                     preexec_fn=_default_signals)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()  # printed once the server is ready
        assert "tritonserver ready" in line, line + self.proc.stdout.read().decode()
        servers = [p for p in _children(self.proc.pid)
                   if Path(f"/proc/{p}/exe").resolve().name == "tritonserver"]
        assert len(servers) == 1, servers
        self.triton = servers[0]
        assert [p.name for p in self.tmp.iterdir()][0].startswith("tritonops-server-")



@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    s = Serve(tmp_path)
    yield s
    s.proc.kill()
    s.proc.wait()
    if _alive(s.triton):  # what the test found left behind
        os.kill(s.triton, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_stops_tritonserver_and_removes_the_temp_folder(serve: Serve, signum: int) -> None:
    serve.proc.send_signal(signum)
    serve.proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while _alive(serve.triton) and time.monotonic() < deadline:  # an orphan would keep running
        time.sleep(0.2)
    assert not _alive(serve.triton), "tritonserver left running"
    assert list(serve.tmp.iterdir()) == []


def test_a_server_that_dies_leaves_no_temp_folder(serve: Serve) -> None:
    os.kill(serve.triton, signal.SIGKILL)
    serve.proc.wait(timeout=60)
    assert list(serve.tmp.iterdir()) == []
