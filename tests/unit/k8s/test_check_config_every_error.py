"""``tritonops render --check-config`` reports every mistake of a stack file in one run, in file order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tritonops.cli import app
from tritonops.k8s.config import STACKS
from typer.testing import CliRunner

STACKS_DIR = Path(__file__).resolve().parents[3] / "stacks"


def _staging(tmp_path: Path) -> Path:
    for stack in STACKS:
        shutil.copytree(STACKS_DIR / stack, tmp_path / "stacks" / stack,
                        ignore=shutil.ignore_patterns("venv", "__pycache__"))
    return tmp_path / "stacks" / "triton" / "Pulumi.staging.yaml"


def test_two_schema_mistakes_and_a_missing_value_in_one_run_in_file_order(tmp_path: Path) -> None:
    path = _staging(tmp_path)
    text = path.read_text().replace("  tritonops-triton:tier: non-production\n", "")  # Pulumi's rule: missing
    text = text.replace("          sizeMib: 350\n", "          sizeMib: -1\n", 1)
    text = text.replace("      replicas: 1\n", "      replicas: many\n", 1)  # the first service's, above
    path.write_text(text)
    lines = text.splitlines()
    replicas, size = lines.index("      replicas: many") + 1, lines.index("          sizeMib: -1") + 1
    assert replicas < size
    result = CliRunner().invoke(app, ["render", "--check-config", "--stack", "triton", "--env", "staging",
                                      "--project-dir", str(tmp_path), "--json"])
    assert result.exit_code == 2, result.output
    keys = [e["key"] for e in json.loads(result.output)["errors"]]
    assert keys == ["tritonops-triton:modelServices[0].replicas",
                    "tritonops-triton:modelServices[0].models[0].sizeMib",
                    "tritonops-triton:tier"]  # missing: no line, last
    human = CliRunner().invoke(app, ["render", "--check-config", "--stack", "triton", "--env", "staging",
                                     "--project-dir", str(tmp_path)])
    out = [" ".join(ln.split()) for ln in human.stderr.strip().splitlines()]
    assert len(out) == 3 and "Traceback" not in human.output
    assert out[0].startswith(f"invalid configuration {path}:{replicas}: ")
    assert out[1].startswith(f"invalid configuration {path}:{size}: ")
