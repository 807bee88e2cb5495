"""roles/drift_check: argument_specs identical to defaults, prefixed variables, README table in sync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "drift_check"


def _defaults() -> dict[str, Any]:
    return dict(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()))


def _options() -> dict[str, Any]:
    return dict(yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"])


def test_every_default_is_documented_with_the_same_value() -> None:
    opts = _options()
    assert set(opts) == set(_defaults())
    for name, value in _defaults().items():
        assert opts[name]["default"] == value, name


def test_public_variables_are_prefixed() -> None:
    assert all(name.startswith("drift_check_") for name in _defaults())


def test_readme_lists_every_variable() -> None:
    readme = (ROLE / "README.md").read_text()
    for name in _defaults():
        assert f"`{name}`" in readme, name


def test_unit_runs_the_projects_check_and_treats_drift_as_success() -> None:
    unit = (ROLE / "templates" / "drift-check.service.j2").read_text()
    assert "node_check.py check" in unit and "--textfile" in unit
    assert "SuccessExitStatus=2" in unit
