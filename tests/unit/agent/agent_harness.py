"""Helpers of the agent tests: release sources (the sample repository copied, optionally with one file
changed), signing key pairs, the controller's CLI in process and the agent's command line run as a subprocess
(optionally crashing at a named step)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def release_source(tmp_path: Path, name: str, note: str = "") -> Path:
    """A copy of the sample at ``tmp_path/src/name``; ``note`` appended to mlp's model.py (another digest)."""
    src = tmp_path / "src" / name
    shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
    if note:
        with (src / "mlp" / "1" / "model.py").open("a") as f:
            f.write(f"\n# {note}\n")
    return src


def key_pairs(folder: Path, *names: str) -> dict[str, Path]:
    """A signing key pair per name: ``out[name]`` the private key, ``out[name + ".pub"]`` the public one."""
    from tritonops.release_format import signing

    out: dict[str, Path] = {}
    for name in names:
        out[name], out[f"{name}.pub"] = signing.keygen(folder / f"{name}.key", folder / f"{name}.pub")
    return out


def cli(*args: object) -> tuple[int, str]:
    """``tritonops ARGS`` in process: (exit code, output on one line); a traceback fails the test."""
    from tritonops.cli import app
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output  # never a traceback
    return r.exit_code, " ".join(r.output.split())


def moto_releases_bucket(request: Any, monkeypatch: Any) -> None:
    """boto3 pointed at the ``moto_s3`` fixture's server with test credentials, bucket ``releases`` made."""
    endpoint = request.getfixturevalue("moto_s3")
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                 ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_S3", endpoint)):
        monkeypatch.setenv(k, v)
    import boto3

    s3 = boto3.client("s3")
    if "releases" not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket="releases")


def agent_cmd(*args: str, crash: str | None = None) -> subprocess.CompletedProcess:
    """``python -m tritonops.agent ARGS``; ``crash``: the step it dies at (TRITONOPS_TEST_CRASH_AT)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITONOPS_TEST_CRASH_AT"}
    if crash:
        env["TRITONOPS_TEST_CRASH_AT"] = crash
    return subprocess.run([sys.executable, "-m", "tritonops.agent", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


class StoreUnderTest:
    """A release store of one kind for a test: ``folder``; ``mirror`` (the folder published, read by the agent
    through an http.server); ``s3`` (moto_server); ``oci`` (a repository of its own in the test registry,
    tests/oci_registry.py). ``url`` is where the controller publishes, ``reader`` what the agent reads;
    ``tamper``, ``hide`` and ``restore`` change a file's bytes in the store behind the publisher's back."""

    def __init__(self, kind: str, tmp_path: Path, server: object = None) -> None:
        self.kind, self.tmp_path, self.server = kind, tmp_path, server
        self.url = self.other("store")

    def other(self, name: str) -> str:
        """Another store of the same kind (another team's, a restored one)."""
        if self.kind in ("folder", "mirror"):
            return str(self.tmp_path / name)
        if self.kind == "s3":
            return f"s3://releases/{self.tmp_path.name}/{name}"
        return self.server.url(f"{self.tmp_path.name.lower().replace('_', '-')}/{name}")  # type: ignore[attr-defined]

    def reader(self, url: str | None = None) -> str:
        """The URL the agent reads ``url`` (default: this store) at."""
        url = url or self.url
        if self.kind == "mirror":
            return f"{self.server}/{Path(url).relative_to(self.tmp_path)}"
        return url

    def settle(self) -> None:
        """A mirror's pointers written minutes ago: its Last-Modified is trusted for If-Modified-Since (a
        pointer changed within the last two seconds is read whole, store._settled)."""
        if self.kind == "mirror":
            old = time.time() - 300
            for p in (Path(self.url) / "channels").glob("*.json"):
                os.utime(p, (old, old))

    def _blob(self, sha256: str) -> Path:
        from tritonops.core.keys import blob_key

        if self.kind == "oci":
            return self.server.blob_path(sha256)  # type: ignore[attr-defined,no-any-return]
        return Path(self.url) / blob_key(sha256)

    def _s3(self) -> tuple[object, str]:
        import boto3
        from tritonops.stores import open_store
        from tritonops.stores.s3 import S3Store

        store = open_store(self.url)
        assert isinstance(store, S3Store)
        return boto3.client("s3"), store.prefix

    def tamper(self, sha256: str, data: bytes) -> None:
        if self.kind == "s3":
            s3, prefix = self._s3()
            s3.put_object(Bucket="releases", Key=f"{prefix}/blobs/sha256/{sha256}", Body=data)  # type: ignore[attr-defined]
        else:
            self._blob(sha256).write_bytes(data)

    def hide(self, sha256: str, back: bool = False) -> None:
        """Take a file's bytes away (``back``: put them back)."""
        if self.kind == "s3":
            s3, prefix = self._s3()
            key = f"{prefix}/blobs/sha256/{sha256}"
            src, dst = (key + ".away", key) if back else (key, key + ".away")
            s3.copy_object(Bucket="releases", Key=dst, CopySource={"Bucket": "releases", "Key": src})  # type: ignore[attr-defined]
            s3.delete_object(Bucket="releases", Key=src)  # type: ignore[attr-defined]
            return
        blob = self._blob(sha256)
        if back:
            blob.with_suffix(".away").rename(blob)
        else:
            blob.rename(blob.with_suffix(".away"))
