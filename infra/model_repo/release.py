"""Model repository releases on a node: stage, verify, switch atomically, mark current, prune.

Used by the ``model_repository`` role in two places:

* on the **controller** (``python -m infra.model_repo.release prepare|fetch-s3|golden``): validate a
  source repository with ``infra.model_repo.validate``, checksum it with ``infra.model_repo.manifest``
  and stage it as a release folder; fetch an S3 prefix with boto3; run the golden inference gate.
  Nothing on a host changes before ``prepare`` has succeeded.
* on the **node** (pushed by ``ansible.builtin.script`` and run with the node's own python3, so the
  node needs nothing but the standard library): ``status``, ``install`` (verify the pushed copy
  against its manifest, then rename it into place), ``activate`` (switch the ``models`` symlink by
  renaming a temporary symlink over it: atomic), ``mark`` (record the release as current after the
  golden gate) and ``prune`` (keep the last N).

Layout on the node (paths from the role's variables)::

    /var/lib/triton/releases/<release-id>/...        one folder per release, MANIFEST.sha256.json inside
    /var/lib/triton/releases/.staging-<release-id>/  a push in progress (renamed when verified)
    /var/lib/triton/releases/current.json             {"current": id, "history": [...]} after the gate
    /var/lib/triton/models -> releases/<release-id>   what tritonserver --model-repository points at

Every subcommand prints one JSON object on stdout; exit 0 ok, 1 failed (the message names the file),
2 usage error. Node-side code here must stay standard-library only and Python 3.8 compatible
(Debian 12 and Ubuntu 22.04 on Jetson).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Kept identical to infra.model_repo.manifest (which needs pydantic, absent on nodes).
MANIFEST_FILE = "MANIFEST.sha256.json"
STATE_FILE = "current.json"
STAGING_PREFIX = ".staging-"
_CHUNK = 1 << 20


class ReleaseError(Exception):
    """A release step failed; the message names the file or the variable."""


# --- pure helpers (node and controller) ---------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_files(root: Path) -> dict[str, str]:
    """sha256 of every regular file under root, as infra.model_repo.manifest.build hashes them."""
    files = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and p.name != MANIFEST_FILE and "__pycache__" not in rel.parts:
            files[rel.as_posix()] = _sha256(p)
    return files


def read_manifest(release_dir: Path) -> dict[str, str]:
    path = release_dir / MANIFEST_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReleaseError(f"{path}: missing (every release carries its manifest)") from None
    except ValueError as e:
        raise ReleaseError(f"{path}: not valid JSON ({e})") from None
    if doc.get("algorithm") != "sha256" or not isinstance(doc.get("files"), dict):
        raise ReleaseError(f"{path}: expected {{'algorithm': 'sha256', 'files': {{...}}}}")
    return {str(k): str(v) for k, v in doc["files"].items()}


def manifest_digest(files: dict[str, str]) -> str:
    """Same digest as infra.model_repo.manifest.Manifest.digest (sha256 of the stable JSON)."""
    text = json.dumps({"algorithm": "sha256", "files": files}, sort_keys=True, indent=2) + "\n"
    return hashlib.sha256(text.encode()).hexdigest()


def model_digests(files: dict[str, str]) -> dict[str, str]:
    """One digest per model folder (top-level folder that holds a config.pbtxt)."""
    models = sorted({k.split("/", 1)[0] for k in files if k.count("/") == 1 and k.endswith("/config.pbtxt")})
    out = {}
    for m in models:
        entries = {k: v for k, v in files.items() if k.startswith(m + "/")}
        out[m] = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16]
    return out


def ensembles(repo: Path) -> list[str]:
    """Models whose config.pbtxt declares the ensemble platform (loaded after their steps)."""
    pattern = re.compile(r'^\s*platform\s*:\s*"ensemble"', re.M)
    return sorted(p.parent.name for p in repo.glob("*/config.pbtxt") if pattern.search(p.read_text()))


def verify(release_dir: Path) -> dict[str, str]:
    """Check a folder against its manifest; raise naming every file that differs."""
    expected = read_manifest(release_dir)
    actual = tree_files(release_dir)
    problems = []
    for k in sorted(expected.keys() - actual.keys()):
        problems.append(f"{release_dir / k}: missing")
    for k in sorted(actual.keys() - expected.keys()):
        problems.append(f"{release_dir / k}: not in the manifest")
    for k in sorted(expected.keys() & actual.keys()):
        if expected[k] != actual[k]:
            problems.append(f"{release_dir / k}: sha256 {actual[k]} does not match the manifest's {expected[k]}")
    if problems:
        raise ReleaseError("checksum verification failed:\n  " + "\n  ".join(problems))
    return expected


def check_release_id(release: str) -> str:
    ok = release and release[0].isalnum() and all(c.isalnum() or c in "._-" for c in release)
    if not ok or len(release) > 100:
        raise ReleaseError(f"release id {release!r}: use letters, digits, '.', '_' or '-' (starting alphanumeric)")
    return release


# --- node side ----------------------------------------------------------------------------------


def _state(releases: Path) -> dict[str, Any]:
    path = releases / STATE_FILE
    if not path.is_file():
        return {"current": None, "history": []}
    return dict(json.loads(path.read_text()))


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=str(path.parent))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def active_release(link: Path, releases: Path) -> str | None:
    """The release the models symlink points at (None when it is absent or not a release link)."""
    if not link.is_symlink():
        return None
    target = (link.parent / os.readlink(link)).resolve()
    if target.parent != releases.resolve():
        return None
    return target.name


def list_releases(releases: Path) -> list[str]:
    if not releases.is_dir():
        return []
    return sorted(p.name for p in releases.iterdir() if p.is_dir() and not p.name.startswith("."))


def status(link: Path, releases: Path, release: str | None = None) -> dict[str, Any]:
    active = active_release(link, releases)
    state = _state(releases)
    out: dict[str, Any] = {
        "link": str(link),
        "link_kind": "symlink" if link.is_symlink() else ("directory" if link.is_dir() else "absent"),
        "active": active,
        "current": state.get("current"),
        "releases": list_releases(releases),
        "active_models": {},
    }
    if active:
        try:
            out["active_models"] = model_digests(read_manifest(releases / active))
        except ReleaseError as e:
            out["active_error"] = str(e)
    if release is not None:
        check_release_id(release)
        rdir = releases / release
        out["release"] = release
        out["release_present"] = rdir.is_dir()
        out["release_verified"] = False
        if rdir.is_dir():
            try:
                verify(rdir)
                out["release_verified"] = True
            except ReleaseError as e:
                out["release_error"] = str(e)
    return out


def _safe_extract(tarball: Path, dest: Path) -> None:
    """Unpack a release tarball: regular files and folders only, nothing outside ``dest``."""
    import tarfile

    with tarfile.open(tarball) as tf:
        members = tf.getmembers()
        for m in members:
            target = (dest / m.name).resolve()
            if not (m.isfile() or m.isdir()) or (target != dest.resolve() and dest.resolve() not in target.parents):
                raise ReleaseError(f"{tarball}: member {m.name!r} is not a plain file inside the release")
        for m in members:
            m.uid = m.gid = 0
            m.uname = m.gname = "root"
        tf.extractall(dest, members=members)  # noqa: S202 - members checked above


def _own(root: Path, owner: str | None, group: str | None) -> None:
    """Folders 0750, files 0640, owner:group: the service's group reads, nobody else does."""
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o750 if p.is_dir() else 0o640)
        if owner and group:
            shutil.chown(p, owner, group)
        elif owner:
            shutil.chown(p, user=owner)
        elif group:
            shutil.chown(p, group=group)


