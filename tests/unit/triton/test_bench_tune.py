"""Pure parts of the load generator and the tuner: target guard, statistics deltas, sweep grid."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException
from tritonops.cli import app
from tritonops.model_repo import pbtxt, pbtxt_edit
from tritonops.model_repo.spec import DynamicBatching, InstanceGroup, ModelInput, ModelOutput, ModelSpec
from tritonops.triton import bench, paired, perf_analyzer, server, tune
from tritonops.triton.load_config import BenchConfig
from typer.testing import CliRunner


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



def test_tune_refuses_a_remote_target_unless_allowed_and_passes_the_allowance_on() -> None:
    """tune against an edge node (issue 35): --allow-host as bench has it (it had none: never a node)."""
    repo = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
    result = CliRunner().invoke(app, ["tune", "mlp_batched", "--repository", str(repo), "--url", "10.0.0.5:8000",
                                      "--no-write"])
    assert result.exit_code == 2 and "--allow-host" in " ".join(result.output.split()), result.output
    cfg = tune.TuneConfig(url="10.0.0.5:8000", model="m", allowed_hosts=("10.0.0.5",))
    assert cfg.load.allowed_hosts == ("10.0.0.5",) and bench.check_target(cfg.url, cfg.allowed_hosts) == "10.0.0.5"

def test_run_refuses_a_remote_target_before_connecting() -> None:
    cfg = BenchConfig(url="203.0.113.7:8000", model="m", max_requests=1, max_seconds=1)
    with pytest.raises(bench.TargetNotAllowed):
        bench.run(cfg)


@pytest.mark.parametrize(
    ("field", "value"),
    [("concurrency", 0), ("max_requests", 0), ("max_seconds", 0), ("rate", -1), ("batch_size", 0),
     ("max_windows", 2)],
)
def test_bench_config_bounds(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        BenchConfig(url="127.0.0.1:8000", model="m", **{field: value})


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
    grid = tune.Space(8, instance_counts=(1, 2), queue_delays_us=(0, 1000)).grid()
    assert tune.Setting(False, 1) in grid and tune.Setting(False, 2) in grid
    assert tune.Setting(True, 2, (8,), 1000) in grid
    assert len(grid) == 2 + 2 * 2 * 2
    assert tune.Space(0).grid() == [tune.Setting(False, 1), tune.Setting(False, 2)]


@pytest.mark.parametrize("counts, delays", [((), (0,)), ((0, 1), (0,)), ((1,), ()), ((1,), (-1,))])
def test_space_refuses_empty_or_impossible_values(counts: tuple[int, ...], delays: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        tune.Space(8, counts, delays)


def _climb(space: tune.Space, figures: Callable[[tune.Setting], tuple[float, float]],
           budget: float = 50) -> list[tune.Setting]:
    """The settings climb measures, in order, when ``figures(setting)`` gives (throughput, p95)."""
    seen: list[tune.Setting] = []

    def trial(s: tune.Setting) -> tune.Trial:
        seen.append(s)
        return _trial(s, *figures(s), budget=budget)

    tune.climb(space, trial)
    return seen


def _batching_pays(s: tune.Setting) -> tuple[float, float]:
    """A model where batching multiplies throughput, a second instance adds 60%, delays and preferred
    sizes change nothing beyond noise."""
    tput = (400.0 if s.dynamic_batching else 100.0) * (1.6 if s.instances == 2 else 1.0)
    return tput * (1.02 if s.max_queue_delay_us else 1.0), 20.0


def test_climb_keeps_what_gains_and_stops_a_dimension_at_the_first_step_that_does_not() -> None:
    space = tune.Space(8, instance_counts=(1, 2, 4), queue_delays_us=(0, 500, 2000))
    seen = _climb(space, lambda s: _batching_pays(s) if s.instances < 4 else (640.0, 20.0))
    assert seen == [
        tune.Setting(False, 1), tune.Setting(True, 1, (), 0),  # batching off, on
        tune.Setting(True, 2, (), 0), tune.Setting(True, 4, (), 0),  # 2 gains 60%, 4 gains nothing: stop
        tune.Setting(True, 2, (), 500),  # 2% is noise: no longer delay is tried
        tune.Setting(True, 2, (8,), 0),  # the max batch size as preferred size, at the best so far
    ]
    assert len(seen) < len(space.grid())


def test_climb_without_batching_gains_only_climbs_instances() -> None:
    seen = _climb(tune.Space(8, (1, 2), (0, 2000)),
                  lambda s: (100.0 * s.instances, 20.0))  # batching changes nothing, instances scale
    assert seen == [tune.Setting(False, 1), tune.Setting(True, 1, (), 0), tune.Setting(False, 2)]
    assert _climb(tune.Space(0, (1, 2)), lambda s: (100.0 * s.instances, 20.0)) == [
        tune.Setting(False, 1), tune.Setting(False, 2)]  # no batch dimension: batching is never tried


def test_climb_moves_towards_the_budget_while_nothing_meets_it() -> None:
    # Every setting is over budget; more instances lower p95, so climb keeps adding them.
    seen = _climb(tune.Space(0, (1, 2, 3)), lambda s: (100.0, 300.0 / s.instances), budget=50)
    assert seen == [tune.Setting(False, 1), tune.Setting(False, 2), tune.Setting(False, 3)]


@pytest.mark.parametrize("grpc_gain", [1.3, 1.02])
def test_climb_tries_the_best_over_grpc_last_and_keeps_it_only_when_it_gains(grpc_gain: float) -> None:
    space = tune.Space(8, (1, 2), (0, 2000), protocols=("http", "grpc"))
    seen = _climb(space, lambda s: (_batching_pays(s)[0] * (grpc_gain if s.protocol == "grpc" else 1.0), 20.0))
    best = tune.Setting(True, 2, (), 0)
    assert seen[-2:] == [tune.Setting(True, 2, (8,), 0), replace(best, protocol="grpc")]
    trials = [_trial(s, _batching_pays(s)[0] * (grpc_gain if s.protocol == "grpc" else 1.0), 20.0) for s in seen]
    assert tune.recommend(trials).setting.protocol == ("grpc" if grpc_gain > 1.05 else "http")
    assert replace(best, protocol="grpc").label == "batching pref=- delay=0us, 2 inst, grpc"


def test_the_grid_measures_every_setting_over_each_protocol_http_first() -> None:
    http = tune.Space(8, (1,), (0,)).grid()
    both = tune.Space(8, (1,), (0,), protocols=("http", "grpc")).grid()
    assert both == http + [replace(s, protocol="grpc") for s in http]


def test_tune_over_grpc_needs_its_address_and_no_admin_key_for_perf_analyzer() -> None:
    assert tune.TuneConfig(url="127.0.0.1:8000", model="m", grpc_url="127.0.0.1:8001").space(8).protocols == (
        "http", "grpc")
    with pytest.raises(ValueError, match="perf_analyzer sends no headers over gRPC"):
        tune.TuneConfig(url="127.0.0.1:8000", model="m", grpc_url="127.0.0.1:8001",
                        headers=(("triton-admin-key", "k"),))


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


def test_recommend_takes_the_first_measured_of_settings_within_noise_of_the_fastest() -> None:
    trials = [
        _trial(tune.Setting(True, 2, (), 0), 2390, 40),
        _trial(tune.Setting(True, 2, (), 2000), 2446, 39),  # 2.3% faster: noise, and a longer queue delay
        _trial(tune.Setting(True, 2, (8,), 0), 2329, 39),
    ]
    best = tune.recommend(trials)
    assert best is not None and best.setting == tune.Setting(True, 2, (), 0)
    faster = tune.recommend([*trials[:1], _trial(tune.Setting(True, 2, (), 2000), 2600, 39)])  # 8.8%: real
    assert faster is not None and faster.setting.max_queue_delay_us == 2000


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


# --- bad input (issue 13): usage errors exit 2, an unreachable server exits 3, nothing is sent -----------

@pytest.mark.parametrize("rate", ["nan", "inf", "-5", "0"])
def test_bench_cli_refuses_a_rate_that_is_not_a_positive_number(rate: str) -> None:
    result = CliRunner().invoke(app, ["bench", "m", "--url", "127.0.0.1:1", "--mode", "open", "--rate", rate])
    assert result.exit_code == 2, result.output
    assert "rate: must be a finite number > 0" in result.output


@pytest.mark.parametrize("field", ["rate", "max_seconds", "request_timeout_s", "stability_pct"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_bench_config_refuses_nan_and_inf(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        BenchConfig(url="127.0.0.1:8000", model="m", **{field: value})


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bench_cli_exits_3_when_no_triton_answers(protocol: str) -> None:
    port = server.free_port()  # nothing listens there
    result = CliRunner().invoke(app, ["bench", "m", "--url", f"127.0.0.1:{port}", "--protocol", protocol,
                                      "--duration", "1"])
    assert result.exit_code == 3, result.output
    assert f"127.0.0.1:{port}: no Triton answers over {protocol}" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def _repo(tmp_path: Path, text: str | bytes) -> Path:
    (tmp_path / "m").mkdir()
    config = tmp_path / "m" / "config.pbtxt"
    config.write_bytes(text if isinstance(text, bytes) else text.encode())
    return config


def test_tune_cli_exits_3_when_no_triton_answers(tmp_path: Path) -> None:
    _repo(tmp_path, pbtxt.render(_spec()))
    port = server.free_port()
    result = CliRunner().invoke(app, ["tune", "m", "--repository", str(tmp_path), "--url", f"127.0.0.1:{port}"])
    assert result.exit_code == 3, result.output
    assert "no Triton answers" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("content", "message"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
    (b"name: \"m\"\nbackend: \"caf\xe9\"\n", "not UTF-8"),
])
def test_tune_cli_names_an_unusable_config_file(tmp_path: Path, content: bytes, message: str) -> None:
    config = _repo(tmp_path, content)
    result = CliRunner().invoke(app, ["tune", "m", "--repository", str(tmp_path), "--url", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert str(config) in result.output.replace("\n", "") and message in " ".join(result.output.split())


def test_tune_cli_refuses_a_nan_budget(tmp_path: Path) -> None:
    _repo(tmp_path, pbtxt.render(_spec()))
    result = CliRunner().invoke(app, ["tune", "m", "--repository", str(tmp_path), "--url", "127.0.0.1:1",
                                      "--budget-ms", "nan"])
    assert result.exit_code == 2, result.output
    assert "budget-ms" in result.output


def test_smoke_cli_refuses_a_repository_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    result = CliRunner().invoke(app, ["smoke", "http://127.0.0.1:1", "--repository", str(missing)])
    assert result.exit_code == 2, result.output
    assert f"--repository {missing}: not a folder" in " ".join(result.output.split())


# --- the perf_analyzer engine: its command line, its CSV, its failures ------------------------------------

PA_CSV = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
    "Avg latency,request/response,response wait\n"
    "16,4160.8,2,438,1436,105,542,1313,0,3620,4818,5606,8151,3840,2,3825\n"
)


def test_perf_analyzer_csv_is_read_by_column_name() -> None:
    m = perf_analyzer.parse_csv(PA_CSV)
    assert m.inferences_per_s == pytest.approx(4160.8)
    assert (m.p50_ms, m.p90_ms, m.p95_ms, m.p99_ms, m.mean_ms) == pytest.approx((3.62, 4.818, 5.606, 8.151, 3.84))
    with pytest.raises(perf_analyzer.PerfAnalyzerError, match="p95 latency"):
        perf_analyzer.parse_csv(PA_CSV.replace("p95 latency", "p95"))
    with pytest.raises(perf_analyzer.PerfAnalyzerError, match="empty"):
        perf_analyzer.parse_csv("")


def test_perf_analyzer_arguments_carry_the_load_and_its_bounds() -> None:
    closed = BenchConfig(url="http://127.0.0.1:8000", model="m", concurrency=64, max_requests=None,
                         max_seconds=10, stability_pct=20, engine="perf_analyzer")
    args = perf_analyzer.arguments(closed)
    assert args[:8] == ["-m", "m", "-u", "127.0.0.1:8000", "-i", "http", "-b", "1"]
    assert args[args.index("--concurrency-range") + 1] == "64:64"
    assert args[args.index("--measurement-interval") + 1] == "2000"  # 10 s over 5 windows at most
    assert args[args.index("--max-trials") + 1] == "5" and args[args.index("--stability-percentage") + 1] == "20"
    opened = replace(closed, mode="open", rate=250.0, max_requests=3000, protocol="grpc", model_version="2")
    args = perf_analyzer.arguments(opened)
    assert args[args.index("--request-rate-range") + 1] == "250:250"
    assert args[args.index("--request-distribution") + 1] == "poisson"
    assert args[args.index("--request-count") + 1] == "3000" and "--measurement-interval" not in args
    assert args[args.index("-x") + 1] == "2" and args[args.index("-i") + 1] == "grpc"


def test_perf_analyzer_failures_read_as_one_clear_line() -> None:
    cfg = BenchConfig(url="127.0.0.1:8000", model="m", max_requests=None, max_seconds=5)
    unstable = "Failed to obtain stable measurement within 5 measurement windows for concurrency 16."
    assert "no stable measurement" in perf_analyzer.failure(unstable, cfg)
    assert "--duration" in perf_analyzer.failure(unstable, cfg)
    assert perf_analyzer.failure("*** Measurement Settings ***\nerror: failed to get model metadata: boom\n", cfg) \
        == "perf_analyzer failed: error: failed to get model metadata: boom"


@pytest.mark.parametrize(("library", "package"), [("libb64.so.0d", "libb64-0d"),
                                                  ("libcudart.so.12", "nvidia-cuda-runtime-cu12")])
def test_a_missing_shared_library_names_its_package(tmp_path: Path, library: str, package: str) -> None:
    fake = tmp_path / "perf_analyzer"
    fake.write_text(f"#!/bin/sh\necho 'perf_analyzer: error while loading shared libraries: {library}: "
                    "cannot open shared object file: No such file or directory' >&2\nexit 127\n")
    fake.chmod(0o755)
    with pytest.raises(perf_analyzer.PerfAnalyzerError, match=package):
        perf_analyzer.PerfAnalyzer(fake, None).check()


def test_the_cuda_runtime_wheel_goes_on_the_loader_path(tmp_path: Path) -> None:
    env = perf_analyzer.PerfAnalyzer(tmp_path / "pa", tmp_path / "cudart").env()
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(tmp_path / "cudart")


# --- the recommendation keeps the operator's file -----------------------------------------------------------

OPERATOR_CONFIG = """\
# Copyright 2026 Example Corp. Licensed under the Apache License, Version 2.0.
# SPDX-License-Identifier: Apache-2.0

