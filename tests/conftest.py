"""Shared fixtures: the sample repository and a real, CPU-only Triton serving it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_REPO = ROOT / "examples" / "model_repository"


@pytest.fixture
def sample_repo(tmp_path: Path) -> Path:
    """A private copy of the sample repository that a test may edit."""
    dest = tmp_path / "model_repository"
    shutil.copytree(SAMPLE_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """tritonserver from the nvidia-pytriton wheel on free loopback ports, explicit model control,
    every sample model loaded. Session-wide: tests must not unload models from it."""
    from infra.triton import server

    workdir = tmp_path_factory.mktemp("triton")
    repo = workdir / "model_repository"
    shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    srv = server.start(repo, model_control_mode="explicit", load_models=["*"], workdir=workdir)
    yield srv
    srv.stop()
