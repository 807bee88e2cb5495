"""`make demo`: a local edge node converged by Ansible, then the smoke check and real inference results.

Default (``python -m devkit demo``): build the Debian systemd image (cached), boot the Podman node
``tritonops-edge-1``, run ``ansible-playbook ansible/edge.yml -i ansible/inventories/local`` against
it (gpu_facts, triton_server from the wheel, the sample repository as a model release), then smoke-check
the node's Triton over its bridge address and show the pipeline's answers.

``python -m devkit demo --local``: the earlier path, a tritonserver process on loopback (no Ansible, no Podman).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from rich.console import Console
from rich.table import Table
from tritonops.core.triton_cli import HTTP_PORT, METRICS_PORT
from tritonops.core.triton_http import DEFAULT_HEADER
from tritonops.model_repo.golden import Golden
from tritonops.triton import server
from tritonops.triton.smoke import SmokeReport, report_table, smoke

from devkit.hosts.images import cache_dir
from devkit.hosts.podman import CONTAINERS_CONF

# The checkout the development kit lives in (tools/devkit/): the demo converges its playbooks and sample models.
REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "model_repository"
EDGE_NODE = "tritonops-edge-1"
_TASK = re.compile(r"^TASK \[(?P<name>.+?)\] \*")
_RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unr>\d+)\s+"
                    r"failed=(?P<failed>\d+)")


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where its log is."""


def pipeline_table(url: str, repository: Path) -> Table:
    """Send the pipeline's golden raw inputs and show what the ensemble answers."""
    client = httpclient.InferenceServerClient(url)
    case = Golden.load(repository / "pipeline" / "golden.json").cases[-1]
    raw = case.inputs["raw"].array()
    inp = httpclient.InferInput("raw", list(raw.shape), "UINT8")
    inp.set_data_from_numpy(raw)
    result = client.infer("pipeline", [inp])
    probs, labels = result.as_numpy("probabilities"), result.as_numpy("label")
    table = Table(title="pipeline (preprocess -> mlp -> postprocess), one batch of 4")
    for col in ("row", "raw[:6]", "label", "p(label)", "expected label"):
        table.add_column(col)
    want = case.outputs["label"].array()
    for i in range(len(raw)):
        table.add_row(str(i), " ".join(map(str, raw[i, :6])), str(int(labels[i, 0])),
                      f"{float(np.max(probs[i])):.4f}", str(int(want[i, 0])))
    return table


def run_playbook(console: Console, playbook: Path, inventories: Sequence[Path], limit: str, log: Path,
                 extra_vars: dict[str, str] | None = None, forks: int | None = None,
                 options: Sequence[str] = ()) -> dict[str, int]:
    """Run ansible-playbook, showing the current task; the full output goes to ``log``, with each
    task's time (profile_tasks: ``slowest_tasks`` reads its summary back)."""
    bin_dir = Path(sys.executable).parent
    exe = bin_dir / "ansible-playbook"
    cmd = [str(exe if exe.exists() else "ansible-playbook"), str(playbook), "--limit", limit, *options]
    for inventory in inventories:
        cmd += ["-i", str(inventory)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if forks:
        cmd += ["--forks", str(forks)]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
               CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF)),
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    log.parent.mkdir(parents=True, exist_ok=True)
    recap: dict[str, int] = {}
    tasks = 0
    started = time.monotonic()
    with log.open("w") as fh, console.status("ansible-playbook: starting") as status:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=REPO)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if m := _TASK.match(line):
                tasks += 1
                status.update(f"ansible-playbook [{time.monotonic() - started:5.0f}s] task {tasks}: {m['name']}")
                if tasks % 10 == 0:
                    console.print(f"  [{time.monotonic() - started:5.0f}s] {tasks} tasks, now: {m['name']}",
                                  highlight=False)
            elif m := _RECAP.match(line):
                recap = {k: int(m[k]) for k in ("ok", "changed", "unr", "failed")}
        rc = proc.wait()
    if rc != 0 or not recap:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise DemoError(f"ansible-playbook failed (rc {rc}); full log {log}:\n{tail}")
    recap["seconds"] = round(time.monotonic() - started)
    return recap


_PROFILED = re.compile(r"^(?P<name>\S.*?) -{3,} (?P<seconds>\d+\.\d+)s$")


def slowest_tasks(log: Path, count: int = 10) -> list[tuple[str, float]]:
    """The slowest tasks of a run_playbook log, from profile_tasks' summary (the run's last lines)."""
    rows = [(m["name"], float(m["seconds"])) for line in log.read_text().splitlines()
            if (m := _PROFILED.match(line))]
    return sorted(rows, key=lambda r: -r[1])[:count]


