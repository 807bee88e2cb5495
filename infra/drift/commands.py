"""``tritonops drift``: exit 0 clean, 1 drift found, 3 the check itself failed, 2 usage error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from infra.agent.exitcodes import ExitCode
from infra.drift.report import SOURCES, TEXTFILE_NAME, markdown, table, write_textfile
from infra.drift.run import DEFAULT_PLAYBOOKS, run


def drift_cmd(
    inventory: Annotated[
        list[Path] | None, typer.Option("--inventory", "-i", help="Ansible inventory (repeatable)")
    ] = None,
    source: Annotated[
        list[str] | None,
        typer.Option(help=f"Source to check (repeatable): {', '.join(SOURCES)}. Default: ansible and models"),
    ] = None,
    playbook: Annotated[
        list[Path] | None, typer.Option(help="Playbook for the ansible source (repeatable). Default: ansible/edge.yml")
    ] = None,
    limit: Annotated[str | None, typer.Option(help="Ansible --limit pattern")] = None,
    stack: Annotated[list[str] | None, typer.Option(help="Pulumi stack (repeatable). Default: all")] = None,
    env: Annotated[list[str] | None, typer.Option(help="Environment (repeatable). Default: all")] = None,
    forks: Annotated[int, typer.Option(help="Hosts checked at once")] = 10,
    textfile_dir: Annotated[
        Path | None, typer.Option(help=f"Write Prometheus metrics to DIR/{TEXTFILE_NAME} (atomic)")
    ] = None,
    summary: Annotated[
        Path | None, typer.Option(help="Also write the Markdown summary to this file (CI step summaries)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable report")] = False,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="Markdown summary (ticket, chat)")] = False,
) -> None:
    """Compare what runs with what the code says. Exit 0 clean, 1 drift found, 3 the check itself failed, 2 usage."""
    sources = source or ["ansible", "models"]
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        Console(stderr=True).print(f"[red]error:[/] unknown --source {', '.join(bad)} "
                                   f"(choose from {', '.join(SOURCES)})")
        raise typer.Exit(ExitCode.USAGE)
    report = run(sources, inventory or [], playbook or list(DEFAULT_PLAYBOOKS), limit, stack or [], env or [], forks)
    if textfile_dir is not None:
        write_textfile(report, textfile_dir)
    if summary is not None:
        summary.write_text(markdown(report))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True, default=str))
    elif as_markdown:
        typer.echo(markdown(report), nl=False)
    else:
        Console().print(table(report))
    raise typer.Exit(report.exit_code)
