"""The ``tritonops`` command line."""

from __future__ import annotations

import typer

from infra.observability.commands import obs_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.add_typer(obs_app, name="observability")
