"""Benchmark: ``make demo-fleet``'s steps (three pull-mode nodes; a release in waves; a bad one halted, rolled back).

    PYTHONPATH=tools .venv/bin/python tests/benchmarks/bench_demo_fleet.py            # the nodes removed after
    PYTHONPATH=tools .venv/bin/python tests/benchmarks/bench_demo_fleet.py --keep

Runs the demo (devkit.demo_fleet.run_fleet) on fresh nodes and records "demo_fleet" (record.py): the nodes'
boot, the converge until every node serves v1, v2's publish until every node serves it (the canary's
wave, its report, advance, the rest, advance), and the bad v3's halt until the channel is rolled back and
every node serves v2 again (also from its publish). The image is the one ``make demo`` builds (cached).
"""

from __future__ import annotations

import argparse
import os
import sys

import record
from devkit.demo import DemoError
from devkit.demo_fleet import fleet_down, run_fleet
from devkit.hosts.podman import HostsError
from rich.console import Console


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", action="store_true", help="keep the nodes")
    args = p.parse_args()
    console = Console(record=True)
    load = os.getloadavg()[0]
    try:
        fleet = run_fleet(console)
    except (DemoError, HostsError) as e:
        console.print(f"[red]demo-fleet failed:[/] {e}", highlight=False)
        return 1
    finally:
        if not args.keep:
            fleet_down()
    path = record.write("demo_fleet", {f"{k}_s": v for k, v in fleet.phases.items()}, console.export_text(),
                        note=f"{record.load_note(load)}; 3 nodes on the shared cores, image cached")
    print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
