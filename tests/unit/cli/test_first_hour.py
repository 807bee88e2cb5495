"""The first hour's dead ends (issue 35): each a clear one-line error and the table's exit code, not a quiet
success or a message about something else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tritonops.cli import app
from tritonops.core.exitcodes import ExitCode
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "model_repository"


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    keys = tmp_path / "release.key"
    assert run("release", "keygen", str(keys), str(tmp_path / "release.pub")).exit_code == 0
    where = tmp_path / "store"
    res = run("release", "publish", str(SAMPLE), "--store", str(where), "--key", str(keys), "--channel", "stable")
    assert res.exit_code == 0, res.output
    return where


def _one_line(res: Any) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return " ".join(lines[0].split())


def test_status_of_a_store_that_does_not_exist(tmp_path: Path) -> None:
    res = run("release", "status", "--store", str(tmp_path / "nowhere"), "--channel", "stable")
    assert res.exit_code == ExitCode.USAGE
    assert f"{tmp_path / 'nowhere'}: no such store: the folder does not exist" in _one_line(res)
    assert res.stdout == ""


def test_status_of_a_misspelled_channel_names_the_channels_there(store: Path) -> None:
    res = run("release", "status", "--store", str(store), "--channel", "stabel")
    assert res.exit_code == ExitCode.USAGE
    assert "channel 'stabel' does not exist (channels there: stable)" in _one_line(res)
    assert run("release", "status", "--store", str(store), "--channel", "stable").exit_code == 0


@pytest.mark.parametrize("cmd", [("promote", "canary", "stable"), ("rollback", "stable")])
def test_promote_and_rollback_on_a_missing_store_say_the_store_is_missing(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    res = run("release", *cmd, "--store", str(tmp_path / "nowhere"), "--key", str(tmp_path / "k"))
    assert res.exit_code == ExitCode.USAGE
    line = _one_line(res)
    assert "no such store" in line and "channel" not in line


def _columns(table_text: str) -> list[str]:
    """Each body column's text, its folded lines joined (a rich table as printed in a pipe)."""
    rows = [ln.split("│")[1:-1] for ln in table_text.splitlines() if ln.startswith("│")]
    return ["".join(r[i].strip() for r in rows) for i in range(len(rows[0]))] if rows else []


def test_tables_fold_rather_than_cut_in_a_narrow_pipe(store: Path) -> None:
    tritonops = Path(sys.executable).parent / "tritonops"
    args = [str(tritonops), "release", "status", "--store", str(store), "--channel", "stable"]
    env = {**os.environ, "COLUMNS": "60"}
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    doc = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True, env=env, timeout=60,
                                    check=True).stdout)["channels"]["stable"]
    assert _columns(res.stdout)[:4] == ["stable", doc["release"], doc["digest"][:16], doc["published"]]
    assert max(len(ln) for ln in res.stdout.splitlines()) <= 60


def test_a_store_error_is_one_line_in_a_narrow_pipe(tmp_path: Path) -> None:
    missing = tmp_path / ("a-rather-long-folder-name-" * 3)
    res = subprocess.run([str(Path(sys.executable).parent / "tritonops"), "release", "status", "--store",
                          str(missing), "--channel", "stable"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "60"}, timeout=60, check=False)
    assert res.returncode == ExitCode.USAGE
    assert res.stderr.splitlines() == [f"error: {missing}: no such store: the folder does not exist "
                                       "(tritonops release publish makes one)"]
