"""The GPU host preparation roles (nvidia_driver, container_runtime, jetson, node_monitoring):
argument_specs identical to defaults, README tables current. (Their pins: tests/unit/test_versions.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

ROLES = Path(__file__).resolve().parents[2] / "roles"
GPU_HOST_ROLES = ["nvidia_driver", "container_runtime", "jetson", "node_monitoring"]


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def defaults(role: str) -> dict[str, Any]:
    return dict(_yaml(ROLES / role / "defaults" / "main.yml"))


def specs(role: str) -> dict[str, Any]:
    return dict(_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"])


@pytest.mark.parametrize("role", GPU_HOST_ROLES)
def test_every_default_is_documented(role: str) -> None:
    assert sorted(defaults(role)) == sorted(specs(role))


@pytest.mark.parametrize("role", GPU_HOST_ROLES)
def test_spec_defaults_equal_defaults(role: str) -> None:
    d, s = defaults(role), specs(role)
    mismatched = {k: (d[k], s[k].get("default")) for k in d if s[k].get("default") != d[k]}
    assert mismatched == {}


@pytest.mark.parametrize("role", GPU_HOST_ROLES)
def test_public_variables_are_prefixed(role: str) -> None:
    assert [k for k in defaults(role) if not k.startswith(f"{role}_")] == []


@pytest.mark.parametrize("role", GPU_HOST_ROLES)
def test_spec_choices_hold_the_default(role: str) -> None:
    for name, spec in specs(role).items():
        if "choices" in spec:
            assert spec["default"] in spec["choices"], name


def variables_table(role: str) -> str:
    """The README's Role Variables table, generated from meta/argument_specs.yml."""
    rows = ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, spec in specs(role).items():
        d = spec.get("default")
        shown = (f'"{d}"' if d == "" else d) if isinstance(d, str) else json.dumps(d)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        desc = spec["description"] + (f" Choices: {', '.join(map(str, spec['choices']))}." if "choices" in spec else "")
        rows.append(f"| `{name}` | {spec['type']} | `{shown}` | {desc.replace('|', '/')} |")
    return "\n".join(rows)


@pytest.mark.parametrize("role", GPU_HOST_ROLES)
def test_readme_variables_table_is_current(role: str) -> None:
    readme = (ROLES / role / "README.md").read_text()
    assert variables_table(role) in readme, f"regenerate the table in roles/{role}/README.md from argument_specs"
