"""One behaviour suite run against every registered store kind that runs here: a folder, an HTTP mirror
(the folder served by http.server), S3 (moto_server) and an OCI registry (docker-registry); and the
registry of kinds itself (tritonops.stores.KINDS): what it refuses, and the role checks held equal to it."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from local_servers import counting_store
from tritonops import stores
from tritonops.core.errors import StoreError, UsageError
from tritonops.core.keys import blob_key, channel_key

ROOT = Path(__file__).resolve().parents[3]
CHANNEL = channel_key("stable")
BLOB = b"the bytes of one file\n" * 100
SHA = hashlib.sha256(BLOB).hexdigest()


@dataclass
class Kit:
    """A store of one kind: ``writer`` the controller's, ``store`` the agent's reads of the same objects;
    ``settle`` makes what was just written old enough for a mirror's Last-Modified to be trusted."""

    name: str
    writer: stores.Writer
    store: stores.Store
    settle: Callable[[], None] = lambda: None


@pytest.fixture(params=["folder", "http", pytest.param("s3", marks=pytest.mark.integration),
                        pytest.param("oci", marks=pytest.mark.integration)])
def kit(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kit]:
    folder = tmp_path / "store"
    if request.param == "folder":
        yield Kit("folder", stores.open_writer(str(folder)), stores.open_store(str(folder)))
    elif request.param == "http":
        def settle() -> None:
            old = time.time() - 300
            for p in folder.rglob("*.json"):
                os.utime(p, (old, old))

        with counting_store(tmp_path) as (url, _):
            yield Kit("http", stores.open_writer(str(folder)), stores.open_store(f"{url}/store"), settle)
    elif request.param == "s3":
        endpoint = request.getfixturevalue("moto_s3")
        for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                     ("AWS_DEFAULT_REGION", "us-east-1")):
            monkeypatch.setenv(k, v)
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="stores-kinds")
        url = f"s3://stores-kinds/{tmp_path.name}"
        yield Kit("s3", stores.open_writer(url, endpoint), stores.open_store(url, s3_endpoint=endpoint))
    else:
        reg = request.getfixturevalue("oci_registry")
        monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(reg.config))
        monkeypatch.setenv("TRITONOPS_REGISTRY_CA", str(reg.ca))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the writer's tag locks
        url = reg.url(f"stores-{tmp_path.name.lower().replace('_', '-')}")
        yield Kit("oci", stores.open_writer(url), stores.open_store(url))


def test_what_the_controller_writes_an_agent_reads(kit: Kit) -> None:
    kit.writer.put(CHANNEL, b'{"v": 1}\n', "application/json")
    before = kit.store.requests
    assert kit.store.get(CHANNEL) == b'{"v": 1}\n' and kit.writer.get(CHANNEL) == b'{"v": 1}\n'
    assert kit.store.requests > before  # every read is counted
    assert kit.writer.exists(CHANNEL) and kit.store.kind.name == kit.name


def test_a_conditional_read_answers_none_until_the_object_changes(kit: Kit) -> None:
    kit.writer.put(CHANNEL, b'{"v": 1}\n', "application/json")
    kit.settle()
    assert kit.store.get(CHANNEL, conditional=True) == b'{"v": 1}\n'
    assert kit.store.get(CHANNEL, conditional=True) is None  # unchanged: nothing read
    kit.store.forget(CHANNEL)
    assert kit.store.get(CHANNEL, conditional=True) == b'{"v": 1}\n'  # forgotten: read whole again
    kit.writer.put(CHANNEL, b'{"v": 2, "longer": true}\n', "application/json")
    assert kit.store.get(CHANNEL, conditional=True) == b'{"v": 2, "longer": true}\n'


def test_a_missing_object_is_a_store_error(kit: Kit) -> None:
    with pytest.raises(StoreError, match=r"not found|HTTP 404"):
        kit.store.get(channel_key("nothing"))


def test_a_download_is_checked_against_its_sha256_and_length(kit: Kit, tmp_path: Path) -> None:
    kit.writer.put(blob_key(SHA), BLOB)
    dest = tmp_path / "out"
    chunks: list[int] = []
    assert kit.store.download(blob_key(SHA), dest, SHA, len(BLOB), on_chunk=lambda c: chunks.append(len(c))) \
        == len(BLOB)
    assert dest.read_bytes() == BLOB and sum(chunks) == len(BLOB)
    with pytest.raises(StoreError, match="content sha256"):
        kit.store.download(blob_key(SHA), dest, "0" * 64, len(BLOB))
    assert not dest.exists()  # nothing unchecked is left behind
    with pytest.raises(StoreError, match="allowed|more than|bytes, not the"):
        kit.store.download(blob_key(SHA), dest, SHA, len(BLOB) - 1)  # never more than the signed length
    assert not dest.exists()
    with pytest.raises(StoreError, match="no signed length"):
        kit.store.download(blob_key(SHA), dest, SHA, None)  # type: ignore[arg-type]


BIG = hashlib.shake_256(b"tritonops").digest(6 << 20)  # 6 MiB, no two pieces alike: more than one chunk


