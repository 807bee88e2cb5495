"""Pure parts of the load generator and the tuner: target guard, statistics deltas, sweep grid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException
from typer.testing import CliRunner

from infra.cli import app
from infra.model_repo import pbtxt
from infra.model_repo.spec import DynamicBatching, InstanceGroup, ModelInput, ModelOutput, ModelSpec
from infra.triton import bench, tune


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "http://127.0.0.1:8001", "localhost:8000", "[::1]:8000",
                                 "127.0.0.2:8000"])
def test_loopback_targets_are_allowed(url: str) -> None:
    assert bench.check_target(url)


@pytest.mark.parametrize("url", ["10.0.0.5:8000", "8.8.8.8:8001", "http://192.168.1.10:8000", ":8000"])
def test_other_targets_are_refused(url: str) -> None:
    with pytest.raises(bench.TargetNotAllowed):
        bench.check_target(url)


def test_an_explicitly_allowed_project_host_is_accepted() -> None:
    assert bench.check_target("10.0.0.5:8000", allowed_hosts=["10.0.0.5"]) == "10.0.0.5"
    with pytest.raises(bench.TargetNotAllowed):
        bench.check_target("10.0.0.6:8000", allowed_hosts=["10.0.0.5"])


def test_run_refuses_a_remote_target_before_connecting() -> None:
    cfg = bench.BenchConfig(url="203.0.113.7:8000", model="m", max_requests=1, max_seconds=1)
    with pytest.raises(bench.TargetNotAllowed):
        bench.run(cfg)


@pytest.mark.parametrize(
    ("field", "value"),
    [("concurrency", 0), ("max_requests", 0), ("max_seconds", 0), ("rate", -1), ("batch_size", 0)],
)
def test_bench_config_bounds(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        bench.BenchConfig(url="127.0.0.1:8000", model="m", **{field: value})


def _stats(success: int, queue_ns: int, infer_ns: int, inf: int, execs: int, fail: int = 0) -> dict:
    return {"model_stats": [{
        "name": "m", "inference_count": inf, "execution_count": execs,
        "inference_stats": {
            "success": {"count": success, "ns": success * 3_000_000},
            "fail": {"count": fail, "ns": 0},
            "queue": {"count": success, "ns": queue_ns},
            "compute_input": {"count": success, "ns": success * 100_000},
            "compute_infer": {"count": success, "ns": infer_ns},
            "compute_output": {"count": success, "ns": success * 50_000},
        },
    }]}


def test_breakdown_is_the_delta_between_snapshots() -> None:
    before = _stats(100, 50_000_000, 100_000_000, 100, 100)
    after = _stats(300, 250_000_000, 300_000_000, 900, 150, fail=4)
    b = bench.breakdown(before, after, "m")
    assert b.requests == 200
    assert b.failures == 4
    assert b.queue_ms == pytest.approx(1.0)  # 200e6 ns / 200 requests
    assert b.compute_infer_ms == pytest.approx(1.0)
    assert b.compute_input_ms == pytest.approx(0.1)
    assert b.compute_output_ms == pytest.approx(0.05)
    assert b.request_ms == pytest.approx(3.0)
    assert b.batch_size == pytest.approx(800 / 50)


def test_error_kinds() -> None:
    assert bench.error_kind(TimeoutError()) == "timeout"
    assert bench.error_kind(InferenceServerException("boom", status="500")) == "server:500"
    assert bench.error_kind(InferenceServerException("x", status="StatusCode.UNAVAILABLE")) == "server:UNAVAILABLE"
    assert bench.error_kind(ConnectionRefusedError()) == "connection"
    assert bench.error_kind(InferenceServerException("Deadline Exceeded", status="StatusCode.DEADLINE_EXCEEDED")) \
        == "timeout"


def _spec() -> ModelSpec:
    return ModelSpec(
        name="m", backend="python", max_batch_size=8,
        input=[ModelInput(name="x", data_type="TYPE_FP32", dims=[4])],
        output=[ModelOutput(name="y", data_type="TYPE_FP32", dims=[4])],
        instance_group=[InstanceGroup(kind="KIND_CPU", count=2)],
        dynamic_batching=DynamicBatching(preferred_batch_size=[4], max_queue_delay_microseconds=100),
    )


def test_grid_has_batching_off_and_on_per_instance_count() -> None:
    grid = tune.default_grid(8, instance_counts=(1, 2), queue_delays_us=(0, 1000))
    assert tune.Setting(False, 1) in grid and tune.Setting(False, 2) in grid
    assert tune.Setting(True, 2, (8,), 1000) in grid
    assert len(grid) == 2 + 2 * 2 * 2
    assert tune.default_grid(0) == [tune.Setting(False, 1), tune.Setting(False, 2)]


def test_apply_changes_only_batching_and_instances() -> None:
    spec = _spec()
    on = tune.apply(spec, tune.Setting(True, 3, (8,), 2000))
    assert on.dynamic_batching == DynamicBatching(preferred_batch_size=[8], max_queue_delay_microseconds=2000)
    assert on.instance_group == [InstanceGroup(kind="KIND_CPU", count=3)]
    assert on.input == spec.input and on.max_batch_size == 8
    off = tune.apply(spec, tune.Setting(False, 1))
    assert off.dynamic_batching is None
    assert "dynamic_batching" not in pbtxt.render(off)
    assert spec.dynamic_batching is not None  # the input spec is not modified


def test_apply_refuses_batching_without_a_batch_dimension() -> None:
    spec = _spec().model_copy(update={"max_batch_size": 0})
    with pytest.raises(ValueError, match="max_batch_size"):
        tune.apply(spec, tune.Setting(True, 1))


def test_config_json_is_tritons_model_config() -> None:
    data = json.loads(tune.config_json(tune.apply(_spec(), tune.Setting(True, 1, (), 500))))
    assert data["name"] == "m"
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == "500"  # int64 as string in JSON
    assert data["instance_group"][0]["count"] == 1


def _trial(setting: tune.Setting, tput: float, p95: float, errors: dict | None = None,
           budget: float = 50) -> tune.Trial:
    report = bench.BenchReport(config={}, sent=1, succeeded=1, elapsed_s=1, throughput_rps=tput,
                               inferences_per_s=tput, p50_ms=p95 / 2, p95_ms=p95, p99_ms=p95, mean_ms=p95,
                               max_ms=p95, errors=errors or {})
    return tune.Trial(setting, report, within_budget=p95 <= budget)


def test_recommend_takes_the_fastest_within_budget_without_errors() -> None:
    trials = [
        _trial(tune.Setting(False, 1), 100, 20),
        _trial(tune.Setting(True, 1, (), 0), 400, 30),
        _trial(tune.Setting(True, 2, (), 2000), 900, 80),  # over budget
        _trial(tune.Setting(True, 1, (8,), 500), 1000, 10, errors={"server:500": 3}),  # errors
    ]
    best = tune.recommend(trials)
    assert best is not None and best.setting == tune.Setting(True, 1, (), 0)
    assert tune.recommend(trials[2:]) is None


def test_write_recommendation_and_plot(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text(pbtxt.render(_spec()))
    tune.write_recommendation(config, tune.Setting(True, 1, (8,), 1500))
    spec = pbtxt.parse(config.read_text())
    assert spec.dynamic_batching == DynamicBatching(preferred_batch_size=[8], max_queue_delay_microseconds=1500)
    assert spec.instance_group[0].count == 1
    trials = [_trial(tune.Setting(False, 1), 100, 20), _trial(tune.Setting(True, 1, (), 0), 400, 30)]
    result = tune.TuneResult("m", 50, trials, tune.recommend(trials))
    png = tune.plot(result, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_cli_rejects_bad_bounds_before_sending_anything() -> None:
    result = CliRunner().invoke(app, ["bench", "m", "--url", "127.0.0.1:1", "--concurrency", "0"])
    assert result.exit_code == 2
    assert "concurrency" in result.output


def test_tune_cli_names_a_missing_config(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["tune", "nope", "--repository", str(tmp_path), "--url", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "nope/config.pbtxt" in result.output
