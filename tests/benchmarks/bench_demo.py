"""Benchmark: the phases of ``make demo`` (apt and venv, node image, node boot, first converge, smoke).

    PYTHONPATH=tools .venv/bin/python tests/benchmarks/bench_demo.py                 # node demo-bench-1
    PYTHONPATH=tools .venv/bin/python tests/benchmarks/bench_demo.py --node h5-demo --keep

Runs what ``make demo`` runs, timed step by step: ``make apt venv`` (no-ops on a machine that has them: the
record says which), then the demo itself (devkit.demo.run_edge) on its own node, which is removed first and
at the end (unless ``--keep``) so the converge is a first one. The image is built only when its inputs
changed (``built`` in the record): on a fresh machine it is always built. Records "demo" (record.py) when
the run was a fresh machine's (apt and venv installed, the image built: what the docs quote), else
"demo_warm", so a warm machine's figures never stand for a fresh one's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import record
from devkit.demo import REPO, DemoError, run_edge
from devkit.hosts.images import ImageSpec, image_is_current
from devkit.hosts.nodes import node_down
from rich.console import Console


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--node", default="demo-bench-1")
    p.add_argument("--keep", action="store_true", help="keep the node")
    args = p.parse_args()
    console = Console(record=True)
    load = os.getloadavg()[0]
    start = time.monotonic()
    subprocess.run(["make", "--no-print-directory", "apt", "venv"], cwd=REPO, check=True, capture_output=True)
    apt_venv = round(time.monotonic() - start, 1)
    console.print(f"make apt venv: {apt_venv}s")
    built = not image_is_current(ImageSpec(arch="amd64"))
    phases: dict[str, float] = {}
    node_down(args.node)
    try:
        report = run_edge(console, node=args.node, phases=phases)
    except DemoError as e:
        console.print(f"[red]demo failed:[/] {e}", markup=True, highlight=False)
        return 1
    finally:
        if not args.keep:
            node_down(args.node)
    total = round(apt_venv + sum(phases.values()), 1)
    console.print("demo phases: " + ", ".join(f"{k} {v}s" for k, v in {"apt+venv": apt_venv, **phases}.items())
                  + f"; total {total}s (image {'built' if built else 'cached'})")
    if not report.ok:
        return 1
    fresh = built and apt_venv >= 5  # a no-op make takes well under a second
    path = record.write("demo" if fresh else "demo_warm", {"apt_venv_s": apt_venv, **{f"{k}_s": v for k, v in phases.items()},
                                 "total_s": total, "image_built": int(built)}, console.export_text(), note=(
        f"{record.load_note(load)}; apt and venv "
        f"{'already installed: no-ops' if apt_venv < 5 else 'installed'}, image {'built' if built else 'cached'}"))
    console.print(f"recorded: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
