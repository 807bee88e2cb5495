"""The ``tritonops`` command line."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
