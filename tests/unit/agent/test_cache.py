"""The node cache (agent/cache.py, cache_daemon.py): quota and LRU eviction that spares pinned blobs,
concurrent fillers (processes) reading the store once, corrupted blobs refetched, a fill killed midway
leaving nothing visible, a fill linked into the release file (a torn blob fetched again), the
prefetcher's bandwidth bound, and the cache daemon as the pods' mirror.

The store is a real one: the sample repository published into a folder, read over HTTP through an
http.server that counts (and slows) blob requests.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import SAMPLE, agent_cmd, release_source
from local_servers import CountingStore, counting_store
from tritonops.agent import releases
from tritonops.agent.cache import Cache, RateLimit
from tritonops.agent.cache_daemon import Prefetcher, serve
from tritonops.agent.pull import Agent
from tritonops.release import publish as pub
from tritonops.release_format import manifest, signing
from tritonops.stores import open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, collections.Counter, Path, type[CountingStore]]]:
    """(the published store's HTTP URL, blob requests by sha256, the public key, the handler: its delay)."""
    key, pubkey = signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")
    pub.publish(release_source(tmp_path, "a"), str(tmp_path / "store"), "stable", key, target="cpu", version="r1")
    with counting_store(tmp_path / "store") as (url, handler):
        yield url, handler.counts, pubkey, handler


def _blobs(n: int, size: int) -> list[bytes]:
    return [bytes([i]) * size for i in range(n)]


def _put(cache: Cache, data: bytes) -> str:
    h = hashlib.sha256(data).hexdigest()
    cache.fill(h, lambda part: part.write_bytes(data))
    return h


def test_quota_evicts_least_recently_used_never_a_pinned_blob(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c", quota=3000, log=lambda m: None)
    a, b, c = (_put(cache, d) for d in _blobs(3, 1000))
    for age, h in ((300, a), (200, b), (100, c)):  # a the least recently used
        os.utime(cache.blob(h), (time.time() - age, time.time() - age))
    cache.pin("pod-1", [a])
    d = _put(cache, b"d" * 1000)  # 4000 bytes: one must go; a is pinned, b is the next least recently used
    assert {p.name for p in (tmp_path / "c" / "blobs").iterdir()} == {a, c, d}
    cache.copy_to(c, tmp_path / "out")  # a read makes c the most recently used
    os.utime(cache.blob(d), (time.time() - 50, time.time() - 50))
    e = _put(cache, b"e" * 1000)
    assert {p.name for p in (tmp_path / "c" / "blobs").iterdir()} == {a, c, e}
    # Pinned blobs over the quota stay; a pin untouched for pin_ttl (its pod gone) expires and frees them.
    cache.pin("pod-2", [c, e])
    _put(cache, b"f" * 1000)
    assert {a, c, e} <= {p.name for p in (tmp_path / "c" / "blobs").iterdir()}
    old = time.time() - 2 * cache.pin_ttl
    os.utime(tmp_path / "c" / "pins" / "pod-1.json", (old, old))
    assert cache.touch_pin("pod-2")
    assert cache.evict() == [a] and not (tmp_path / "c" / "pins" / "pod-1.json").exists()


def test_two_filler_processes_read_each_blob_from_the_store_once(tmp_path: Path, store: tuple) -> None:
    url, counts, pubkey, handler = store
    handler.delay = 0.2  # each blob request: the two fillers overlap

    def sync(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "tritonops.agent", "sync", "--store", url, "--channel", "stable",
                                 "--trusted-key", str(pubkey), "--link", str(tmp_path / name / "models"),
                                 "--releases", str(tmp_path / name / "releases"), "--cache", str(tmp_path / "cache")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    pods = [sync("pod1"), sync("pod2")]
    outs = [p.communicate(timeout=120) for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outs
    distinct = set(manifest.tree_files(SAMPLE).values())
    assert set(counts) == distinct and set(counts.values()) == {1}  # each blob once for the two pods
    for pod in ("pod1", "pod2"):
        assert manifest.verify(tmp_path / pod / "releases" / "r1") == manifest.tree_files(SAMPLE)


def test_a_corrupted_cached_blob_is_refetched_never_served(tmp_path: Path, store: tuple) -> None:
    url, counts, pubkey, _ = store
    cache = tmp_path / "cache"
    r = agent_cmd("sync", "--store", url, "--channel", "stable", "--trusted-key", str(pubkey), "--link",
                  str(tmp_path / "p1" / "models"), "--releases", str(tmp_path / "p1" / "releases"), "--cache", str(cache))
    assert r.returncode == 0, r.stderr
    victim = max((cache / "blobs").iterdir(), key=lambda p: p.stat().st_size)
    good = victim.read_bytes()
    victim.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit flipped
    before = dict(counts)
    r = agent_cmd("sync", "--store", url, "--channel", "stable", "--trusted-key", str(pubkey), "--link",
                  str(tmp_path / "p2" / "models"), "--releases", str(tmp_path / "p2" / "releases"), "--cache", str(cache))
    assert r.returncode == 0, r.stderr
    assert "was corrupted: deleted, fetched again" in r.stderr
    assert counts[victim.name] == before[victim.name] + 1 and sum(counts.values()) == sum(before.values()) + 1
    assert victim.read_bytes() == good
    assert manifest.verify(tmp_path / "p2" / "releases" / "r1") == manifest.tree_files(SAMPLE)


_KILLED_FILL = """
import sys, time
from pathlib import Path
from tritonops.agent.cache import Cache

def slow(part: Path) -> int:
    with open(part, "wb") as f:
        f.write(b"x" * 4096)
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
    return 4096

Cache(Path(sys.argv[1])).fill("a" * 64, slow)
"""


def test_a_fill_killed_midway_leaves_no_visible_blob_and_is_cleaned(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", _KILLED_FILL, str(tmp_path / "c")], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "writing\n"
    assert (tmp_path / "c" / "fill" / ("a" * 64) / "part").exists()
    p.send_signal(signal.SIGKILL)  # a power cut, as far as the cache can tell
    p.wait(timeout=10)
    cache = Cache(tmp_path / "c", log=lambda m: None)  # the next start (a reboot)
    assert not (tmp_path / "c" / "fill" / ("a" * 64) / "part").exists()
    assert cache.verified("a" * 64) is None and not list((tmp_path / "c" / "blobs").iterdir())


def test_a_fill_into_a_release_file_links_it_and_a_torn_blob_is_fetched_again(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "c", log=lambda m: None)
    data = b"w" * 100_000
    h = hashlib.sha256(data).hexdigest()
    release_file = tmp_path / "release" / "model.onnx"
    release_file.parent.mkdir()
    downloads = []

    def download(out: Path) -> int:
        downloads.append(out)
        return out.write_bytes(data)

    assert cache.fill(h, download, into=release_file) == (cache.blob(h), len(data))
    # One inode for the release's file and the blob: the checked bytes were not written a second time.
    assert os.path.samefile(release_file, cache.blob(h)) and os.stat(release_file).st_nlink == 2
    # No fsync: a power cut may leave the blob's name over torn bytes (here: cut through the shared inode).
    os.truncate(release_file, 4096)
    assert not cache.copy_to(h, tmp_path / "next") and not cache.blob(h).exists()  # never served
    assert cache.fill(h, download, into=tmp_path / "next")[1] == len(data) and len(downloads) == 2
    assert cache.copy_to(h, tmp_path / "third") and (tmp_path / "third").read_bytes() == data
    # The cache on another filesystem (no hard link across): the blob is a copy of the checked bytes.
    other = Cache(tmp_path / "other", log=lambda m: None)
    def cross_device(src: Path, dst: Path) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", cross_device)
    other.fill(h, download, into=tmp_path / "fourth")
    assert not os.path.samefile(tmp_path / "fourth", other.blob(h)) and other.blob(h).read_bytes() == data


def test_rate_limit_schedule_holds_the_bound() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    pace = RateLimit(1_000_000, clock=lambda: now[0], sleep=sleep)  # 1 MB/s, bursts of 1 MB
    for _ in range(50):
        pace(100_000)  # 5 MB read instantly
    assert now[0] == pytest.approx(4.0)  # all but the first second's burst paced at the rate
    windows: collections.Counter[int] = collections.Counter()  # bytes per one-second window, by the limiter's clock
    for _ in range(30):
        windows[int(now[0])] += 100_000
        pace(100_000)
    assert max(windows.values()) <= 1_100_000


def test_prefetch_warms_the_cache_and_pods_read_it_through_the_daemon(tmp_path: Path, store: tuple) -> None:
    url, counts, pubkey, _ = store
    cache = Cache(tmp_path / "cache", log=lambda m: None)
    pre = Prefetcher(cache, open_store(url), "stable", [pubkey], rate=5000, log=lambda m: None)
    now = [0.0]
    pre.pace = RateLimit(5000, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    warm = pre.once()
    assert warm["warm"] and warm["releases"] == ["r1"] and (tmp_path / "cache" / "warm" / "stable.json").exists()
    # --max-rate: every byte went through the limiter, at 5000 bytes/s after the first second's burst.
    assert now[0] == pytest.approx((warm["fetched_bytes"] - 5000) / 5000)
    distinct = set(manifest.tree_files(SAMPLE).values())
    assert set(counts) == distinct and cache.pinned() == distinct
    before = sum(counts.values())
    assert pre.once() is warm and sum(counts.values()) == before  # unchanged pointer: nothing read again
    srv = serve("127.0.0.1:0", cache, open_store(url), 1 << 30, lambda: {})
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        mirror = open_store(f"http://127.0.0.1:{srv.server_port}")
        agent = Agent(open_store(url), "stable", tmp_path / "pod" / "models", tmp_path / "pod" / "releases", [pubkey],
                      mirror=mirror, log=lambda m: None)
        out = agent.sync()
    finally:
        srv.shutdown()
        srv.server_close()
    assert (out["downloaded"], out["mirrored"]) == (0, len(distinct))
    assert sum(counts.values()) == before  # the pod read no blob from the store
    assert releases.active_release(agent.link, agent.releases) == "r1"


def test_an_edge_agent_pins_the_release_it_serves(tmp_path: Path, store: tuple) -> None:
    url, counts, pubkey, _ = store
    agent = Agent(open_store(url), "stable", tmp_path / "node" / "models", tmp_path / "node" / "releases", [pubkey],
                  cache=tmp_path / "cache", cache_quota=1, agent_id="edge-1", log=lambda m: None)
    assert agent.poll()["result"] == "applied"
    files = set(manifest.read(tmp_path / "node" / "releases" / "r1").values())
    assert agent.cache is not None and agent.cache.pinned() == files
    assert agent.cache.evict() == [] and {p.name for p in (tmp_path / "cache" / "blobs").iterdir()} == files


def test_a_miss_at_the_daemon_passes_the_store_through_once_and_fills_the_cache(tmp_path: Path, store: tuple) -> None:
    url, counts, pubkey, _ = store
    cache = Cache(tmp_path / "cache", log=lambda m: None)
    srv = serve("127.0.0.1:0", cache, open_store(url), 1 << 30, lambda: {})
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        for pod in ("pod1", "pod2"):
            agent = Agent(open_store(url), "stable", tmp_path / pod / "models", tmp_path / pod / "releases", [pubkey],
                          mirror=open_store(f"http://127.0.0.1:{srv.server_port}"), log=lambda m: None)
            out = agent.sync()
            assert out["downloaded"] == 0 and out["mirrored"] == len(manifest.tree_files(SAMPLE)) - out["reused"]
            assert manifest.verify(tmp_path / pod / "releases" / "r1") == manifest.tree_files(SAMPLE)
        distinct = set(manifest.tree_files(SAMPLE).values())
        assert set(counts) == distinct and set(counts.values()) == {1}  # the first pod's misses, passed through
        assert {p.name for p in (tmp_path / "cache" / "blobs").iterdir()} == distinct
        victim = max((tmp_path / "cache" / "blobs").iterdir(), key=lambda p: p.stat().st_size)
        good = victim.read_bytes()
        victim.write_bytes(bytes([good[0] ^ 1]) + good[1:])  # corrupted on the node: never served, fetched again
        agent = Agent(open_store(url), "stable", tmp_path / "pod3" / "models", tmp_path / "pod3" / "releases", [pubkey],
                      mirror=open_store(f"http://127.0.0.1:{srv.server_port}"), log=lambda m: None)
        assert agent.sync()["downloaded"] == 0
        assert counts[victim.name] == 2 and hashlib.sha256(victim.read_bytes()).hexdigest() == victim.name
    finally:
        srv.shutdown()
        srv.server_close()
