"""Releases: controller staging (tritonops.release.push) and the agent's node steps (tritonops.agent.releases).

The node-side commands run here on temporary folders exactly as the role runs them on a node (the
agent zipapp with a bare python3); the S3 source is exercised against moto_server (the moto[server]
package) on 127.0.0.1, a plainly named stand-in for AWS S3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from tritonops import agent_bundle as bundle
from tritonops.agent import releases as node_rel
from tritonops.core.names import MANIFEST_FILE
from tritonops.release import push as rel
from tritonops.release_format import manifest

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


@pytest.fixture
def staged(tmp_path: Path) -> dict:
    return rel.prepare(SAMPLE, tmp_path / "cache", "cpu")


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "var-lib-triton"
    (root / "releases").mkdir(parents=True)
    return root / "models", root / "releases"


def push(staged: dict, releases: Path) -> str:
    """What the role's copy task does: the staged folder lands in releases/.staging-<id>."""
    shutil.copytree(staged["path"], releases / f"{node_rel.STAGING_PREFIX}{staged['release']}")
    node_rel.install(releases, releases / f"{node_rel.STAGING_PREFIX}{staged['release']}", staged["release"])
    return str(staged["release"])


def test_release_id_is_the_manifest_digest(staged: dict) -> None:
    assert staged["release"] == staged["digest"][:16]
    assert staged["digest"] == manifest.digest(manifest.tree_files(SAMPLE))
    assert manifest.digest(manifest.tree_files(SAMPLE)) == staged["digest"]


def test_staged_release_carries_its_manifest(staged: dict) -> None:
    path = Path(staged["path"])
    assert json.loads((path / MANIFEST_FILE).read_text())["files"] == manifest.tree_files(SAMPLE)
    assert manifest.verify(path) == manifest.tree_files(SAMPLE)


def test_models_and_ensembles(staged: dict) -> None:
    assert sorted(staged["models"]) == ["mlp", "mlp_batched", "pipeline", "postprocess", "preprocess"]
    assert staged["ensembles"] == ["pipeline"]


def test_prepare_twice_stages_once(tmp_path: Path, staged: dict) -> None:
    again = rel.prepare(SAMPLE, tmp_path / "cache", "cpu")
    assert (staged["changed"], again["changed"]) == (True, False)
    assert again["release"] == staged["release"]


def test_eight_prepares_at_once_into_one_cache_stage_once_and_agree(tmp_path: Path) -> None:
    """The hosts of one play stage in parallel (no throttle): eight processes at once into one empty cache
    all succeed with the same release, exactly one stages it, and nothing half-made is left."""
    import multiprocessing as mp

    cache, ctx = tmp_path / "cache", mp.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()

    def one() -> None:
        barrier.wait()  # all eight validate and checksum together, then race to stage
        try:
            results.put(rel.prepare(SAMPLE, cache, "cpu"))
        except Exception as e:  # noqa: BLE001 - reported to the test
            results.put({"error": f"{type(e).__name__}: {e}"})

    procs = [ctx.Process(target=one) for _ in range(8)]
    for proc in procs:
        proc.start()
    outs = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert not [o for o in outs if "error" in o], outs
    assert len({(o["release"], o["digest"], o["tarball"]) for o in outs}) == 1
    assert sum(o["changed"] for o in outs) == 1, [o["changed"] for o in outs]
    release = outs[0]["release"]
    assert sorted(p.name for p in cache.iterdir()) == [release, f"{release}.tar"]  # no staging folder, no .lock
    assert manifest.verify(cache / release)


def test_model_digest_changes_only_for_the_changed_model(tmp_path: Path, staged: dict) -> None:
    changed = tmp_path / "v2"
    shutil.copytree(SAMPLE, changed)
    cfg = changed / "mlp" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1", "count: 2"))
    v2 = rel.prepare(changed, tmp_path / "cache", "cpu")
    assert v2["release"] != staged["release"]
    assert [m for m in v2["models"] if v2["models"][m] != staged["models"][m]] == ["mlp"]


def test_invalid_config_stops_prepare_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(SAMPLE, bad)
    cfg = bad / "mlp" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("KIND_CPU", "KIND_GPU"))
    with pytest.raises(rel.ReleaseError, match=r"mlp/config.pbtxt:\d+"):
        rel.prepare(bad, tmp_path / "cache", "cpu")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_source_with_a_wrong_manifest_stops_prepare_naming_the_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(SAMPLE, src)
    (src / MANIFEST_FILE).write_text(manifest.text(manifest.tree_files(src)))
    (src / "mlp" / "1" / "model.py").write_text("tampered\n")
    with pytest.raises(rel.ReleaseError, match=r"mlp/1/model.py: sha256 does not match"):
        rel.prepare(src, tmp_path / "cache", "cpu")


