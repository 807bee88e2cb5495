"""Capacity planner: the scaler's steady state, the plan of the dev/prod configs, inputs and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops.capacity import plan as planner
from tritonops.cli import app
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config
from tritonops.observability.keda_trigger import ScalingPolicy
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "examples" / "capacity" / "bench-mlp_batched-cpu.json"


def _cfg(env: str) -> TritonStackConfig:
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _replica(rps: float = 1000.0) -> planner.Throughput:
    return planner.Throughput(throughput_rps=rps, inferences_per_s=rps, p95_ms=10.0)


def test_steady_replicas_the_scaler_asks_no_more() -> None:
    policy = ScalingPolicy(threshold=4, min_replicas=1, max_replicas=20)
    # 4500 req/s over 1000 req/s replicas: 5 are at 90% (pending 8.1 each, the scaler wants 11), 6 at 75%
    assert planner.steady_replicas(4500, 1000, policy) == (6, True)


def test_steady_replicas_with_the_served_rate_trigger() -> None:
    policy = ScalingPolicy(threshold=4, min_replicas=1, max_replicas=10)
    # 4500 / 600 = 7.5 per replica target: at 7 the ratio is 1.07, within the HPA's 0.1 tolerance
    assert planner.steady_replicas(4500, 1000, policy, rate_target=600) == (7, True)
    assert planner.steady_replicas(4500, 1000, policy, rate_target=500) == (9, True)  # 4500 / 500 = 9
    assert planner.steady_replicas(4500, 1000, policy, rate_target=5000) == (6, True)  # pending decides


def test_steady_replicas_bounded_by_min_and_max() -> None:
    policy = ScalingPolicy(threshold=4, min_replicas=3, max_replicas=5)
    assert planner.steady_replicas(10, 1000, policy) == (3, True)
    assert planner.steady_replicas(9000, 1000, policy) == (5, False)


def test_scale_to_zero_without_traffic() -> None:
    policy = ScalingPolicy(threshold=4, min_replicas=0, max_replicas=5)
    assert planner.steady_replicas(0, 1000, policy) == (0, True)
    assert planner.steady_replicas(1, 1000, policy) == (1, True)


def test_plan_prod_vision() -> None:
    p = planner.plan(_cfg("prod"), "vision", _replica(), planner.load_traffic("consumer", 5000),
                     planner.load_prices())
    assert (p.instance_type, p.pods_per_node, p.min_replicas, p.max_replicas) == ("g5.2xlarge", 1, 3, 10)
    assert p.fits and p.gpu_memory_need_mib == 4 * 350 + 2 * 200 + 600 + 256 + 512
    assert p.peak_carried and p.replicas_peak == 6 and p.nodes_peak == 6  # 83%: within the HPA tolerance
    assert min(p.hourly_replicas) == 3 and max(p.hourly_replicas) == 6
    costs = {s.name: s.cost_per_day for s in p.strategies}
    assert costs["fixed at peak, on-demand"] == pytest.approx(6 * 24 * 1.212)
    assert costs["autoscaled, spot"] < costs["autoscaled, on-demand"] < costs["fixed at peak, on-demand"]
    assert p.findings == []


def test_plan_dev_time_slicing_puts_two_pods_on_a_node() -> None:
    p = planner.plan(_cfg("dev"), "vision", _replica(), planner.load_traffic("business", 1500),
                     planner.load_prices())
    assert (p.instance_type, p.pods_per_node, p.gpu_memory_share_mib) == ("g6.xlarge", 2, 23034 // 2)
    assert p.replicas_peak == 2 and p.nodes_peak == 1
    zero = next(s for s in p.strategies if s.name.startswith("scale-to-zero"))
    auto = next(s for s in p.strategies if s.name == "autoscaled, on-demand")
    assert zero.node_hours < auto.node_hours  # the business day's empty nights cost nothing


def test_plan_peak_above_max_replicas_is_a_finding() -> None:
    p = planner.plan(_cfg("prod"), "vision", _replica(), planner.load_traffic("consumer", 50_000),
                     planner.load_prices())
    assert not p.peak_carried and "maxReplicas=10" in p.findings[0]


def test_plan_unknown_service_names_the_known_ones() -> None:
    with pytest.raises(planner.InputError, match="known: vision, embeddings"):
        planner.plan(_cfg("prod"), "nope", _replica(), planner.load_traffic("consumer", 10), planner.load_prices())


def test_shipped_prices_have_a_date_and_cover_the_stacks_pools() -> None:
    prices = planner.load_prices()
    region = prices.regions["us-east-1"]
    assert region.as_of and "price list" in region.source
    for env in ("dev", "prod"):
        for pool in _cfg(env).node_pools.values():
            assert pool.instance_type in region.instances


def test_throughput_from_bench_and_tune_json(tmp_path: Path) -> None:
    assert planner.load_throughput(BENCH).throughput_rps > 0
    tune = tmp_path / "tune.json"
    tune.write_text(json.dumps({"model": "m", "recommended": {"throughput_rps": 50.0, "inferences_per_s": 400.0,
                                                              "p95_ms": 9.0}, "trials": []}))
    t = planner.load_throughput(tune)
    assert (t.throughput_rps, t.batch) == (50.0, 8.0)


@pytest.mark.parametrize(("content", "message"), [
    ('{"throughput_rps": NaN, "inferences_per_s": 1}', "throughput_rps: Input should be a finite number"),
    ('{"throughput_rps": -5, "inferences_per_s": 1}', "throughput_rps: Input should be greater than 0"),
    ('{"inferences_per_s": 1}', "throughput_rps: Field required"),
    ('{"throughput_rps": 1,', "line 1: not valid JSON"),
    ('{"model": "m", "recommended": null}', "recommended: the tune run found no setting"),
])
def test_bad_bench_json_names_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "b.json"
    f.write_text(content)
    with pytest.raises(planner.InputError) as e:
        planner.load_throughput(f)
    assert str(f) in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(("content", "message"), [
    ("peak_rps: 10\nhourly: [1, 2]\n", "hourly: List should have at least 24 items"),
    ("peak_rps: .nan\nhourly: " + str([1] * 24) + "\n", "peak_rps: Input should be a finite number"),
    ("peak_rps: 10\nhourly: " + str([-1] + [1] * 23) + "\n", "hourly.0: Input should be greater than or equal"),
    ("peak_rps: 10\nhourly: " + str([0] * 24) + "\n", "hourly: at least one hour needs traffic"),
    ("peak_rps: 10\nhourly: [1\n", "not valid YAML"),
    ("peak_rps: 10\nhourly: " + str([1] * 24) + "\npeak: 10\n", "peak: Extra inputs are not permitted"),
])
def test_bad_traffic_profile_names_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(content)
    with pytest.raises(planner.InputError) as e:
        planner.load_traffic(str(f))
    assert str(f) in str(e.value) and message in str(e.value)


def test_traffic_file_scales_to_its_peak(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("peak_rps: 100\nhourly: " + str([1] * 12 + [2] * 12) + "\n")
    assert planner.load_traffic(str(f)).rps() == [50.0] * 12 + [100.0] * 12
    assert planner.load_traffic(str(f), peak_rps=10).peak_rps == 10


def test_builtin_profile_needs_a_peak() -> None:
    with pytest.raises(planner.InputError, match="needs --peak-rps"):
        planner.load_traffic("consumer")


def test_missing_price_for_a_pool_names_the_instance_type(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"regions": {"us-east-1": {"as_of": "2024-10-01", "source": "s", "instances": {}}}}))
    with pytest.raises(planner.InputError, match="no price for 'g5.2xlarge'"):
        planner.plan(_cfg("prod"), "vision", _replica(), planner.load_traffic("consumer", 10),
                     planner.load_prices(f))


def test_cli_plan_table_and_json() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["plan", "vision", "--env", "prod", "--bench", str(BENCH), "--traffic", "consumer",
                            "--peak-rps", "8000"])
    assert r.exit_code == 0, r.output
    assert "replicas at peak" in r.output and "autoscaled, spot" in r.output
    r = runner.invoke(app, ["plan", "vision", "--env", "prod", "--bench", str(BENCH), "--traffic", "consumer",
                            "--peak-rps", "8000", "--json"])
    data = json.loads(r.output)
    assert data["replicas_peak"] == 6 and data["findings"] == []


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--bench", "/nonexistent.json", "--traffic", "consumer", "--peak-rps", "10"], 2, "not found"),
    (["--bench", str(BENCH), "--traffic", "consumer", "--peak-rps", "nan"], 2, "expected a finite number"),
    (["--bench", str(BENCH), "--traffic", "consumer", "--peak-rps", "-3"], 2, "expected a finite number"),
    (["--bench", str(BENCH), "--traffic", "consumer", "--peak-rps", "100000"], 1, "maxReplicas=10"),
])
def test_cli_plan_exit_codes(args: list[str], code: int, message: str) -> None:
    r = CliRunner().invoke(app, ["plan", "vision", "--env", "prod", *args])
    assert r.exit_code == code and message in r.output
    assert "Traceback" not in r.output


def test_cli_plan_missing_stack_file_is_a_usage_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["plan", "vision", "--env", "prod", "--project-dir", str(tmp_path), "--bench",
                                 str(BENCH), "--traffic", "consumer", "--peak-rps", "10"])
    assert r.exit_code == 2 and "no stack config file" in r.output
