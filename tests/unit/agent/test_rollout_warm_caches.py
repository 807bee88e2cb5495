"""A staged rollout waits for the next wave's node caches (issue 46, "warm before needed"):
``release rollout advance --cache-url`` moves to the next wave only when each node cache daemon
(``tritonops-agent cache serve``) reports the channel warm with the pointer's release.

Real parts: a folder store, real publish and rollout start, a real agent reporting its outcome, the
cache daemon's HTTP server and prefetcher in process, and once the ``cache serve`` program itself.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tritonops.agent.cache import Cache
from tritonops.agent.cache_daemon import Prefetcher, serve
from tritonops.agent.pull import Agent
from tritonops.core.errors import UsageError
from tritonops.release import publish as pub
from tritonops.release import rollout as ro
from tritonops.release.status import scrape_cache
from tritonops.release_format import records
from tritonops.release_format import waves as ar
from tritonops.stores import open_store

WAVES = [{"percent": 50}, {"percent": 100}]
RID = "r2-stable"


@pytest.fixture
def rollout(tmp_path: Path, keys: dict[str, Path], published: Path) -> dict[str, Any]:
    """A copy of the store and an agent of r2's first wave, reporting into it (not polled yet)."""
    store = str(tmp_path / "store")
    shutil.copytree(published, store)
    name = next(a for a in (f"node-{i:03d}" for i in range(200)) if ar.bucket(RID, a) < 50)
    agent = Agent(open_store(store), "stable", tmp_path / name / "models", tmp_path / name / "releases",
                  [keys["pub"]], log=lambda m: None, agent_id=name, report=True)
    return {"store": store, "agent": agent, "sign": {"keys": [keys["key"]]}, "pub": keys["pub"]}


@pytest.fixture
def daemons(tmp_path: Path, rollout: dict[str, Any]) -> Iterator[list[tuple[str, Prefetcher]]]:
    """Two node cache daemons following stable (each its cache, its prefetcher, its /status), not passed yet."""
    out, servers = [], []
    for n in range(2):
        cache = Cache(tmp_path / f"cache{n}", log=lambda m: None)
        pre = Prefetcher(cache, open_store(rollout["store"]), "stable", [rollout["pub"]], log=lambda m: None)
        srv = serve("127.0.0.1:0", cache, open_store(rollout["store"]), 1 << 30,
                    functools.partial(_status, cache, pre))
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        out.append((f"http://127.0.0.1:{srv.server_port}", pre))
    yield out
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _status(cache: Cache, pre: Prefetcher) -> dict[str, Any]:
    """The daemon's /status, as ``cache serve`` answers it."""
    return records.cache_status(str(cache), cache.usage(), cache.quota, [pre.warm])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pointer(store: str) -> dict[str, Any]:
    p = pub.read_pointer(open_store(store), "stable")
    assert p is not None
    return p


def _wave(store: str) -> int:
    return int(_pointer(store)["rollout"]["wave"])


def test_advance_waits_until_every_next_wave_cache_holds_the_release(rollout: dict[str, Any],
                                                                     daemons: list[tuple[str, Prefetcher]]) -> None:
    store, sign = rollout["store"], rollout["sign"]
    (url_a, pre_a), (url_b, pre_b) = daemons
    assert pre_a.once()["releases"] == ["r1"]  # warm before the rollout: for r1, the previous release
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=sign)
    assert rollout["agent"].poll()["result"] == "applied"  # wave 0 healthy: only the caches hold it back

    adv = ro.advance(store, "stable", pointer_args=sign, cache_urls=[url_a, url_b])
    assert (adv["result"], adv["wave"], _wave(store)) == ("waiting", 0, 0)
    assert adv["reason"] == (f"2 of 2 node caches are not warm for release r2 yet ({url_a}: warm for r1 only, not yet "
                             f"for this release; {url_b}: not warm yet (no prefetch pass has finished))")
    assert [c["warm"] for c in adv["caches"]] == [False, False]

    assert pre_a.once()["releases"] == ["r2", "r1"]  # the next pass: r2 and the rollout's previous release
    adv = ro.advance(store, "stable", pointer_args=sign, cache_urls=[url_a, url_b])
    assert adv["result"] == "waiting" and adv["reason"].startswith("1 of 2 node caches") and url_b in adv["reason"]
    assert adv["caches"][0] == {"url": url_a, "warm": True} and _wave(store) == 0

    pre_b.once()
    adv = ro.advance(store, "stable", pointer_args=sign, cache_urls=[url_a, url_b])
    assert (adv["result"], adv["wave"], _wave(store)) == ("advanced", 1, 1)
    assert adv["caches"] == [{"url": url_a, "warm": True}, {"url": url_b, "warm": True}]
    # The last wave: no next wave to warm, the caches are not asked.
    assert "caches" not in ro.advance(store, "stable", pointer_args=sign, cache_urls=[url_a, url_b])


