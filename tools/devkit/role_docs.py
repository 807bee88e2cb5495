"""Ansible role metadata helpers: defaults vs argument_specs, and README variable tables.

``python -m devkit role-docs`` rewrites the "Role Variables" table of every role README between
the ``<!-- BEGIN ROLE VARIABLES -->`` / ``<!-- END ROLE VARIABLES -->`` markers from
``meta/argument_specs.yml``, so the table is never written twice; ``tests/infra/test_role_specs.py``
fails when a README is stale or when ``defaults/main.yml`` and the argument specs disagree.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from tritonops.triton.args import FACTS

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
BEGIN = "<!-- BEGIN ROLE VARIABLES -->"
END = "<!-- END ROLE VARIABLES -->"
# A default that reads one of Triton's facts through the lookup shows the fact's value (8000, not the lookup).
_FACT = re.compile(r"lookup\('tritonops\.triton\.tritonserver_args', '(\w+)'\)")


def role_dirs(root: Path = ROLES_DIR) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "tasks" / "main.yml").is_file())


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def defaults(role: Path) -> dict[str, Any]:
    return dict(load_yaml(role / "defaults" / "main.yml") or {})


def spec_options(role: Path, entry: str = "main") -> dict[str, dict[str, Any]]:
    data = load_yaml(role / "meta" / "argument_specs.yml") or {}
    return dict(((data.get("argument_specs") or {}).get(entry) or {}).get("options") or {})


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    whole = re.fullmatch(r"\{\{ (.+) \}\}", text)
    fact = _FACT.fullmatch(whole[1]) if whole else None
    text = str(FACTS[fact[1]]) if fact else _FACT.sub(lambda m: repr(FACTS[m[1]]), text)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def variables_table(role: Path) -> str:
    """A Markdown table of the role's variables from its argument specs."""
    rows = ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, opt in spec_options(role).items():
        typ = opt.get("type", "str")
        if opt.get("elements"):
            typ = f"{typ} of {opt['elements']}"
        if opt.get("choices"):
            typ = f"{typ} ({', '.join(map(str, opt['choices']))})"
        raw = opt.get("description", "")
        desc = " ".join(raw) if isinstance(raw, list) else str(raw)
        rows.append(f"| `{name}` | {typ} | `{_cell(opt.get('default'))}` | {desc.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


def render_readme(role: Path, text: str) -> str:
    """README text with the generated table between the markers (unchanged when there are none)."""
    if BEGIN not in text or END not in text:
        return text
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{variables_table(role)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    for role in role_dirs():
        readme = role / "README.md"
        if not readme.is_file():
            continue
        text = readme.read_text()
        new = render_readme(role, text)
        if new != text:
            readme.write_text(new)
            print(f"updated {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
