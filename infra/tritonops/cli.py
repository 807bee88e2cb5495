"""The ``tritonops`` command line."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tritonops.agent import manifest as manifests
from tritonops.agent.exitcodes import HELP as EXIT_HELP
from tritonops.agent.exitcodes import ExitCode
from tritonops.agent.manifest import MANIFEST_FILE, MANIFEST_MAX, ReleaseError, read_bounded
from tritonops.agent.releases import write_atomic
from tritonops.capacity.commands import plan_cmd
from tritonops.cli_params import path as path_arg
from tritonops.drift.commands import drift_cmd
from tritonops.k8s.commands import render as render_cmd
from tritonops.model_repo.commands import agent_app, release_app
from tritonops.model_repo.validate import Target, UsageError
from tritonops.model_repo.validate import validate as validate_repo
from tritonops.observability.commands import obs_app
from tritonops.triton.load_commands import bench_cmd, tune_cmd
from tritonops.triton.server import start as start_server
from tritonops.triton.smoke import report_table
from tritonops.triton.smoke import smoke as run_smoke

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__, epilog=EXIT_HELP)
app.add_typer(obs_app, name="observability")
app.command("render")(render_cmd)
app.command("bench")(bench_cmd)
app.command("tune")(tune_cmd)
app.command("drift")(drift_cmd)
app.command("plan")(plan_cmd)
app.add_typer(release_app, name="release")
app.add_typer(agent_app, name="agent")


# --- model repository and inference checks -------------------------------------------------------
console = Console()
err_console = Console(stderr=True)


def _print_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A model repository, or one model folder", parser=path_arg)],
    target: Annotated[Target | None, typer.Option(help="Hardware the repository is for")] = None,
    config_name: Annotated[
        str | None, typer.Option(help="Use configs/NAME.pbtxt as the active config (tritonserver --model-config-name)")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(min=0, help="GPUs the target has: instance groups may use ids 0..N-1 "
                                 "(default: what --target implies: cpu 0, jetson 1, gpu unchecked)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable report")] = False,
) -> None:
    """Check a model repository's layout and every config.pbtxt. Exit 0 clean, 1 errors, 2 usage error."""
    try:
        report = validate_repo(path, target=target, config_name=config_name, gpus=gpus)
    except UsageError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        for f in [*report.errors, *report.warnings]:
            colour = "red" if f.severity == "error" else "yellow"
            fld = f" [{f.field}]" if f.field else ""
            console.print(f"[{colour}]{f.severity}[/] {f.location()}:{escape(fld)} {escape(f.message)}",
                          highlight=False, soft_wrap=True)
        console.print(f"{len(report.models)} models, {len(report.errors)} errors, {len(report.warnings)} warnings")
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FINDINGS)


@app.command()
def manifest(
    path: Annotated[Path, typer.Argument(help="A model repository (or release) folder", parser=path_arg)],
    compare_to: Annotated[
        Path | None, typer.Option("--compare", help="A manifest JSON to compare the folder against", parser=path_arg)
    ] = None,
    write: Annotated[bool, typer.Option(help=f"Also write {MANIFEST_FILE} into the folder")] = False,
) -> None:
    """Print the sha256 manifest of a folder as stable JSON, or compare it with a saved one (exit 1 on a difference)."""
    def usage(message: str) -> typer.Exit:
        err_console.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        return typer.Exit(ExitCode.USAGE)

    if not path.is_dir():
        raise usage(f"{path}: not a directory")
    out = path / MANIFEST_FILE
    if write and (out.is_symlink() or (out.exists() and not out.is_file())):
        raise usage(f"{out}: not a regular file; the manifest is never written through a link or over a folder")
    try:
        saved = None if compare_to is None else manifests.parse(read_bounded(compare_to, MANIFEST_MAX),
                                                                str(compare_to))
        current = manifests.tree_files(path)
    except ReleaseError as e:
        raise usage(str(e)) from None
    except OSError as e:
        raise usage(f"{e.filename or path}: cannot read ({e.strerror or e})") from None
    if saved is not None:
        diff = manifests.compare(saved, current)
        _print_json(diff)
        raise typer.Exit(ExitCode.FINDINGS if any(diff.values()) else ExitCode.OK)
    if write:
        write_atomic(out, manifests.text(current))
    typer.echo(manifests.text(current), nl=False)


@app.command()
def smoke(
    url: Annotated[str, typer.Argument(help="http://HOST:8000, grpc://HOST:8001 or grpcs://HOST:8001")],
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Check only these models")] = None,
    repository: Annotated[
        Path | None, typer.Option(help="Local copy of the deployed repository: golden data and the expected models",
                                  parser=path_arg)
    ] = None,
    metrics_url: Annotated[str | None, typer.Option(help="Default: http://HOST:8002/metrics")] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="NAME=VALUE sent to restricted APIs (the admin header)")
    ] = None,
    ca: Annotated[Path | None, typer.Option(help="CA bundle for grpcs://", parser=path_arg)] = None,
    cert: Annotated[Path | None, typer.Option(help="Client certificate for mutual TLS", parser=path_arg)] = None,
    key: Annotated[Path | None, typer.Option(help="Client key for mutual TLS", parser=path_arg)] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Live, ready, every model READY, golden inference within tolerance, metrics served.

    Exit 0 when every check passes, 1 when any fails, 2 on a usage error.
    """
    headers = {}
    for h in header or []:
        name, sep, value = h.partition("=")
        if not sep or not name:
            err_console.print(f"[red]error:[/] --header {h!r}: expected NAME=VALUE")
            raise typer.Exit(ExitCode.USAGE)
        headers[name] = value
    problems = [f"--repository {repository}: not a folder"] if repository and not repository.is_dir() else []
    problems += [f"--{opt} {p}: not found, or not a regular file"
                 for opt, p in (("ca", ca), ("cert", cert), ("key", key)) if p is not None and not p.is_file()]
    if problems:
        err_console.print(f"[red]error:[/] {escape(problems[0])}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE)
    try:
        report = run_smoke(url, models=model or (), repository=repository, metrics_url=metrics_url,
                           headers=headers, ca=ca, cert=cert, key=key)
    except ValueError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if as_json:
        _print_json(report.model_dump(mode="json") | {"ok": report.ok})
    else:
        console.print(report_table(report))
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FINDINGS)


class ControlMode(StrEnum):
    none = "none"
    poll = "poll"
    explicit = "explicit"


@app.command()
def serve(
    repository: Annotated[
        Path, typer.Argument(help="Model repository to serve", parser=path_arg)
    ] = Path("examples/model_repository"),
    model_control_mode: Annotated[ControlMode, typer.Option(help="Triton's --model-control-mode")] = ControlMode.none,
) -> None:
    """Run a local CPU-only tritonserver (from the nvidia-pytriton wheel) on free loopback ports until Ctrl-C."""
    if not repository.is_dir():
        err_console.print(f"[red]error:[/] {escape(str(repository))}: not a folder (a model repository is one)")
        raise typer.Exit(ExitCode.USAGE)
    try:
        server = start_server(repository, model_control_mode=model_control_mode.value,
                              load_models=["*"] if model_control_mode == ControlMode.explicit else ())
    except RuntimeError as e:  # tritonserver refused the repository or died while starting: its log says why
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.FAILED) from None
    console.print(f"tritonserver ready: http://{server.http_url} grpc://{server.grpc_url} {server.metrics_url}")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()