# The scoring model: keep backend first, our runbook greps for it.
backend: "python"
name: "m"   # the name Triton serves
max_batch_size: 8

instance_group [
  {
    kind: KIND_CPU  # two cores on the gateways
    count: 2
  }
]
input {
  name: "x"
  data_type: TYPE_FP32
  dims: [ 4 ]
}
# batching: tuned 2026-01
dynamic_batching { preferred_batch_size: 4 max_queue_delay_microseconds: 100 }
output {
  name: "y"
  data_type: TYPE_FP32
  dims: [ 4 ]
}
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
"""


def test_writing_a_recommendation_keeps_comments_header_and_field_order(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text(OPERATOR_CONFIG)
    config.chmod(0o640)
    new = tune.write_recommendation(config, tune.Setting(True, 1, (8,), 1500))
    text = config.read_text()
    assert text.startswith(OPERATOR_CONFIG.split("instance_group")[0])  # header, comments, order up to there
    assert "# batching: tuned 2026-01\n" in text and "# the name Triton serves" in text
    assert text.endswith(OPERATOR_CONFIG.split("dynamic_batching")[1].split("}\n", 1)[1])  # output, parameters
    assert [s.name for s in pbtxt_edit.spans(text)] == [s.name for s in pbtxt_edit.spans(OPERATOR_CONFIG)]
    # The result parses to exactly the recommended configuration, through Triton's own protobuf.
    assert pbtxt.parse_proto(text) == pbtxt.spec_to_proto(new)
    assert pbtxt.parse(text).dynamic_batching == DynamicBatching(preferred_batch_size=[8],
                                                                 max_queue_delay_microseconds=1500)
    assert config.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pbtxt"]  # no temp file left


def test_batching_off_removes_only_the_batching_block(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text(OPERATOR_CONFIG)
    tune.write_recommendation(config, tune.Setting(False, 2))
    text = config.read_text()
    assert "dynamic_batching" not in text
    assert text == OPERATOR_CONFIG.replace(
        "dynamic_batching { preferred_batch_size: 4 max_queue_delay_microseconds: 100 }\n", "")
    assert pbtxt.parse(text).dynamic_batching is None


def test_a_field_the_operator_never_wrote_is_appended(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    original = 'name: "m"  # plain\nbackend: "python"\nmax_batch_size: 8\n'
    config.write_text(original)
    tune.write_recommendation(config, tune.Setting(True, 3, (), 0))
    text = config.read_text()
    assert text.startswith(original)
    spec = pbtxt.parse(text)
    assert spec.instance_group[0].count == 3 and spec.dynamic_batching == DynamicBatching()


def test_edit_refuses_a_field_modelconfig_lacks() -> None:
    with pytest.raises(ValueError, match="no_such_field"):
        pbtxt_edit.set_fields(OPERATOR_CONFIG, pbtxt.parse_proto(OPERATOR_CONFIG), ["no_such_field"])


def test_a_crash_mid_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text(OPERATOR_CONFIG)

    def crash(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(pbtxt.ModelConfigError, match="No space left"):
        tune.write_recommendation(config, tune.Setting(True, 1, (8,), 1500))
    assert config.read_text() == OPERATOR_CONFIG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pbtxt"]


def test_a_symlinked_config_is_not_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.pbtxt"
    real.write_text(OPERATOR_CONFIG)
    link = tmp_path / "config.pbtxt"
    link.symlink_to(real)
    with pytest.raises(pbtxt.ModelConfigError, match="symlink"):
        tune.write_recommendation(link, tune.Setting(False, 1))
    assert link.is_symlink() and real.read_text() == OPERATOR_CONFIG


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_url_with_a_scheme_is_the_same_endpoint(command: str, tmp_path: Path) -> None:
    # `--url http://127.0.0.1:PORT`, as `smoke` takes it, reaches the same check as host:port (it was a traceback).
    _repo(tmp_path, pbtxt.render(_spec()))
    port = server.free_port()
    extra = ["--repository", str(tmp_path)] if command == "tune" else ["--duration", "1"]
    result = CliRunner().invoke(app, [command, "m", "--url", f"http://127.0.0.1:{port}", *extra])
    assert result.exit_code == 3, result.output
    assert f"127.0.0.1:{port}" in result.output and "no Triton answers" in " ".join(result.output.split())
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("url", "message"), [("https://127.0.0.1:8000", "plain HTTP or gRPC"),
                                              ("ftp://127.0.0.1:8000", "expected http://HOST:PORT")])
def test_bench_refuses_a_scheme_it_cannot_measure(url: str, message: str) -> None:
    result = CliRunner().invoke(app, ["bench", "m", "--url", url])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output


def test_tune_config_holds_tunes_settings_and_checks_them() -> None:
    cfg = tune.TuneConfig(url="127.0.0.1:8000", model="m", instance_counts=(1, 4), headers=(("h", "secret"),))
    assert (cfg.concurrency, cfg.budget_ms, cfg.search, cfg.engine) == (16, 50.0, "climb", "perf_analyzer")
    assert cfg.load == BenchConfig(url="127.0.0.1:8000", model="m", concurrency=16, max_requests=None,
                                   max_seconds=5.0, engine="perf_analyzer", headers=(("h", "secret"),))
    assert cfg.space(8) == tune.Space(8, (1, 4), (0, 500, 2000))
    assert "secret" not in repr(cfg)
    for bad, message in (({"budget_ms": float("nan")}, "budget-ms"), ({"search": "random"}, "search"),
                         ({"concurrency": 0}, "concurrency"), ({"max_seconds": 0.0}, "max_seconds")):
        with pytest.raises(ValueError, match=message):
            tune.TuneConfig(url="127.0.0.1:8000", model="m", **bad)  # type: ignore[arg-type]


def test_the_tune_command_takes_its_defaults_from_tune_config() -> None:
    """One default per setting: the CLI's are TuneConfig's (bench's BenchConfig's), not literals of their own."""
    import typer

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    defaults = {p.name: p.default for p in commands["tune"].params}
    cfg = tune.TuneConfig(url="u", model="m")
    assert {k: defaults[k] for k in ("budget_ms", "concurrency", "requests", "duration", "engine", "stability",
                                     "instances", "delays", "search")} == {
        "budget_ms": cfg.budget_ms, "concurrency": cfg.concurrency, "requests": cfg.max_requests,
        "duration": cfg.max_seconds, "engine": cfg.engine, "stability": cfg.stability_pct,
        "instances": ",".join(map(str, cfg.instance_counts)), "delays": ",".join(map(str, cfg.queue_delays_us)),
        "search": cfg.search}
    bench_defaults = {p.name: p.default for p in commands["bench"].params}
    load = BenchConfig(url="u", model="m")
    assert (bench_defaults["concurrency"], bench_defaults["rate"], bench_defaults["duration"],
            bench_defaults["stability"]) == (load.concurrency, load.rate, load.max_seconds, load.stability_pct)


@pytest.mark.parametrize("grpc_tput", [900.0, 1500.0])
def test_the_report_says_which_protocol_the_clients_should_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], grpc_tput: float) -> None:
    import typer
    from tritonops.cli import load as load_cli

    http, grpc = tune.Setting(True, 1, (), 0), tune.Setting(True, 1, (), 0, protocol="grpc")
    trials = [_trial(http, 1000.0, 5.0), _trial(grpc, grpc_tput, 5.0)]
    result = tune.TuneResult("m", 50.0, trials, tune.recommend(trials))
    cfg = tune.TuneConfig(url="127.0.0.1:8000", model="m", grpc_url="127.0.0.1:8001")
    with pytest.raises(typer.Exit):
        load_cli._tune_report(result, cfg, tmp_path / "config.pbtxt", tmp_path / "p.png",  # noqa: SLF001
                              write=False, as_json=False)
    out = " ".join(capsys.readouterr().out.split())
    if grpc_tput > 1000:
        assert "recommended: batching pref=- delay=0us, 1 inst, grpc" in out
        assert "clients: send over grpc (not part of config.pbtxt)" in out
    else:
        assert "over gRPC it read 900.0 inf/s, p95 5.00 ms: not a gain beyond the noise, so HTTP stays" in out


def test_the_report_prints_every_trials_spread_and_the_paired_verdict(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import typer
    from tritonops.cli import load as load_cli

    a, b = tune.Setting(True, 1, (), 0), tune.Setting(True, 1, (), 500)
    trials = [_trial(a, 1000.0, 5.0), _trial(b, 1030.0, 4.0)]
    trials[1].report.spread = 0.12
    pairs = [(_trial(a, 1000.0, 5.0), _trial(b, f, 5.0)) for f in (960.0, 1010.0, 1040.0, 1080.0, 1000.0)]
    comparison = paired.Comparison.of(a, b, pairs)
    result = tune.TuneResult("m", 50.0, trials, tune.recommend(trials, comparisons=[comparison]),
                             comparisons=[comparison])
    cfg = tune.TuneConfig(url="127.0.0.1:8000", model="m")
    for as_json in (False, True):
        with pytest.raises(typer.Exit):
            load_cli._tune_report(result, cfg, tmp_path / "config.pbtxt", tmp_path / "p.png",  # noqa: SLF001
                                  write=False, as_json=as_json)
        out = capsys.readouterr().out
        if as_json:
            got = json.loads(out)["comparisons"]
            assert [(c["verdict"], c["kept"], c["bound"]) for c in got] == [
                ("indistinguishable", a.label, [0.96, 1.08])]
        else:
            text = " ".join(out.split())
            assert ("runoff: indistinguishable: kept the simpler setting batching pref=- delay=0us, 1 inst over "
                    "batching pref=- delay=500us, 1 inst: throughput x1.01 [0.96, 1.08]") in text
            assert "+-12%" in text and "recommended: batching pref=- delay=0us, 1 inst" in text
