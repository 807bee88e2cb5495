"""Release sources for the agent tests: the sample repository copied, optionally with one file changed."""

from __future__ import annotations

import shutil
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def release_source(tmp_path: Path, name: str, note: str = "") -> Path:
    """A copy of the sample at ``tmp_path/src/name``; ``note`` appended to mlp's model.py (another digest)."""
    src = tmp_path / "src" / name
    shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
    if note:
        with (src / "mlp" / "1" / "model.py").open("a") as f:
            f.write(f"\n# {note}\n")
    return src
