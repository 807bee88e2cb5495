"""``tritonops render``: a stack's objects as YAML, without the Pulumi engine.

Exit codes: 0 written (or, with ``--check-config``, the stack file is valid); 2 invalid configuration
(the message names the file, line where known, and config key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tritonops import project
from tritonops.cli.extras import imports
from tritonops.cli.params import ProjectDir, folder_to_write, path
from tritonops.core.exitcodes import ExitCode
from tritonops.k8s import STACKS

if TYPE_CHECKING:
    from tritonops.k8s.config import ConfigError


def _fail(problems: list[tuple[str, str]], as_json: bool) -> NoReturn:
    """(message, key) of each problem on stderr (or JSON on stdout); exit 2."""
    if as_json:
        print(json.dumps({"error": problems[0][0], "key": problems[0][1],
                          "errors": [{"error": m, "key": k} for m, k in problems]}))
    else:
        err = Console(stderr=True)
        for message, _ in problems:
            err.print(f"[red]invalid configuration[/red] {escape(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(ExitCode.USAGE)


def _config_error(exc: ConfigError, stack: str, env: str, stacks_dir: Path) -> tuple[str, str]:
    """The error with file:line in front where the key is in the stack file."""
    message, key, _line = _located(exc, stack, env, stacks_dir)
    return message, key


def _located(exc: ConfigError, stack: str, env: str, stacks_dir: Path) -> tuple[str, str, int | None]:
    from tritonops.k8s.contract import locate
    from tritonops.k8s.stack_file import stack_file

    if exc.source:
        line = locate(stack_file(stack, env, stacks_dir), exc.key) if ":" in exc.key else None
        if line:
            return f"{exc.source}:{line}: {str(exc)[len(exc.source) + 2:]}", exc.key, line
    return str(exc), exc.key, None


def _in_file_order(found: list[tuple[str, str, int | None]]) -> list[tuple[str, str]]:
    """(message, key) of every problem, once per key (Pulumi's rules before the schema's), ordered by line
    (those without one last)."""
    first = {p[1]: p for p in reversed(found)}
    once = [p for p in found if first[p[1]] is p]
    return [(message, key) for message, key, _line in sorted(once, key=lambda p: (p[2] is None, p[2] or 0))]


def check_config(stack: str, env: str, stacks_dir: Path, as_json: bool) -> None:
    """Pulumi's own rules (Pulumi.yaml against the stack file), the stack's parser, then the cluster contract
    (tritonops.k8s.cluster_contract: what serves each rendered object); exit 0 or 2."""
    from tritonops.k8s import cluster_contract
    from tritonops.k8s.config import ConfigError
    from tritonops.k8s.contract import check_project, check_stack_file, missing_user_values, user_secrets
    from tritonops.k8s.stack_file import load_stack_config, read_stack_file, stack_file

    try:
        read_stack_file(stack, env, stacks_dir)  # names a bad --stack/--env or a missing file
        found = [(str(p), p.key, p.line) for p in check_project(stack, stacks_dir)
                 + check_stack_file(stack, env, stacks_dir)]
    except ConfigError as exc:
        _fail([_config_error(exc, stack, env, stacks_dir)], as_json)
    try:  # the stack's own schema too: every mistake of the file in one run, in file order
        load_stack_config(stack, env, stacks_dir)
    except ConfigError as exc:
        found += [_located(e, stack, env, stacks_dir) for e in exc.errors]
    if not found:  # a valid file: what it renders must be served by something (the cluster contract)
        found = [(str(p), p.key, p.line) for p in cluster_contract.check(stack, env, stacks_dir)]
    problems = _in_file_order(found)
    if problems:
        _fail(problems, as_json)
    secrets = user_secrets(stack, stacks_dir)
    values = missing_user_values(stack, env, stacks_dir)  # only the user can give them; the engine refuses without
    path_ = stack_file(stack, env, stacks_dir)
    warnings = _warnings(stack, env, stacks_dir)
    if as_json:
        print(json.dumps({"ok": str(path_), "valuesToSet": values, "secretsToSet": secrets,
                          "warnings": [{"warning": m, "key": k} for m, k in warnings]}, indent=2))
        return
    out = Console()
    out.print(f"{escape(str(path_))}: valid", soft_wrap=True, highlight=False)
    for message, _ in warnings:
        Console(stderr=True).print(f"[yellow]warning[/yellow] {escape(message)}", soft_wrap=True, highlight=False)
    for cmd in [*values.values(), *secrets.values()]:
        out.print(f"  before `pulumi up`: {escape(cmd)}", soft_wrap=True, highlight=False)


def _warnings(stack: str, env: str, stacks_dir: Path) -> list[tuple[str, str]]:
    """(file:line: key: message, key) of what is valid but ends soon (the cluster's Kubernetes version)."""
    from tritonops.k8s.contract import locate
    from tritonops.k8s.stack_file import load_stack_config, stack_file
    from tritonops.k8s.stacks.cluster_aws.checks import version_warnings

    if stack != "cluster-aws":
        return []
    path_ = stack_file(stack, env, stacks_dir)
    return [(f"{path_}:{locate(path_, key) or '?'}: {key}: {message}", key)
            for key, message in version_warnings(load_stack_config(stack, env, stacks_dir))]


def _check_channels(stack: str, env: str, stacks_dir: Path) -> None:
    """Each pull-mode channel of the triton stack file exists in its store (tritonops.k8s.stacks.triton.bootstrap)."""
    from tritonops.k8s.config import ConfigError, TritonStackConfig
    from tritonops.k8s.stack_file import load_stack_config, stack_file
    from tritonops.k8s.stacks.triton.bootstrap import check_channels

    if stack != "triton":
        raise ConfigError("--check-channels", f"only the triton stack has release channels (not {stack!r})")
    cfg = load_stack_config(stack, env, stacks_dir)
    assert isinstance(cfg, TritonStackConfig)
    check_channels(cfg, source=str(stack_file(stack, env, stacks_dir)))


def render(
    stack: Annotated[str, typer.Option("--stack", help=f"Stack under the project's stacks/: {', '.join(STACKS)}.")],
    env: Annotated[str, typer.Option("--env", help="Pulumi stack: any with a stacks/<stack>/Pulumi.<env>.yaml.")],
    out: Annotated[Path | None, typer.Option("--out", help="Directory to write the YAML into.", parser=path,
                                             callback=folder_to_write)] = None,
    check: Annotated[bool, typer.Option("--check-config", help="Only validate the stack file (Pulumi's rules, "
                                        "the stack's parser, and the cluster contract: every rendered object has "
                                        "what serves it): exit 0, or 2 naming file, line and key. Prints the "
                                        "`pulumi config set` command of each value or secret only you give.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the written files as JSON.")] = False,
    check_channels: Annotated[bool, typer.Option(
        "--check-channels", help="triton: first read each pull-mode channel from its store, as `pulumi up` does, "
        "and refuse an unpublished one (render alone never reads a store).")] = False,
    project_dir: ProjectDir = None,
) -> None:
    """Write the Kubernetes objects (and Helm values, AWS specs) a stack creates, as plain YAML.

    Writing needs the 'obs' extra (the triton stack's dashboards ConfigMap); --check-config does not.
    """
    from rich.table import Table

    from tritonops.k8s.config import ConfigError

    stacks_dir = project.stacks_dir(project_dir)
    if check:
        check_config(stack, env, stacks_dir, as_json)
        return
    if out is None:
        Console(stderr=True).print("[red]error:[/red] --out DIR is needed (or --check-config to only validate)")
        raise typer.Exit(ExitCode.USAGE)
    console = Console()
    try:
        if check_channels:
            _check_channels(stack, env, stacks_dir)
        with imports("render"):  # the objects' builders import the Grafana dashboards (the 'obs' extra)
            from tritonops.k8s.render import render as do_render

            written = do_render(stack, env, out, stacks_dir)
    except ConfigError as exc:
        _fail([_config_error(exc, stack, env, stacks_dir)], as_json)
    if as_json:
        print(json.dumps([{"path": str(w.path), "kind": w.kind, "name": w.name} for w in written], indent=2))
        return
    table = Table(title=f"tritonops render --stack {stack} --env {env}")
    for col in ("kind", "name", "file"):
        table.add_column(col, overflow="fold")
    for w in written:
        table.add_row(w.kind, w.name, str(w.path))
    console.print(table)
