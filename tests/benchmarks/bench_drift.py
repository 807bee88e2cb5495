"""Benchmark: how long `tritonops drift` (ansible + models sources) takes for 1 and for 4 local nodes.

    .venv/bin/python tests/benchmarks/bench_drift.py [--nodes 4] [--rounds 2] [--keep]

Boots N Podman nodes (``drift-bench-1..N``), converges them all with ansible/edge.yml in one run, then
times the drift check against the first node alone and against all N, ``--rounds`` times each
(interleaved), and prints the figures with the ratio. Checks run in parallel (Ansible forks, and the
sources in their own threads), so the N-node time should grow well below N times the 1-node time.
Every run must be clean (0 findings, no errors): a figure for a failed check would mean nothing.
Each source's own time is printed too (the ansible check and the models probe run side by side, so the
slower one bounds the whole), and the figures go to tests/benchmarks/records/bench_drift.json (record.py).
The nodes are removed at the end unless --keep. Needs root, Podman and the image `python -m devkit
hosts build` makes (built if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import record
from devkit.demo import REPO, run_playbook
from devkit.hosts.images import ImageSpec, build_image, cache_dir
from devkit.hosts.nodes import node_down, node_up
from rich.console import Console
from rich.table import Table
from tritonops.drift.run import run

LOCAL = REPO / "ansible" / "inventories" / "local"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--keep", action="store_true", help="keep the nodes (a second run reuses them)")
    args = p.parse_args()
    console = Console(record=True)
    load = os.getloadavg()[0]
    names = [f"drift-bench-{i}" for i in range(1, args.nodes + 1)]
    build_image(ImageSpec(arch="amd64"))
    times: dict[int, list[float]] = {1: [], args.nodes: []}
    per_source: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-drift-") as tmp:
        inv = Path(tmp) / "hosts.yml"
        inv.write_text(json.dumps({"all": {"children": {"edge": {"children": {"cpu_gateways": {
            "hosts": {n: {} for n in names}}}}}}}))
        try:
            for n in names:
                node_up(n)
            recap = run_playbook(console, REPO / "ansible" / "edge.yml", [LOCAL, inv], ",".join(names),
                                 cache_dir() / "logs" / "bench-drift-converge.log",
                                 extra_vars={"edge_serial": "100%"})
            console.print(f"converged {len(names)} nodes in {recap['seconds']}s (changed={recap['changed']})")
            for r in range(args.rounds):
                for count in (1, args.nodes):
                    limit = ",".join(names[:count])
                    start = time.monotonic()
                    report = run(["ansible", "models"], [LOCAL, inv], limit=limit, forks=max(5, count))
                    seconds = time.monotonic() - start
                    if report.errors or report.findings:
                        console.print(report.to_json())
                        console.print(f"[red]round {r + 1}, {count} node(s): the check was not clean[/]")
                        return 1
                    times[count].append(seconds)
                    for x in report.results:
                        per_source.setdefault(f"n{count}_{x.source}_s", []).append(x.seconds)
                    console.print(f"round {r + 1}: {count} node(s) {seconds:.1f}s "
                                  + " ".join(f"{x.source}={x.seconds}s" for x in report.results))
        finally:
            if not args.keep:
                for n in names:
                    node_down(n)
    one, many = statistics.median(times[1]), statistics.median(times[args.nodes])
    table = Table(title="tritonops drift (ansible check mode + model releases + Triton index), local Podman nodes")
    for col in ("nodes", "runs (s)", "median (s)", "per node (s)", f"vs 1 node x{args.nodes}"):
        table.add_column(col, justify="right")
    table.add_row("1", " ".join(f"{x:.1f}" for x in times[1]), f"{one:.1f}", f"{one:.1f}", "-")
    table.add_row(str(args.nodes), " ".join(f"{x:.1f}" for x in times[args.nodes]), f"{many:.1f}",
                  f"{many / args.nodes:.1f}", f"{many / (one * args.nodes):.2f}")
    console.print(table)
    console.print(f"{args.nodes} nodes take {many / one:.2f}x the time of 1 (linear would be {args.nodes}x)")
    sources = {k: round(statistics.median(v), 1) for k, v in per_source.items()}
    console.print("median per source: " + ", ".join(f"{k} {v}s" for k, v in sources.items()))
    path = record.write("bench_drift", {"n1_s": round(one, 1), f"n{args.nodes}_s": round(many, 1),
                                        "ratio": round(many / one, 2), **sources}, console.export_text(), note=record.load_note(load))
    console.print(f"recorded: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
