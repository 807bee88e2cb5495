"""Live: ``bench``, ``tune`` and ``smoke`` against a Triton hardened as the triton_server role hardens it.

The server runs with the role's restricted APIs (``--http-restricted-api`` and ``--grpc-restricted-protocol``
over every API of ``triton.args.RESTRICTED_APIS``, header ``triton-admin-key``): the model configuration,
the statistics and the repository API need the admin key. The tools take it as the roles hand it out, from
a file (``--admin-key-file``) or the release agent's variable (``TRITONOPS_ADMIN_SECRET``); without it
they stop with one line and exit 3, before any load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonops.cli import app
from tritonops.core.triton_http import DEFAULT_HEADER, SECRET_ENV
from tritonops.triton import server
from tritonops.triton.args import RESTRICTED
from typer.testing import CliRunner

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
SAMPLES = HERE.parent.parent / "examples" / "model_repository"
MODEL = "mlp_batched"
SECRET = "s3cret-admin-key-for-the-test"  # noqa: S105 - a test server's key
FAST = ["--duration", "2", "--stability", "100", "--concurrency", "4"]


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.TritonServer]:
    work = tmp_path_factory.mktemp("restricted")
    repo = work / "repo"
    shutil.copytree(SAMPLES / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    admin = f"{RESTRICTED}:{DEFAULT_HEADER}={SECRET}"  # the role's tritonserver.env.j2, both protocols
    with server.running(repo, model_control_mode="explicit", load_models=[MODEL], workdir=work / "triton",
                        extra_args=[f"--http-restricted-api={admin}", f"--grpc-restricted-protocol={admin}",
                                    "--exit-timeout-secs=5"]) as s:
        yield s


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin-key"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


def _invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, args, env={SECRET_ENV: "", **(env or {})})
    assert "Traceback" not in result.output
    assert SECRET not in result.output  # the key is never printed, nor in a report
    return result.exit_code, result.stdout, result.stderr


def test_bench_measures_the_hardened_triton_with_the_key_from_a_file(hardened: server.TritonServer,
                                                                     key_file: Path) -> None:
    code, out, err = _invoke(["bench", MODEL, "--url", hardened.http_url, *FAST, "--admin-key-file", str(key_file),
                              "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["engine"] == "perf_analyzer" and report["errors"] == {}
    assert report["inferences_per_s"] > 0 and report["p95_ms"] > 0
    assert report["server"]["requests"] == report["succeeded"] > 0  # the statistics, read with the key


def test_bench_measures_again_and_says_what_it_relaxed_when_no_window_is_stable(hardened: server.TritonServer,
                                                                               key_file: Path) -> None:
    # 0.001%: no three windows of a real server agree that closely, so the first try always fails as on a busy box
    code, out, err = _invoke(["bench", MODEL, "--url", hardened.http_url, "--duration", "1.5", "--stability", "0.001",
                              "--concurrency", "4", "--admin-key-file", str(key_file), "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["measured"] in ("stable-after-retry", "median-of-5")
    assert "no stable measurement" in report["tries"][0]["failure"] and report["tries"][-1]["failure"] == ""
    assert report["relaxed"] and report["relaxed"][0] == "windows 300 -> " + (
        "600 ms" if report["measured"] == "stable-after-retry" else "500 ms")
    assert report["inferences_per_s"] > 0 and report["server"]["requests"] > 0


def test_bench_show_command_is_a_perf_analyzer_command_that_measures(hardened: server.TritonServer,
                                                                     key_file: Path) -> None:
    code, out, err = _invoke(["bench", MODEL, "--url", hardened.http_url, *FAST, "--admin-key-file", str(key_file),
                              "--show-command"])
    assert code == 0, err
    assert f"$(cat {key_file})" in out and "LD_LIBRARY_PATH=" in out  # the key is read by the shell, not shown
    proc = subprocess.run(["bash", "-c", out.strip()], capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": os.environ["PATH"]})  # no loader path of ours: the command carries it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Throughput:" in proc.stdout and "Concurrency: 4" in proc.stdout


def test_bench_takes_the_key_from_the_agents_variable(hardened: server.TritonServer) -> None:
    code, out, err = _invoke(["bench", MODEL, "--url", f"grpc://{hardened.grpc_url}", "--engine", "python",
                              "--requests", "50", "--json"], env={SECRET_ENV: SECRET})
    assert code == 0, err
    assert json.loads(out)["server"]["requests"] == 50


@pytest.mark.parametrize("url_of", ["http", "grpc"])
def test_bench_without_the_key_is_one_line_and_exit_3(hardened: server.TritonServer, url_of: str) -> None:
    url = f"http://{hardened.http_url}" if url_of == "http" else f"grpc://{hardened.grpc_url}"
    code, out, err = _invoke(["bench", MODEL, "--url", url, "--engine", "python", "--requests", "5"])
    assert code == 3, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "restricted" in lines[0] and "--admin-key-file" in lines[0] and SECRET_ENV in lines[0]


def test_bench_refuses_perf_analyzer_over_grpc_with_a_key(hardened: server.TritonServer, key_file: Path) -> None:
    code, _out, err = _invoke(["bench", MODEL, "--url", f"grpc://{hardened.grpc_url}", *FAST,
                               "--admin-key-file", str(key_file)])
    assert code == 2
    assert "perf_analyzer sends no headers over gRPC" in " ".join(err.split())


def test_tune_tunes_the_hardened_triton(hardened: server.TritonServer, key_file: Path, tmp_path: Path) -> None:
    config = hardened.repository / MODEL / "config.pbtxt"
    original = config.read_text()
    try:
        code, out, err = _invoke([
            "tune", MODEL, "--repository", str(hardened.repository), "--url", hardened.http_url, "--search", "grid",
            "--instances", "1", "--delays", "0", *FAST, "--budget-ms", "10000", "--plot", str(tmp_path / "t.png"),
            "--admin-key-file", str(key_file), "--json"])
        assert code == 0, err
        result = json.loads(out)
        assert result["recommended"] is not None
        trials = result["trials"]
        assert len(trials) == 3 and all(t["inferences_per_s"] > 0 for t in trials)
        # The overrides reached Triton through its restricted repository API: batching on batches.
        assert any(t["server"]["batch_size"] > 1 for t in trials if t["setting"]["dynamic_batching"])
    finally:
        config.write_text(original)


def test_tune_without_the_key_is_one_line_and_exit_3(hardened: server.TritonServer, tmp_path: Path) -> None:
    config = hardened.repository / MODEL / "config.pbtxt"
    original = config.read_text()
    code, out, err = _invoke(["tune", MODEL, "--repository", str(hardened.repository), "--url", hardened.http_url,
                              *FAST, "--plot", str(tmp_path / "t.png")])
    assert code == 3, err
    assert len(err.strip().splitlines()) == 1 and "restricted" in err, err
    assert config.read_text() == original


def test_smoke_lists_the_models_with_the_key(hardened: server.TritonServer, key_file: Path) -> None:
    code, out, _err = _invoke(["smoke", f"http://{hardened.http_url}", "--metrics-url", hardened.metrics_url,
                               "--admin-key-file", str(key_file), "--json"])
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    assert "index" not in checks and checks["model"]["target"] == MODEL and checks["model"]["ok"]
    code, out, _err = _invoke(["smoke", f"http://{hardened.http_url}", "--metrics-url", hardened.metrics_url,
                               "--json"])
    assert code == 1
    index = next(c for c in json.loads(out)["checks"] if c["check"] == "index")
    assert "restricted" in index["detail"]
