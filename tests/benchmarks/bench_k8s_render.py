"""How long does rendering every stack for both environments take? Prints figures; asserts nothing.

    .venv/bin/python tests/benchmarks/bench_k8s_render.py [--repeat N] [--note TEXT]

Each round parses every stacks/<stack>/Pulumi.<env>.yaml, builds all objects and writes them as YAML
into a temporary directory: exactly what `tritonops render` does, once per stack and environment. The
stack files are the repository's with what only a user gives set (tests/unit/k8s/k8s_harness.user_stacks:
a generated release key, the cluster-aws values), as `pulumi config set` writes them.
Records the figures as tests/benchmarks/records/bench_k8s_render.json (docs/kubernetes.md quotes them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit" / "k8s"))

import record  # noqa: E402  (tests/benchmarks/record.py, beside this script)
from k8s_harness import user_stacks  # noqa: E402
from tritonops.k8s.config import STACKS
from tritonops.k8s.render import render  # noqa: E402
from tritonops.k8s.stack_file import stack_envs


def one_round(out: Path, stacks: Path) -> tuple[float, dict[str, float], int]:
    per: dict[str, float] = {}
    files = 0
    start = time.perf_counter()
    for stack in STACKS:
        for env in stack_envs(stack):
            t0 = time.perf_counter()
            files += len(render(stack, env, out / f"{stack}-{env}", stacks))
            per[f"{stack}/{env}"] = time.perf_counter() - t0
    return time.perf_counter() - start, per, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--note", default="", help="what the record should say about the machine (busy, quiet)")
    args = parser.parse_args()
    stacks = user_stacks()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cold, per_cold, files = one_round(Path(tmp) / "cold", stacks)
        import_and_cold = time.perf_counter() - t0
        totals = []
        per_stack: dict[str, list[float]] = {}
        for i in range(args.repeat):
            total, per, _ = one_round(Path(tmp) / f"r{i}", stacks)
            totals.append(total)
            for k, v in per.items():
                per_stack.setdefault(k, []).append(v)
    count = sum(len(stack_envs(s)) for s in STACKS)
    lines = [
        f"render every stack file ({len(STACKS)} stacks, {count} stack files, {files} files per round)",
        f"  first round (cold caches):  {cold * 1000:8.1f} ms",
        f"  warm rounds (n={args.repeat}):       median {statistics.median(totals) * 1000:8.1f} ms   "
        f"min {min(totals) * 1000:.1f} ms   max {max(totals) * 1000:.1f} ms",
        *(f"    {k:<18} median {statistics.median(v) * 1000:7.1f} ms" for k, v in per_stack.items()),
        f"  wall incl. first round: {import_and_cold * 1000:.1f} ms",
    ]
    print("\n".join(lines))
    record.write("bench_k8s_render", {"files": files, "cold_s": round(cold, 3),
                                      "median_s": round(statistics.median(totals), 3),
                                      "min_s": round(min(totals), 3), "max_s": round(max(totals), 3)},
                 "\n".join(lines), note=args.note)


if __name__ == "__main__":
    main()
