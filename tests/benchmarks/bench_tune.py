"""Benchmark: what ``tritonops tune`` finds against batching off, judged by perf_analyzer, side by side.

Builds the wide MLP (``tests/wide_mlp.py``: onnxruntime, one thread, a model where batching saves
compute; the operator's config has batching off, one CPU instance), starts a CPU-only Triton
(explicit model control) and:

1. measures the baseline (the repository's configuration) with perf_analyzer at ``--concurrency``;
2. runs the tuner's sweep (``tritonops.triton.tune``, perf_analyzer engine) with the baseline's p95 as the
   latency budget, so the recommendation is the highest throughput at equal or better p95, and times it;
3. with ``--model-analyzer PATH`` (Triton Model Analyzer's ``model-analyzer``, installed in a venv
   of its own: its pins conflict with ours), runs its ``profile`` on the same model and concurrency,
   launching the wheel's tritonserver itself (local mode, CPU-only model), and times it;
4. judges: perf_analyzer itself on baseline, recommendation (and Model Analyzer's pick), interleaved
   for ``--rounds`` rounds (the machine is shared: interleaving spreads background noise over all),
   with the server's CPU time per request (Triton and its Python-backend stubs, from /proc); the
   verdict is the median of the per-round ratios (tuned / baseline).

Exit 1 unless the recommendation reaches ``--min-ratio`` (3x) the baseline's throughput at equal or
lower p95. Everything runs on 127.0.0.1 and every load is bounded in time.

    .venv/bin/python tests/benchmarks/bench_tune.py [--concurrency 64] [--rounds 3] [--json]
        [--model-analyzer /tmp/ma-venv/bin/model-analyzer]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "infra"), str(ROOT / "tests")]

import wide_mlp  # noqa: E402
from tritonops.model_repo import pbtxt  # noqa: E402
from tritonops.model_repo.spec import ModelSpec  # noqa: E402
from tritonops.triton import perf_analyzer, server, tune  # noqa: E402
from tritonops.triton.load_config import BenchConfig  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--protocol", choices=["http", "grpc"], default="grpc")
    ap.add_argument("--seconds", type=float, default=12.0, help="perf_analyzer budget per judging measurement")
    ap.add_argument("--tune-seconds", type=float, default=6.0,
                    help="the tuner's budget per setting (tritonops tune --duration)")
    ap.add_argument("--stability", type=float, default=60.0, help="perf_analyzer stability %%")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instances", default="1,2", help="instance counts to sweep")
    ap.add_argument("--delays", default="0,2000", help="max_queue_delay_microseconds values to sweep")
    ap.add_argument("--search", choices=["climb", "grid"], default="climb", help="the tuner's search")
    ap.add_argument("--min-ratio", type=float, default=3.0)
    ap.add_argument("--model-analyzer", type=Path, help="model-analyzer executable (its own venv)")
    ap.add_argument("--plot", type=Path, default=Path("tune-benchmark.png"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    pa = perf_analyzer.find()
    work = Path(tempfile.mkdtemp(prefix="tritonops-bench-tune-"))
    folder = wide_mlp.build(work / "repo")
    spec = pbtxt.parse((folder / "config.pbtxt").read_text())
    baseline = tune.setting_of(spec)
    t0 = time.monotonic()
    with server.running(work / "repo", model_control_mode="explicit", load_models=[wide_mlp.NAME],
                        workdir=work / "t") as s:
        url = s.grpc_url if args.protocol == "grpc" else s.http_url
        load = BenchConfig(url=url, model=wide_mlp.NAME, protocol=args.protocol, concurrency=args.concurrency,
                           max_requests=None, max_seconds=args.seconds, stability_pct=args.stability,
                           engine="perf_analyzer")
        base = reference(pa, load, work)  # the repository's configuration is loaded: batching off
        log(f"baseline {baseline.label}: {base['throughput']:.0f} inf/s, p95 {base['p95_ms']:.1f} ms -> p95 budget")
        space = tune.Space(spec.max_batch_size or 0, tuple(_ints(args.instances)), tuple(_ints(args.delays)))

        def show(t: tune.Trial) -> None:
            log(f"  {t.setting.label:<45} {t.report.throughput_rps:8.0f} req/s  p95 {t.report.p95_ms:7.1f} ms"
                f"  batch {t.report.server.batch_size:5.1f}  {'ok' if t.within_budget else 'over budget'} {t.failure}")

        started = time.monotonic()
        result = tune.tune(s.http_url, spec, space, replace(load, max_seconds=args.tune_seconds), base["p95_ms"],
                           search=args.search, on_trial=show)
        tune_s = time.monotonic() - started
        tune.plot(result, args.plot)
        if result.best is None:
            log("no setting met the baseline's p95")
            return 1
        best = result.best.setting
        log(f"recommended after {tune_s:.0f} s: {best.label}")
        contenders = {"off": spec, "tuned": tune.apply(spec, best)}
        ma: dict[str, object] = {}
        if args.model_analyzer:
            ma = model_analyzer(args.model_analyzer, pa, folder, args.concurrency, spec.max_batch_size or 0, work)
            log(f"model analyzer: {ma}")
            if "config" in ma:
                contenders["model analyzer"] = pbtxt.parse(str(ma["config"])).model_copy(
                    update={"name": wide_mlp.NAME})

        def judge(variant: ModelSpec) -> dict[str, float]:
            """Load ``variant``, then perf_analyzer itself (the judge) with the server's CPU time around it."""
            tune.measure(s.http_url, variant, tune.setting_of(variant), replace(load, engine="python",
                         max_seconds=1), warmup_requests=0)  # reload through the repository API
            before = server_cpu(s.process.pid)
            m = reference(pa, load, work)
            after = server_cpu(s.process.pid)
            used = sum(t - before.get(pid, 0.0) for pid, t in after.items())
            return m | {"server_cpu_ms": used * 1000 / max(1.0, m["throughput"] * m["seconds"])}

        rounds: dict[str, list[dict[str, float]]] = {k: [] for k in contenders}
        for i in range(args.rounds):
            for key in (list(contenders) if i % 2 == 0 else list(contenders)[::-1]):
                rounds[key].append(judge(contenders[key]))
            log(f"  round {i + 1}: " + " | ".join(
                f"{k} {v[-1]['throughput']:.0f}/s p95 {v[-1]['p95_ms']:.1f} ms cpu {v[-1]['server_cpu_ms']:.2f} ms/req"
                for k, v in rounds.items()))
    ratio = {m: statistics.median(t[m] / o[m] for o, t in zip(rounds["off"], rounds["tuned"], strict=True))
             for m in ("throughput", "p95_ms", "server_cpu_ms")}
    if "model analyzer" in rounds:
        ma["tuned_over_model_analyzer"] = {m: statistics.median(
            t[m] / a[m] for a, t in zip(rounds["model analyzer"], rounds["tuned"], strict=True))
            for m in ("throughput", "p95_ms")}
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("throughput", "p50_ms", "p95_ms", "server_cpu_ms")}
           for k, v in rounds.items()}
    ok = ratio["throughput"] >= args.min_ratio and ratio["p95_ms"] <= 1.0
    out = {
        "model": wide_mlp.NAME, "protocol": args.protocol, "concurrency": args.concurrency, "rounds": args.rounds,
        "baseline": baseline.label, "tuned": best.label, "tune_seconds": round(tune_s, 1),
        "settings_tried": len(result.trials), "median": med, "ratio": ratio, "ok": ok,
        "model_analyzer": {k: v for k, v in ma.items() if k != "config"},
        "plot": str(args.plot), "wall_s": round(time.monotonic() - t0, 1),
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"\n{wide_mlp.NAME}, {args.protocol}, concurrency {args.concurrency}: perf_analyzer, "
              f"{args.rounds} interleaved rounds")
        for k in med:
            label = {"off": baseline.label, "tuned": best.label}.get(k, str(ma.get("variant", "")))
            print(f"  {k:<6} {label:<45} {med[k]['throughput']:8.0f} inf/s  p50 {med[k]['p50_ms']:7.1f} ms"
                  f"  p95 {med[k]['p95_ms']:7.1f} ms  server cpu {med[k]['server_cpu_ms']:.2f} ms/req")
        print(f"  throughput ratio (tuned/off, median per round): {ratio['throughput']:.2f}x")
        print(f"  p95 ratio (tuned/off):                          {ratio['p95_ms']:.2f}")
        print(f"  server CPU per request ratio:                   {ratio['server_cpu_ms']:.2f}")
        print(f"  tune: {len(result.trials)} settings in {tune_s:.0f} s; plot {args.plot}; wall {out['wall_s']} s")
        print(f"  at least {args.min_ratio:g}x throughput at equal or lower p95: {ok}")
        if ma:
            print(f"  model analyzer: {json.dumps(out['model_analyzer'])}")
    return 0 if ok else 1


