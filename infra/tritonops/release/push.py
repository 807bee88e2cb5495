"""The push-mode release steps on the controller: validate, checksum and stage a release; fetch it; gate it.

Used by the ``model_repository`` role (``python -m tritonops.release.push prepare|fetch-s3|golden``);
``check_repository`` also by ``tritonops release publish``. The gate is the release agent's
(:mod:`tritonops.release_format.golden_gate`), so push and pull mode decide a release alike. Nothing on a host
changes before ``prepare`` has succeeded.
What runs on the node (install, activate, mark, prune, status) is the release agent
(``tritonops.agent``), which the role pushes as one file; the manifest and its hashing live there too.

Every subcommand prints one JSON object on stdout; exit 0 ok, 1 failed (the message names the file),
2 usage error (a bad argument, unusable credentials, nothing to gate).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from tritonops.core import lock
from tritonops.core.errors import ReleaseError, UsageError
from tritonops.core.names import MANIFEST_FILE, STAGING_PREFIX, check_path, check_release_id
from tritonops.core.triton_http import Triton
from tritonops.release_format import manifest
from tritonops.release_format.golden_gate import golden_gate

STAGE_LOCK_TIMEOUT = 600.0  # seconds a prepare waits for another one staging into the same cache


class CredentialsError(ValueError):
    """Unusable credentials on stdin (exit 2); the message names a key, never a value."""


def pack(staged: Path) -> Path:
    """``<staged>.tar`` with the release's files in manifest order (one transfer to each node)."""
    import tarfile

    out = staged.with_name(staged.name + ".tar")
    if out.is_file():
        return out
    files = [MANIFEST_FILE, *manifest.read(staged)]
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


# --- controller side (needs the tritonops package) ---------------------------------------------


def check_repository(source: Path, target: str | None = None, config_name: str | None = None) -> tuple[dict, list]:
    """Validate a repository as Triton would load it; its files' sha256 and the warnings, or raise.

    A source that carries its own MANIFEST.sha256.json must match it (a corrupt or tampered
    download stops here, naming the file).
    """
    from tritonops.model_repo.validate import Target, UsageError, validate

    source = Path(source)
    if not source.is_dir():
        raise ReleaseError(f"{source}: model repository source is not a directory")
    files = manifest.repository_files(source)  # links that loop or leave, hard links: refused, each named
    if (source / MANIFEST_FILE).is_file():
        manifest.verify(source)
    try:
        report = validate(source, target=Target(target) if target else None, config_name=config_name)
    except UsageError as e:
        raise ReleaseError(str(e)) from None
    if not report.ok:
        lines = [f"{f.location()}: [{f.field or f.code}] {f.message}" for f in report.errors]
        raise ReleaseError(f"{source}: tritonops validate --target {target or '-'} found "
                           f"{len(report.errors)} error(s):\n  " + "\n  ".join(lines))
    for rel in files:
        check_path(rel, str(source))
    return files, [f"{f.location()}: {f.message}" for f in report.warnings]


def prepare(source: Path, cache: Path, target: str | None = None, version: str | None = None,
            config_name: str | None = None) -> dict[str, Any]:
    """Validate ``source``, checksum it, and stage it as ``cache/<release-id>`` on the controller.

    The release id is ``version`` or the first 16 hex digits of the manifest digest. Returns the
    release id, the staged folder and each model's digest. Several at once (the hosts of one play,
    two plays) may stage into one cache: each validates and checksums by itself, and the staging
    holds the cache's lock (:mod:`tritonops.core.lock`, ``<cache>/.lock``).
    """
    source = Path(source)
    files, warnings = check_repository(source, target, config_name)
    digest = manifest.digest(files)
    release = check_release_id(version or digest[:16])
    staged = Path(cache) / release
    if _staged(staged, files) and staged.with_name(staged.name + ".tar").is_file():
        return _result(staged, files, digest, release, warnings, False)  # already staged: nothing to write
    with staging_lock(cache):
        return _stage(source, staged, files, digest, release, version, warnings)


def staging_lock(cache: Path) -> Any:
    """The controller cache's lock (re-entrant in a thread): one staging (or tarball unpacking) at a time."""
    Path(cache).mkdir(parents=True, exist_ok=True)
    return lock.held(Path(cache), "prepare", STAGE_LOCK_TIMEOUT)


def _staged(staged: Path, files: dict) -> bool:
    """``staged`` holds exactly ``files`` (its manifest and every file's checksum)."""
    if not staged.is_dir():
        return False
    try:
        return manifest.read(staged) == files and manifest.tree_files(staged) == files
    except ReleaseError:
        return False


def _stage(source: Path, staged: Path, files: dict, digest: str, release: str, version: str | None,
           warnings: list) -> dict[str, Any]:
    staged_now = False
    if staged.is_dir() and not _staged(staged, files):
        if version:
            raise ReleaseError(f"{staged}: release {version!r} is already staged with different "
                               "content; give the new content a new model_repository_version")
        shutil.rmtree(staged)
        staged.with_name(staged.name + ".tar").unlink(missing_ok=True)
    if not staged.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=str(staged.parent)))
        for rel in files:
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, dst)
        (tmp / MANIFEST_FILE).write_text(manifest.text(files))
        manifest.verify(tmp)  # the copy is what gets pushed: check it once more
        os.rename(tmp, staged)
        staged_now = True
    return _result(staged, files, digest, release, warnings, staged_now)


