"""Docs figures: a measured figure in README.md or docs/*.md quotes a benchmark record, never a typed number.

A quoted figure carries a marker right after it, invisible when rendered: ``127 s<!-- fig: demo.total_s -->``
is figure ``total_s`` of record ``demo`` (``tests/benchmarks/records/demo.json``, written by the benchmark
with ``record.write``; the file holds the latest run). ``python -m devkit figures --write`` rewrites every
marked figure from the records; ``--check`` exits 1 naming each stale or dangling marker by ``file:line``.
tests/unit/test_doc_figures.py holds the docs to the records, and says which timings need no marker.

How a figure is written (:func:`fmt`, the one rule): the key's suffix is its unit (``_s`` " s", ``_ms``
" ms", ``_min`` " min", ``_pct`` "%", ``_x`` "x", anything else none); two significant digits with the
whole digits kept (0.41, 7.4, 18, 127, 1,856), a comma every three whole digits; an integer as it is
(1,153). A figure that is a string is written as it is.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from devkit.docs import DEFAULT_FILES, ROOT, files

RECORDS = ROOT / "tests" / "benchmarks" / "records"
UNITS = (("_ms", " ms"), ("_min", " min"), ("_pct", "%"), ("_x", "x"), ("_s", " s"))
MARKER = re.compile(r"<!-- fig: (?P<record>[\w-]+)\.(?P<key>\w+) -->")
# What a marker's figure looks like, ending right before the marker: a number and an optional unit, or a word.
SHOWN = re.compile(r"(?:(?<![\w.,])\d[\d,]*(?:\.\d+)?(?: ?(?:min|ms|s|%|x))?|(?<![\w.-])[A-Za-z][\w.-]*)$")


def fmt(key: str, value: float | int | str) -> str:
    """A figure as the docs write it: ``fmt("total_s", 126.6)`` is ``"127 s"``."""
    if isinstance(value, str):
        return value
    unit = next((u for suffix, u in UNITS if key.endswith(suffix)), "")
    exact = isinstance(value, int) or value == 0
    digits = 0 if exact else max(0, 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}{unit}"


@dataclass(frozen=True)
class Figure:
    """One marker: where it is, what the docs show before it, and what its record says (None: no such)."""

    path: Path
    line: int
    record: str
    key: str
    shown: str
    start: int  # offset of the shown figure in the line
    end: int  # offset of the marker's start

    @property
    def expected(self) -> str | None:
        figures = record_figures(self.record)
        if figures is None or self.key not in figures:
            return None
        return fmt(self.key, figures[self.key])

    def problem(self) -> str | None:
        """Why this figure is not the record's (None: it is)."""
        where = f"{_rel(self.path)}:{self.line}: {self.record}.{self.key}"
        figures = record_figures(self.record)
        if figures is None:
            return f"{where}: no record {_rel(RECORDS / (self.record + '.json'))} (run its benchmark)"
        if self.key not in figures:
            return f"{where}: record {self.record} has no figure {self.key} (it has: {', '.join(figures)})"
        if self.shown != self.expected:
            return f"{where}: shows {self.shown or '(nothing)'!r}, the record says {self.expected!r}"
        return None


@cache
def record_figures(name: str) -> dict[str, Any] | None:
    path = RECORDS / f"{name}.json"
    if not path.is_file():
        return None
    figures: dict[str, Any] = json.loads(path.read_text())["figures"]
    return figures


def parse(path: Path, text: str) -> list[Figure]:
    """The marked figures of a Markdown text."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in MARKER.finditer(line):
            shown = SHOWN.search(line[:m.start()])
            start = shown.start() if shown else m.start()
            found.append(Figure(path, n, m["record"], m["key"], line[start:m.start()], start, m.start()))
    return found


def check(paths: Sequence[Path]) -> list[str]:
    """Every marked figure that is stale or names no record or key, as ``file:line: record.key: why``."""
    record_figures.cache_clear()
    return [why for p in paths for f in parse(p, p.read_text()) if (why := f.problem())]


def write(paths: Sequence[Path]) -> list[Figure]:
    """Rewrite every stale marked figure whose record has it; returns the rewritten ones."""
    record_figures.cache_clear()
    changed: list[Figure] = []
    for path in paths:
        text = path.read_text()
        lines = text.splitlines()
        stale = [f for f in parse(path, text) if f.expected is not None and f.shown != f.expected]
        for f in reversed(stale):  # right to left, so earlier offsets on a line stay true
            line = lines[f.line - 1]
            lines[f.line - 1] = line[:f.start] + str(f.expected) + line[f.end:]
        if stale:
            path.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
            changed += stale
    return changed


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: Sequence[str], *, rewrite: bool) -> int:
    """Check (or rewrite) the given files, default README.md and docs/*.md; 0 current, 1 stale, 2 usage."""
    try:
        paths = files(argv or DEFAULT_FILES)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if rewrite:
        for f in write(paths):
            print(f"{_rel(f.path)}:{f.line}: {f.record}.{f.key}: {f.shown!r} -> {f.expected!r}")
    problems = check(paths)
    for why in problems:
        print(why)
    marked = sum(len(parse(p, p.read_text())) for p in paths)
    print(f"{len(paths)} files, {marked} marked figures, {'left' if rewrite else 'stale'}: {len(problems)}")
    return 1 if problems else 0
