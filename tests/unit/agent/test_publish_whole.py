"""``tritonops release publish`` ships a repository whole or not at all (issue 34 item 5), through the real CLI.

Careless-operator inputs: symbolic links that loop or leave the repository, a file hard-linked to a
secret, a version folder that is a link inside its model folder, a channel name no store can hold, and
two publishes of different content under one release id at the same moment. Each refusal is one line,
exit 2 (or 1 for the id taken), with nothing uploaded; the version folder link reaches a node (the
built agent zipapp) as the files Triton would load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_harness import moto_releases_bucket, release_source
from tritonops import agent_bundle as bundle
from tritonops.cli import app
from tritonops.core.errors import ReleaseError, StoreError
from tritonops.release import publish as pub
from typer.testing import CliRunner


def publish(src: Path, store: Path | str, key: Path, *extra: str, channel: str = "stable") -> tuple[int, str]:
    r = CliRunner().invoke(app, ["release", "publish", str(src), "--store", str(store), "--channel", channel,
                                 "--key", str(key), "--target", "cpu", *extra])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output  # never a traceback
    return r.exit_code, " ".join(r.output.split())


def test_loops_links_leaving_and_hard_links_are_refused_each_named_before_any_upload(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    src = release_source(tmp_path, "a")
    (src / "loop1").symlink_to("loop2")
    (src / "loop2").symlink_to("loop1")
    (src / "mlp" / "up").symlink_to("..")  # a folder link to the folder holding it
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the fleet")
    (src / "mlp" / "1" / "extra.txt").symlink_to(secret)
    os.link(secret, src / "mlp" / "notes.txt")
    code, out = publish(src, tmp_path / "store", keys["key"])
    assert code == 2, out
    for named in ("loop1: a symbolic link that loops", "loop2: a symbolic link that loops",
                  "mlp/up: a symbolic link to a folder that holds it", "extra.txt: a symbolic link to",
                  "outside the repository", "notes.txt: a file with 1 other hard link(s)"):
        assert named in out, named
    assert "5 path(s) a release cannot ship" in out and not (tmp_path / "store").exists()


def test_a_version_folder_linked_inside_its_model_reaches_the_node(tmp_path: Path, keys: dict[str, Path]) -> None:
    src = release_source(tmp_path, "a")
    (src / "mlp" / "1").rename(src / "mlp" / "v1data")
    (src / "mlp" / "1").symlink_to("v1data")
    store = tmp_path / "store"
    code, out = publish(src, store, keys["key"], "--release", "r1")
    assert code == 0, out
    pyz = bundle.build(tmp_path / "tritonops-agent.pyz")
    node = tmp_path / "node"
    (node / "releases").mkdir(parents=True)
    done = subprocess.run([sys.executable, "-I", str(pyz), "sync", "--store", str(store), "--channel", "stable",
                           "--link", str(node / "models"), "--releases", str(node / "releases"),
                           "--trusted-key", str(keys["pub"])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    served = node / "releases" / "r1" / "mlp" / "1"
    assert served.is_dir() and not served.is_symlink()
    assert (served / "model.py").read_bytes() == (src / "mlp" / "v1data" / "model.py").read_bytes()


def test_a_channel_name_no_store_can_hold_is_refused_before_any_upload(tmp_path: Path, keys: dict[str, Path]) -> None:
    code, out = publish(release_source(tmp_path, "a"), tmp_path / "store", keys["key"], channel="c" * 300)
    assert code == 2 and "(1-128 characters)" in out, out
    assert not (tmp_path / "store").exists()


def test_two_publishes_of_different_content_under_one_id_at_once_one_is_refused(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    store = str(tmp_path / "store")
    sources = [release_source(tmp_path, name, name) for name in ("a", "b", "c", "d")]
    results: list[object] = []

    def one(src: Path) -> None:
        try:
            results.append(pub.publish(src, store, None, keys["key"], target="cpu", version="r1",
                                       channels=["stable"])["digest"])
        except ReleaseError as e:
            results.append(e)

    threads = [threading.Thread(target=one, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if isinstance(r, str)]
    assert len(won) == 1 and sum("published with other content" in str(r) for r in results) == 3, results
    assert json.loads((tmp_path / "store" / "ids" / "r1.json").read_text())["digest"] == won[0]
    assert [p.parent.name for p in (tmp_path / "store" / "releases").glob("*/manifest.json")] == won


def test_validate_errors_on_what_publish_would_refuse(tmp_path: Path) -> None:
    src = release_source(tmp_path, "a")
    (src / "loop1").symlink_to("loop2")
    (src / "loop2").symlink_to("loop1")
    (tmp_path / "secret.txt").write_text("not for the fleet")
    (src / "mlp" / "1" / "extra.txt").symlink_to(tmp_path / "secret.txt")
    r = CliRunner().invoke(app, ["validate", str(src), "--target", "cpu"])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "3 errors" in out, out
    assert "loop1: a symbolic link that loops or leads nowhere: tritonops release publish refuses it" in out
    assert "extra.txt: a symbolic link to" in out and "outside the repository" in out


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.integration)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "folder":
        return str(tmp_path / "store")
    moto_releases_bucket(request, monkeypatch)
    return f"s3://releases/{tmp_path.name}/store"


def _objects(url: str) -> set[str]:
    if not url.startswith("s3://"):
        return {str(p.relative_to(url)) for p in Path(url).rglob("*") if p.is_file() and not p.name.startswith(".")}
    import boto3

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    return {o["Key"].removeprefix(prefix + "/") for page in pages for o in page.get("Contents", [])}


def test_a_store_write_failing_mid_upload_leaves_nothing_of_the_release_behind(
        tmp_path: Path, keys: dict[str, Path], store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert publish(release_source(tmp_path, "r1"), store_url, keys["key"], "--release", "r1")[0] == 0
    before = _objects(store_url)
    src = release_source(tmp_path, "r2", note="r2")  # r1's files (blobs kept), mlp's model.py changed...
    for i in range(4):  # ...and four files no release has yet: new blobs
        (src / "mlp" / "1" / f"extra{i}.txt").write_text(f"extra {i}\n")
    kind = type(pub.open_writer(store_url))  # the store kind's writer
    real, blobs = kind.put, []  # the blob keys written, in order

    def put(self: Any, key: str, data: bytes | Path, content_type: str = "application/octet-stream",
            **kw: Any) -> None:
        if key.startswith("blobs/"):
            blobs.append(key)
            if len(blobs) == 3:  # the store fails at the third new blob (a full disk, a dropped connection)
                raise StoreError(f"{self.url}/{key}: upload failed: simulated")
        real(self, key, data, content_type, **kw)

    monkeypatch.setattr(kind, "put", put)
    code, out = publish(src, store_url, keys["key"], "--release", "r2")
    assert code == 3 and "simulated" in out
    assert len(blobs) == 3 and _objects(store_url) == before  # r2's two blobs, claim: gone; r1's blobs all kept
    monkeypatch.setattr(kind, "put", real)
    assert publish(src, store_url, keys["key"], "--release", "r2")[0] == 0  # the id is free again
