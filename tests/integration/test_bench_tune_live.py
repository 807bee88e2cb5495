"""Live: ``tritonops bench`` and ``tritonops tune`` against a real CPU-only Triton on loopback."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonops.cli import app
from tritonops.model_repo import pbtxt
from tritonops.triton import bench, bounds, perf_analyzer, server
from tritonops.triton.load_config import BenchConfig
from typer.testing import CliRunner

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
SAMPLES = HERE.parent.parent / "examples" / "model_repository"
TUNED = "mlp_batched" if (SAMPLES / "mlp_batched").is_dir() else "faulty"


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.TritonServer]:
    work = tmp_path_factory.mktemp("bench")
    repo = work / "repo"
    shutil.copytree(HERE / "fault_repo", repo)
    if TUNED != "faulty":
        shutil.copytree(SAMPLES / TUNED, repo / TUNED, ignore=shutil.ignore_patterns("__pycache__"))
    with server.running(repo, model_control_mode="explicit", load_models=["faulty", TUNED],
                        extra_args=["--exit-timeout-secs=5"], workdir=work / "triton") as s:
        yield s


@pytest.fixture
def fault(triton: server.TritonServer) -> Iterator[Path]:
    control = triton.repository / "fault_control.json"
    yield control
    control.unlink(missing_ok=True)


@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bench_counts_every_request_and_reads_server_breakdown(triton: server.TritonServer, protocol: str,
                                                               mode: str) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    cfg = BenchConfig(url=url, model="faulty", protocol=protocol, mode=mode,  # type: ignore[arg-type]
                      concurrency=4, rate=200, max_requests=120, max_seconds=20)
    r = bench.run(cfg)
    assert r.sent == r.succeeded == 120
    assert r.errors == {}
    assert r.stopped_by == "count"
    assert r.p50_ms <= r.p95_ms <= r.p99_ms <= r.max_ms
    assert r.server.requests == 120  # Triton's statistics API agrees with the client
    assert r.server.executions == 120 and r.server.batch_size == 1.0
    assert r.server.compute_infer_ms > 0 and r.server.queue_ms > 0
    if mode == "open":  # Poisson at 200/s: 120 arrivals take about 0.6 s
        assert 0.2 < r.elapsed_s < 5


def test_bench_stops_on_time_and_sees_a_slow_model(triton: server.TritonServer, fault: Path) -> None:
    fault.write_text(json.dumps({"delay_ms": 100}))
    r = bench.run(BenchConfig(url=triton.http_url, model="faulty", concurrency=2, max_requests=10_000,
                              max_seconds=1.5))
    assert r.stopped_by == "time"
    assert r.sent < 100
    assert 1.4 < r.elapsed_s < 3
    assert r.p50_ms >= 100
    assert r.server.compute_infer_ms >= 95  # the delay is inside the model's execute()
    assert r.server.queue_ms >= 50  # two clients, one instance: one waits while the other runs



def test_what_bounds_a_slow_model_is_its_compute_and_two_clients_on_one_instance_queue(
        triton: server.TritonServer, fault: Path) -> None:
    """Triton's own counters name the bound (issue 35 item 2): a model that sleeps 60 ms in execute()."""
    fault.write_text(json.dumps({"delay_ms": 60}))
    names = {}
    for clients in (1, 3):
        r = bench.run(BenchConfig(url=triton.http_url, model="faulty", concurrency=clients, max_requests=12,
                                  max_seconds=20))
        b = bounds.bound(r.server, r.mean_ms)
        assert b is not None and sum(b.shares.values()) == pytest.approx(1.0)
        names[clients] = b.name
    assert names == {1: "compute infer", 3: "queue"}  # 3 clients on one instance: two wait for each run