def test_version_reused_for_other_content_is_refused(tmp_path: Path) -> None:
    rel.prepare(SAMPLE, tmp_path / "cache", "cpu", version="r1")
    other = tmp_path / "other"
    shutil.copytree(SAMPLE, other)
    (other / "mlp" / "1" / "model.py").write_text((other / "mlp" / "1" / "model.py").read_text() + "# v2\n")
    with pytest.raises(rel.ReleaseError, match="already staged with different content"):
        rel.prepare(other, tmp_path / "cache", "cpu", version="r1")


def test_tarball_push_installs_with_modes(staged: dict, node: tuple[Path, Path]) -> None:
    _, releases = node
    tarball = releases / f"{node_rel.STAGING_PREFIX}{staged['release']}.tar"
    shutil.copy(staged["tarball"], tarball)
    out = node_rel.install(releases, releases / f"{node_rel.STAGING_PREFIX}{staged['release']}", staged["release"], tarball)
    assert out["changed"] is True and not tarball.exists()
    dest = releases / staged["release"]
    assert manifest.verify(dest) == manifest.tree_files(SAMPLE)
    assert (dest / "mlp").stat().st_mode & 0o777 == 0o750
    assert (dest / "mlp" / "config.pbtxt").stat().st_mode & 0o777 == 0o640
    assert node_rel.install(releases, releases / "x", staged["release"])["changed"] is False


def test_tarball_with_an_escaping_member_is_refused(tmp_path: Path, node: tuple[Path, Path]) -> None:
    _, releases = node
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tf:
        f = tmp_path / "x"
        f.write_text("x")
        tf.add(f, arcname="../../etc/x")
    with pytest.raises(rel.ReleaseError, match="not a plain file inside the release"):
        node_rel.install(releases, releases / ".staging-r1", "r1", evil)


def test_install_refuses_a_corrupt_push_naming_the_file(staged: dict, node: tuple[Path, Path]) -> None:
    _, releases = node
    staging = releases / f"{node_rel.STAGING_PREFIX}{staged['release']}"
    shutil.copytree(staged["path"], staging)
    (staging / "mlp" / "1" / "model.onnx").write_bytes(b"truncated")
    with pytest.raises(rel.ReleaseError, match=r"mlp/1/model.onnx: sha256 does not match"):
        node_rel.install(releases, staging, staged["release"])
    assert node_rel.list_releases(releases) == []


def test_first_activation_replaces_the_empty_directory(staged: dict, node: tuple[Path, Path]) -> None:
    link, releases = node
    link.mkdir()  # what triton_server creates before the first release
    rid = push(staged, releases)
    out = node_rel.activate(link, releases, rid)
    assert out == {"changed": True, "previous": None, "active": rid, "touched": []}
    assert link.is_symlink() and os.readlink(link) == f"releases/{rid}"
    assert (link / "mlp" / "config.pbtxt").is_file()


def test_switch_is_a_rename_and_idempotent(tmp_path: Path, staged: dict, node: tuple[Path, Path]) -> None:
    link, releases = node
    r1 = push(staged, releases)
    node_rel.activate(link, releases, r1)
    v2 = tmp_path / "v2"
    shutil.copytree(SAMPLE, v2)
    (v2 / "mlp" / "1" / "model.py").write_text((v2 / "mlp" / "1" / "model.py").read_text() + "# v2\n")
    r2 = push(rel.prepare(v2, tmp_path / "cache", "cpu"), releases)
    inode_before = os.lstat(link).st_ino
    assert node_rel.activate(link, releases, r2) == {"changed": True, "previous": r1, "active": r2, "touched": []}
    assert os.lstat(link).st_ino != inode_before  # a new symlink renamed over the old one
    assert node_rel.activate(link, releases, r2)["changed"] is False
    assert not list(link.parent.glob(".models.tmp-*"))


def test_status_reports_active_current_and_verification(staged: dict, node: tuple[Path, Path]) -> None:
    link, releases = node
    rid = push(staged, releases)
    before = node_rel.status(link, releases, rid)
    assert (before["active"], before["current"], before["release_verified"]) == (None, None, True)
    node_rel.activate(link, releases, rid)
    assert node_rel.mark(releases, rid)["changed"] is True
    assert node_rel.mark(releases, rid)["changed"] is False
    after = node_rel.status(link, releases, rid)
    assert (after["active"], after["current"]) == (rid, rid)
    assert after["active_models"] == staged["models"]
    (releases / rid / "mlp" / "config.pbtxt").write_text("changed on the node\n")
    assert node_rel.status(link, releases, rid)["release_verified"] is False