def install(releases: Path, staging: Path, release: str, tarball: Path | None = None,
            owner: str | None = None, group: str | None = None) -> dict[str, Any]:
    """Verify a pushed release and rename it to releases/<release> (atomic within one filesystem).

    The push is either a folder (``staging``) or a tarball unpacked into ``staging`` first; either
    way every file is checked against the release's manifest before the rename.
    """
    check_release_id(release)
    dest = releases / release
    pushed = staging.is_dir() or (tarball is not None and tarball.is_file())
    damaged_copy = False
    if dest.is_dir():
        try:
            verify(dest)
        except ReleaseError:
            if not pushed:
                raise
            # Files of the installed copy were changed on the node (drift): replace it with the verified push.
            damaged_copy = True
        if not damaged_copy:
            for leftover in (staging, tarball):
                if leftover is not None and leftover.is_dir():
                    shutil.rmtree(leftover)
                elif leftover is not None and leftover.exists():
                    leftover.unlink()
            return {"changed": False, "release": release, "path": str(dest)}
    if tarball is not None:
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        _safe_extract(tarball, staging)
    _own(staging, owner, group)
    files = verify(staging)
    if damaged_copy:
        damaged = releases / f"{STAGING_PREFIX}damaged-{release}"
        if damaged.exists():
            shutil.rmtree(damaged)
        os.rename(dest, damaged)
        os.rename(staging, dest)
        shutil.rmtree(damaged)
    else:
        os.rename(staging, dest)
    if tarball is not None:
        tarball.unlink()
    out = {"changed": True, "release": release, "path": str(dest), "files": len(files)}
    if damaged_copy:
        out["repaired"] = True
    return out