@pytest.mark.parametrize(("protocol", "kind"), [("http", "server:500"), ("grpc", "server:INTERNAL")])
def test_bench_counts_errors_by_kind(triton: server.TritonServer, fault: Path, protocol: str, kind: str) -> None:
    fault.write_text(json.dumps({"fail": True}))
    url = triton.http_url if protocol == "http" else triton.grpc_url
    r = bench.run(BenchConfig(url=url, model="faulty", protocol=protocol,  # type: ignore[arg-type]
                              max_requests=30, max_seconds=10))
    assert r.errors == {kind: 30}
    assert r.succeeded == 0
    assert r.server.failures == 30


def test_bench_cli_json(triton: server.TritonServer) -> None:
    result = CliRunner().invoke(app, ["bench", "faulty", "--url", triton.grpc_url, "--protocol", "grpc",
                                      "--requests", "40", "--concurrency", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["engine"] == "perf_analyzer"  # the default engine
    assert report["succeeded"] == 40
    assert report["server"]["requests"] == 40
    assert set(report) >= {"throughput_rps", "p50_ms", "p95_ms", "p99_ms", "errors", "server", "bound"}
    assert report["bound"]["bound"] in bounds.LIFT and sum(report["bound"]["shares"].values()) == pytest.approx(1, 0.01)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_engine_measures_and_keeps_the_server_breakdown(triton: server.TritonServer,
                                                                      protocol: str) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    cfg = BenchConfig(url=url, model=TUNED, protocol=protocol, concurrency=8,  # type: ignore[arg-type]
                      max_requests=None, max_seconds=3, stability_pct=100, engine="perf_analyzer")
    start = time.monotonic()
    r = bench.run(cfg)
    assert time.monotonic() - start < perf_analyzer.time_limit(cfg)
    assert r.engine == "perf_analyzer" and r.stopped_by == "time" and r.errors == {}
    assert r.throughput_rps > 0 and 0 < r.p50_ms <= r.p95_ms <= r.p99_ms
    assert r.server.requests == r.succeeded > 0  # Triton's statistics API over the whole run
    assert r.server.compute_infer_ms > 0
    if TUNED == "mlp_batched":  # its repository config batches dynamically
        assert r.server.batch_size > 1


def test_perf_analyzer_engine_counts_failed_requests(triton: server.TritonServer, fault: Path) -> None:
    fault.write_text(json.dumps({"fail": True}))
    result = CliRunner().invoke(app, ["bench", "faulty", "--url", triton.http_url, "--duration", "2", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["errors"]["server"] == report["server"]["failures"] > 0
    assert report["p95_ms"] is None  # nothing measured; JSON null, not NaN


@pytest.mark.parametrize("engine", ["perf_analyzer", "python"])
def test_bench_cli_names_a_model_the_server_does_not_serve(triton: server.TritonServer, engine: str) -> None:
    result = CliRunner().invoke(app, ["bench", "no_such_model", "--url", triton.http_url, "--engine", engine])
    assert result.exit_code == 2, result.output
    assert "model 'no_such_model' is not loaded and ready at" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_tune_cli_names_a_model_the_server_does_not_serve(triton: server.TritonServer, tmp_path: Path) -> None:
    shutil.copytree(triton.repository / TUNED, tmp_path / "unloaded", ignore=shutil.ignore_patterns("__pycache__"))
    result = CliRunner().invoke(app, ["tune", "unloaded", "--repository", str(tmp_path), "--url", triton.http_url])
    assert result.exit_code == 2, result.output
    assert "model 'unloaded' is not loaded and ready" in " ".join(result.output.split())


def test_bench_cli_refuses_a_remote_target() -> None:
    result = CliRunner().invoke(app, ["bench", "faulty", "--url", "198.51.100.4:8000", "--requests", "1"])
    assert result.exit_code == 2
    assert "not loopback" in result.output


def test_tune_sweeps_through_the_repository_api_and_writes_the_recommendation(
    triton: server.TritonServer, tmp_path: Path
) -> None:
    config = triton.repository / TUNED / "config.pbtxt"
    original = config.read_text()
    header = "# Copyright 2026 Example Corp.\n# SPDX-License-Identifier: Apache-2.0\n\n"
    config.write_text(header + original)
    png = tmp_path / "tune.png"
    try:
        result = CliRunner().invoke(app, [
            "tune", TUNED, "--repository", str(triton.repository), "--url", triton.http_url,
            "--search", "grid", "--instances", "1", "--delays", "2000", "--concurrency", "16", "--duration", "3",
            "--stability", "100", "--budget-ms", "10000", "--plot", str(png), "--json",
            "--grpc-url", f"grpc://{triton.grpc_url}",
        ])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        trials = {t["label"]: t for t in out["trials"]}
        # off, on without preferred size, on with preferred = max batch size; each over HTTP, then over gRPC
        assert len(trials) == 6 and [t["setting"]["protocol"] for t in out["trials"]] == ["http"] * 3 + ["grpc"] * 3
        assert trials["batching off, 1 inst, grpc"]["server"]["requests"] > 0  # measured at the gRPC port
        off = trials["batching off, 1 inst"]
        # The override really reached Triton: one inference per execution with batching off,
        # several per execution with it on.
        assert off["server"]["batch_size"] == 1.0
        on = [t for t in out["trials"] if t["setting"]["dynamic_batching"]]
        assert all(t["server"]["batch_size"] > 1.0 for t in on)
        best = out["recommended"]
        assert all(t["engine"] == "perf_analyzer" for t in out["trials"])  # ranked on perf_analyzer's figures
        assert all(t["bound"]["says"].startswith("the model computes ") for t in out["trials"])  # each says why
        # The setting the runoff's paired comparisons kept; without finalists to pair, the fastest, or the
        # first measured of those within noise (5%, or their spreads together) of it.
        top = max((t for t in out["trials"] if not t["errors"]), key=lambda t: t["inferences_per_s"])
        assert best == (next(t for t in out["trials"] if t["label"] == out["comparisons"][-1]["kept"])
                        if out["comparisons"] else next(t for t in out["trials"] if not t["errors"] and t[
                            "inferences_per_s"] * (1 + max(0.05, t["spread"] + top["spread"])) >= top["inferences_per_s"]))
        assert config.read_text().startswith(header)  # the operator's header stays
        written = pbtxt.parse(config.read_text())
        assert written.instance_group[0].count == best["setting"]["instances"]
        assert (written.dynamic_batching is not None) == best["setting"]["dynamic_batching"]
        assert png.read_bytes()[:4] == b"\x89PNG"
        # After the sweep Triton serves the repository's own configuration again.
        client = httpclient.InferenceServerClient(triton.http_url)
        loaded = client.get_model_config(TUNED)
        client.close()
        on_disk = pbtxt.parse(original)
        assert int(loaded["instance_group"][0]["count"]) == on_disk.instance_group[0].count
    finally:
        config.write_text(original)


def test_bench_stops_when_the_caller_says_so(triton: server.TritonServer) -> None:
    deadline = time.monotonic() + 0.5
    r = bench.run(BenchConfig(url=triton.http_url, model="faulty", concurrency=2, max_requests=1_000_000,
                              max_seconds=30),
                  should_stop=lambda: time.monotonic() > deadline)
    assert r.stopped_by == "caller"
    assert r.elapsed_s < 5
    assert r.errors == {} and r.succeeded == r.sent


def test_tune_exits_1_when_no_setting_meets_the_budget(triton: server.TritonServer, tmp_path: Path) -> None:
    config = triton.repository / TUNED / "config.pbtxt"
    original = config.read_text()
    result = CliRunner().invoke(app, [
        "tune", TUNED, "--repository", str(triton.repository), "--url", triton.http_url,
        "--instances", "1", "--delays", "0", "--concurrency", "2", "--requests", "200", "--duration", "2",
        "--budget-ms", "0.001", "--plot", str(tmp_path / "t.png"), "--json",
    ])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["recommended"] is None
    assert config.read_text() == original  # nothing written without a recommendation
