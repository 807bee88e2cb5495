"""Two channel moves at once (promote, rollback) lose nothing: the pointer moves by compare-and-swap.

Both moves read the pointer before either writes (each read is held back a little, the second longer
than the first); without the conditional write the second overwrote the first and its move vanished
from the pointer and the history. The folder store is locked around the read-modify-write; S3 (moto_server)
takes a conditional PUT (If-Match / If-None-Match) and reads again when it lost.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tritonops.core.errors import StoreError
from tritonops.core.keys import manifest_key
from tritonops.release import publish as pub
from tritonops.release_format import manifest, signing
from tritonops.stores import s3 as s3_store

# Releases without files, each signed for every channel used here: what a (signed) pointer move checks.
TEXTS = {r: manifest.text({}, {}, r, ["stable", "a", "b"]).encode() for r in ("r0", "ra", "rb")}
DIGESTS = {r: hashlib.sha256(t).hexdigest() for r, t in TEXTS.items()}
KEYS: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _signing_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = tmp_path_factory.mktemp("keys")
    KEYS[:] = [signing.keygen(d / "release.key", d / "release.pub")[0]]


def _releases(writer: pub.Writer) -> pub.Writer:
    for r, text in TEXTS.items():
        writer.put(manifest_key(DIGESTS[r]), text, "application/json")
    return writer


def _held_back_reads(monkeypatch: pytest.MonkeyPatch, channel: str, delay: Any = lambda n: 0.2 * n) -> None:
    """The first read of ``channel``'s pointer in each thread waits ``delay(n)`` for the n-th thread to
    read it (default 0.2 s, then 0.4 s): the moves overlap."""
    real = pub.parse_pointer
    lock, count, seen = threading.Lock(), [0], set()

    def slow(raw: bytes, where: str) -> dict[str, Any]:
        doc = real(raw, where)
        me = threading.get_ident()
        if where.endswith(f"channels/{channel}.json") and me not in seen:
            with lock:
                seen.add(me)
                count[0] += 1
                n = count[0]
            time.sleep(delay(n))
        return doc

    monkeypatch.setattr(pub, "parse_pointer", slow)


def _two_promotes_at_once(store: str, monkeypatch: pytest.MonkeyPatch, s3_endpoint: str | None = None) -> None:
    """Two promotes into ``store`` that read the pointer before either writes: neither is lost."""
    writer = _releases(pub.open_writer(store, s3_endpoint))
    for channel, release in (("stable", "r0"), ("a", "ra"), ("b", "rb")):
        pub.move_pointer(writer, channel, release, DIGESTS[release], f"set {release}", keys=KEYS)
    _held_back_reads(monkeypatch, "stable")
    results: dict[str, Any] = {}

    def promote(src: str) -> None:
        try:
            results[src] = pub.promote(store, src, "stable", s3_endpoint=s3_endpoint, keys=KEYS)
        except Exception as e:  # noqa: BLE001 - reported below
            results[src] = e

    threads = [threading.Thread(target=promote, args=(c,)) for c in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(isinstance(r, dict) and r["changed"] for r in results.values()), results
    final = pub.read_pointer(pub.open_writer(store, s3_endpoint), "stable")
    assert final is not None
    moves = [final["release"]] + [h["release"] for h in final["history"]]
    # Both promotes and the original release are in the pointer or its history, in order, none lost.
    assert sorted(moves) == ["r0", "ra", "rb"], moves
    assert moves[-1] == "r0"
    first, second = moves[1], moves[0]
    assert {results["a"]["previous"], results["b"]["previous"]} == {"r0", first}
    assert second != first


def test_two_promotes_at_once_into_a_folder_store_lose_nothing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _two_promotes_at_once(str(tmp_path / "store"), monkeypatch)
    assert not (tmp_path / "store" / "channels" / ".lock").exists()  # let go after each move


def test_a_rollback_during_a_promote_rolls_back_from_what_the_promote_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "store")
    writer = _releases(pub.open_writer(store))
    for channel, release in (("stable", "r0"), ("stable", "ra"), ("b", "rb")):
        pub.move_pointer(writer, channel, release, DIGESTS[release], f"set {release}", keys=KEYS)
    _held_back_reads(monkeypatch, "stable", lambda n: 0.3 if n == 1 else 0.0)  # the promote reads, then waits
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(p=pub.promote(store, "b", "stable", keys=KEYS)))
    t.start()
    time.sleep(0.05)
    out["r"] = pub.rollback(store, "stable", keys=KEYS)
    t.join(20)
    final = pub.read_pointer(writer, "stable")
    assert final is not None
    moves = [final["release"]] + [h["release"] for h in final["history"]]
    notes = [final["note"]] + [h["note"] for h in final["history"]]
    assert moves.count("rb") == 1 and "r0" in moves and "ra" in moves, moves
    assert final["note"] == "rollback from rb" and final["release"] == "ra", notes  # back from what is there now
    assert out["p"]["changed"] and out["r"]["changed"] and out["r"]["previous"] == "rb"


@pytest.mark.integration  # moto_server
def test_a_pointer_moved_by_someone_else_on_every_try_fails_clearly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto_s3: str) -> None:
    _s3_env(monkeypatch, moto_s3, "ptr-busy")
    store = "s3://ptr-busy/edge"
    writer = _releases(pub.open_writer(store, moto_s3))
    pub.move_pointer(writer, "stable", "r0", DIGESTS["r0"], "set r0", keys=KEYS)
    monkeypatch.setattr(s3_store, "SWAP_TRIES", 2)
    other = pub.open_writer(store, moto_s3)
    real = pub.parse_pointer
    n = [0]

    def meanwhile(raw: bytes, where: str) -> dict[str, Any]:  # someone moves it between our read and write
        doc = real(raw, where)
        n[0] += 1
        other.put("channels/stable.json", raw.replace(b"set r0", b"set r0 " + str(n[0]).encode()))
        return doc

    monkeypatch.setattr(pub, "parse_pointer", meanwhile)
    with pytest.raises(StoreError, match=r"channels/stable.json: moved by someone else on each of 2 tries"):
        pub.move_pointer(writer, "stable", "ra", DIGESTS["ra"], "promote", keys=KEYS)
    monkeypatch.setattr(pub, "parse_pointer", real)
    assert pub.read_pointer(writer, "stable")["release"] == "r0"  # type: ignore[index]  # nothing written


def _s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str, bucket: str) -> None:
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)


@pytest.mark.integration  # moto_server, a real S3 stand-in process (it honours If-Match / If-None-Match)
def test_two_promotes_at_once_into_s3_lose_nothing(monkeypatch: pytest.MonkeyPatch, moto_s3: str) -> None:
    _s3_env(monkeypatch, moto_s3, "ptr")
    _two_promotes_at_once("s3://ptr/edge", monkeypatch, s3_endpoint=moto_s3)


@pytest.mark.integration  # docker-registry: no conditional tag writes; the publisher's lock and read-back
def test_two_promotes_at_once_into_a_registry_lose_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           oci_registry: Any) -> None:
    monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(oci_registry.config))
    monkeypatch.setenv("TRITONOPS_REGISTRY_CA", str(oci_registry.ca))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _two_promotes_at_once(oci_registry.url("ptr/promotes"), monkeypatch)