def test_prune_keeps_the_last_n_and_the_active(tmp_path: Path, node: tuple[Path, Path]) -> None:
    link, releases = node
    ids = []
    for i in range(4):
        src = tmp_path / f"v{i}"
        shutil.copytree(SAMPLE, src)
        (src / "mlp" / "1" / "model.py").write_text((src / "mlp" / "1" / "model.py").read_text() + f"# {i}\n")
        rid = push(rel.prepare(src, tmp_path / "cache", "cpu"), releases)
        node_rel.activate(link, releases, rid)
        node_rel.mark(releases, rid)
        ids.append(rid)
    out = node_rel.prune(link, releases, keep=2)
    assert sorted(out["removed"]) == sorted(ids[:2])
    assert node_rel.list_releases(releases) == sorted(ids[2:])
    assert node_rel.prune(link, releases, keep=2)["changed"] is False
    node_rel.activate(link, releases, ids[2])  # rolled back to an older one: it is never pruned
    assert ids[2] in node_rel.prune(link, releases, keep=1)["kept"]


def test_node_side_cli_runs_with_a_bare_python(staged: dict, node: tuple[Path, Path]) -> None:
    """The role pushes the agent as one file and runs it with the node's python3: no project imports."""
    link, releases = node
    rid = push(staged, releases)
    script = bundle.build(releases.parent / "tritonops-agent.pyz")
    env = {"PATH": os.environ["PATH"]}
    out = subprocess.run([sys.executable, "-I", str(script), "activate", "--link", str(link), "--releases",
                          str(releases), "--release", rid], capture_output=True, text=True, env=env, cwd="/")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["active"] == rid
    bad = subprocess.run([sys.executable, "-I", str(script), "activate", "--link", str(link), "--releases",
                          str(releases), "--release", "../etc"], capture_output=True, text=True, env=env, cwd="/")
    assert bad.returncode == 2 and "release id" in json.loads(bad.stdout)["error"]  # usage error


def test_tarball_source(tmp_path: Path) -> None:
    tarball = tmp_path / "release.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(SAMPLE, arcname="model_repository")
    root = rel.extract_tarball(tarball, tmp_path / "unpacked")
    out = rel.prepare(root, tmp_path / "cache", "cpu")
    assert out["digest"] == manifest.digest(manifest.tree_files(SAMPLE))


@pytest.mark.integration  # moto_server, a real S3 stand-in process
def test_s3_source(tmp_path: Path, moto_s3: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s3 = boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1")
    s3.create_bucket(Bucket="models")
    for p in SAMPLE.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            s3.upload_file(str(p), "models", f"edge/r7/{p.relative_to(SAMPLE).as_posix()}")
    s3.put_object(Bucket="models", Key="edge/r8/other/config.pbtxt", Body=b"not this release")
    out = rel.fetch_s3("models", "edge/r7/", tmp_path / "s3", endpoint_url=moto_s3, region="us-east-1")
    assert out["objects"] == len(manifest.tree_files(SAMPLE))
    assert rel.prepare(tmp_path / "s3", tmp_path / "cache", "cpu")["digest"] == manifest.digest(manifest.tree_files(SAMPLE))
    with pytest.raises(rel.ReleaseError, match="no objects under this prefix"):
        rel.fetch_s3("models", "edge/missing", tmp_path / "s3b", endpoint_url=moto_s3, region="us-east-1")


def test_activate_touches_the_models_about_to_be_loaded(staged: dict, node: tuple[Path, Path]) -> None:
    """Triton reloads a model only when its folder is newer than what it loaded: a rollback touches it."""
    link, releases = node
    rid = push(staged, releases)
    old = time.time() - 3600
    for p in (releases / rid / "mlp").rglob("*"):
        os.utime(p, (old, old))
    out = node_rel.activate(link, releases, rid, touch=["mlp", "absent"])
    assert out["touched"] == ["mlp"]
    assert (releases / rid / "mlp" / "1" / "model.py").stat().st_mtime > old + 3000
    assert (releases / rid / "preprocess" / "config.pbtxt").stat().st_mtime < time.time() + 1
    assert manifest.verify(releases / rid)  # content unchanged
