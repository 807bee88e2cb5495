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
Then the phases of the no-change re-converge and of the check run (what ``tritonops drift``'s ansible source
runs): ansible-playbook's own floor against the same node in the same run (an empty play, then one ``ping``:
start-up, then the SSH connection and one module), the facts, each role's share (profile_tasks), and what
is left (the play's parsing, skipped tasks' bookkeeping); with ``--drift`` also the models source. The
figures go to tests/benchmarks/records/bench_edge.json (record.py).
Exits 1 when a no-change or check run changed anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import record
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


_ROLE = re.compile(r"^(?:[\w.]+\.)?(?P<role>\w+) : ")
FLOOR_PLAYS = {
    "empty play": {"gather_facts": False, "tasks": []},
    "one ping": {"gather_facts": False, "tasks": [{"ansible.builtin.ping": {}}]},
    "facts + ping": {"gather_facts": True, "gather_subset": ["min", "network"],
                     "tasks": [{"ansible.builtin.ping": {}}]},
    # The cost of one module call (Python on the node importing module_utils from the payload) against one
    # SSH round trip (raw: no Python) over the same ControlPersist connection.
    "ten pings": {"gather_facts": False, "tasks": [{"ansible.builtin.ping": {}}] * 10},
    "ten raw": {"gather_facts": False, "tasks": [{"ansible.builtin.raw": "true"}] * 10},
}