def run_edge(console: Console | None = None, node: str = EDGE_NODE,
             phases: dict[str, float] | None = None) -> SmokeReport:
    """Create the local edge node, converge ansible/edge.yml on it, smoke-check it from the controller.

    Each step's seconds are printed, and put in ``phases`` (image, node, converge, smoke) when given."""
    import yaml

    from devkit.hosts.images import ImageSpec, build_image
    from devkit.hosts.nodes import node_up

    console = console or Console()
    started = time.monotonic()
    phases = {} if phases is None else phases
    with console.status("image: checking the cached Debian bookworm systemd image") as status:
        built = build_image(ImageSpec(arch="amd64"), step=lambda m: status.update(f"image: {m}"))
    phases["image"] = round(time.monotonic() - started, 1)
    console.print(f"[1/4] image localhost/tritonops-debian-bookworm:systemd-amd64 {'built' if built else 'cached'}"
                  f" ({phases['image']:.0f}s)")
    step = time.monotonic()
    with console.status(f"node: booting {node} (Podman, systemd)"):
        n = node_up(node, arch="amd64")
    phases["node"] = round(time.monotonic() - step, 1)
    console.print(f"[2/4] node {n.name} {n.state} at {n.address} ({phases['node']:.0f}s)")
    inventory = REPO / "ansible" / "inventories" / "local"
    log = cache_dir() / "logs" / f"demo-{node}-ansible.log"
    console.print(f"[3/4] ansible-playbook ansible/edge.yml -i ansible/inventories/local --limit {node}"
                  f" (log: {log})")
    inventories = [inventory]
    if node != EDGE_NODE:  # a node of its own (tests/benchmarks/bench_demo.py): the local group_vars apply to it
        inventories.append(node_inventory(node, {node: {}}))
    step = time.monotonic()
    recap = run_playbook(console, REPO / "ansible" / "edge.yml", inventories, node, log)
    phases["converge"] = round(time.monotonic() - step, 1)
    console.print(f"      converged in {recap['seconds']}s: ok={recap['ok']} changed={recap['changed']} "
                  f"failed={recap['failed']}")
    secret = yaml.safe_load((inventory / "group_vars" / "all.yml").read_text())["triton_server_admin_secret"]
    console.print(f"[4/4] smoke check of {node} from the controller (HTTP {n.address}:{HTTP_PORT}, golden data from"
                  " examples/model_repository)")
    step = time.monotonic()
    report = smoke(f"http://{n.address}:{HTTP_PORT}", repository=SAMPLE, metrics_url=f"http://{n.address}:{METRICS_PORT}/metrics",
                   headers={DEFAULT_HEADER: secret})
    console.print(report_table(report))
    console.print(pipeline_table(f"{n.address}:{HTTP_PORT}", SAMPLE))
    phases["smoke"] = round(time.monotonic() - step, 1)
    key_file = write_key_file(cache_dir() / f"{node}-admin-key", secret)
    console.print(closing_hint(node, n.address, key_file, time.monotonic() - started), soft_wrap=True,
                  highlight=False, markup=False)
    return report


def node_inventory(name: str, hosts: dict[str, dict[str, Any]], group_vars: dict[str, Any] | None = None) -> Path:
    """A second inventory (``-i``, beside ansible/inventories/local, whose group_vars apply too) that puts
    ``hosts`` (name: host vars) in the edge group, in a group ``name`` of their own with ``group_vars``."""
    path = cache_dir() / f"{name}-inventory.json"
    group = {"hosts": hosts, "vars": group_vars or {}}
    path.write_text(json.dumps({"all": {"children": {"edge": {"children": {name.replace("-", "_"): group}}}}}))
    return path


def write_key_file(path: Path, secret: str) -> Path:
    """The node's admin key alone in a file only this user reads (``--admin-key-file``), as an operator keeps it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    path.chmod(0o600)
    return path


def closing_hint(node: str, address: str, key_file: Path, seconds: float) -> str:
    """What to run next, each a command that works from the checkout as printed (one per line, never wrapped)."""
    return "\n".join([
        f"demo done in {seconds:.0f}s. The node keeps running. tritonops and ansible-playbook are in .venv/bin:",
        "  . .venv/bin/activate        # or: export PATH=\"$PWD/.venv/bin:$PATH\"",
        f"  podman exec -it {node} bash",
        f"  tritonops smoke http://{address}:{HTTP_PORT} --repository examples/model_repository",
        f"  tritonops bench mlp_batched --url {address}:{HTTP_PORT} --allow-host {address} --admin-key-file {key_file}",
        f"  tritonops tune mlp_batched --repository examples/model_repository --url {address}:{HTTP_PORT} --allow-host "
        f"{address} --admin-key-file {key_file} --no-write --plot /tmp/tune-mlp_batched.png",
        f"  make demo-down              # removes the node: "
        f"PYTHONPATH=tools .venv/bin/python -m devkit hosts down {node}",
    ])


def run(console: Console | None = None, repository: Path = SAMPLE) -> SmokeReport:
    console = console or Console()
    started = time.monotonic()
    with console.status("starting tritonserver (CPU, nvidia-pytriton wheel) on loopback..."):
        srv = server.start(repository, model_control_mode="explicit", load_models=["*"])
    try:
        console.print(f"tritonserver ready in {time.monotonic() - started:.1f}s: "
                      f"http://{srv.http_url} grpc://{srv.grpc_url} {srv.metrics_url}")
        report = smoke(f"grpc://{srv.grpc_url}", repository=repository, metrics_url=srv.metrics_url)
        console.print(report_table(report))
        console.print(pipeline_table(srv.http_url, repository))
        return report
    finally:
        srv.stop()
