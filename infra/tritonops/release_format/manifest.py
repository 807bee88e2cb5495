"""The manifest of a release: the sha256 of every file, as stable JSON. Written once, here.

A manifest is what a release *is*: its digest (the sha256 of the manifest's text) names the
release in a store, the signature covers that text, and nodes verify every file against it.

    {"algorithm": "sha256", "files": {"mlp/config.pbtxt": "<hex>", ...}}

A manifest published for pull mode (``tritonops release publish``) also states, under the same
signature, every file's length, the release id and the channels it may be served on, so that a
mirror can neither send more bytes than were signed, relabel the release, nor serve it on another
channel (issue 21 item 1)::

    {"algorithm": "sha256", "files": {...}, "lengths": {"mlp/config.pbtxt": 312, ...},
     "release": "r7", "channels": ["canary", "stable"]}
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.errors import ReleaseError, UsageError
from ..core.fsio import read_bounded
from ..core.names import MANIFEST_FILE, MANIFEST_MAX, check_path

_CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")  # used with fullmatch: "$" would also match before a final newline


def sha256_file(path: Path) -> str:
    """The file's sha256 (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def copy_verified(src: Path, dest: Path) -> str:
    """Copy ``src`` into ``dest`` and return the sha256 of ``dest``'s content: a kernel copy (shutil: sendfile),
    then one read of the copy from the page cache, so the hash is of the bytes ``dest`` holds, whatever
    happens to ``src`` meanwhile (faster than reading, hashing and writing each chunk in Python)."""
    shutil.copyfile(src, dest)
    return sha256_file(dest)


