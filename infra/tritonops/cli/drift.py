"""``tritonops drift``: exit 0 clean, 1 drift found, 3 the check itself failed, 2 usage error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tritonops import project
from tritonops.cli.extras import require, require_program
from tritonops.cli.params import JsonReport, ProjectDir, folder_to_write, path
from tritonops.core.exitcodes import ExitCode
from tritonops.drift import SOURCES, TEXTFILE_NAME


def _env_problems(envs: list[str], stacks: list[str], stacks_dir: Path) -> list[str]:
    """An --env must be a stack name that has a Pulumi.<env>.yaml in one of the stacks checked."""
    from tritonops.k8s.config import STACKS, ConfigError
    from tritonops.k8s.stack_file import check_env_name, stack_envs

    out = []
    for e in envs:
        try:
            check_env_name(e)
        except ConfigError as exc:
            out.append(str(exc))
            continue
        if not any(e in stack_envs(s, stacks_dir) for s in stacks if s in STACKS):
            files = ", ".join(str(stacks_dir / s / f"Pulumi.{e}.yaml") for s in stacks if s in STACKS)
            out.append(f"--env {e}: no stack file ({files or 'no known --stack'})")
    return out


def extra_vars_args(values: list[str]) -> tuple[list[str], list[str]]:
    """``-e`` values for ansible-playbook, which runs in the project folder: an @FILE made absolute (from
    here), and (values, problems) where an @FILE that is not a readable file is a problem, named."""
    out, problems = [], []
    for value in values:
        if value.startswith("@"):
            file = Path(value[1:]).expanduser()
            if not file.is_file():
                problems.append(f"--extra-vars {value}: not found, or not a file")
            value = f"@{file.resolve()}"
        out.append(value)
    return out, problems


def _usage(sources: list[str], inventories: list[Path], playbooks: list[Path], stacks: list[str], envs: list[str],
           summary: Path | None, root: Path) -> list[str]:
    """What is wrong with the command line, checked before any host or stack is touched."""
    from tritonops.drift.models import PROBE_PLAYBOOK
    from tritonops.drift.run import DEFAULT_PLAYBOOK
    from tritonops.k8s.config import STACKS

    out = [f"unknown --source {s} (choose from {', '.join(SOURCES)})" for s in sources if s not in SOURCES]
    if {"ansible", "models"} & set(sources) and not inventories:
        out.append(f"--source {'/'.join(s for s in sources if s in ('ansible', 'models'))} needs an inventory (-i)")
    out += [f"--inventory {p}: not found, or not a file or folder" for p in inventories
            if not (p.is_file() or p.is_dir())]
    out += [f"--playbook {p}: not found, or not a file" for p in playbooks if not p.is_file()]
    out += [f"--stack {s}: unknown (choose from {', '.join(STACKS)})" for s in stacks if s not in STACKS]
    out += _env_problems(envs, stacks or list(STACKS), project.stacks_dir(root))
    if summary is not None and (summary.is_dir() or (summary.exists() and not summary.is_file())):
        out.append(f"--summary {summary}: not a regular file")
    # Files the sources take from the project folder (tritonops.project), when the command line names none.
    needed = ([DEFAULT_PLAYBOOK] if "ansible" in sources and not playbooks else []) + (
        [PROBE_PLAYBOOK] if "models" in sources else [])
    out += [project.missing(rel, root) for rel in needed if not (root / rel).is_file()]
    return out


def drift_cmd(
    inventory: Annotated[
        list[Path] | None, typer.Option("--inventory", "-i", help="Ansible inventory (repeatable)")
    ] = None,
    source: Annotated[
        list[str] | None,
        typer.Option(help=f"Source to check (repeatable): {', '.join(SOURCES)}. Default: ansible and models"),
    ] = None,
    playbook: Annotated[
        list[Path] | None,
        typer.Option(help="Playbook for the ansible source (repeatable). Default: the project's ansible/edge.yml")
    ] = None,
    limit: Annotated[str | None, typer.Option(help="Ansible --limit pattern")] = None,
    extra_vars: Annotated[
        list[str] | None,
        typer.Option("--extra-vars", "-e", help="Variables for the ansible and models sources, as ansible-playbook "
                                                "takes them (KEY=VALUE, JSON, @FILE; repeatable, later wins), e.g. "
                                                "a host's mode: -e release_agent_enabled=true")
    ] = None,
    stack: Annotated[list[str] | None, typer.Option(help="Pulumi stack (repeatable). Default: all")] = None,
    env: Annotated[list[str] | None, typer.Option(help="Stack with a Pulumi.<env>.yaml (repeatable). Default: all")]
    = None,
    forks: Annotated[int, typer.Option(help="Hosts checked at once", min=1)] = 10,
    textfile_dir: Annotated[
        Path | None, typer.Option(help=f"Write Prometheus metrics to DIR/{TEXTFILE_NAME} (atomic)", parser=path,
                                  callback=folder_to_write)
    ] = None,
    summary: Annotated[
        Path | None, typer.Option(help="Also write the Markdown summary to this file (CI step summaries)",
                                  parser=path)
    ] = None,
    as_json: JsonReport = False,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="Markdown summary (ticket, chat)")] = False,
    project_dir: ProjectDir = None,
) -> None:
    """Compare what runs with what the code says. Exit 0 clean, 1 drift found, 3 the check itself failed, 2 usage.

    A host in pull mode (release_agent_enabled, from its inventory or -e) is compared with its channel: the
    release it serves must be the one its release agent last verified the channel's signed pointer to name.
    """
    from tritonops.drift.progress import drift_progress
    from tritonops.drift.report import markdown, table, write_textfile
    from tritonops.drift.run import run

    sources = source or ["ansible", "models"]
    root = project.project_dir(project_dir)
    evars, bad_vars = extra_vars_args(extra_vars or [])
    problems = _usage(sources, inventory or [], playbook or [], stack or [], env or [], summary, root) + bad_vars
    if problems:
        Console(stderr=True).print(f"[red]error:[/] {escape(problems[0])}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE)
    if "pulumi" in sources:
        require("drift --source pulumi", "k8s")  # Pulumi's Automation API, in process
    playbooks = [s for s in sources if s in ("ansible", "models")]
    if playbooks:  # both run ansible-playbook (check mode, the probe)
        require_program(f"drift --source {'/'.join(playbooks)}", "ansible", "ansible-playbook")
    # ansible-playbook runs in the project folder: paths from this command line are made absolute first.
    # Host k of n per source, its task and the time, on stderr when it is a terminal (never in the output).
    with drift_progress(Console(stderr=True), sources) as shown:
        report = run(sources, [p.resolve() for p in inventory or []], [p.resolve() for p in playbook or []], limit,
                     stack or [], env or [], forks, project_dir=root, on_event=shown.event if shown else None,
                     extra_args=evars)
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
