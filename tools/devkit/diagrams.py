"""The docs' two pictures, drawn from the code: the release flow, and what runs where.

``python -m devkit diagrams`` rewrites each Mermaid block between ``<!-- BEGIN DIAGRAM name -->`` /
``<!-- END DIAGRAM name -->`` in the docs from what the code says today (GitHub renders Mermaid):

* ``release-flow`` (docs/releases.md): the ``release`` commands of the CLI, the store kinds the agent
  reads, and the agent's steps in the order it runs them, each with the cause and class of its failure
  from ``agent/failures.py`` (retry or refused);
* ``what-runs-where`` (README.md): the CLI's commands (controller), the store, the containers of the
  rendered dev Triton pod (``tritonops render --stack triton --env dev``) with their ports, and the
  systemd units each role of the edge playbook installs.

``tests/unit/devkit/test_diagrams.py`` fails when a picture is stale or leaves out a step of the agent's table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = {"release-flow": ROOT / "docs" / "releases.md", "what-runs-where": ROOT / "README.md"}

# The agent's steps for one release, in the order pull.py runs them. Steps of the failure table that are
# not one release's (waiting for Triton, the node lock, unloading the previous models) are drawn apart.
PIPELINE = ("fetch", "verify", "install", "activate", "load", "golden", "mark")
AROUND = ("lock", "triton", "unload")
# What the agent reads, as ``Store`` takes it (its usage error names each).
STORE_KINDS = ("a folder", "http(s)://HOST/PATH", "s3://BUCKET/PREFIX", "oci://REGISTRY/REPO")


def _id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _commands(group: Any) -> list[str]:
    return sorted(name for name, cmd in group.commands.items() if not getattr(cmd, "hidden", False))


def _cli() -> Any:
    import typer
    from tritonops.cli import app

    return typer.main.get_command(app)


def release_flow() -> str:
    from tritonops.agent.failures import CAUSES, STEP_CAUSES

    release = _cli().commands["release"]
    lines = ["flowchart LR",
             f'  controller["<b>controller</b><br/>tritonops release<br/>{"<br/>".join(_commands(release))}"]',
             f'  store[("<b>store</b><br/>{"<br/>".join(STORE_KINDS)}")]',
             '  controller -- "signed blobs, manifest, channel pointer" --> store',
             '  subgraph agent["release agent (node or pod sidecar)"]', "    direction LR"]
    for step in PIPELINE:
        cause = STEP_CAUSES[step]
        lines.append(f'    {step}["{step}<br/><i>fails: {cause}, {CAUSES[cause][0]}</i>"]')
    lines.append("    " + " --> ".join(PIPELINE))
    lines.append("  end")
    lines += ['  store -- "poll (If-None-Match)" --> fetch',
              '  mark --> served(["gated: served, /ready 200, tritonops_release_info"])',
              '  golden -. "refused: the last gated release serves" .-> served',
              f'  around["also classed: {", ".join(f"{s} ({STEP_CAUSES[s]})" for s in AROUND)}"]']
    return "\n".join(lines)


def _pod() -> tuple[str, list[dict[str, Any]]]:
    from tritonops.k8s.programs import render_set
    from tritonops.k8s.stack_file import load_stack_config

    # The pod's shape; the release public key only the user gives (render refuses without it) changes none of it.
    dep = next(o for o in render_set("triton", "dev", load_stack_config("triton", "dev")).objects
               if o["kind"] == "Deployment" and o["metadata"]["name"] == "triton-vision")
    spec = dep["spec"]["template"]["spec"]
    return dep["metadata"]["name"], [*spec.get("initContainers", []), *spec["containers"]]


def _edge_units() -> dict[str, list[str]]:
    play = yaml.safe_load((ROOT / "playbooks" / "edge.yml").read_text())
    steps = [step for p in play for step in [*p.get("roles", []), *p.get("tasks", [])]  # roles: or import/include_role
             if "tasks_from" not in (step.get("ansible.builtin.include_role") or {})]  # not a mode's off.yml
    names = [s.get("role") or (s.get("ansible.builtin.import_role") or s.get("ansible.builtin.include_role")
                                or {}).get("name") for s in steps]
    roles = [str(n).rsplit(".", 1)[-1] for n in names if n]
    units = {}
    for role in roles:
        found = sorted(p.name.removesuffix(".j2") for p in (ROOT / "roles" / role / "templates").glob("*.j2")
                       if p.name.removesuffix(".j2").endswith((".service", ".timer")))
        if found:
            units[role] = found
    return units


def what_runs_where() -> str:
    cli = _cli()
    pod, containers = _pod()
    lines = ["flowchart LR",
             f'  controller["<b>controller</b> (a laptop or CI)<br/>tritonops {" · ".join(_commands(cli))}"]',
             f'  store[("<b>store</b><br/>{"<br/>".join(STORE_KINDS)}")]',
             '  controller -- "release publish, promote" --> store',
             f'  subgraph pod["Kubernetes pod {pod} (tritonops render --stack triton --env dev)"]']
    for c in containers:
        ports = ", ".join(f"{p['name']} {p['containerPort']}" for p in c.get("ports", []))
        lines.append(f'    {_id("pod_" + c["name"])}["{c["name"]}{"<br/>" + ports if ports else ""}"]')
    lines.append("  end")
    lines += ['  pod_release_sync -- "sync (init)" --> store', '  pod_release_agent -- "poll" --> store',
              '  pod_release_agent -- "load, golden gate" --> pod_triton',
              '  subgraph edge["edge node (ansible/edge.yml)"]']
    for role, units in _edge_units().items():
        lines.append(f'    {_id("edge_" + role)}["<i>{role}</i><br/>{"<br/>".join(units)}"]')
    lines += ["  end", '  edge_release_agent -- "poll" --> store',
              '  edge_release_agent -- "load, golden gate" --> edge_triton_server']
    return "\n".join(lines)


DIAGRAMS = {"release-flow": release_flow, "what-runs-where": what_runs_where}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN DIAGRAM {name} -->\n```mermaid\n)(.*?)(```\n<!-- END DIAGRAM {name} -->)", re.S)


def stale() -> dict[str, str]:
    """name -> why, for each picture whose docs block differs from what the code draws today."""
    out = {}
    for name, draw in DIAGRAMS.items():
        found = _block(name).search(DOCS[name].read_text())
        if not found:
            out[name] = f"{DOCS[name].relative_to(ROOT)}: no <!-- BEGIN DIAGRAM {name} --> mermaid block"
        elif found.group(2) != draw() + "\n":
            out[name] = f"{DOCS[name].relative_to(ROOT)}: the {name} picture is stale (python -m devkit diagrams)"
    return out


def update() -> list[str]:
    """Rewrite every stale picture in place; the docs rewritten."""
    changed = []
    for name, draw in DIAGRAMS.items():
        path, text = DOCS[name], DOCS[name].read_text()
        drawn = draw() + "\n"
        new = _block(name).sub(lambda m: m.group(1) + drawn + m.group(3), text)  # noqa: B023 (used at once)
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(ROOT)))
    return changed
