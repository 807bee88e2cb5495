"""Helpers of the agent tests: release sources (the sample repository copied, optionally with one file
changed) and the agent's command line run as a subprocess (optionally crashing at a named step)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def agent_cmd(*args: str, crash: str | None = None) -> subprocess.CompletedProcess:
    """``python -m tritonops.agent ARGS``; ``crash``: the step it dies at (TRITONOPS_TEST_CRASH_AT)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITONOPS_TEST_CRASH_AT"}
    if crash:
        env["TRITONOPS_TEST_CRASH_AT"] = crash
    return subprocess.run([sys.executable, "-m", "tritonops.agent", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


class StoreUnderTest:
    """A release store of one kind for a test: ``folder``, or ``oci`` (a repository of its own in the test
    registry, tests/oci_registry.py); ``blob_file`` is where the store keeps a file's bytes on disk (to
    tamper with, or to take away)."""

    def __init__(self, kind: str, tmp_path: Path, registry: object = None) -> None:
        self.kind, self.tmp_path, self.registry = kind, tmp_path, registry
        self.url = self.other("store")

    def other(self, name: str) -> str:
        """Another store of the same kind (another team's, a restored one)."""
        if self.kind == "folder":
            return str(self.tmp_path / name)
        return self.registry.url(f"{self.tmp_path.name.lower().replace('_', '-')}/{name}")  # type: ignore[attr-defined]

    def blob_file(self, sha256: str) -> Path:
        from tritonops.agent.store import blob_key

        if self.kind == "folder":
            return Path(self.url) / blob_key(sha256)
        return self.registry.blob_path(sha256)  # type: ignore[attr-defined,no-any-return]
