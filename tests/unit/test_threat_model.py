"""The README's threat-model table names tests that exist: each row's test is a function in tests/unit."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CELL = re.compile(r"`([\w/]+\.py)::(\w+)`")


def _rows() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Releases: the threat model"):]
    section = section[:section.index("\n## ", 1)]
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]


def test_every_attack_row_names_tests_that_exist() -> None:
    rows = _rows()
    assert len(rows) >= 10, "README: the threat-model table lost its rows"
    for row in rows:
        named = _CELL.findall(row)
        assert named, f"README threat model: {row[:60]!r} names no test"
        for path, name in named:
            tree = ast.parse((REPO / "tests" / "unit" / path).read_text())
            functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name in functions, f"README threat model: tests/unit/{path} has no {name}"