def floor(inventories: list[Path], node: str, tmp: Path) -> dict[str, float]:
    """ansible-playbook's own cost against ``node``, best of two: an empty play (start-up: Python, the
    inventories), one ping (+ the SSH connection and one module), facts + ping (+ edge.yml's fact subset),
    and ten pings against ten raw commands: one module call's cost and one SSH round trip's."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    out: dict[str, float] = {}
    for label, play in FLOOR_PLAYS.items():
        path = tmp / f"floor-{label.replace(' ', '-').replace('+', 'and')}.yml"
        path.write_text(json.dumps([{"name": label, "hosts": node, **play}]))
        cmd = [str(bin_dir / "ansible-playbook"), str(path), "--limit", node]
        for inventory in inventories:
            cmd += ["-i", str(inventory)]
        runs = []
        for _ in range(2):
            start = time.monotonic()
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=REPO)
            runs.append(time.monotonic() - start)
        out[label] = round(min(runs), 2)
    return out


def phases(log: Path, seconds: float, floor_s: dict[str, float]) -> dict[str, float]:
    """Where one profiled run's time went: start-up (the empty play's floor), facts, each role's task time
    (profile_tasks' summary), and the rest (playbook parsing, includes, callbacks between tasks)."""
    share: dict[str, float] = defaultdict(float)
    for name, secs in slowest_tasks(log, count=sys.maxsize):
        key = "facts" if name == "Gathering Facts" else (r["role"] if (r := _ROLE.match(name)) else "includes")
        share[key] += secs
    out = {"start-up (empty play)": floor_s["empty play"], **{k: round(v, 2) for k, v in
                                                              sorted(share.items(), key=lambda kv: -kv[1])}}
    out["rest"] = round(seconds - sum(out.values()), 2)
    return out


def phase_table(title: str, parts: dict[str, float]) -> Table:
    table = Table(title=title)
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    total = sum(parts.values())
    for name, secs in parts.items():
        table.add_row(name, f"{secs:.2f}", f"{secs / max(total, 0.01):.0%}")
    table.add_row("total", f"{total:.2f}", "")
    return table


def fleet(console: Console, names: list[str], tmp: Path, fresh: bool,
          rows: list[tuple[str, dict[str, int]]], drift: bool = False, serial: str | None = None,
          figures: dict[str, float] | None = None) -> None:
    inventory = tmp / f"hosts-{len(names)}.yml"
    inventory.write_text(json.dumps({"all": {"children": {"edge": {"hosts": {n: {} for n in names}}}}}))
    size = f"{len(names)} node{'s' if len(names) > 1 else ''}" + (f" (edge_serial {serial})" if serial else "")

    def converge(label: str, extra: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> Path:
        # The local inventory's group_vars (and its SSH connection) apply; the second inventory adds the nodes.
        log = LOGS / f"bench-edge-{len(names)}-{label.split()[0]}.log"
        if serial is not None:  # the play's waves (playbooks/edge.yml: serial: edge_serial)
            extra = {"edge_serial": serial, **(extra or {})}
        busy = cpu_busy_seconds()
        start = time.monotonic()
        recap = run_playbook(console, PLAYBOOK, [LOCAL, inventory], ",".join(names), log, extra_vars=extra,
                             forks=len(names), options=options)
        recap["cpu"] = round(cpu_busy_seconds() - busy, 1)
        recap["exact"] = round(time.monotonic() - start, 2)
        rows.append((f"{size}: {label}", recap))
        console.print(f"{size}: {label}: {recap['seconds']}s ok={recap['ok']} changed={recap['changed']} "
                      f"cpu={recap['cpu']}s ({recap['cpu'] / max(recap['seconds'], 0.1):.2f} of {os.cpu_count()} cores)")
        return log

    figures = {} if figures is None else figures
    key = f"n{len(names)}"
    if fresh:
        converge("first converge")
        figures[f"{key}_first_converge_s"] = rows[-1][1]["exact"]
    no_change = converge("re-converge (no change)")
    figures[f"{key}_no_change_s"] = rows[-1][1]["exact"]
    check_log = converge("check --diff", options=("--check", "--diff"))
    figures[f"{key}_check_s"] = rows[-1][1]["exact"]
    if len(names) == 1:
        floor_s = floor([LOCAL, inventory], names[0], tmp)
        floor_s["per module call"] = round((floor_s["ten pings"] - floor_s["empty play"]) / 10, 3)
        floor_s["per SSH round trip"] = round((floor_s["ten raw"] - floor_s["empty play"]) / 10, 3)
        console.print("ansible-playbook's floor against " + names[0] + ": "
                      + ", ".join(f"{k} {v:.2f}s" for k, v in floor_s.items()))
        figures.update({f"floor_{k.replace(' + ', '_').replace(' ', '_').lower()}_s": v for k, v in floor_s.items()})
        for label, log, secs in (("no-change re-converge", no_change, figures[f"{key}_no_change_s"]),
                                 ("check --diff (drift's ansible source)", check_log, figures[f"{key}_check_s"])):
            parts = phases(log, secs, floor_s)
            console.print(phase_table(f"{size}: phases of the {label}", parts))
            tag = "no_change" if label.startswith("no-change") else "check"
            figures.update({f"{tag}_phase_{k.split()[0].replace('-', '_')}_s": v for k, v in parts.items()})
    if drift:
        start = time.monotonic()
        report = drift_run(["ansible", "models"], [LOCAL, inventory], limit=names[0], forks=5)
        seconds = round(time.monotonic() - start, 1)
        figures[f"{key}_drift_s"] = seconds
        figures.update({f"{key}_drift_{x.source}_s": x.seconds for x in report.results})
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
        figures[f"{key}_publish_s"] = rows[-1][1]["exact"]


def main(argv: list[str]) -> int:
    console = Console(record=True)
    reuse = argv[argv.index("--reuse") + 1] if "--reuse" in argv else None
    sizes = [int(n) for n in argv[argv.index("--nodes") + 1].split(",")] if "--nodes" in argv else [1, 10]
    prefix = argv[argv.index("--prefix") + 1] if "--prefix" in argv else "edge-bench"
    keep, drift = "--keep" in argv, "--drift" in argv
    serial = argv[argv.index("--serial") + 1] if "--serial" in argv else None
    build_image(ImageSpec(arch="amd64"))
    rows: list[tuple[str, dict[str, int]]] = []
    figures: dict[str, float] = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-edge-") as tmp_dir:
        for size in [1] if reuse else sizes:
            names = [reuse] if reuse else [f"{prefix}-{i}" for i in range(1, size + 1)]
            try:
                for name in names:
                    if not reuse:
                        node_down(name)
                    node_up(name)
                fleet(console, names, Path(tmp_dir), fresh=not reuse, rows=rows, drift=drift, serial=serial,
                      figures=figures)
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
    clean = bool(quiet) and all(r["changed"] == 0 and r["failed"] == 0 for r in quiet)
    if clean:
        path = record.write("bench_edge", figures, console.export_text(), note=record.load_note(load))
        console.print(f"recorded: {path}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