def test_an_unreachable_or_failing_cache_makes_advance_wait_with_the_reason(
        rollout: dict[str, Any], daemons: list[tuple[str, Prefetcher]]) -> None:
    store, sign = rollout["store"], rollout["sign"]
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=sign)
    rollout["agent"].poll()
    dead = f"http://127.0.0.1:{_closed_port()}"
    url, pre = daemons[0]
    pre.store = pre.agent.store = open_store(dead)  # a daemon whose store does not answer: its pass fails
    stop = threading.Event()
    pre.log = lambda m: stop.set()  # run()'s pass fails, is recorded and logged: then it returns
    pre.run(60, stop)
    adv = ro.advance(store, "stable", pointer_args=sign, cache_urls=[dead, url])
    assert adv["result"] == "waiting" and _wave(store) == 0
    assert adv["caches"][0]["error"].startswith("unreachable: GET /status: ")
    assert adv["caches"][1]["error"].startswith("not warm: ") and pre.warm["error"] in adv["caches"][1]["error"]
    assert f"{dead}: unreachable" in adv["reason"]
    # A server that is no cache daemon, a daemon that does not follow the channel: said as such.
    assert scrape_cache(url, "beta", "0" * 64)["error"] == "does not follow channel beta (cache serve --channel beta)"
    with pytest.raises(UsageError, match="--cache-url 'node-1:8080': expected a node cache daemon's"):
        ro.advance(store, "stable", pointer_args=sign, cache_urls=["node-1:8080"])


def test_the_cli_option_waits_for_a_real_cache_serve_daemon(rollout: dict[str, Any], tmp_path: Path) -> None:
    from tritonops.cli import app
    from typer.testing import CliRunner

    store, key = rollout["store"], ["--key", str(rollout["sign"]["keys"][0])]
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=rollout["sign"])
    rollout["agent"].poll()
    port = _closed_port()
    url = f"http://127.0.0.1:{port}"
    advance = ["release", "rollout", "advance", "--channel", "stable", "--store", store, "--cache-url", url, *key]
    r = CliRunner().invoke(app, [*advance, "--json"])  # the daemon not started yet
    assert r.exit_code == 1, r.output
    out = json.loads(r.output)
    assert out["result"] == "waiting" and out["caches"][0]["url"] == url and not out["caches"][0]["warm"]
    assert _wave(store) == 0
    daemon = subprocess.Popen([sys.executable, "-m", "tritonops.agent", "cache", "serve", "--listen",
                               f"127.0.0.1:{port}", "--cache", str(tmp_path / "node-cache"), "--store", store,
                               "--trusted-key", str(rollout["pub"]), "--channel", "stable", "--interval", "0.2"],
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not scrape_cache(url, "stable", str(_pointer(store)["digest"]))["warm"]:
            assert time.monotonic() < deadline and daemon.poll() is None, "the cache daemon never warmed r2"
            time.sleep(0.1)
        r = CliRunner().invoke(app, advance)
    finally:
        daemon.terminate()
        daemon.wait(10)
    assert r.exit_code == 0 and "advanced" in r.output, r.output
    r = CliRunner().invoke(app, [*advance[:-4], "--cache-url", "ftp://node-1", *key])
    assert r.exit_code == 2 and "--cache-url 'ftp://node-1'" in r.output
