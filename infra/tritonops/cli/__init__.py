"""The ``tritonops`` command line, assembled in one place: one module per command group.

* ``model_repo``: validate, manifest, warmup
* ``load``: smoke, bench, tune, serve
* ``k8s``: render
* ``preflight``: preflight
* ``drift``: drift
* ``plan``: plan
* ``observability``, ``release``, ``agent``: sub-commands of their own

Each module holds the command functions (argument parsing and printing); the domain logic stays in its
package (``tritonops.model_repo``, ``tritonops.triton``, ...). ``params`` holds the shared checks on
command-line values, ``output`` the consoles, ``extras`` the one check that a command's optional
dependencies (a pyproject extra) are installed; modules needing an extra are imported inside the commands
that need them, so the base install starts. Every command exits with ``tritonops.core.exitcodes.ExitCode``,
described once in ``--help`` (the epilog below) and in the README.
"""

from __future__ import annotations

from typing import Annotated

import typer

import tritonops
from tritonops.cli import agent, drift, k8s, load, model_repo, observability, plan, preflight, release, rollout
from tritonops.core.exitcodes import HELP as EXIT_HELP

app = typer.Typer(no_args_is_help=True, add_completion=False, epilog=EXIT_HELP,
                  help="Triton Inference Server infrastructure: validate, release, render, check drift, plan.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tritonops {tritonops.__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                                               help="Print the version and exit.")] = False) -> None:
    """Triton Inference Server infrastructure: validate, release, render, check drift, plan."""
# Registration order is the order of `tritonops --help`.
app.command("render")(k8s.render)
app.command("preflight")(preflight.preflight)
app.command("bench")(load.bench_cmd)
app.command("tune")(load.tune_cmd)
app.command("drift")(drift.drift_cmd)
app.command("plan")(plan.plan_cmd)
app.command("validate")(model_repo.validate)
app.command("manifest")(model_repo.manifest)
app.command("warmup")(model_repo.warmup)
app.command("smoke")(load.smoke)
app.command("serve")(load.serve)
app.add_typer(observability.app, name="observability")
app.add_typer(release.app, name="release")
release.app.add_typer(rollout.app, name="rollout")  # tritonops release rollout start|advance|status
app.add_typer(agent.app, name="agent")
