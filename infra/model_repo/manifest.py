"""Checksum manifests of a model repository: sha256 per file, stable JSON, and a comparison.

A manifest is what a release *is*: the model_repository role writes one next to each staged
release, and drift checks compare it with what is on a host.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

MANIFEST_FILE = "MANIFEST.sha256.json"
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class Manifest(BaseModel):
    """``files`` maps POSIX paths relative to the repository root to their sha256."""

    algorithm: str = "sha256"
    files: dict[str, str]

    def to_json(self) -> str:
        """Stable text: sorted keys, fixed indentation, trailing newline."""
        return json.dumps(self.model_dump(), sort_keys=True, indent=2) + "\n"

    @classmethod
    def load(cls, path: Path) -> Manifest:
        return cls.model_validate_json(path.read_text())

    @property
    def digest(self) -> str:
        """One sha256 over the whole manifest: a release id that changes when any file does."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()


class Diff(BaseModel):
    added: list[str] = []
    removed: list[str] = []
    changed: list[str] = []

    @property
    def clean(self) -> bool:
        return not (self.added or self.removed or self.changed)


def build(root: Path) -> Manifest:
    """Hash every regular file under ``root`` (skipping the manifest itself and __pycache__)."""
    root = Path(root)
    files = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and p.name != MANIFEST_FILE and "__pycache__" not in rel.parts:
            files[rel.as_posix()] = sha256_file(p)
    return Manifest(files=files)


def compare(expected: Manifest, actual: Manifest) -> Diff:
    exp, act = expected.files, actual.files
    return Diff(
        added=sorted(act.keys() - exp.keys()),
        removed=sorted(exp.keys() - act.keys()),
        changed=sorted(k for k in exp.keys() & act.keys() if exp[k] != act[k]),
    )
