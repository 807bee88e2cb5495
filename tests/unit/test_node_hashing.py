"""The node-side scripts hash files with the standard library only (they are pushed as single files),
so they carry their own copy of the manifest hashing: it must agree with infra.model_repo.manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.drift import node_check
from infra.model_repo import manifest, release

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"


@pytest.mark.parametrize("module", [node_check, release], ids=["drift.node_check", "model_repo.release"])
def test_node_hashing_matches_the_manifest(module, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert module.tree_files(SAMPLE) == manifest.build(SAMPLE).files
    (tmp_path / "m" / "__pycache__").mkdir(parents=True)
    (tmp_path / "m" / "__pycache__" / "x.pyc").write_text("skip")
    (tmp_path / "m" / "config.pbtxt").write_text("x")
    (tmp_path / manifest.MANIFEST_FILE).write_text("{}")
    assert module.tree_files(tmp_path) == manifest.build(tmp_path).files == {
        "m/config.pbtxt": manifest.sha256_file(tmp_path / "m" / "config.pbtxt")}
