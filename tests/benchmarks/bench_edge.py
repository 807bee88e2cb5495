"""Benchmark: converge a fresh local edge node with ansible/edge.yml, re-converge it, publish a release.

    .venv/bin/python tests/benchmarks/bench_edge.py                            # fresh node mr-bench
    .venv/bin/python tests/benchmarks/bench_edge.py --reuse tritonops-edge-1   # a converged node: no first converge

Prints three figures, each with its Ansible recap: the first converge of a fresh Podman node
(gpu_facts, triton_server from the wheel, the sample repository as a release), a re-converge with
nothing to change (changed must be 0), and the time to publish a new model release (the sample
with mlp at two instances) through the same playbook, golden gate included. The node (``mr-bench``)
is removed at the end. Needs root, Podman and the image `python -m devkit hosts build` makes (built if missing).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from devkit.demo import REPO, SAMPLE, run_playbook
from devkit.hosts.images import ImageSpec, build_image, cache_dir
from devkit.hosts.nodes import node_down, node_up
from rich.console import Console
from rich.table import Table

NODE = "mr-bench"


def main(argv: list[str]) -> int:
    console = Console()
    reuse = argv[argv.index("--reuse") + 1] if "--reuse" in argv else None
    name = reuse or NODE
    build_image(ImageSpec(arch="amd64"))
    if not reuse:
        node_down(NODE)
    rows: list[tuple[str, dict[str, int]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-edge-") as tmp_dir:
        tmp = Path(tmp_dir)
        try:
            node = node_up(name)
            inventory = tmp / "hosts.yml"
            inventory.write_text(json.dumps({"all": {"children": {"edge": {"hosts": {name: {}}}}}}))
            local = REPO / "ansible" / "inventories" / "local"
            playbook = REPO / "ansible" / "edge.yml"
            logs = cache_dir() / "logs"

            def converge(label: str, extra: dict[str, str] | None = None) -> None:
                # The local inventory's group_vars apply; the second inventory adds the bench node.
                recap = run_playbook(console, playbook, [local, inventory], name,
                                     logs / f"bench-edge-{label.split()[0]}.log", extra_vars=extra)
                rows.append((label, recap))
                console.print(f"{label}: {recap['seconds']}s ok={recap['ok']} changed={recap['changed']}")

            if not reuse:
                converge("first converge")
            converge("re-converge (no change)")
            release = tmp / "release-2"
            shutil.copytree(SAMPLE, release, ignore=shutil.ignore_patterns("__pycache__"))
            cfg = release / "mlp" / "config.pbtxt"
            cfg.write_text(cfg.read_text().replace("count: 1", "count: 2", 1))
            model = release / "mlp" / "1" / "model.py"
            model.write_text(f"# bench release {time.time_ns()}\n" + model.read_text())
            converge("publish new release", {"model_repository_local_path": str(release)})
            console.print(f"node {node.name} at {node.address}")
        finally:
            if not reuse:
                node_down(NODE)
    table = Table(title="edge node benchmark (ansible/edge.yml on a local Podman node, 2-core host)")
    for col in ("step", "seconds", "ok", "changed", "failed"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for label, recap in rows:
        table.add_row(label, str(recap["seconds"]), str(recap["ok"]), str(recap["changed"]), str(recap["failed"]))
    console.print(table)
    no_change = [r for label, r in rows if label.startswith("re-converge")]
    return 0 if no_change and no_change[0]["changed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