def pack(staged: Path) -> Path:
    """``<staged>.tar`` with the release's files in manifest order (one transfer to each node)."""
    import tarfile

    out = staged.with_name(staged.name + ".tar")
    if out.is_file():
        return out
    files = [MANIFEST_FILE, *read_manifest(staged)]
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tf:
        for rel in files:
            info = tf.gettarinfo(str(staged / rel), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with (staged / rel).open("rb") as fh:
                tf.addfile(info, fh)
    os.rename(tmp, out)
    return out


def touch_models(release_dir: Path, models: list[str]) -> list[str]:
    """Set the mtime of each model folder (and everything in it) to now.

    Triton decides whether a load must re-read a model from the folder's modification time and only
    reloads when it is newer than what it loaded; a release switched back to (rollback) or one staged
    with preserved, older mtimes would otherwise keep the model in memory. Content is unchanged, so
    manifests still verify.
    """
    touched = []
    for m in models:
        folder = release_dir / m
        if folder.is_dir():
            for p in [*sorted(folder.rglob("*"), reverse=True), folder]:
                os.utime(p, None)
            touched.append(m)
    return touched


def activate(link: Path, releases: Path, release: str, touch: list[str] | None = None) -> dict[str, Any]:
    """Point the models symlink at releases/<release> by renaming a fresh symlink over it.

    ``touch`` names the models about to be loaded from it (see ``touch_models``).
    """
    check_release_id(release)
    if not (releases / release).is_dir():
        raise ReleaseError(f"{releases / release}: no such release on this node")
    touched = touch_models(releases / release, touch or [])
    previous = active_release(link, releases)
    if previous == release:
        return {"changed": bool(touched), "previous": previous, "active": release, "touched": touched}
    target = os.path.relpath(releases / release, link.parent)
    if link.is_dir() and not link.is_symlink():
        # The empty directory triton_server creates before the first release (or a hand-made one).
        if any(link.iterdir()):
            aside = releases / f"preexisting-{time.strftime('%Y%m%dT%H%M%S')}"
            os.rename(link, aside)
        else:
            link.rmdir()
    tmp = link.parent / f".{link.name}.tmp-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return {"changed": True, "previous": previous, "active": release, "touched": touched}


def mark(releases: Path, release: str) -> dict[str, Any]:
    """Record the release as current (after the golden gate) and append it to the history."""
    check_release_id(release)
    state = _state(releases)
    if state.get("current") == release:
        return {"changed": False, "current": release}
    history = [h for h in state.get("history", []) if h.get("release") != release]
    history.append({"release": release, "activated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    _write_atomic(releases / STATE_FILE, json.dumps({"current": release, "history": history}, indent=2) + "\n")
    return {"changed": True, "previous": state.get("current"), "current": release}


def prune(link: Path, releases: Path, keep: int) -> dict[str, Any]:
    """Keep the `keep` most recently current releases (always the active and current ones); drop the rest."""
    if keep < 1:
        raise ReleaseError(f"keep: {keep} must be at least 1")
    state = _state(releases)
    order = [h["release"] for h in reversed(state.get("history", []))]
    protect = {r for r in (active_release(link, releases), state.get("current")) if r}
    ranked = order + sorted(set(list_releases(releases)) - set(order))  # never-current ones go first
    kept = set(protect) | set(ranked[:keep])
    removed = []
    for name in list_releases(releases):
        if name not in kept:
            shutil.rmtree(releases / name)
            removed.append(name)
    for p in releases.glob(STAGING_PREFIX + "*") if releases.is_dir() else []:
        shutil.rmtree(p)
        removed.append(p.name)
    if removed:
        history = [h for h in state.get("history", []) if h.get("release") not in removed]
        if history != state.get("history", []):
            _write_atomic(releases / STATE_FILE,
                          json.dumps({"current": state.get("current"), "history": history}, indent=2) + "\n")
    return {"changed": bool(removed), "removed": removed, "kept": sorted(kept & set(list_releases(releases)))}


# --- controller side (needs the tritonops package) ---------------------------------------------


def prepare(source: Path, cache: Path, target: str | None = None, version: str | None = None,
            config_name: str | None = None) -> dict[str, Any]:
    """Validate ``source``, checksum it, and stage it as ``cache/<release-id>`` on the controller.

    A source that carries its own MANIFEST.sha256.json must match it (a corrupt or tampered download
    stops here, naming the file). The release id is ``version`` or the first 16 hex digits of the
    manifest digest. Returns the release id, the staged folder and each model's digest.
    """
    from infra.model_repo.manifest import build
    from infra.model_repo.validate import Target, UsageError, validate

    source = Path(source)
    if not source.is_dir():
        raise ReleaseError(f"{source}: model repository source is not a directory")
    if (source / MANIFEST_FILE).is_file():
        verify(source)
    try:
        report = validate(source, target=Target(target) if target else None, config_name=config_name)
    except UsageError as e:
        raise ReleaseError(str(e)) from None
    if not report.ok:
        lines = [f"{f.location()}: [{f.field or f.code}] {f.message}" for f in report.errors]
        raise ReleaseError(f"{source}: tritonops validate --target {target or '-'} found "
                           f"{len(report.errors)} error(s):\n  " + "\n  ".join(lines))
    manifest = build(source)
    release = check_release_id(version or manifest.digest[:16])
    staged = Path(cache) / release
    staged_now = False
    if staged.is_dir():
        try:
            same = read_manifest(staged) == manifest.files and tree_files(staged) == manifest.files
        except ReleaseError:
            same = False
        if not same:
            if version:
                raise ReleaseError(f"{staged}: release {version!r} is already staged with different "
                                   "content; give the new content a new model_repository_version")
            shutil.rmtree(staged)
            staged.with_name(staged.name + ".tar").unlink(missing_ok=True)
    if not staged.is_dir():
        Path(cache).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=str(cache)))
        for rel in manifest.files:
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, dst)
        (tmp / MANIFEST_FILE).write_text(manifest.to_json())
        verify(tmp)  # the copy is what gets pushed: check it once more
        os.rename(tmp, staged)
        staged_now = True
    return {
        "changed": staged_now,
        "release": release,
        "path": str(staged),
        "digest": manifest.digest,
        "files": len(manifest.files),
        "models": model_digests(manifest.files),
        "ensembles": ensembles(staged),
        "tarball": str(pack(staged)),
        "warnings": [f"{f.location()}: {f.message}" for f in report.warnings],
    }


