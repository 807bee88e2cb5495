"""Benchmark: a model service's cold start on the local Triton, next to the cooldown that must exceed it.

    .venv/bin/python tests/benchmarks/bench_cold_start.py [--rounds 3] [--repository DIR] [--json]

What a scaled-to-zero service waits for once its pod is scheduled and the image is on the node:
from spawning ``tritonserver`` (explicit model control, every model loaded at start, as in the pods)
to the release gate passing (server ready, every model READY, every golden inference within its
tolerance: ``tritonops.release.push.golden``, the check the release agent runs). Node
provisioning and image pull come on top in a cluster (the capacity simulation adds them).

Prints each round, the median and the maximum, then every stack service with ``minReplicas: 0``
with its ``cooldownPeriod`` and ``modelLoadSeconds``: the configured load time should not be below
the measured maximum, and the cooldown must be longer (the config check refuses it otherwise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config, stack_envs
from tritonops.release.push import golden
from tritonops.triton import server

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"


def cold_start(repository: Path, models: list[str], timeout: float = 300) -> float:
    """Seconds from process spawn to the golden gate passing."""
    t0 = time.monotonic()
    triton = server.start(repository, model_control_mode="explicit", load_models=models, wait_ready=False)
    try:
        deadline = t0 + timeout
        while True:
            if triton.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {triton.process.returncode}:\n{triton.log()[-2000:]}")
            try:
                report = golden(triton.http_url, repository, models, timeout=0)
            except OSError:
                report = {"ok": False}  # not listening yet
            if report["ok"]:
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise RuntimeError(f"golden gate not passing after {timeout}s: {report.get('failed')}")
            time.sleep(0.1)
    finally:
        triton.stop()


def scale_to_zero_services() -> list[tuple[str, str, int, float | None]]:
    out = []
    for env in stack_envs("triton"):  # every committed stack file
        cfg = load_stack_config("triton", env)
        assert isinstance(cfg, TritonStackConfig)
        for svc in cfg.model_services:
            a = svc.autoscaling
            if a.enabled and a.min_replicas == 0:
                out.append((env, svc.name, a.cooldown_period, a.model_load_seconds))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repository", type=Path, default=SAMPLES)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    models = sorted(d.name for d in args.repository.iterdir() if (d / "config.pbtxt").is_file())
    rounds = [cold_start(args.repository, models) for _ in range(args.rounds)]
    services = scale_to_zero_services()
    result = {
        "models": models,
        "rounds_s": [round(r, 2) for r in rounds],
        "median_s": round(statistics.median(rounds), 2),
        "max_s": round(max(rounds), 2),
        "scale_to_zero": [
            {"env": env, "service": name, "cooldown_s": cooldown, "model_load_s": load}
            for env, name, cooldown, load in services
        ],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    console = Console()
    console.print(f"cold start of {args.repository} ({', '.join(models)}): tritonserver spawn to golden gate")
    t = Table()
    t.add_column("round")
    t.add_column("seconds", justify="right")
    for i, r in enumerate(rounds, 1):
        t.add_row(str(i), f"{r:.2f}")
    t.add_row("median", f"{result['median_s']:.2f}")
    t.add_row("max", f"{result['max_s']:.2f}")
    console.print(t)
    console.print("services that scale to zero (stacks/triton/Pulumi.<env>.yaml)")
    s = Table()
    for col in ("env", "service", "cooldownPeriod s", "modelLoadSeconds", "measured max s"):
        s.add_column(col)
    for env, name, cooldown, load in services:
        s.add_row(env, name, str(cooldown), f"{load:g}" if load else "-", f"{max(rounds):.2f}")
    console.print(s)
    low = [name for _, name, _, load in services if load is not None and load < max(rounds)]
    if low:
        console.print(f"[yellow]modelLoadSeconds below the measured cold start for: {', '.join(low)}[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
