"""Every CLI command that talks to Triton, against a server that refuses (403), fails (500) or answers garbage.

A tiny HTTP server on 127.0.0.1 (in this process) plays a broken Triton. Whatever it answers, each command
ends with the exit code of the table (core/exitcodes.py) and at most one line of error, never a traceback:
``bench`` and ``tune`` exit 3 (the instrument, the server, failed), ``smoke`` reports failing checks (1).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonops.core.exitcodes import ExitCode
from tritonops.core.triton_http import SECRET_ENV

TRITONOPS = Path(sys.executable).parent / "tritonops"

MODEL = "m"
CONFIG = {"name": MODEL, "platform": "python", "backend": "python", "max_batch_size": 8,
          "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
          "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
          "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}
STATS = {"model_stats": [{"name": MODEL, "version": "1", "inference_count": 0, "execution_count": 0,
                          "inference_stats": {}}]}
RESTRICTED = {"error": "This API is restricted, expecting header 'triton-admin-key'"}
GARBAGE = b"\x00garbage{not json"


def _answer(mode: str, method: str, path: str) -> tuple[int, bytes]:
    """What the broken Triton answers (status, body) to ``method path`` in ``mode``."""
    if mode == "403":
        return 403, json.dumps(RESTRICTED).encode()
    if mode == "500":
        return 500, json.dumps({"error": "internal error"}).encode()
    if mode == "garbage":
        return 200, GARBAGE
    # The rest answer health and readiness like a Triton; they break one API each.
    if path.startswith("/v2/health") or path == f"/v2/models/{MODEL}/ready":
        return 200, b""
    admin = path.endswith("/config") or path.endswith("/stats") or path.startswith("/v2/repository")
    if mode == "restricted" and admin:
        return 403, json.dumps(RESTRICTED).encode()
    if path.endswith("/config"):
        return 200, (GARBAGE if mode == "config-garbage" else json.dumps(CONFIG).encode())
    if path.endswith("/stats"):
        return 200, (b"[1, 2]" if mode == "stats-shape" else json.dumps(STATS).encode())
    if path.startswith("/v2/repository") and method == "POST":
        return (500, json.dumps({"error": "failed to load 'm'"}).encode()) if mode == "load-500" else (200, b"{}")
    return 500, json.dumps({"error": "inference failed"}).encode()  # inference, metadata, the rest


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "403"

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.server.mode == "not-http":  # type: ignore[attr-defined]
            self.wfile.write(b"garbage, not HTTP\r\n\r\n")
            self.close_connection = True
            return
        status, body = _answer(self.server.mode, self.command, self.path)  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass


@pytest.fixture(scope="module")
def broken() -> Iterator[http.server.ThreadingHTTPServer]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _run(srv: http.server.ThreadingHTTPServer, mode: str, args: list[str]) -> tuple[int, str]:
    """``tritonops ARGS`` as the operator runs it (its own process: tritonclient's gevent hub stays out of
    this one, whose later forks, tests/unit/badinput, would inherit it)."""
    srv.mode = mode  # type: ignore[attr-defined]
    env = {**os.environ, SECRET_ENV: "", "COLUMNS": "200"}
    res = subprocess.run([str(TRITONOPS), *args], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    return res.returncode, res.stderr


def _url(srv: http.server.ThreadingHTTPServer) -> str:
    return f"127.0.0.1:{srv.server_address[1]}"


MODES = ["403", "500", "garbage", "not-http", "restricted", "config-garbage", "stats-shape"]


@pytest.mark.parametrize("engine", ["python", "perf_analyzer"])
@pytest.mark.parametrize("mode", MODES)
def test_bench_exits_3_with_one_line(broken: http.server.ThreadingHTTPServer, mode: str, engine: str) -> None:
    code, err = _run(broken, mode, ["bench", MODEL, "--url", _url(broken), "--engine", engine, "--requests", "5",
                                    "--duration", "2"])
    assert code == ExitCode.FAILED, err
    assert len(err.strip().splitlines()) == 1 and err.strip().startswith("error: "), err
    if mode == "restricted":
        assert "--admin-key-file" in err and SECRET_ENV in err


def test_bench_perf_analyzer_failing_inference_exits_3(broken: http.server.ThreadingHTTPServer) -> None:
    """Health, configuration and statistics answer; every inference fails: perf_analyzer cannot measure."""
    code, err = _run(broken, "inference-500", ["bench", MODEL, "--url", _url(broken), "--duration", "2"])
    assert code == ExitCode.FAILED, err
    assert len(err.strip().splitlines()) == 1 and "perf_analyzer" in err, err


@pytest.mark.parametrize("mode", [*MODES, "load-500"])
def test_tune_exits_3_with_one_line(broken: http.server.ThreadingHTTPServer, mode: str, tmp_path: Path) -> None:
    (tmp_path / MODEL).mkdir()
    config = tmp_path / MODEL / "config.pbtxt"
    config.write_text(f'name: "{MODEL}"\nbackend: "python"\nmax_batch_size: 8\n'
                      'instance_group [ { count: 1, kind: KIND_CPU } ]\n')
    before = config.read_text()
    code, err = _run(broken, mode, ["tune", MODEL, "--repository", str(tmp_path), "--url", _url(broken),
                                    "--engine", "python", "--requests", "5", "--duration", "1",
                                    "--plot", str(tmp_path / "t.png")])
    assert code == ExitCode.FAILED, err
    assert len(err.strip().splitlines()) == 1 and err.strip().startswith("error: "), err
    assert config.read_text() == before
    if mode == "load-500":  # the search reached the repository API: the reload's refusal is the line
        assert "loading m" in err and "failed to load 'm'" in err


@pytest.mark.parametrize("mode", MODES)
def test_smoke_fails_its_checks(broken: http.server.ThreadingHTTPServer, mode: str) -> None:
    url = _url(broken)
    code, _err = _run(broken, mode, ["smoke", f"http://{url}", "--metrics-url", f"http://{url}/metrics"])
    assert code == ExitCode.FINDINGS


def test_a_key_on_the_command_line_is_refused(broken: http.server.ThreadingHTTPServer) -> None:
    for cmd in (["bench", MODEL, "--url", _url(broken)], ["smoke", f"http://{_url(broken)}"]):
        code, err = _run(broken, "403", [*cmd, "--header", "triton-admin-key=hunter2"])
        assert code == ExitCode.USAGE
        assert "never the command line" in " ".join(err.split()) and "hunter2" not in err
