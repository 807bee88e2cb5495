"""Benchmark: ansible/edge.yml over the lab's SSH on one fresh node and on ten, as a fleet is reached.

    .venv/bin/python tests/benchmarks/bench_edge.py                  # 1 node, then 10 nodes
    .venv/bin/python tests/benchmarks/bench_edge.py --nodes 1        # one node only
    .venv/bin/python tests/benchmarks/bench_edge.py --reuse tritonops-edge-1   # a converged node: no first converge
    .venv/bin/python tests/benchmarks/bench_edge.py --nodes 1 --prefix edge-e --keep --drift   # own names, kept, drift timed
    .venv/bin/python tests/benchmarks/bench_edge.py --nodes 10 --serial 100%   # one wave (default edge_serial: [1, 25%])

For each fleet size: the first converge of fresh Podman nodes (gpu_facts, triton_server from the wheel,
the sample repository as a release), a re-converge with nothing to change (changed must be 0) and a
``--check --diff`` run (changed must be 0 too), each with its Ansible recap, then the slowest ten tasks
of the no-change run (profile_tasks). Ansible reaches the nodes over SSH with pipelining and
ControlPersist (ansible/inventories/local, devkit.hosts.lab_ssh), one fork per node. The one-node run
also times publishing a new model release through the same playbook, golden gate included. The nodes
(``edge-bench-N``, or ``--prefix``-N) are removed at the end unless ``--keep``. ``--drift`` also times
``tritonops drift`` (ansible and models sources) on the first node after the check run. Needs root, Podman and the node image (built if missing).
Each run also prints the CPU seconds the whole machine spent in it (controller and nodes, /proc/stat) and
the cores that kept busy on average: the nodes here share the controller's cores, which a fleet does not.
Exits 1 when a no-change or check run changed anything.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from devkit.demo import REPO, SAMPLE, run_playbook, slowest_tasks
from devkit.hosts.images import ImageSpec, build_image, cache_dir
from devkit.hosts.nodes import node_down, node_up
from rich.console import Console
from rich.table import Table
from tritonops.drift.run import run as drift_run

PLAYBOOK = REPO / "ansible" / "edge.yml"
LOCAL = REPO / "ansible" / "inventories" / "local"
LOGS = cache_dir() / "logs"


def cpu_busy_seconds() -> float:
    """CPU seconds this machine has spent busy since boot, all cores and all processes (the nodes' included):
    the first line of /proc/stat less idle and iowait."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def fleet(console: Console, names: list[str], tmp: Path, fresh: bool,
          rows: list[tuple[str, dict[str, int]]], drift: bool = False, serial: str | None = None) -> None:
    inventory = tmp / f"hosts-{len(names)}.yml"
    inventory.write_text(json.dumps({"all": {"children": {"edge": {"hosts": {n: {} for n in names}}}}}))
    size = f"{len(names)} node{'s' if len(names) > 1 else ''}" + (f" (edge_serial {serial})" if serial else "")

    def converge(label: str, extra: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> Path:
        # The local inventory's group_vars (and its SSH connection) apply; the second inventory adds the nodes.
        log = LOGS / f"bench-edge-{len(names)}-{label.split()[0]}.log"
        if serial is not None:  # the play's waves (playbooks/edge.yml: serial: edge_serial)
            extra = {"edge_serial": serial, **(extra or {})}
        busy = cpu_busy_seconds()
        recap = run_playbook(console, PLAYBOOK, [LOCAL, inventory], ",".join(names), log, extra_vars=extra,
                             forks=len(names), options=options)
        recap["cpu"] = round(cpu_busy_seconds() - busy, 1)
        rows.append((f"{size}: {label}", recap))
        console.print(f"{size}: {label}: {recap['seconds']}s ok={recap['ok']} changed={recap['changed']} "
                      f"cpu={recap['cpu']}s ({recap['cpu'] / max(recap['seconds'], 0.1):.2f} of {os.cpu_count()} cores)")
        return log

    if fresh:
        converge("first converge")
    no_change = converge("re-converge (no change)")
    converge("check --diff", options=("--check", "--diff"))
    if drift:
        start = time.monotonic()
        report = drift_run(["ansible", "models"], [LOCAL, inventory], limit=names[0], forks=5)
        seconds = round(time.monotonic() - start, 1)
        clean = not report.errors and not report.findings
        rows.append((f"{size}: tritonops drift on {names[0]}", {"seconds": seconds, "ok": int(clean),
                                                               "changed": len(report.findings),
                                                               "failed": len(report.errors)}))
        console.print(f"{size}: tritonops drift {seconds}s "
                      + " ".join(f"{x.source}={x.seconds}s" for x in report.results))
        if not clean:
            console.print(report.to_json())
    table = Table(title=f"{size}: slowest ten tasks of the no-change re-converge")
    table.add_column("task")
    table.add_column("seconds", justify="right")
    for name, secs in slowest_tasks(no_change):
        table.add_row(name, f"{secs:.2f}")
    console.print(table)
    if len(names) == 1:
        release = tmp / "release-2"
        shutil.copytree(SAMPLE, release, ignore=shutil.ignore_patterns("__pycache__"))
        cfg = release / "mlp" / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace("count: 1", "count: 2", 1))
        model = release / "mlp" / "1" / "model.py"
        model.write_text(f"# bench release {time.time_ns()}\n" + model.read_text())
        converge("publish new release", {"model_repository_local_path": str(release)})


def main(argv: list[str]) -> int:
    console = Console()
    reuse = argv[argv.index("--reuse") + 1] if "--reuse" in argv else None
    sizes = [int(n) for n in argv[argv.index("--nodes") + 1].split(",")] if "--nodes" in argv else [1, 10]
    prefix = argv[argv.index("--prefix") + 1] if "--prefix" in argv else "edge-bench"
    keep, drift = "--keep" in argv, "--drift" in argv
    serial = argv[argv.index("--serial") + 1] if "--serial" in argv else None
    build_image(ImageSpec(arch="amd64"))
    rows: list[tuple[str, dict[str, int]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-edge-") as tmp_dir:
        for size in [1] if reuse else sizes:
            names = [reuse] if reuse else [f"{prefix}-{i}" for i in range(1, size + 1)]
            try:
                for name in names:
                    if not reuse:
                        node_down(name)
                    node_up(name)
                fleet(console, names, Path(tmp_dir), fresh=not reuse, rows=rows, drift=drift, serial=serial)
            finally:
                for name in names if not (reuse or keep) else []:
                    node_down(name)
    table = Table(title="edge benchmark (ansible/edge.yml over the lab's SSH, local Podman nodes, 2-core host)")
    for col in ("step", "seconds", "ok", "changed", "failed", "cpu s", "cores busy"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for label, recap in rows:
        cpu = recap.get("cpu")
        table.add_row(label, str(recap["seconds"]), str(recap["ok"]), str(recap["changed"]), str(recap["failed"]),
                      "" if cpu is None else str(cpu), "" if cpu is None else f"{cpu / max(recap['seconds'], 0.1):.2f}")
    console.print(table)
    console.print(f"cores busy: CPU seconds of the whole machine (controller and nodes) per wall second, of "
                  f"{os.cpu_count()}; a run near {os.cpu_count()} is bound by this machine's CPUs, not by Ansible's waves")
    quiet = [r for label, r in rows if "no change" in label or "check" in label or "drift" in label]
    return 0 if quiet and all(r["changed"] == 0 and r["failed"] == 0 for r in quiet) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
