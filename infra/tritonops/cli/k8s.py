"""``tritonops render``: a stack's objects as YAML, without the Pulumi engine.

Exit codes: 0 written; 2 invalid configuration (the message names the config key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tritonops import project
from tritonops.agent.exitcodes import ExitCode
from tritonops.cli.params import ProjectDir, folder_to_write, path
from tritonops.k8s.config import ENVIRONMENTS, STACKS, ConfigError


def render(
    stack: Annotated[str, typer.Option("--stack", help=f"Stack under the project's stacks/: {', '.join(STACKS)}.")],
    env: Annotated[str, typer.Option("--env", help=f"Environment (Pulumi.<env>.yaml): {', '.join(ENVIRONMENTS)}.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to write the YAML into.", parser=path,
                                      callback=folder_to_write)],
    as_json: Annotated[bool, typer.Option("--json", help="Print the written files as JSON.")] = False,
    project_dir: ProjectDir = None,
) -> None:
    """Write the Kubernetes objects (and Helm values, AWS specs) a stack creates, as plain YAML."""
    from tritonops.k8s.render import render as do_render

    console = Console()
    try:
        written = do_render(stack, env, out, project.stacks_dir(project_dir))
    except ConfigError as exc:
        if as_json:
            print(json.dumps({"error": str(exc), "key": exc.key}))
        else:
            Console(stderr=True).print(f"[red]invalid configuration[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from exc
    if as_json:
        print(json.dumps([{"path": str(w.path), "kind": w.kind, "name": w.name} for w in written], indent=2))
        return
    table = Table(title=f"tritonops render --stack {stack} --env {env}")
    for col in ("kind", "name", "file"):
        table.add_column(col)
    for w in written:
        table.add_row(w.kind, w.name, str(w.path))
    console.print(table)
