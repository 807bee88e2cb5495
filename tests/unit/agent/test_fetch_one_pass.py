"""A release fetch reads and hashes each byte once (issue 46): the download is hashed as it arrives, the node
cache's copy is a kernel copy of those checked bytes, a warm cache's copy is hashed once as the release's own
file, and install does not read what the fetch hashed again; yet it still refuses a folder that holds a
file the manifest does not name, or lacks one, and a pushed folder is hashed in full."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import SAMPLE, release_source
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.core.errors import ReleaseError
from tritonops.core.names import MANIFEST_FILE
from tritonops.release import publish as pub
from tritonops.release_format import manifest, signing
from tritonops.stores import open_store


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path manifest.sha256_file reads, in order."""
    read: list[Path] = []
    real: Callable[[Path], str] = manifest.sha256_file

    def counted(path: Path) -> str:
        read.append(Path(path))
        return real(path)

    monkeypatch.setattr(manifest, "sha256_file", counted)
    return read


def test_a_fetch_hashes_each_file_once_cold_or_warm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key, pubkey = signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")
    pub.publish(release_source(tmp_path, "a"), str(tmp_path / "store"), "stable", key, target="cpu", version="r1")
    files = manifest.tree_files(SAMPLE)
    read = _counting(monkeypatch)

    def pod(name: str) -> dict:
        agent = Agent(open_store(str(tmp_path / "store")), "stable", tmp_path / name / "models", tmp_path / name / "releases",
                      [pubkey], cache=tmp_path / "cache", log=lambda m: None)
        return agent.sync()

    cold = pod("pod1")
    assert cold["downloaded"] > 0
    assert 0 < cold["fetch_seconds"] < 60  # the fetch's own time (bench_cold_start's fetch MB/s)
    # Each distinct blob hashed as it was downloaded; a second file of the same content is a local copy, hashed
    # once as it is made; neither the cache's copy nor install reads a file again.
    assert len(read) == len(files) - len(set(files.values())) and all("pod1" in p.parts for p in read)
    read.clear()
    installed = tmp_path / "pod1" / "releases" / "r1"
    blobs = {p.name for p in (tmp_path / "cache" / "blobs").iterdir()}
    assert blobs == set(files.values())

    warm = pod("pod2")
    assert warm["downloaded"] == 0
    release = tmp_path / "pod2" / "releases" / "r1"
    # One read per file, of the release's own copy (what is installed is what was hashed), none by install.
    assert len(read) == len(files) and all("pod2" in p.parts for p in read)
    monkeypatch.undo()
    assert manifest.verify(installed) == files and manifest.verify(release) == files


def test_install_refuses_a_file_the_manifest_lacks_even_when_the_rest_was_hashed(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rel = tmp_path / "releases"
    rel.mkdir()
    files = manifest.tree_files(SAMPLE)

    def staged(name: str) -> Path:
        folder = rel / f"{releases.STAGING_PREFIX}{name}"
        shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / MANIFEST_FILE).write_text(manifest.text(files))
        return folder

    read = _counting(monkeypatch)
    out = releases.install(rel, staged("r1"), "r1", verified=files)
    assert out["changed"] and read == []
    extra = staged("r2")
    (extra / "mlp" / "extra.py").write_text("print('not signed')\n")
    with pytest.raises(ReleaseError, match="extra.py: not in the manifest"):
        releases.install(rel, extra, "r2", verified=files)
    assert not (rel / "r2").exists()
    # A pushed folder (no verified hashes) is read in full: a changed byte is refused.
    pushed = staged("r3")
    model = next(p for p in sorted(pushed.rglob("*")) if p.is_file() and p.name != MANIFEST_FILE)
    model.write_bytes(model.read_bytes() + b"#")
    read.clear()
    with pytest.raises(ReleaseError, match="sha256 does not match the manifest"):
        releases.install(rel, pushed, "r3")
    assert len(read) == len(files)
