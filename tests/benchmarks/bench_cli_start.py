"""Benchmark: how long ``tritonops`` takes to start, side by side with a bare Python start (issue 45).

    .venv/bin/python tests/benchmarks/bench_cli_start.py [--runs 15] [--note TEXT] [--no-record]

Runs each command ``--runs`` times, in turns (one of each, then again), so a busy machine slows them alike:
``python -c pass`` (the baseline), typer's own floor (typer, rich and typer's rich help formatter, which any
typer CLI loads to print a help text), ``tritonops --help``, ``tritonops render --help``, and ``tritonops
validate`` of one sample model and of the whole sample repository. Prints the median and p90 of each, and
the median's difference over bare Python and its ratio to it. Target: ``--help`` and ``validate`` of one
model within 0.3 s of bare Python. What the commands import is held by tests/unit/cli/test_cli_imports.py.

Records the figures as tests/benchmarks/records/bench_cli_start.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import record  # tests/benchmarks/record.py, beside this script

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SAMPLE = ROOT / "examples" / "model_repository"
TARGET_S = 0.3  # over bare Python, for --help and validate of one model

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "typer's floor": [sys.executable, "-c", "import typer.main, typer.rich_utils"],
    "tritonops --help": [str(BIN / "tritonops"), "--help"],
    "tritonops render --help": [str(BIN / "tritonops"), "render", "--help"],
    "tritonops validate (1 model)": [str(BIN / "tritonops"), "validate", str(SAMPLE / "mlp")],
    "tritonops validate (sample repo)": [str(BIN / "tritonops"), "validate", str(SAMPLE)],
}
KEYS = {"python -c pass": "python", "typer's floor": "typer_floor", "tritonops --help": "help",
        "tritonops render --help": "render_help", "tritonops validate (1 model)": "validate_one",
        "tritonops validate (sample repo)": "validate_repo"}
TARGETED = ("tritonops --help", "tritonops validate (1 model)")


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, cwd=ROOT, env=os.environ | {"COLUMNS": "100"})
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {res.returncode}:\n{res.stderr.decode()[-2000:]}")
    return took


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--note", default="", help="what the record should say about the machine (busy, quiet)")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    for argv in COMMANDS.values():  # warm the page cache and the bytecode caches once
        timed(argv)
    runs: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, argv in COMMANDS.items():
            runs[name].append(timed(argv))
    base = statistics.median(runs["python -c pass"])
    lines = [f"start time, {args.runs} runs each in turns (load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)",
             f"{'command':34} {'median':>8} {'p90':>8} {'over python':>12} {'ratio':>7}"]
    figures: dict[str, float | int | str] = {"runs": args.runs}
    for name, values in runs.items():
        med = statistics.median(values)
        over = med - base
        lines.append(f"{name:34} {med:7.3f}s {p90(values):7.3f}s {over:+11.3f}s {med / base:6.1f}x")
        key = KEYS[name]
        figures.update({f"{key}_median_s": round(med, 3), f"{key}_p90_s": round(p90(values), 3)})
        if name != "python -c pass":
            figures[f"{key}_over_python_s"] = round(over, 3)
            figures[f"{key}_ratio"] = round(med / base, 1)
    met = all(statistics.median(runs[n]) - base <= TARGET_S for n in TARGETED)
    floor = statistics.median(runs["typer's floor"]) - base
    lines.append(f"target: --help and validate of one model within {TARGET_S} s of bare Python: "
                 + ("met" if met else "not met") + f" (typer's floor alone is {floor:+.3f} s)")
    figures["target_met"] = "yes" if met else "no"
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        record.write("bench_cli_start", figures, text, note=args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
