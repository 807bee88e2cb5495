"""The committed sample repository is exactly what its generator builds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tritonops.release_format import manifest

ROOT = Path(__file__).resolve().parents[2]


def test_generator_reproduces_the_committed_repository(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "examples" / "build_models.py"), str(tmp_path)], check=True)
    diff = manifest.compare(manifest.tree_files(ROOT / "examples" / "model_repository"), manifest.tree_files(tmp_path))
    assert diff == {"added": [], "removed": [], "changed": []}
