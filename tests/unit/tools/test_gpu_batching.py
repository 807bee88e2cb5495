"""tools/gpu_batching.py without a GPU or a server: GPU utilization from Triton's metrics text and over a
setting's measurement windows, the model it serves per engine and kind, the engine choice, the stub's path,
and the checks its rows give (from trials made here; the live CPU run is tests/integration/test_gpu_batching_live.py).
"""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path

import gpu_batching as gb  # tools/ is on pytest's pythonpath
import pytest
from tritonops.model_repo import pbtxt
from tritonops.triton import bench, tune

UUID0, UUID1 = "GPU-5f1d6a2e-0c3b-4d1e-9a77-1b2c3d4e5f60", "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"
# Triton's /metrics as a GPU build exports it (two GPUs), with the series around it.
METRICS = f"""\
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{{model="torch_mlp",version="1"}} 1200
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{{gpu_uuid="{UUID0}"}} 0.36
nv_gpu_utilization{{gpu_uuid="{UUID1}"}} 0.02
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{{gpu_uuid="{UUID0}"}} 8.2e+08
"""
CPU_METRICS = 'nv_inference_count{model="wide_mlp",version="1"} 12\nnv_cpu_utilization 0.93\n'


# --- GPU utilization ------------------------------------------------------------------------------------


def test_utilization_is_the_mean_of_nv_gpu_utilization_over_the_gpus_asked() -> None:
    assert gb.gpu_utilization(METRICS) == pytest.approx(0.19)  # every GPU: (0.36 + 0.02) / 2
    assert gb.gpu_utilization(METRICS, [UUID0]) == pytest.approx(0.36)  # the GPU the instance runs on
    assert gb.gpu_utilization(METRICS, ["GPU-other"]) is None


def test_a_triton_without_gpu_series_has_no_utilization() -> None:
    assert gb.gpu_utilization(CPU_METRICS) is None  # nv_cpu_utilization is not the GPU's


def _sampler(samples: list[tuple[float, float | None]], error: str = "") -> gb.Sampler:
    s = gb.Sampler("http://127.0.0.1:1/metrics")
    s.samples, s.error = samples, error
    return s


def test_a_settings_utilization_is_the_mean_of_the_samples_inside_its_windows() -> None:
    s = _sampler([(1.0, 0.9), (2.0, 0.2), (3.0, 0.4), (4.0, 0.9), (6.0, 0.6)])
    assert s.mean([(1.5, 3.5)]) == (pytest.approx(0.3), "")
    assert s.mean([(1.5, 2.5), (5.5, 6.5)]) == (pytest.approx(0.4), "")  # a retried setting: two runs


def test_utilization_is_na_and_says_why() -> None:
    value, why = _sampler([(1.0, None), (2.0, None)]).mean([(0.0, 3.0)])
    assert value is None
    assert why == "Triton exports no nv_gpu_utilization (it sees no GPU: DCGM found none)"
    value, why = _sampler([(1.0, 0.5), (9.0, 0.5)]).mean([(2.0, 3.0)])
    assert (value, why) == (None, "no nv_gpu_utilization sample during the measurement (0 scrapes)")
    value, why = _sampler([], error="could not scrape x: refused").mean([(0.0, 1.0)])
    assert (value, why) == (None, "could not scrape x: refused")


# --- the served model --------------------------------------------------------------------------------------


def test_the_pytorch_model_is_the_issues_mlp_on_a_gpu_instance(tmp_path: Path) -> None:
    folder = gb.build_model(tmp_path, "KIND_GPU", "pytorch")
    spec = pbtxt.parse((folder / "config.pbtxt").read_text())
    assert (spec.name, spec.backend, spec.max_batch_size) == ("torch_mlp", "python", 64)
    assert [(g.kind, g.gpus, g.count) for g in spec.instance_group] == [("KIND_GPU", [0], 1)]
    assert [i.dims for i in spec.input] == [[1024]] and [o.dims for o in spec.output] == [[1024]]
    model_py = folder / "1" / "model.py"
    py_compile.compile(str(model_py), cfile=str(tmp_path / "model.pyc"), doraise=True)
    text = model_py.read_text()
    assert "WIDTHS = (1024, 8192, 8192, 8192, 1024)" in text
    assert 'torch.device("cuda", int(args["model_instance_device_id"]))' in text