def test_a_large_download_is_written_whole_and_in_order(kit: Kit, tmp_path: Path) -> None:
    """Past one chunk (netio.BLOB_CHUNK) a second thread writes while the next chunks arrive (WriteBehind)."""
    sha = hashlib.sha256(BIG).hexdigest()
    kit.writer.put(blob_key(sha), BIG)
    dest = tmp_path / "big"
    assert kit.store.download(blob_key(sha), dest, sha, len(BIG)) == len(BIG)
    assert dest.read_bytes() == BIG


def test_a_full_disk_stops_the_download_and_leaves_nothing(tmp_path: Path) -> None:
    """The kernel refuses the write (RLIMIT_FSIZE: EFBIG, as ENOSPC would on a full disk) on the writing
    thread: the download ends with a StoreError naming it, and the partial file is removed."""
    sha = hashlib.sha256(BIG).hexdigest()
    stores.open_writer(str(tmp_path / "store")).put(blob_key(sha), BIG)
    dest = tmp_path / "out"
    script = f"""
import resource, signal
from pathlib import Path
from tritonops import stores
from tritonops.core.errors import StoreError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))
try:
    stores.open_store({str(tmp_path / "store")!r}).download({blob_key(sha)!r}, Path({str(dest)!r}), {sha!r}, {len(BIG)})
except StoreError as e:
    print("refused:", e)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "File too large" in done.stdout, done.stdout
    assert not dest.exists()


def test_a_swap_reads_changes_and_writes_one_object(kit: Kit) -> None:
    seen: list[bytes | None] = []

    def bump(old: bytes | None) -> bytes:
        seen.append(old)
        return b"1\n" if old is None else str(int(old) + 1).encode() + b"\n"

    assert kit.writer.swap(CHANNEL, bump) == b"1\n"
    assert kit.writer.swap(CHANNEL, bump) == b"2\n"
    assert kit.writer.swap(CHANNEL, lambda old: None) is None  # nothing to write
    assert seen == [None, b"1\n"] and kit.writer.get(CHANNEL) == b"2\n"
    assert kit.writer.names("channels/") == [CHANNEL]
    with pytest.raises(UsageError, match=r"channel 'beta' does not exist \(channels there: stable\)"):
        raise kit.writer.missing_channel("beta")


def test_an_agent_reports_only_where_its_kind_allows(kit: Kit) -> None:
    key = "reports/stable/node-1.json"
    if not kit.store.kind.reports:
        with pytest.raises(UsageError, match=r"read-only to agents; reports need s3://BUCKET/PREFIX or a folder"):
            kit.store.put(key, b"{}\n")
        return
    kit.store.put(key, b'{"node": 1}\n')
    assert kit.writer.get(key) == b'{"node": 1}\n'


def test_a_kind_missing_from_the_registry_is_refused_with_the_known_forms() -> None:
    known = [k.form for k in stores.KINDS]
    for url in ("ftp://host/releases", "gs://bucket/prefix"):
        with pytest.raises(UsageError, match="store URLs are") as e:
            stores.open_store(url)
        assert all(form in str(e.value) for form in known), e.value
    with pytest.raises(UsageError, match="expected s3://BUCKET/PREFIX"):
        stores.open_store("  ")
    with pytest.raises(UsageError, match=r"publish to s3://BUCKET/PREFIX, oci://REGISTRY/REPO, a folder"):
        stores.open_writer("https://mirror.example/releases")  # a mirror is written as the folder it serves


def test_every_kind_module_is_registered_once() -> None:
    modules = {p.stem for p in (ROOT / "infra" / "tritonops" / "stores").glob("*.py")
               if re.search(r"^KIND = Kind\(", p.read_text(), re.M)}
    assert sorted(modules) == sorted(k.name for k in stores.KINDS)
    schemes = [s for k in stores.KINDS for s in k.schemes]
    assert len(schemes) == len(set(schemes))


def _sample(kind: stores.Kind) -> str:
    """A URL of ``kind`` written as its form says."""
    return {"s3": "s3://bucket/prefix", "http": "https://mirror.example/releases", "oci": "oci://reg.example/team/m",
            "folder": "/srv/releases"}[kind.name]


def test_the_agent_roles_store_checks_follow_the_registry() -> None:
    """The release_agent role checks its store URL in YAML (no lookup reads the registry): the forms it
    takes are the kinds an agent on a host can read without registry credentials (all but oci), and it
    refuses --report for exactly the kinds agents may not write."""
    role = ROOT / "roles" / "release_agent"
    store_re = yaml.safe_load((role / "vars" / "main.yml").read_text())["_release_agent_re_store"]
    preflight = (role / "tasks" / "preflight.yml").read_text()
    read_only = re.search(r"release_agent_store_url is not match\('([^']+)'\)", preflight)
    assert read_only is not None
    for kind in stores.KINDS:
        url = _sample(kind)
        assert stores.kind_of(url) is kind
        assert bool(re.match(store_re, url)) == (kind.name != "oci"), url
        if kind.name != "oci":
            assert bool(re.match(read_only.group(1), url)) == (not kind.reports), url
