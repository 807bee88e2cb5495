"""Every bad input of the table (badinput_cases.py) gets a clean error: the exit code of the scheme, a
message naming the file or field, no traceback, no hang, no unbounded read, no input file touched.

The per-class counts: ``.venv/bin/python tests/benchmarks/badinput_report.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Imported once here: each case's forked child then starts in milliseconds.
import tritonops.agent.cli  # noqa: F401
import tritonops.cli  # noqa: F401
import tritonops.k8s.render  # noqa: F401
from badinput_cases import CASES, ROOT
from badinput_runner import Case, run, tritonops_command
from tritonops import agent_bundle as bundle
from tritonops.core.exitcodes import ExitCode

tritonops_command()

@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_a_clean_error(case: Case, tmp_path: Path) -> None:
    outcome = run(case, tmp_path)
    assert outcome.klass == "clean", f"{outcome.klass} (owner {case.owner}): {outcome.detail}"


def test_the_shipped_agent_answers_a_fifo_manifest_at_once(tmp_path: Path) -> None:
    """The real entry points (python -m tritonops.agent, and the zipapp the roles push), not only main()."""
    release = tmp_path / "r1"
    release.mkdir()
    os.mkfifo(release / "MANIFEST.sha256.json")
    pyz = bundle.build(tmp_path / "tritonops-agent.pyz")
    for argv in ([sys.executable, "-m", "tritonops.agent"], [sys.executable, "-I", str(pyz)]):
        res = subprocess.run([*argv, "verify", str(release)], capture_output=True, text=True, timeout=20, cwd=ROOT)
        assert res.returncode == ExitCode.FINDINGS, res.stderr
        assert "Traceback" not in res.stderr and "not a regular file" in json.loads(res.stdout)["error"]