def test_the_onnxruntime_gpu_model_is_the_wide_mlp_asking_the_cuda_provider(tmp_path: Path) -> None:
    folder = gb.build_model(tmp_path, "KIND_GPU", "onnxruntime-gpu")
    spec = pbtxt.parse((folder / "config.pbtxt").read_text())
    assert spec.name == "wide_mlp"
    assert [(g.kind, g.gpus) for g in spec.instance_group] == [("KIND_GPU", [0])]
    text = (folder / "1" / "model.py").read_text()
    assert 'providers=["CUDAExecutionProvider"]' in text and "CPUExecutionProvider" not in text


def test_a_cpu_instance_gets_no_gpu(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text(gb.TORCH_CONFIG)
    gb.set_instance_kind(config, "KIND_CPU", count=2)
    assert [(g.kind, g.gpus, g.count) for g in pbtxt.parse(config.read_text()).instance_group] == [("KIND_CPU", [], 2)]
    with pytest.raises(ValueError, match="kind: must be one of KIND_GPU, KIND_CPU, got 'KIND_TPU'"):
        gb.set_instance_kind(config, "KIND_TPU")
    with pytest.raises(ValueError, match="engine: must be one of"):
        gb.build_model(tmp_path, "KIND_CPU", "tensorrt")


def _python(folder: Path, exit_code: int) -> str:
    """A stand-in interpreter for the torch probe: exits ``exit_code`` (0: torch sees CUDA)."""
    exe = folder / f"python-{exit_code}"
    exe.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    exe.chmod(0o755)
    return str(exe)


def test_the_engine_is_pytorch_where_torch_sees_cuda_else_onnxruntime(tmp_path: Path) -> None:
    assert gb.serving_engine("KIND_GPU", _python(tmp_path, 0)) == "pytorch"
    # No torch with CUDA: onnxruntime, with its CUDA provider where it has one (this build has not).
    import onnxruntime

    expected = ("onnxruntime-gpu" if "CUDAExecutionProvider" in onnxruntime.get_available_providers()
                else "onnxruntime-cpu")
    assert gb.serving_engine("KIND_GPU", _python(tmp_path, 3)) == expected
    assert gb.serving_engine("KIND_CPU", _python(tmp_path, 0)) == "onnxruntime-cpu"  # a CPU instance


def test_the_stub_is_given_the_folders_a_pth_adds_after_site_packages(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import site

    sites = site.getsitepackages()
    machine = tmp_path / "machine-site-packages"  # what the bundle's venv reaches through its .pth file
    machine.mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "script"), *sys.path[:1], *sites, str(machine)])
    monkeypatch.setenv("PYTHONPATH", "/opt/extra")
    with gb.stub_sees_this_path():
        assert os.environ["PYTHONPATH"] == os.pathsep.join(["/opt/extra", str(machine)])
    assert os.environ["PYTHONPATH"] == "/opt/extra"
    monkeypatch.delenv("PYTHONPATH")
    with gb.stub_sees_this_path():
        assert os.environ["PYTHONPATH"] == str(machine)
    assert "PYTHONPATH" not in os.environ


# --- the checks the rows give -------------------------------------------------------------------------------


def _trial(setting: tune.Setting, inf_s: float, *, usable: bool = True) -> tune.Trial:
    server = bench.ServerBreakdown(requests=100, inferences=100, executions=20, queue_ms=1.0, compute_input_ms=0.5,
                                   compute_infer_ms=0.9, compute_output_ms=0.5, request_ms=3.5)
    report = bench.BenchReport(config={}, sent=100, succeeded=100, elapsed_s=5, throughput_rps=inf_s,
                               inferences_per_s=inf_s, p50_ms=3, p95_ms=4, p99_ms=5, mean_ms=10.0, max_ms=None,
                               server=server, engine="perf_analyzer")
    return tune.Trial(setting, report, within_budget=usable)


OFF, ON, ON2 = tune.Setting(False, 1), tune.Setting(True, 1, (), 0), tune.Setting(True, 2, (), 0)