def _result(staged: Path, files: dict, digest: str, release: str, warnings: list, staged_now: bool) -> dict[str, Any]:
    return {
        "changed": staged_now,
        "release": release,
        "path": str(staged),
        "digest": digest,
        "files": len(files),
        "models": manifest.model_digests(files),
        "ensembles": manifest.ensembles(staged),
        "tarball": str(pack(staged)),
        "warnings": warnings,
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


S3_CREDENTIALS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")


def read_credentials(stream: IO[str]) -> dict[str, str]:
    """S3 credentials as one JSON object on ``stream`` (the role's stdin): never argv, never the environment.

    Keys: aws_access_key_id and aws_secret_access_key (both), aws_session_token (optional). An error
    names the key, never a value.
    """
    try:
        data = json.loads(stream.read() or "{}")
    except json.JSONDecodeError as e:
        raise CredentialsError(f"--credentials-stdin: stdin is not one JSON object (line {e.lineno})") from None
    if not isinstance(data, dict):
        raise CredentialsError("--credentials-stdin: stdin is not one JSON object")
    unknown = sorted(set(data) - set(S3_CREDENTIALS))
    bad = [k for k in S3_CREDENTIALS if k in data and not isinstance(data[k], str)]
    if unknown or bad:
        raise CredentialsError(f"--credentials-stdin: unknown key(s) {unknown}, or not a string: {bad} "
                               f"(keys: {', '.join(S3_CREDENTIALS)})")
    creds = {k: v for k, v in data.items() if v}
    if ("aws_access_key_id" in creds) != ("aws_secret_access_key" in creds):
        raise CredentialsError("--credentials-stdin: aws_access_key_id and aws_secret_access_key go together")
    return creds


def _scrub(text: str, secrets: dict[str, str]) -> str:
    for value in secrets.values():
        text = text.replace(value, "***")
    return text


def fetch_s3(bucket: str, prefix: str, dest: Path, endpoint_url: str | None = None,
             region: str | None = None, credentials: dict[str, str] | None = None) -> dict[str, Any]:
    """Download every object under s3://bucket/prefix into dest.

    ``credentials`` (see :func:`read_credentials`) or, without them, boto3's own chain (environment,
    profile, instance role). A message never holds a credential.
    """
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    credentials = credentials or {}
    prefix = prefix.strip("/")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    client = boto3.session.Session().client("s3", endpoint_url=endpoint_url or None, region_name=region or None,
                                            **credentials)
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
        raise ReleaseError(_scrub(f"s3://{bucket}/{prefix}: {e}", credentials)) from None
    if count == 0:
        raise ReleaseError(f"s3://{bucket}/{prefix}: no objects under this prefix")
    return {"objects": count, "path": str(dest)}


def golden(url: str, repository: Path, models: list[str] | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """The release gate of push mode, run from the controller: the agent's golden gate, the one pull mode runs.

    Every model (``models``, or each folder of ``repository`` with a config.pbtxt) READY within
    ``timeout`` seconds, every golden case of ``repository`` within tolerance
    (:func:`tritonops.release_format.golden_gate.golden_gate`). The metrics endpoint is not part of the gate (it may
    bind to a management address only). ``url`` is Triton's HTTP endpoint, ``http(s)://HOST:PORT``.
    """
    if "://" not in url:
        url = f"http://{url}"
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{url}: the golden gate speaks Triton's HTTP/REST protocol; give http://HOST:PORT")
    names = sorted(set(models or ())) or sorted(p.parent.name for p in Path(repository).glob("*/config.pbtxt"))
    if not names:
        raise UsageError(f"{repository}: no model folders (*/config.pbtxt) to gate, and no --model given")
    gate = golden_gate(Triton(url), Path(repository), names, timeout=timeout)
    return {"ok": gate["ok"], "url": url, "models": names, "cases": gate["cases"], "failed": gate["failed"]}


# --- CLI ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="release", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

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
    sp.add_argument("--credentials-stdin", action="store_true",
                    help="read the S3 credentials as one JSON object from stdin (keys: "
                         + ", ".join(S3_CREDENTIALS) + "); default: boto3's own chain")
    sp = sub.add_parser("golden", help="controller: the golden inference gate against a node")
    sp.add_argument("url")
    sp.add_argument("--repository", type=Path, required=True)
    sp.add_argument("--model", action="append")
    sp.add_argument("--timeout", type=float, default=60.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "prepare":
            source = args.source
            with staging_lock(args.cache):  # the unpacked folder is shared by every run on this cache
                if args.tarball:
                    source = extract_tarball(args.source, args.cache / f"{STAGING_PREFIX}unpacked")
                out = prepare(source, args.cache, args.target, args.version, args.config_name)
        elif args.cmd == "fetch-s3":
            creds = read_credentials(sys.stdin) if args.credentials_stdin else None
            out = fetch_s3(args.bucket, args.prefix, args.dest, args.endpoint_url, args.region, creds)
        else:
            out = golden(args.url, args.repository, args.model, args.timeout)
            print(json.dumps(out, indent=2, sort_keys=True))
            if not out["ok"]:
                print("golden inference gate failed:\n  " + "\n  ".join(out["failed"]), file=sys.stderr)
            return 0 if out["ok"] else 1
    except (CredentialsError, UsageError) as e:
        print(json.dumps({"error": str(e)}))
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ReleaseError as e:
        print(json.dumps({"error": str(e)}))
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
