"""Every command's --help (the tritonops CLI and the release agent's) reads as plain text: no reST markup.

The help text comes from docstrings and help strings; reST's ``double backticks`` and argparse's ``%%``
escape (which click prints as written) must never reach a user. The walk is over the command tree
itself, so a command added later is checked too.
"""

from __future__ import annotations

import argparse

import pytest
import typer
from tritonops.agent import cli as agent_cli
from tritonops.cli import app
from typer.testing import CliRunner

LEAKS = ("``", "%%")


def _paths(cmd: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The command path of every command and group under ``cmd`` (typer's click objects: a group has .commands)."""
    out = [prefix]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            out += _paths(sub, (*prefix, name))
    return out


COMMANDS = _paths(typer.main.get_command(app))


def test_the_walk_sees_every_command_group() -> None:
    assert {("release", "publish"), ("release", "status"), ("agent", "build"), ("observability", "export"),
            ("render",), ("plan",), ("validate",)} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "tritonops")
def test_cli_help_has_no_markup(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output
    assert [leak for leak in LEAKS if leak in res.output] == [], res.output


def _agent_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    top = agent_cli.parser()
    out = [("tritonops-agent", top)]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            out += sorted(action.choices.items())
    return out


@pytest.mark.parametrize(("name", "parser"), _agent_parsers(), ids=lambda x: x if isinstance(x, str) else "")
def test_agent_help_has_no_markup(name: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert text.startswith("usage:")
    assert [leak for leak in LEAKS if leak in text] == [], text


def test_the_agent_walk_sees_its_sub_commands() -> None:
    assert {"pull", "sync", "check", "probe"} <= {name for name, _ in _agent_parsers()}
