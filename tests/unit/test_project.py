"""tritonops.project: the project folder is --project-dir, else $TRITONOPS_PROJECT_DIR, else the current
directory; a missing file is named with its folder. The commands that read it (render, drift) take it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops import project
from tritonops.cli import app
from tritonops.core.exitcodes import ExitCode
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def test_explicit_then_environment_then_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(project.ENV_VAR, raising=False)
    assert project.project_dir() == tmp_path
    monkeypatch.setenv(project.ENV_VAR, "/srv/env-project")
    assert project.project_dir() == Path("/srv/env-project")
    assert project.project_dir(Path("/srv/explicit")) == Path("/srv/explicit")
    assert project.stacks_dir(Path("/srv/explicit")) == Path("/srv/explicit/stacks")


def test_a_missing_file_names_itself_its_folder_and_the_option(tmp_path: Path) -> None:
    with pytest.raises(project.ProjectError) as exc:
        project.require("ansible/edge.yml", tmp_path)
    assert str(exc.value) == (f"no ansible/edge.yml under {tmp_path}; pass --project-dir (or set "
                              "TRITONOPS_PROJECT_DIR) to the project folder")
    assert project.require("stacks/triton/Pulumi.dev.yaml", ROOT) == ROOT / "stacks/triton/Pulumi.dev.yaml"


def test_drift_in_a_folder_without_the_project_is_a_usage_error(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    n1:\n")
    res = CliRunner().invoke(app, ["drift", "-i", str(inventory), "--project-dir", str(tmp_path)])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert f"noansible/edge.ymlunder{tmp_path};pass--project-dir" in "".join(res.output.split())  # wrapped or not


def test_render_takes_the_project_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(project.ENV_VAR, str(ROOT))
    res = CliRunner().invoke(app, ["render", "--stack", "platform", "--env", "dev", "--out", "out", "--json"])
    assert res.exit_code == ExitCode.OK, res.output
    assert {w["kind"] for w in json.loads(res.output)} >= {"Namespace"}
    assert (tmp_path / "out" / "kustomization.yaml").is_file()
