"""Benchmark records: what a benchmark measured, kept in the repository with its date, machine and command.

A benchmark calls :func:`write` with its figures (named numbers) and the text it printed; the record lands
in ``tests/benchmarks/records/<name>.json`` and replaces the previous one. The docs quote a figure from a
record, never typed by hand: ``tests/unit/test_doc_figures.py`` holds every quoted figure to the latest
record, so a figure changes only by running its benchmark again.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

RECORDS = Path(__file__).resolve().parent / "records"


def machine() -> dict[str, Any]:
    """The machine a figure was measured on: CPU model, cores, memory, OS."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "memory_gib": mem_gib,
            "arch": platform.machine(), "os": platform.platform(terse=True),
            "load_1m": round(os.getloadavg()[0], 2)}


def load_note(load_at_start: float) -> str:
    """How busy the machine was: the 1-minute load average at a run's start and now."""
    return (f"load average {load_at_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end: other work shared "
            f"the {os.cpu_count()} cores unless both are near 0")


def write(name: str, figures: dict[str, float | int | str], output: str = "",
          command: str | None = None, note: str = "") -> Path:
    """Record one run of benchmark ``name``: its figures, what it printed, and where and how it ran."""
    doc = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "machine": machine(),
        "command": command or shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "note": note,
        "figures": figures,
        "output": output,
    }
    RECORDS.mkdir(exist_ok=True)
    path = RECORDS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def read(name: str) -> dict[str, Any]:
    return json.loads((RECORDS / f"{name}.json").read_text())