def model_analyzer(exe: Path, pa: perf_analyzer.PerfAnalyzer, folder: Path, concurrency: int,
                   max_batch_size: int, work: Path) -> dict[str, object]:
    """Triton Model Analyzer's ``profile`` on ``folder``'s model: its pick, its wall time, or why it failed.

    Local launch mode with the wheel's tritonserver (backend folder, libraries and the Python backend's
    interpreter passed through its ``triton_server_flags`` / ``triton_server_environment``), our
    perf_analyzer, the model marked CPU-only, a brute search over instance counts and batching at
    ``concurrency`` over the same space tune sweeps (the model's max batch size, 1-2 instances).
    """
    install = server.find_install()
    repo, out = work / "ma-repo", work / "ma-out"
    shutil.copytree(folder, repo / folder.name)
    ports = [server.free_port() for _ in range(3)]
    config = {
        "model_repository": str(repo), "output_model_repository_path": str(out),
        "override_output_model_repository": True, "checkpoint_directory": str(work / "ma-ckpt"),
        "export_path": str(work / "ma-export"), "triton_launch_mode": "local",
        "triton_server_path": str(install.binary), "perf_analyzer_path": str(pa.binary),
        "triton_http_endpoint": f"localhost:{ports[0]}", "triton_grpc_endpoint": f"localhost:{ports[1]}",
        "triton_metrics_url": f"http://localhost:{ports[2]}/metrics",
        "triton_server_flags": {"backend_directory": str(install.backend_dir(work / "ma-backends"))},
        "triton_server_environment": {
            # Model Analyzer runs perf_analyzer with this environment too: it needs libcudart.so.12.
            "LD_LIBRARY_PATH": ":".join(str(p) for p in (install.libs, pa.cudart_dir) if p), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": ":".join(site.getsitepackages())},
        "run_config_search_mode": "brute", "run_config_search_min_concurrency": concurrency,
        "run_config_search_max_concurrency": concurrency, "run_config_search_max_instance_count": 2,
        # tune's space: the operator's max batch size, 1-2 instances (its default sweeps 1..128 as well,
        # which takes over an hour here)
        "run_config_search_min_model_batch_size": max_batch_size,
        "run_config_search_max_model_batch_size": max_batch_size,
        "profile_models": {folder.name: {"cpu_only": True}},
    }
    (work / "ma.yaml").write_text(json.dumps(config))  # JSON is YAML
    cmd = [str(exe), "profile", "-f", str(work / "ma.yaml")]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=pa.env(), capture_output=True, text=True, check=False, timeout=1800)
    seconds = round(time.monotonic() - start, 1)
    (work / "ma.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-5:]
        return {"ok": False, "seconds": seconds, "command": " ".join(cmd), "error": tail, "log": str(work / "ma.log")}
    rows = list(csv.DictReader((work / "ma-export" / "results" / "metrics-model-inference.csv").open()))
    best = max(rows, key=lambda r: float(r["Throughput (infer/sec)"]))
    variant = best["Model Config Path"]
    return {"ok": True, "seconds": seconds, "variant": variant, "configs_measured": len(rows),
            "throughput_reported": float(best["Throughput (infer/sec)"]),
            "config": (out / variant / "config.pbtxt").read_text()}


def reference(pa: perf_analyzer.PerfAnalyzer, cfg: BenchConfig, work: Path) -> dict[str, float]:
    """perf_analyzer itself, run directly with the engine's arguments."""
    out = work / "judge.csv"
    out.unlink(missing_ok=True)
    for attempt in range(3):  # a burst of background load can leave no stable windows: measure again
        start = time.monotonic()
        proc = subprocess.run(pa.command(cfg, out), env=pa.env(), capture_output=True, text=True, check=False,
                              timeout=perf_analyzer.time_limit(cfg))
        if proc.returncode == 0:
            m = perf_analyzer.parse_csv(out.read_text())
            return {"throughput": m.inferences_per_s, "p50_ms": m.p50_ms, "p95_ms": m.p95_ms,
                    "seconds": time.monotonic() - start}
        log(f"  retry {attempt + 1}: {perf_analyzer.failure(proc.stdout + proc.stderr, cfg)}")
    raise RuntimeError("perf_analyzer found no stable measurement three times")


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