def extract_tarball(tarball: Path, dest: Path) -> Path:
    """Unpack a (sha256-checked) repository tarball; a single top folder is taken as the repository."""
    import tarfile

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        with tarfile.open(tarball) as tf:
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise ReleaseError(f"{tarball}: cannot unpack ({e})") from None
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and not (entries[0] / "config.pbtxt").exists():
        return entries[0]
    return dest


def fetch_s3(bucket: str, prefix: str, dest: Path, endpoint_url: str | None = None,
             region: str | None = None) -> dict[str, Any]:
    """Download every object under s3://bucket/prefix into dest (credentials from the environment)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = prefix.strip("/")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    client = boto3.client("s3", endpoint_url=endpoint_url or None, region_name=region or None)
    count = 0
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                rel = key[len(prefix) + 1:] if prefix else key
                if not rel or rel.endswith("/"):
                    continue
                out = (dest / rel).resolve()
                if dest.resolve() not in out.parents:
                    raise ReleaseError(f"s3://{bucket}/{key}: key escapes the repository folder")
                out.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, key, str(out))
                count += 1
    except (BotoCoreError, ClientError) as e:
        raise ReleaseError(f"s3://{bucket}/{prefix}: {e}") from None
    if count == 0:
        raise ReleaseError(f"s3://{bucket}/{prefix}: no objects under this prefix")
    return {"objects": count, "path": str(dest)}


def golden(url: str, repository: Path, models: list[str] | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """The release gate: server ready, every model READY, every golden inference within tolerance.

    The metrics endpoint is not part of the gate (it may bind to a management address only).
    Retries for ``timeout`` seconds while models are still becoming READY after a load.
    """
    from infra.triton.smoke import smoke

    deadline = time.monotonic() + timeout
    while True:
        report = smoke(url, models=models or (), repository=repository)
        gate = [c for c in report.checks if c.check != "metrics"]
        ok = bool(gate) and all(c.ok for c in gate)
        not_ready = [c for c in gate if c.check in ("live", "ready", "model") and not c.ok]
        if ok or not not_ready or time.monotonic() > deadline:
            break
        time.sleep(2)
    failed = [f"{c.check} {c.target}: {c.detail}" for c in gate if not c.ok]
    return {"ok": ok, "url": url, "server_version": report.server_version,
            "checks": [c.model_dump() for c in gate], "failed": failed}


# --- CLI ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="release", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def node(name: str, help_: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--link", type=Path, required=True, help="the models symlink (tritonserver --model-repository)")
        sp.add_argument("--releases", type=Path, required=True, help="folder holding one folder per release")
        return sp

    sp = node("status", "what is active, current and present (read only)")
    sp.add_argument("--release")
    sp = node("install", "verify a pushed staging copy and rename it into place")
    sp.add_argument("--staging", type=Path, required=True)
    sp.add_argument("--release", required=True)
    sp.add_argument("--tarball", type=Path, help="the pushed release tarball, unpacked into --staging")
    sp.add_argument("--owner")
    sp.add_argument("--group")
    sp = node("activate", "switch the models symlink to a release (atomic rename)")
    sp.add_argument("--release", required=True)
    sp.add_argument("--touch", action="append", default=[], help="a model about to be (re)loaded from it")
    sp = node("mark", "record a release as current (after the golden gate)")
    sp.add_argument("--release", required=True)
    sp = node("prune", "keep the last N releases")
    sp.add_argument("--keep", type=int, required=True)
    sp = sub.add_parser("verify", help="check a release folder against its manifest")
    sp.add_argument("path", type=Path)

    sp = sub.add_parser("prepare", help="controller: validate, checksum and stage a release")
    sp.add_argument("source", type=Path)
    sp.add_argument("--cache", type=Path, required=True)
    sp.add_argument("--target", choices=["cpu", "gpu", "jetson"])
    sp.add_argument("--version")
    sp.add_argument("--config-name")
    sp.add_argument("--tarball", action="store_true", help="source is a (sha256-checked) tarball")
    sp = sub.add_parser("fetch-s3", help="controller: download s3://BUCKET/PREFIX (boto3)")
    sp.add_argument("--bucket", required=True)
    sp.add_argument("--prefix", default="")
    sp.add_argument("--dest", type=Path, required=True)
    sp.add_argument("--endpoint-url")
    sp.add_argument("--region")
    sp = sub.add_parser("golden", help="controller: the golden inference gate against a node")
    sp.add_argument("url")
    sp.add_argument("--repository", type=Path, required=True)
    sp.add_argument("--model", action="append")
    sp.add_argument("--timeout", type=float, default=60.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "status":
            out = status(args.link, args.releases, args.release)
        elif args.cmd == "install":
            out = install(args.releases, args.staging, args.release, args.tarball, args.owner, args.group)
        elif args.cmd == "activate":
            out = activate(args.link, args.releases, args.release, args.touch)
        elif args.cmd == "mark":
            out = mark(args.releases, args.release)
        elif args.cmd == "prune":
            out = prune(args.link, args.releases, args.keep)
        elif args.cmd == "verify":
            out = {"files": len(verify(args.path)), "path": str(args.path)}
        elif args.cmd == "prepare":
            source = args.source
            if args.tarball:
                source = extract_tarball(args.source, args.cache / f"{STAGING_PREFIX}unpacked")
            out = prepare(source, args.cache, args.target, args.version, args.config_name)
        elif args.cmd == "fetch-s3":
            out = fetch_s3(args.bucket, args.prefix, args.dest, args.endpoint_url, args.region)
        else:
            out = golden(args.url, args.repository, args.model, args.timeout)
            print(json.dumps(out, indent=2, sort_keys=True))
            if not out["ok"]:
                print("golden inference gate failed:\n  " + "\n  ".join(out["failed"]), file=sys.stderr)
            return 0 if out["ok"] else 1
    except ReleaseError as e:
        print(json.dumps({"error": str(e)}))
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
