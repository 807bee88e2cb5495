"""Benchmark: tuned configuration vs dynamic batching off, same concurrency, one run, side by side.

Starts a CPU-only Triton (explicit model control) on a copy of the sample throughput model
(``examples/model_repository/mlp_batched``), then:

1. measures the baseline: the repository's configuration with dynamic batching removed;
2. runs the tuner's sweep (``infra.triton.tune``) with the baseline's p95 as the latency budget, so
   the recommendation is the highest throughput at equal or better p95;
3. measures baseline and recommendation again, interleaved for ``--rounds`` rounds (the machine is
   shared: interleaving spreads any background noise over both), and prints the medians and ratios.

Besides client-side throughput and latency it prints the server's CPU time per request (Triton and
its Python-backend stub processes, from /proc): on a small machine where the load generator itself
is the bottleneck, that is the figure that shows what batching saves.

Prints figures; it is not a test. Everything runs on 127.0.0.1 and every load is bounded.

    .venv/bin/python tests/benchmarks/bench_tune.py [--concurrency 32] [--protocol grpc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.model_repo import pbtxt  # noqa: E402
from infra.triton import bench, server, tune  # noqa: E402

MODEL = "mlp_batched"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repository", type=Path, default=ROOT / "examples" / "model_repository")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--protocol", choices=["http", "grpc"], default="grpc")
    ap.add_argument("--seconds", type=float, default=6.0, help="per measurement (upper bound)")
    ap.add_argument("--requests", type=int, default=20_000, help="per measurement (upper bound)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instances", default="1,2", help="instance counts to sweep")
    ap.add_argument("--delays", default="0,1000,4000", help="max_queue_delay_microseconds values to sweep")
    ap.add_argument("--plot", type=Path, default=Path("tune-benchmark.png"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tritonops-bench-"))
    repo = work / "repo"
    shutil.copytree(args.repository / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    spec = pbtxt.parse((repo / MODEL / "config.pbtxt").read_text())
    current = tune.setting_of(spec)
    baseline = replace(current, dynamic_batching=False, preferred_batch_sizes=(), max_queue_delay_us=0)
    t0 = time.monotonic()
    with server.running(repo, model_control_mode="explicit", load_models=[MODEL], workdir=work / "t") as s:
        url = s.grpc_url if args.protocol == "grpc" else s.http_url
        load = bench.BenchConfig(url=url, model=MODEL, protocol=args.protocol, concurrency=args.concurrency,
                                 max_requests=args.requests, max_seconds=args.seconds)

        def measure(setting: tune.Setting) -> bench.BenchReport:
            return tune.measure(s.http_url, spec, setting, load)

        def measure_with_cpu(setting: tune.Setting) -> tuple[bench.BenchReport, float]:
            tune.measure(s.http_url, spec, setting, replace(load, max_requests=200))  # reload + warm up
            before = server_cpu(s.process.pid)
            report = bench.run(load)
            after = server_cpu(s.process.pid)
            used = sum(t - before.get(pid, 0.0) for pid, t in after.items())
            return report, used * 1000 / max(1, report.succeeded)

        base = measure(baseline)
        budget = base.p95_ms
        log(f"baseline {baseline.label}: {base.throughput_rps:.0f} req/s, p95 {base.p95_ms:.1f} ms "
            f"-> p95 budget {budget:.1f} ms")
        grid = [g for g in tune.default_grid(spec.max_batch_size or 0, _ints(args.instances), _ints(args.delays))
                if g.dynamic_batching]

        def show(t: tune.Trial) -> None:
            log(f"  {t.setting.label:<45} {t.report.throughput_rps:8.0f} req/s  p95 {t.report.p95_ms:7.1f} ms"
                f"  batch {t.report.server.batch_size:5.1f}  {'ok' if t.within_budget else 'over budget'}")

        result = tune.tune(s.http_url, spec, grid, load, budget, on_trial=show)
        result.trials.insert(0, tune.Trial(baseline, base, within_budget=True))
        tune.plot(result, args.plot)
        if result.best is None:
            log("no batching setting met the baseline's p95")
            return 1
        best = result.best.setting
        log(f"recommended: {best.label}")
        rounds: dict[str, list[bench.BenchReport]] = {"off": [], "tuned": []}
        cpu: dict[str, list[float]] = {"off": [], "tuned": []}
        for i in range(args.rounds):
            for key, setting in (("off", baseline), ("tuned", best)):
                report, cpu_ms = measure_with_cpu(setting)
                rounds[key].append(report)
                cpu[key].append(cpu_ms)
            log(f"  round {i + 1}: off {rounds['off'][-1].throughput_rps:.0f} req/s "
                f"p95 {rounds['off'][-1].p95_ms:.1f} ms cpu {cpu['off'][-1]:.3f} ms/req | tuned "
                f"{rounds['tuned'][-1].throughput_rps:.0f} req/s p95 {rounds['tuned'][-1].p95_ms:.1f} ms "
                f"cpu {cpu['tuned'][-1]:.3f} ms/req")
    med = {k: {"throughput_rps": statistics.median(r.throughput_rps for r in v),
               "server_cpu_ms_per_request": statistics.median(cpu[k]),
               "p95_ms": statistics.median(r.p95_ms for r in v),
               "p50_ms": statistics.median(r.p50_ms for r in v),
               "batch_size": statistics.median(r.server.batch_size for r in v),
               "errors": sum(sum(r.errors.values()) for r in v)} for k, v in rounds.items()}
    out = {
        "model": MODEL, "protocol": args.protocol, "concurrency": args.concurrency, "rounds": args.rounds,
        "baseline": baseline.label, "tuned": best.label, "median": med,
        "throughput_ratio": med["tuned"]["throughput_rps"] / med["off"]["throughput_rps"],
        "p95_ratio": med["tuned"]["p95_ms"] / med["off"]["p95_ms"],
        "server_cpu_per_request_ratio": (med["tuned"]["server_cpu_ms_per_request"]
                                         / med["off"]["server_cpu_ms_per_request"]),
        "plot": str(args.plot), "wall_s": round(time.monotonic() - t0, 1),
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"\n{MODEL}, {args.protocol}, concurrency {args.concurrency}, median of {args.rounds} rounds")
        for k in ("off", "tuned"):
            label = baseline.label if k == "off" else best.label
            print(f"  {k:<6} {label:<45} {med[k]['throughput_rps']:8.0f} req/s  p50 {med[k]['p50_ms']:7.1f} ms"
                  f"  p95 {med[k]['p95_ms']:7.1f} ms  batch {med[k]['batch_size']:5.1f}"
                  f"  server cpu {med[k]['server_cpu_ms_per_request']:.3f} ms/req  errors {med[k]['errors']}")
        print(f"  throughput ratio (tuned/off): {out['throughput_ratio']:.2f}x")
        print(f"  p95 ratio (tuned/off):        {out['p95_ratio']:.2f}")
        print(f"  server CPU per request ratio: {out['server_cpu_per_request_ratio']:.2f}")
        print(f"  plot: {args.plot}   wall time: {out['wall_s']} s")
    return 0


def server_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of ``pid`` and its direct children (the Python backend stubs)."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    out = {}
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[p] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
