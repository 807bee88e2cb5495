"""What every ``tritonops`` command module prints with: the consoles and stable JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from tritonops.core.errors import ReleaseError

console = Console()
err_console = Console(stderr=True)


def print_json(data: object) -> None:
    """Stable JSON on stdout (sorted keys, two-space indent; paths and dates as strings)."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def run_release_op(fn: Callable[[], Any], as_json: bool, render: Callable[[Any], None] | None = None) -> None:
    """Run a release-store operation: its result as JSON (or ``render``ed); a ReleaseError is one line and
    the exit code of its kind (tritonops.agent.cli.exit_code)."""
    from tritonops.agent.cli import exit_code

    try:
        out = fn()
    except ReleaseError as e:  # one line, as long as it is (a pipe, a log: never wrapped inside a name)
        err_console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True, highlight=False)
        raise typer.Exit(exit_code(e)) from None
    if as_json or render is None:
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        render(out)
