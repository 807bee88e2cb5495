"""Triton 2.51's Python backend under numpy 2 serves empty outputs (issue 35, measured on a GPU): ``serve``,
``server.start`` (the fixtures, the demo) and gpu-check refuse it, naming the numpy and where the stub would
import it from, before tritonserver starts or any model loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gpu_check as gc  # tools/ is on pytest's pythonpath
import pytest
from tritonops.cli import app
from tritonops.core.exitcodes import ExitCode
from tritonops.triton import server
from tritonops.versions import NUMPY_VERSION
from typer.testing import CliRunner

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def site_with_numpy(folder: Path, version: str) -> Path:
    """A site-packages folder holding numpy ``version`` as pip installs it (its dist-info metadata)."""
    info = folder / f"numpy-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: numpy\nVersion: {version}\n")
    return folder


@pytest.fixture
def numpy2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stub's PYTHONPATH starts with a site-packages holding numpy 2.1.0 (a venv that upgraded it)."""
    site = site_with_numpy(tmp_path / "site-packages", "2.1.0")
    monkeypatch.setattr(server, "stub_pythonpath", lambda: [str(site)])
    return site


def test_the_numpy_found_first_decides(tmp_path: Path) -> None:
    one, two = site_with_numpy(tmp_path / "a", "1.26.4"), site_with_numpy(tmp_path / "b", "2.0.2")
    assert server.stub_numpy([str(one), str(two)]) == ("1.26.4", str(one))
    assert server.numpy_problem([str(one), str(two)]) is None
    problem = server.numpy_problem([str(two), str(one)])
    assert problem is not None and f"numpy 2.0.2 from {two}" in problem and f"numpy=={NUMPY_VERSION}" in problem


def test_this_environment_passes() -> None:
    assert server.numpy_problem() is None  # the project's pin (numpy<2) is what the fixtures' Tritons import


def test_start_refuses_before_tritonserver_starts(numpy2: Path, tmp_path: Path) -> None:
    with pytest.raises(server.PythonBackendMismatch) as e:
        server.start(SAMPLE, workdir=tmp_path / "triton")
    assert "mlp, mlp_batched, postprocess, preprocess use the Python backend" in str(e.value)
    assert not (tmp_path / "triton").exists()  # nothing was laid out, no process, no log


def test_a_repository_without_python_models_is_not_refused(numpy2: Path, tmp_path: Path) -> None:
    (tmp_path / "onnx_only").mkdir()
    (tmp_path / "onnx_only" / "config.pbtxt").write_text('name: "onnx_only"\nbackend: "onnxruntime"\n')
    server.check_python_backend(tmp_path)


def test_serve_refuses_with_one_line_and_exit_3(numpy2: Path) -> None:
    result = CliRunner().invoke(app, ["serve", str(SAMPLE)])
    assert result.exit_code == ExitCode.FAILED
    line = " ".join(result.stderr.split())
    assert line.startswith("error: ") and "numpy 2.1.0" in line and str(numpy2) in line
    assert "Traceback" not in result.output


def test_gpu_check_refuses_before_it_looks_for_a_gpu(numpy2: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def no_gpu_query() -> list[gc.Gpu]:
        raise AssertionError("gpu-check queried the GPU before refusing")

    monkeypatch.setattr(gc, "query_gpus", no_gpu_query)
    assert gc.main() == 1
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("gpu-check: refused: the Python backend's stub would import numpy 2.1.0")


def test_make_gpu_check_without_a_gpu_exits_0_saying_so() -> None:
    """As `make gpu-check` runs it, on this machine (no nvidia-smi)."""
    res = subprocess.run(["make", "-s", "-n", "gpu-check"], cwd=SAMPLE.parents[1], capture_output=True, text=True,
                         check=True)
    command = res.stdout.strip().splitlines()[-1].split()
    assert command[1:] == ["tools/gpu_check.py"]
    run = subprocess.run([sys.executable, *command[1:]], cwd=SAMPLE.parents[1], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert (run.returncode, run.stdout.split(" (")[0]) == (0, "gpu-check: no NVIDIA GPU here")
