"""tritonops.release_format.manifest: the one manifest format and hashing (nodes, pods, controller and drift use it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops.core.errors import ReleaseError
from tritonops.core.names import MANIFEST_FILE
from tritonops.release_format import manifest


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_manifest_hashes_every_file_with_stable_json(tmp_path: Path) -> None:
    root = _tree(tmp_path / "r", {"b/config.pbtxt": "x", "a/1/model.py": "y", "a/1/__pycache__/m.pyc": "z"})
    files = manifest.tree_files(root)
    assert list(files) == ["a/1/model.py", "b/config.pbtxt"]
    assert files["b/config.pbtxt"] == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    text = manifest.text(files)
    assert text == manifest.text(manifest.tree_files(root))
    assert json.loads(text)["algorithm"] == "sha256"
    assert text.endswith("\n")
    assert manifest.parse(text.encode(), "m") == files


def test_manifest_ignores_itself_so_writing_it_changes_nothing(tmp_path: Path) -> None:
    root = _tree(tmp_path / "r", {"m/config.pbtxt": "x"})
    before = manifest.tree_files(root)
    (root / MANIFEST_FILE).write_text(manifest.text(before))
    assert manifest.tree_files(root) == before
    assert manifest.verify(root) == before


def test_compare_reports_added_removed_changed(tmp_path: Path) -> None:
    old = manifest.tree_files(_tree(tmp_path / "old", {"keep": "1", "gone": "2", "edit": "3"}))
    new = manifest.tree_files(_tree(tmp_path / "new", {"keep": "1", "edit": "4", "fresh": "5"}))
    assert manifest.compare(old, new) == {"added": ["fresh"], "removed": ["gone"], "changed": ["edit"]}
    assert manifest.compare(old, old) == {"added": [], "removed": [], "changed": []}
    assert manifest.digest(old) != manifest.digest(new)


@pytest.mark.parametrize("path", ["../etc/passwd", "/abs", "m/../../x", "m$(touch${IFS}PWNED)x/config.pbtxt",
                                  "-rf/config.pbtxt", "m/ spaced", "", "m//x", "m/\u0661/model.py"])
def test_parse_refuses_paths_outside_the_safe_set(path: str) -> None:
    raw = json.dumps({"algorithm": "sha256", "files": {path: "0" * 64}}).encode()
    with pytest.raises(ReleaseError, match="is not allowed"):
        manifest.parse(raw, "remote manifest")


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"[]", b'{"algorithm": "md5", "files": {}}', b"{",
                                 b'{"algorithm": "sha256", "files": {"m/config.pbtxt": "abc"}}'])
def test_parse_refuses_malformed_manifests_with_the_source_named(raw: bytes) -> None:
    with pytest.raises(ReleaseError, match="^remote manifest: "):
        manifest.parse(raw, "remote manifest")
