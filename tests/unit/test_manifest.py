from __future__ import annotations

import json
from pathlib import Path

from infra.model_repo import manifest


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_manifest_hashes_every_file_with_stable_json(tmp_path: Path) -> None:
    root = _tree(tmp_path / "r", {"b/config.pbtxt": "x", "a/1/model.py": "y", "a/1/__pycache__/m.pyc": "z"})
    m = manifest.build(root)
    assert list(m.files) == ["a/1/model.py", "b/config.pbtxt"]
    assert m.files["b/config.pbtxt"] == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    text = m.to_json()
    assert text == manifest.build(root).to_json()
    assert json.loads(text)["algorithm"] == "sha256"
    assert text.endswith("\n")


def test_manifest_ignores_itself_so_writing_it_changes_nothing(tmp_path: Path) -> None:
    root = _tree(tmp_path / "r", {"m/config.pbtxt": "x"})
    before = manifest.build(root)
    (root / manifest.MANIFEST_FILE).write_text(before.to_json())
    assert manifest.build(root) == before


def test_compare_reports_added_removed_changed(tmp_path: Path) -> None:
    old = manifest.build(_tree(tmp_path / "old", {"keep": "1", "gone": "2", "edit": "3"}))
    new = manifest.build(_tree(tmp_path / "new", {"keep": "1", "edit": "4", "fresh": "5"}))
    diff = manifest.compare(old, new)
    assert (diff.added, diff.removed, diff.changed) == (["fresh"], ["gone"], ["edit"])
    assert not diff.clean
    assert manifest.compare(old, old).clean
    assert old.digest != new.digest
