"""What every ``tritonops`` command module shares about its options: checks on command-line values (typer
parsers and callbacks) and the option types (``Annotated`` aliases) that more than one command takes.

click turns an empty argument into ``Path("")``, which is the current folder, and accepts ``nan`` and
``inf`` for a float even with a range; these refuse both as usage errors (exit 2) naming the option.

A renamed option keeps its old spelling for one release: :func:`old_spelling` is a hidden option that
still works and prints one deprecation line on stderr naming the new spelling, and :func:`either`
merges the two values in the command.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from tritonops.project import ENV_VAR


def path(text: str | Path) -> Path:
    """A typer ``parser``: a path that is not the empty string."""
    if not str(text).strip():
        raise typer.BadParameter("an empty path (say '.' for the current folder)")
    return Path(text)


def finite(low: float | None = None, high: float | None = None, low_ok: bool = True) -> Callable[[float], float]:
    """A typer ``callback``: a finite number within [low, high] ((low, high] without ``low_ok``)."""
    def check(value: float) -> float:
        if value is None:
            return value
        too_low = low is not None and (value < low if low_ok else value <= low)
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            bound = " ".join(filter(None, [
                f"{'>=' if low_ok else '>'} {low:g}" if low is not None else "",
                f"<= {high:g}" if high is not None else ""]))
            raise typer.BadParameter(f"{value}: expected a finite number {bound}".rstrip())
        return value
    return check


def folder_to_write(value: Path | None) -> Path | None:
    """A typer ``callback``: an output folder that is a folder, or does not exist yet."""
    if value is not None and value.exists() and not value.is_dir():
        raise typer.BadParameter(f"{value}: exists and is not a folder")
    return value


# ``--project-dir``: the folder holding stacks/, ansible/ and roles/ (tritonops.project); None: $TRITONOPS_PROJECT_DIR,
# else the current directory.
ProjectDir = Annotated[Path | None, typer.Option(
    "--project-dir", envvar=ENV_VAR, parser=path, show_envvar=True,
    help="Project folder holding stacks/, ansible/ and roles/ (default: the current directory)")]


# The release store (--store) of the release commands: optional in the type, as --to is its old spelling
# (cli.release._store requires one of the two). The rollout commands take it as a plain required option.
Store = Annotated[str | None, typer.Option(
    "--store", help="Where releases live (required): s3://BUCKET/PREFIX, oci://REGISTRY/REPO (credentials: "
                     "TRITONOPS_REGISTRY_AUTH or ~/.docker/config.json), or the folder an HTTP mirror serves")]
RolloutStore = Annotated[str, typer.Option(
    "--store", help="Where releases live: s3://BUCKET/PREFIX, or the folder an HTTP mirror serves")]
S3Endpoint = Annotated[str | None, typer.Option(help="An S3-compatible endpoint URL (default: AWS)")]
AgentUrl = Annotated[list[str] | None, typer.Option(
    "--agent-url", help="A release agent's /metrics URL, http(s)://HOST:PORT/metrics (repeatable)")]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable output")]
JsonReport = Annotated[bool, typer.Option("--json", help="Machine-readable report")]


T = TypeVar("T")


def old_spelling(old: str, new: str, **kwargs: Any) -> Any:
    """A hidden typer option for the old spelling of ``new``: it works, and says on stderr that it is deprecated."""
    def warn(value: Any) -> Any:
        if value not in (None, [], ()):
            typer.echo(f"warning: {old} is deprecated, use {new} (the old spelling goes in the next release)",
                       err=True)
        return value
    return typer.Option(old, hidden=True, callback=warn, help=f"Deprecated spelling of {new}.", **kwargs)


def either(value: T | None, old_value: T | None, new: str, old: str, required: str = "") -> T | None:
    """The value of option ``new``, or of its deprecated spelling ``old``; both with different values is a usage
    error, and so is neither when ``required`` (what the option names, for the message)."""
    if value is not None and old_value is not None and value != old_value:
        raise typer.BadParameter(f"{old} is the old spelling of {new}: give one of them", param_hint=f"'{new}'")
    chosen = value if value is not None else old_value
    if required and chosen is None:
        raise typer.BadParameter(f"missing: {required}", param_hint=f"'{new}'")
    return chosen