def tree_files(root: Path, checked: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (not the manifest itself, not __pycache__); those named in
    ``checked`` are taken from it, not read."""
    root = Path(root)
    files = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and p.name != MANIFEST_FILE and "__pycache__" not in rel.parts:
            name = rel.as_posix()
            files[name] = (checked or {}).get(name) or sha256_file(p)
    return files


def repository_files(root: Path) -> dict[str, str]:
    """sha256 of every file a release of ``root`` holds: the bytes Triton would load, through symbolic links
    that stay inside ``root`` (a version folder ``mlp/1 -> v1data`` included). UsageError naming every link
    that loops, leads nowhere or leaves ``root``, and every file with another hard link (its bytes may be a
    file outside the repository): a release ships whole or not at all."""
    found, bad = walk_release(root)
    if bad:
        raise UsageError(f"{root}: {len(bad)} path(s) a release cannot ship: "
                         + "; ".join(f"{p}: {why}" for p, why in bad))
    return {rel: sha256_file(path) for rel, path in found.items()}


def walk_release(root: Path) -> tuple[dict[str, Path], list[tuple[Path, str]]]:
    """({release path: the file it reads}, [(path, why a release cannot ship it)]) for the folder ``root``,
    following symbolic links that stay inside it; nothing is read but the folders (``validate`` uses it)."""
    real_root = Path(os.path.realpath(root))
    found: dict[str, Path] = {}
    bad: list[tuple[Path, str]] = []

    def visit(folder: Path, rel: PurePosixPath, ancestors: frozenset[str]) -> None:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            path, name = Path(entry.path), rel / entry.name
            if entry.name == "__pycache__":
                continue
            target = path
            if entry.is_symlink():
                try:
                    target = Path(os.path.realpath(path, strict=True))
                except OSError:
                    bad.append((path, "a symbolic link that loops or leads nowhere"))
                    continue
                if target != real_root and real_root not in target.parents:
                    bad.append((path, f"a symbolic link to {target}, outside the repository"))
                    continue
            if target.is_dir():
                real = os.path.realpath(target)
                if real in ancestors:
                    bad.append((path, "a symbolic link to a folder that holds it (a loop)"))
                    continue
                visit(target, name, ancestors | {real})
            elif target.is_file() and entry.name != MANIFEST_FILE:
                links = target.stat().st_nlink
                if links > 1:
                    bad.append((path, f"a file with {links - 1} other hard link(s); copy it into the repository"))
                    continue
                found[name.as_posix()] = target

    visit(Path(root), PurePosixPath(), frozenset({str(real_root)}))
    return found, bad


def text(files: dict[str, str], lengths: dict[str, int] | None = None, release: str | None = None,
         channels: list[str] | None = None) -> str:
    """The manifest's stable text: sorted keys, two-space indentation, a trailing newline. With ``lengths``,
    ``release`` and ``channels`` (all three: a pull-mode release) those are part of it."""
    doc: dict[str, object] = {"algorithm": "sha256", "files": files}
    if lengths is not None or release is not None or channels is not None:
        if lengths is None or release is None or not channels or set(lengths) != set(files):
            raise ReleaseError("manifest: lengths (one per file), release and channels go together")
        doc.update(lengths=lengths, release=release, channels=sorted(set(channels)))
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def tree_lengths(root: Path, files: dict[str, str]) -> dict[str, int]:
    """The length in bytes of each file of ``files`` under ``root``."""
    return {rel: (Path(root) / rel).stat().st_size for rel in files}


def digest(files: dict[str, str]) -> str:
    """sha256 of the manifest's text: changes when any file does; names the release in a store."""
    return hashlib.sha256(text(files).encode()).hexdigest()


def parse(raw: bytes, where: str) -> dict[str, str]:
    """The files of a manifest's text, checked: sha256 values and safe relative paths only."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ReleaseError(f"{where}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(doc, dict) or doc.get("algorithm") != "sha256" or not isinstance(doc.get("files"), dict):
        raise ReleaseError(f"{where}: expected {{'algorithm': 'sha256', 'files': {{PATH: SHA256, ...}}}}")
    files = {}
    for k, v in doc["files"].items():
        if not isinstance(v, str) or not _HEX64.fullmatch(v):
            raise ReleaseError(f"{where}: files[{k!r}] is not a sha256 hex digest")
        files[check_path(str(k), where)] = v
    return files


def parse_release(raw: bytes, where: str) -> dict[str, Any]:
    """A pull-mode manifest: ``files`` as :func:`parse`, and the signed ``lengths`` (one per file),
    ``release`` and ``channels`` it must state; a manifest without them is refused (nothing of it is
    downloaded without a signed length)."""
    files = parse(raw, where)
    doc = json.loads(raw.decode("utf-8"))
    lengths, release, channels = doc.get("lengths"), doc.get("release"), doc.get("channels")
    if not isinstance(lengths, dict) or not isinstance(release, str) or not isinstance(channels, list):
        missing = [k for k, t in (("lengths", dict), ("release", str), ("channels", list))
                   if not isinstance(doc.get(k), t)]
        raise ReleaseError(f"{where}: states no {', '.join(missing)} (a manifest from before signed lengths, "
                           "release ids and channels): re-publish the release with this version")
    if set(lengths) != set(files):
        odd = sorted(set(lengths) ^ set(files))[:3]
        raise ReleaseError(f"{where}: lengths must name exactly the files (differs at {odd!r})")
    for k, v in lengths.items():
        if type(v) is not int or v < 0:
            raise ReleaseError(f"{where}: lengths[{k!r}] is not a length in bytes")
    if not channels or not all(isinstance(c, str) and c for c in channels):
        raise ReleaseError(f"{where}: channels is not a list of channel names")
    return {"files": files, "lengths": dict(lengths), "release": release, "channels": list(channels)}


def file_digest(release_dir: Path) -> str:
    """sha256 of a release folder's manifest file as written (the digest its store names it by)."""
    path = Path(release_dir) / MANIFEST_FILE
    return hashlib.sha256(read_bounded(path, MANIFEST_MAX)).hexdigest()


def read(release_dir: Path) -> dict[str, str]:
    path = Path(release_dir) / MANIFEST_FILE
    if not path.exists() and not path.is_symlink():
        raise ReleaseError(f"{path}: missing (every release carries its manifest)")
    return parse(read_bounded(path, MANIFEST_MAX), str(path))


def compare(expected: dict[str, str], actual: dict[str, str]) -> dict[str, list[str]]:
    """added / removed / changed paths of ``actual`` against ``expected``."""
    return {
        "added": sorted(actual.keys() - expected.keys()),
        "removed": sorted(expected.keys() - actual.keys()),
        "changed": sorted(k for k in expected.keys() & actual.keys() if expected[k] != actual[k]),
    }


def verify(release_dir: Path, checked: dict[str, str] | None = None) -> dict[str, str]:
    """Check a folder against its manifest; raise naming every file that differs. ``checked``: files whose
    sha256 the caller computed as it wrote them (a download, a verified copy, into a folder only it writes):
    those are not read again; the folder must still hold exactly the manifest's files."""
    release_dir = Path(release_dir)
    expected = read(release_dir)
    diff = compare(expected, tree_files(release_dir, checked))
    problems = [f"{release_dir / k}: missing" for k in diff["removed"]]
    problems += [f"{release_dir / k}: not in the manifest" for k in diff["added"]]
    problems += [f"{release_dir / k}: sha256 does not match the manifest" for k in diff["changed"]]
    if problems:
        raise ReleaseError("checksum verification failed:\n  " + "\n  ".join(problems))
    return expected


def models(files: dict[str, str]) -> list[str]:
    """Model folders: top-level folders that hold a config.pbtxt."""
    return sorted({k.split("/", 1)[0] for k in files if k.count("/") == 1 and k.endswith("/config.pbtxt")})


def model_digests(files: dict[str, str]) -> dict[str, str]:
    """One digest per model folder: tells which models a release changes."""
    out = {}
    for m in models(files):
        entries = {k: v for k, v in files.items() if k.startswith(m + "/")}
        out[m] = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16]
    return out


_ENSEMBLE = re.compile(r'^\s*platform\s*:\s*"ensemble"', re.M)


def ensembles(root: Path) -> list[str]:
    """Models whose config.pbtxt declares the ensemble platform (loaded after their steps)."""
    return sorted(p.parent.name for p in Path(root).glob("*/config.pbtxt")
                  if _ENSEMBLE.search(p.read_text(errors="replace")))

