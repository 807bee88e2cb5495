"""The manifest hashing has one home, infra/tritonops/release_format/manifest.py, and one way to the nodes: the agent zipapp.

The zipapp's copy of the module, run by a node's python3 (3.10, the oldest the agent supports, when
this machine has it), must give the same files and digest as the checkout and as the controller's
``prepare``; a release staged on the controller verifies on the node; and no other module in the
project hashes release files on its own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tritonops import agent_bundle as bundle
from tritonops.core.names import MANIFEST_FILE
from tritonops.release import push as rel
from tritonops.release_format import manifest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "model_repository"
# The node's python3 (Debian 12) and the oldest the agent supports (Ubuntu 22.04), where present.
CANDIDATES = ["/usr/bin/python3", "python3.10", sys.executable]


def _pythons() -> list[str]:
    found = []
    for c in CANDIDATES:
        exe = shutil.which(c)
        if exe and subprocess.run([exe, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                                  capture_output=True, timeout=30).returncode == 0:
            found.append(exe)
    return list(dict.fromkeys(found))


PYTHONS = _pythons()

_HASH = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tritonops_agent.release_format import manifest
files = manifest.tree_files(sys.argv[2])
print(json.dumps({"module": manifest.__file__, "files": files, "digest": manifest.digest(files)}))
"""


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bundle.build(tmp_path_factory.mktemp("agent") / "tritonops-agent.pyz")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample repository plus what hashing leaves out (__pycache__, the manifest) and a link inside it."""
    root = tmp_path_factory.mktemp("tree") / "repo"
    shutil.copytree(SAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "mlp" / "__pycache__").mkdir()
    (root / "mlp" / "__pycache__" / "x.pyc").write_bytes(b"skip")
    (root / MANIFEST_FILE).write_text("{}")
    (root / "mlp" / "link.txt").symlink_to(root / "mlp" / "config.pbtxt")
    return root


@pytest.mark.parametrize("python", PYTHONS)
def test_zipapp_hashes_like_the_checkout(python: str, agent: Path, tree: Path) -> None:
    res = subprocess.run([python, "-I", "-c", _HASH, str(agent), str(tree)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    node = json.loads(res.stdout)
    assert node["module"].startswith(str(agent))  # the zipapp's module, not the checkout's
    files = manifest.tree_files(tree)
    assert node["files"] == files
    assert node["digest"] == manifest.digest(files)
    assert not any("__pycache__" in k or k.endswith(MANIFEST_FILE) for k in files)
    assert files["mlp/config.pbtxt"] == manifest.sha256_file(tree / "mlp" / "config.pbtxt")


@pytest.mark.parametrize("python", PYTHONS)
def test_a_release_staged_on_the_controller_verifies_on_the_node(python: str, agent: Path, tmp_path: Path) -> None:
    staged = rel.prepare(SAMPLE, tmp_path / "cache", "cpu")
    res = subprocess.run([python, "-I", str(agent), "verify", staged["path"]], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["files"] == staged["files"]
    # The digest the role passes to `status --digest` is the one the node computes from the folder.
    layout = ["--link", str(tmp_path / "models"), "--releases", str(Path(staged["path"]).parent)]
    for digest, conflict in ((staged["digest"], False), ("0" * 64, True)):
        res = subprocess.run([python, "-I", str(agent), "status", *layout, "--release", staged["release"],
                              "--digest", digest], capture_output=True, text=True, timeout=120)
        out = json.loads(res.stdout)
        assert (out["release_verified"], out["release_conflict"]) == (not conflict, conflict), out


def test_nothing_else_hashes_release_files() -> None:
    """One copy: no other module under infra/tritonops/, roles/ or ansible/ defines the manifest's hashing."""
    pattern = re.compile(r"^def (tree_files|sha256_file|build_manifest|read_manifest)\b", re.M)
    homes = sorted(str(p.relative_to(REPO)) for d in ("infra", "roles", "ansible", "plugins")
                   for p in (REPO / d).rglob("*.py") if pattern.search(p.read_text(errors="replace")))
    assert homes == ["infra/tritonops/release_format/manifest.py"]