def _run(kind: str, climb_pick: tune.Trial, grid: list[tune.Trial],
         utils: tuple[float | None, ...] = (0.1, 0.3, 0.35)) -> gb.BatchingRun:
    c = tune.TuneResult("torch_mlp", 50, [climb_pick], climb_pick)
    g = tune.TuneResult("torch_mlp", 50, grid, None)
    best = max(grid, key=lambda t: t.report.inferences_per_s)
    why = "Triton exports no nv_gpu_utilization (it sees no GPU: DCGM found none)"
    rows = [gb.Row(n, t, u, "" if u is not None else why)
            for n, t, u in zip(("batching off", "tune's pick", "grid best"), (grid[0], climb_pick, best), utils,
                               strict=True)]
    return gb.BatchingRun(kind, "pytorch", "torch_mlp", 64, c, g, rows)


def test_a_pick_near_the_grid_best_above_batching_off_passes_on_a_gpu() -> None:
    run = _run("KIND_GPU", _trial(ON, 15000), [_trial(OFF, 1873), _trial(ON, 14900), _trial(ON2, 15787)])
    near, faster, util = run.checks()
    assert near[2] is True and "94% of the grid's best (batching pref=- delay=0us, 2 inst, 15787 inf/s)" in near[3]
    assert faster[2] is True and faster[3] == "1873 inf/s off, 14900 with the pick (7.96x)"
    assert util[2] is True and util[3] == "batching off 10%; tune's pick 30%; grid best 35%"


def test_a_pick_the_grid_measured_more_than_10_percent_below_its_best_fails() -> None:
    run = _run("KIND_GPU", _trial(ON, 15000), [_trial(OFF, 1873), _trial(ON, 13000), _trial(ON2, 15787)])
    assert run.checks()[0][2] is False


def test_batching_off_not_below_the_pick_fails() -> None:
    run = _run("KIND_GPU", _trial(ON, 1800), [_trial(OFF, 1873), _trial(ON, 1850)])
    assert run.checks()[1][2] is False


def test_gpu_utilization_missing_fails_on_a_gpu_and_is_na_on_a_cpu_instance() -> None:
    trials = [_trial(OFF, 100), _trial(ON, 400)]
    util = _run("KIND_GPU", _trial(ON, 400), trials, (None, None, None)).checks()[2]
    assert util[2] is False
    assert util[3] == "n/a for every row: Triton exports no nv_gpu_utilization (it sees no GPU: DCGM found none)"
    util = _run("KIND_GPU", _trial(ON, 400), trials, (0.4, None, None)).checks()[2]
    assert util[2] is False and util[3].startswith("batching off 40%; tune's pick n/a (Triton exports no")
    assert _run("KIND_CPU", _trial(ON, 400), trials, (None, None, None)).checks()[2][2] is None


def test_the_table_shows_each_rows_figures_bound_and_engine() -> None:
    from rich.console import Console

    run = _run("KIND_CPU", _trial(ON, 400), [_trial(OFF, 100), _trial(ON, 400)], (None, None, None))
    console = Console(record=True, width=250)
    gb.print_run(console, run)
    text = console.export_text()
    assert "batching: torch_mlp (pytorch, KIND_CPU), perf_analyzer c=64" in text
    for name, inf_s in (("batching off", "100"), ("tune's pick", "400"), ("grid best", "400")):
        line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith(name))
        assert inf_s in line and "perf_analyzer, stable" in line and " n/a " in line
        assert "frontend/client (model 9%)" in line  # 0.9 ms of the 10 ms the client waited
    assert "GPU util n/a: Triton exports no nv_gpu_utilization (it sees no GPU: DCGM found none)" in text
    assert "batching off: the model computes 9% of the request time" in text



def test_a_setting_measured_again_keeps_every_runs_windows() -> None:
    # tune's runoff reports a finalist once per run, then once more with the runs' median (no run of its own).
    w, s = gb.Windows(), tune.Setting(True, 1)
    report = bench.BenchReport(config={}, sent=1, succeeded=1, elapsed_s=1.0, throughput_rps=1.0,
                               inferences_per_s=1.0, p50_ms=1.0, p95_ms=1.0, p99_ms=1.0, mean_ms=1.0, max_ms=None)
    for window in [(0.0, 1.0), (5.0, 6.0)]:
        w.pending.append(window)
        w.on_trial(tune.Trial(s, report, within_budget=True))
    w.on_trial(tune.Trial(s, report, within_budget=True, measured="runoff-median-of-2"))
    assert w.of[s] == [(0.0, 1.0), (5.0, 6.0)]
