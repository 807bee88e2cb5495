"""Benchmark: N pull-mode release agents against one S3 bucket (moto_server on loopback).

    .venv/bin/python tests/benchmarks/bench_release_agents.py [--agents 200] [--interval 5] [--idle-seconds 60]
                                                              [--processes 4] [--jitter 0.2]

Starts ``moto_server`` on a free loopback port, publishes the sample repository (release 1) with
``tritonops.release.publish``, then runs N agents with the agent's own loop (``Agent.run(interval,
jitter, stop=event)``, ``triton=None``: fetch, verify the signature, install, switch the symlink,
mark), spread over P processes with one thread per agent, each with its own link and releases
folders. It prints how long the cold start took (every agent fetching release 1, and the GETs that
cost each agent), then, once every agent serves release 1, measures:

* idle: requests per second at the bucket (the agents' ``Store.requests`` deltas, cross-checked
  against moto's request log), requests per agent per minute, the share answered 304, and the
  busiest second of the window (how evenly the polls are spread);
* a release: release 2 (one file of one model changed) is published; the time from the pointer
  write to each agent serving it (p50/p95/max; split into the wait for the agent's next poll and the
  agent's own apply time), the requests and bytes at the bucket meanwhile;
* an extrapolation to 10,000 devices polling every 60 s, from the measured per-agent figures;
* with ``--rollout 10,50,100``, first (before the idle window): a release by a staged rollout (``tritonops.release.rollout``; the agents
  then write a status report per release): per wave, the time from its pointer write until every
  agent of the waves so far serves it (none beyond), and the time of each ``advance``.

The last line printed is one JSON object with every figure. Everything started here (moto_server,
the worker processes, the temporary folders) is stopped and removed at the end, on failure and on
Ctrl-C / SIGTERM too; the children also stop by themselves when this process dies.
Runs in about 2 minutes at the defaults on a 2-core host (more with --agents/--idle-seconds). The
agents, moto_server and this process share the host's CPUs: once they saturate it, the cold start
and apply times measure the host, not the agent (the request counts stay exact).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tritonops.agent import releases as agent_releases
from tritonops.agent.pull import Agent
from tritonops.core.keys import channel_key
from tritonops.release_format import signing
from tritonops.stores import open_store

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "model_repository"
BUCKET = "tritonops-bench"
PREFIX = "fleet"
CHANNEL = "stable"
CHANGED_FILE = "mlp/1/model.py"  # release 2 differs from release 1 in this one file
RESULTS = ("not_modified", "unchanged", "changed", "error")
FLEET, FLEET_INTERVAL = 10_000, 60.0


# --- the worker processes: agents in threads -------------------------------------------------------


def worker(conn: Any, first: int, count: int, cfg: dict[str, Any]) -> None:
    """Run agents ``first .. first+count-1`` until told to stop (or until the parent is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    parent = os.getppid()
    stop = threading.Event()
    agents: list[Agent] = []
    installed: list[dict[str, float]] = []  # per agent: release id -> when it served it (time.time())
    messages: list[list[str]] = []          # per agent: other log lines (refusals, rollbacks)
    crashed: list[str | None] = []

    def make_log(i: int):  # noqa: ANN202
        def log(msg: str) -> None:
            # Agent._attempt logs "release ID (DIGEST) serving after ...s: {...}" right after mark.
            m = re.match(r"release (\S+) \(\w+\) serving after", msg)
            if m:
                installed[i].setdefault(m.group(1), time.time())
            elif not msg.startswith("{"):  # Agent.run echoes each poll's result as JSON: not news
                messages[i].append(msg[:300])
        return log

    base = Path(cfg["base"])
    for i in range(count):
        home = base / f"agent-{first + i:05d}"
        installed.append({})
        messages.append([])
        crashed.append(None)
        agents.append(Agent(open_store(cfg["store"], s3_endpoint=cfg["endpoint"]), CHANNEL, home / "models",
                            home / "releases", [Path(cfg["pubkey"])], triton=None, log=make_log(i),
                            agent_id=f"agent-{first + i:05d}", report=bool(cfg.get("rollout"))))

    def run(i: int) -> None:
        try:
            agents[i].run(cfg["interval"], cfg["jitter"], stop=stop)
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the run
            crashed[i] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=run, args=(i,), name=f"agent-{first + i}", daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    conn.send(("started", time.time()))

    def snapshot(consistent: bool) -> list[dict[str, Any]]:
        """Each agent's counters; ``consistent``: taken between two polls (under the agent's lock), so that
        requests and polls agree (a request is counted when sent, its poll when the poll ends)."""
        out = []
        for i, a in enumerate(agents):
            if consistent:
                with a.lock:
                    out.append(one(i, a))
            else:
                out.append(one(i, a))
        return out

    def one(i: int, a: Agent) -> dict[str, Any]:
        try:
            current = agent_releases.state(a.releases).get("current")
        except Exception:  # noqa: BLE001 - a half-written state file reads as "not yet"
            current = None
        return {"agent": first + i, "requests": a.store.requests, "current": current,
                "polls": {r: int(a.metrics.get("tritonops_release_polls_total", channel=CHANNEL, result=r))
                          for r in RESULTS},
                "downloaded": int(a.metrics.get("tritonops_release_downloaded_bytes_total")),
                "apply_s": a.metrics.get("tritonops_release_apply_seconds", channel=CHANNEL),
                "installed": dict(installed[i]), "messages": list(messages[i][-3:]),
                "crashed": crashed[i], "alive": threads[i].is_alive()}

    try:
        while os.getppid() == parent:
            if not conn.poll(0.5):
                continue
            try:
                cmd = conn.recv()
            except EOFError:
                break
            if cmd in ("snap", "snap-consistent"):
                conn.send(("snap", snapshot(cmd == "snap-consistent")))
            elif cmd == "stop":
                break
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
        with contextlib.suppress(OSError):
            conn.send(("stopped", sum(t.is_alive() for t in threads)))


# --- the parent: moto_server, publishing, measuring -------------------------------------------------


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the benchmark process dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoLog:
    """moto_server's request log (werkzeug, on stderr): one line per request, with method, path and status."""

    LINE = re.compile(r'^\S+ - - \[([^\]]+)\] "(\w+) (\S+) HTTP/[\d.]+" (\d{3}) ')
    ANSI = re.compile(r"\x1b\[[0-9;]*m")

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """The file offset just after the last complete line."""
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            f.seek(max(0, size - 65536))
            tail = f.read(size - max(0, size - 65536))
        return size - (len(tail) - tail.rfind(b"\n") - 1) if b"\n" in tail else 0

    def lines(self, start: int, end: int) -> list[tuple[str, str, str, int]]:
        """(second, method, path, status) of every request logged between two marks."""
        with open(self.path, "rb") as f:
            f.seek(start)
            data = f.read(end - start).decode("utf-8", "replace")
        out = []
        for raw in data.splitlines():
            m = self.LINE.match(self.ANSI.sub("", raw))
            if m:
                out.append((m.group(1), m.group(2), m.group(3), int(m.group(4))))
        return out


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))] if s else float("nan")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-release-agents-"))
        self.moto: subprocess.Popen[bytes] | None = None
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.endpoint = ""
        self.log: MotoLog | None = None
        self.figures: dict[str, Any] = {"agents": args.agents, "interval_s": args.interval, "jitter": args.jitter,
                                        "processes": args.processes, "idle_window_s": args.idle_seconds,
                                        "host_cpus": os.cpu_count(), "complete": False}

    # --- setup ---

    def start_moto(self) -> None:
        binary = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
        if binary is None:
            raise SystemExit("moto_server not found: install moto[server] (the `dev` extra)")
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        log_path = self.tmp / "moto.log"
        with open(log_path, "wb") as err:
            self.moto = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                                         stderr=err, preexec_fn=_die_with_parent,  # noqa: PLW1509
                                         start_new_session=True)  # Ctrl-C: stopped by us, after the agents
        self.log = MotoLog(log_path)
        deadline = time.monotonic() + 30
        while True:
            if self.moto.poll() is not None:
                raise RuntimeError(f"moto_server exited ({self.moto.returncode}): {log_path.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=BUCKET)

    def publish(self, label: str) -> dict[str, Any]:
        from tritonops.release.publish import publish

        t0 = time.time()
        out = publish(self.tmp / "repo", to=f"s3://{BUCKET}/{PREFIX}", channel=CHANNEL,
                      signing_key=self.tmp / "keys" / "release.key", target="cpu", s3_endpoint=self.endpoint)
        t1 = time.time()
        print(f"published {label}: {out['release']} ({out['files']} files, {out['uploaded']} uploaded) "
              f"in {t1 - t0:.2f}s")
        return {**out, "t0": t0, "t1": t1}

    def object_sizes(self) -> dict[str, int]:
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint)
        sizes = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for o in page.get("Contents", []):
                sizes[f"/{BUCKET}/{o['Key']}"] = int(o["Size"])
        return sizes

    def start_agents(self) -> float:
        a = self.args
        cfg = {"store": f"s3://{BUCKET}/{PREFIX}", "endpoint": self.endpoint, "interval": a.interval,
               "jitter": a.jitter, "pubkey": str(self.tmp / "keys" / "release.pub"), "base": str(self.tmp / "agents"),
               "rollout": a.rollout}  # --rollout: the agents write status reports (one PUT per release each)
        ctx = mp.get_context("spawn")
        launched = time.time()
        per, extra = divmod(a.agents, a.processes)
        first = 0
        for p in range(a.processes):
            count = per + (1 if p < extra else 0)
            if not count:
                continue
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(child_end, first, count, cfg), name=f"agents-{p}", daemon=True)
            proc.start()
            child_end.close()
            self.procs.append(proc)
            self.conns.append(parent_end)
            first += count
        started = []
        for conn, proc in zip(self.conns, self.procs, strict=True):
            if not conn.poll(120):
                raise RuntimeError(f"worker {proc.name} did not start its agents")
            started.append(conn.recv()[1])
        return launched

    # --- measuring ---

    def snap(self, consistent: bool = True) -> list[dict[str, Any]]:
        if self.moto and self.moto.poll() is not None:
            raise RuntimeError(f"moto_server exited ({self.moto.returncode})")
        for conn in self.conns:
            conn.send("snap-consistent" if consistent else "snap")
        rows: list[dict[str, Any]] = []
        for conn, proc in zip(self.conns, self.procs, strict=True):
            if not conn.poll(60):
                raise RuntimeError(f"worker {proc.name} does not answer (alive: {proc.is_alive()})")
            rows += conn.recv()[1]
        broken = [r for r in rows if r["crashed"] or not r["alive"]]
        if broken:
            raise RuntimeError(f"{len(broken)} agent(s) stopped: {broken[0]['crashed'] or 'thread ended'}")
        return rows

    def wait_all_on(self, release: str, timeout: float) -> tuple[list[dict[str, Any]], float]:
        deadline = time.time() + timeout
        while True:
            rows = self.snap(consistent=False)
            on = sum(r["current"] == release for r in rows)
            if on == len(rows):
                return rows, time.time()
            if time.time() > deadline:
                stuck = [r for r in rows if r["current"] != release][:3]
                raise RuntimeError(f"only {on}/{len(rows)} agents on {release} after {timeout:.0f}s; e.g. "
                                   + "; ".join(f"agent {r['agent']}: current={r['current']} {r['messages']}"
                                               for r in stuck))
            time.sleep(0.5)

    @staticmethod
    def delta(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
        b = {r["agent"]: r for r in before}
        req = [r["requests"] - b[r["agent"]]["requests"] for r in after]
        polls = {k: sum(r["polls"][k] - b[r["agent"]]["polls"][k] for r in after) for k in RESULTS}
        down = sum(r["downloaded"] - b[r["agent"]]["downloaded"] for r in after)
        return {"requests": sum(req), "per_agent": req, "polls": polls, "downloaded": down}

    def idle(self) -> None:
        assert self.log
        a, f = self.args, self.figures
        before, m0, t0 = self.snap(), self.log.mark(), time.time()
        time.sleep(a.idle_seconds)
        after, m1, t1 = self.snap(), self.log.mark(), time.time()
        secs = t1 - t0
        d = self.delta(before, after)
        polls = sum(d["polls"].values())
        lines = self.log.lines(m0, m1)
        gets = [x for x in lines if x[1] == "GET"]
        per_second = Counter(x[0] for x in gets)
        full = sorted(per_second)[1:-1]  # the first and last seconds are partial
        peak = max((per_second[s] for s in full), default=0)
        mean_1s = (sum(per_second[s] for s in full) / len(full)) if full else 0.0
        sd_1s = (sum((per_second[s] - mean_1s) ** 2 for s in full) / len(full)) ** 0.5 if full else 0.0
        f["idle"] = {
            "seconds": round(secs, 1),
            "requests": d["requests"],
            "req_per_s": round(d["requests"] / secs, 2),
            "req_per_agent_per_min": round(d["requests"] / secs * 60 / a.agents, 3),
            "polls": polls,
            "requests_per_poll": round(d["requests"] / polls, 4) if polls else None,
            "share_304_agents": round(d["polls"]["not_modified"] / polls, 4) if polls else None,
            "poll_results": d["polls"],
            "moto_log_requests": len(lines),
            "moto_log_gets": len(gets),
            "moto_log_share_304": round(sum(x[3] == 304 for x in gets) / len(gets), 4) if gets else None,
            "moto_log_non_304": sorted(Counter(f"{x[1]} {x[3]}" for x in lines if x[3] != 304).items()),
            "peak_1s_requests": peak,
            "mean_1s_requests": round(mean_1s, 1),
            "sd_1s_requests": round(sd_1s, 1),
            "bytes_downloaded": d["downloaded"],
        }
        i = f["idle"]
        print(f"\nidle, {secs:.1f}s window, {a.agents} agents, interval {a.interval:g}s +-{a.jitter:.0%}:")
        print(f"  requests at the bucket : {i['requests']} (agents' Store.requests) vs {i['moto_log_gets']} GETs "
              f"in moto's log ({i['moto_log_requests']} requests in all)")
        print(f"  requests per second    : {i['req_per_s']:.2f}   "
              f"(by moto's log, per second: mean {mean_1s:.1f}, sd {sd_1s:.1f} [evenly spread random polls: "
              f"~{mean_1s ** 0.5:.1f}], busiest {peak})")
        print(f"  per agent per minute   : {i['req_per_agent_per_min']:.2f} requests "
              f"({i['requests_per_poll']} per poll; a poll every {a.interval:g}s is {60 / a.interval:.2f}/min)")
        print(f"  answered 304           : {i['share_304_agents']:.2%} of polls (agents); "
              f"{i['moto_log_share_304']:.2%} of GETs (moto's log); poll results {d['polls']}")
        print(f"  bytes downloaded       : {d['downloaded']} (blob bytes, agents' metrics)")
        if d["polls"]["error"] or i["moto_log_non_304"]:
            raise RuntimeError(f"the idle window had failed polls or other answers: {d['polls']}, "
                               f"{i['moto_log_non_304']}")

    def release(self, sizes_before: dict[str, int]) -> None:
        assert self.log
        a, f = self.args, self.figures
        model = self.tmp / "repo" / CHANGED_FILE
        model.write_text(f"# release 2 of the scale benchmark ({time.time_ns()})\n" + model.read_text())
        before, m0 = self.snap(), self.log.mark()
        pub = self.publish("release 2")
        rel = pub["release"]
        rows, t_seen = self.wait_all_on(rel, timeout=3 * a.interval * (1 + a.jitter) + a.release_timeout)
        after, m1, t_end = self.snap(), self.log.mark(), time.time()
        lat = [r["installed"][rel] - pub["t1"] for r in rows if rel in r["installed"]]
        # Split: the wait for the next poll (+ the pointer read) and the apply (pointer read -> marked, the
        # agent's own tritonops_release_apply_seconds: manifest, signature, files, install, switch, mark).
        apply = [r["apply_s"] for r in after]
        wait = [r["installed"][rel] - r["apply_s"] - pub["t1"] for r in after]
        if len(lat) != len(rows):
            raise RuntimeError(f"{len(rows) - len(lat)} agents serve {rel} without having logged it")
        d = self.delta(before, after)
        polls = d["polls"]
        b_by = {x["agent"]: x for x in before}
        fetch = [x["requests"] - b_by[x["agent"]]["requests"]
                 - sum(x["polls"][k] - b_by[x["agent"]]["polls"][k] for k in RESULTS) for x in after]
        # moto's side: GETs only (publish() HEADs and PUTs), less publish()'s own read of the pointer
        # (move_pointer reads the old pointer, answered 200, before writing the new one).
        sizes = self.object_sizes()
        ptr = f"/{BUCKET}/{PREFIX}/{channel_key(CHANNEL)}"
        lines = self.log.lines(m0, m1)
        put_at = next((n for n, x in enumerate(lines) if x[1] == "PUT" and x[2] == ptr), len(lines))
        pub_get = next((n for n, x in enumerate(lines[:put_at]) if x[1] == "GET" and x[2] == ptr and x[3] == 200),
                       None)
        gets = [x for n, x in enumerate(lines) if x[1] == "GET" and n != pub_get]
        body = sum(sizes.get(x[2], sizes_before.get(x[2], 0)) for x in gets if x[3] == 200)
        by_kind = Counter(("pointer" if x[2] == ptr else "manifest" if x[2].endswith("manifest.json")
                           else "signature" if x[2].endswith((".sig", ".sigs")) else "blob" if "/blobs/" in x[2] else "other")
                          + f" {x[3]}" for x in gets)
        if any(x[3] not in (200, 304) for x in gets):
            raise RuntimeError(f"the bucket answered other than 200/304 during the release: {polls}, "
                               f"{sorted(by_kind.items())}")
        # A poll that failed on the agent's side (its deadline on a saturated host) is retried at its next
        # poll, as on a real fleet: counted and shown, not fatal, since every agent did reach the release.
        retried = {x["agent"]: x["messages"][-1:] for x in after
                   if x["polls"]["error"] > b_by[x["agent"]]["polls"]["error"]}
        release_reqs = d["requests"] - polls["not_modified"]  # everything but the idle 304 polls
        n = a.agents
        f["release"] = {
            "release": rel,
            "publish_s": round(pub["t1"] - pub["t0"], 3),
            "latency_s": {"p50": round(pct(lat, 50), 3), "p95": round(pct(lat, 95), 3), "max": round(max(lat), 3),
                          "min": round(min(lat), 3)},
            "pickup_s": {"p50": round(pct(wait, 50), 3), "p95": round(pct(wait, 95), 3), "max": round(max(wait), 3)},
            "apply_s": {"p50": round(pct(apply, 50), 3), "p95": round(pct(apply, 95), 3), "max": round(max(apply), 3)},
            "window_s": round(t_end - pub["t0"], 1),
            "requests": d["requests"],
            "requests_not_304": release_reqs,
            "requests_per_agent_for_release": round(release_reqs / n, 3),
            "fetch_requests_per_agent": {"min": min(fetch), "max": max(fetch)},
            "poll_results": polls,
            "polls_failed_then_retried": polls["error"],
            "retried_agents": {str(k): v for k, v in sorted(retried.items())[:5]},
            "blob_bytes_agents": d["downloaded"],
            "blob_bytes_per_agent": round(d["downloaded"] / n, 1),
            "moto_log_gets": len(gets),
            "moto_log_by_kind": sorted(by_kind.items()),
            "body_bytes_bucket": body,
            "body_bytes_per_agent": round(body / n, 1),
        }
        r = f["release"]
        print(f"\nrelease 2 ({CHANGED_FILE} changed), publish took {r['publish_s']}s; "
              f"all {n} agents serving it {t_seen - pub['t1']:.1f}s after the pointer was written:")
        print(f"  publish -> installed   : p50 {r['latency_s']['p50']:.2f}s  p95 {r['latency_s']['p95']:.2f}s  "
              f"max {r['latency_s']['max']:.2f}s  (min {r['latency_s']['min']:.2f}s)")
        print(f"    = next poll          : p50 {r['pickup_s']['p50']:.2f}s  p95 {r['pickup_s']['p95']:.2f}s  "
              f"max {r['pickup_s']['max']:.2f}s  (publish -> the agent read the new pointer)")
        print(f"    + apply              : p50 {r['apply_s']['p50']:.2f}s  p95 {r['apply_s']['p95']:.2f}s  "
              f"max {r['apply_s']['max']:.2f}s  (agent's apply_seconds: fetch, verify, install, switch, mark)")
        print(f"  requests in the window : {d['requests']} in {r['window_s']}s (agents), {len(gets)} GETs (moto's log); "
              f"{release_reqs} not answered 304 = {r['requests_per_agent_for_release']} per agent "
              f"(pointer + manifest + signature + changed files)")
        print(f"  by kind (moto's log)   : {', '.join(f'{k}: {v}' for k, v in sorted(by_kind.items()))}")
        if retried:
            print(f"  failed polls, retried  : {polls['error']} (agents {', '.join(map(str, sorted(retried)[:5]))}"
                  f"{' ...' if len(retried) > 5 else ''}; last message: {next(iter(retried.values()))})")
        print(f"  bytes at the bucket    : {body} response bodies (moto's log x object sizes), "
              f"{r['body_bytes_per_agent']:.0f} per agent; {d['downloaded']} of them file blobs (agents' metrics)")

    def extrapolate(self) -> None:
        a, f = self.args, self.figures
        i, r = f["idle"], f["release"]
        # Idle: the measured per-agent rate, scaled by the interval ratio (one request per poll).
        per_agent_rps = i["req_per_s"] / a.agents * (a.interval / FLEET_INTERVAL)
        idle_rps = per_agent_rps * FLEET
        rel_reqs = r["requests_per_agent_for_release"] * FLEET
        rel_bytes = r["body_bytes_per_agent"] * FLEET
        spread = FLEET_INTERVAL * (1 + a.jitter)
        f["extrapolated_10k_at_60s"] = {
            "devices": FLEET, "interval_s": FLEET_INTERVAL,
            "idle_req_per_s": round(idle_rps, 1),
            "idle_req_per_day": round(idle_rps * 86400),
            "release_requests": round(rel_reqs),
            "release_bytes": round(rel_bytes),
            "release_extra_req_per_s_mean": round(rel_reqs / FLEET_INTERVAL, 1),
            "release_pickup_within_s": round(spread, 1),
        }
        e = f["extrapolated_10k_at_60s"]
        print(f"\nEXTRAPOLATED (not measured) to {FLEET} devices polling every {FLEET_INTERVAL:g}s, "
              f"from the per-agent figures above:")
        print(f"  idle                   : {e['idle_req_per_s']:.1f} requests/s at the bucket "
              f"({e['idle_req_per_day']:,} a day), {i['share_304_agents']:.1%} answered 304")
        print(f"  one release            : {e['release_requests']:,} requests and {e['release_bytes'] / 1e6:.1f} MB "
              f"of bodies (this release's size), spread over ~{FLEET_INTERVAL:g}-{spread:g}s: "
              f"~{e['release_extra_req_per_s_mean']:.0f} requests/s on top of idle while it rolls out")

    def rollout_run(self) -> None:
        """A release by a staged rollout (--rollout): the time from each wave's pointer write until every
        agent of waves 0..w serves it (and none beyond), and what each ``advance`` (reading 1 report per
        agent from the bucket) took."""
        from tritonops.release import rollout as ro
        from tritonops.release.publish import publish
        from tritonops.release_format import waves as agent_rollout

        a, f = self.args, self.figures
        model = self.tmp / "repo" / CHANGED_FILE
        model.write_text(f"# rolled-out release of the scale benchmark ({time.time_ns()})\n" + model.read_text())
        store, key = f"s3://{BUCKET}/{PREFIX}", self.tmp / "keys" / "release.key"
        rel = publish(self.tmp / "repo", to=store, channel=None, signing_key=key, target="cpu",
                      s3_endpoint=self.endpoint, channels=[CHANNEL])["release"]
        waves = ro.parse_waves(a.rollout)
        t0 = time.time()
        started = ro.start(store, CHANNEL, rel, waves, 0.05, s3_endpoint=self.endpoint, pointer_args={"keys": [key]})
        firsts = {n: agent_rollout.wave_of(f"agent-{n:05d}", [], started["rollout"]) for n in range(a.agents)}
        out: list[dict[str, Any]] = []
        for w in range(len(waves)):
            want = {n for n, first in firsts.items() if first is not None and first <= w}
            deadline = t0 + 3 * a.interval * (1 + a.jitter) + a.release_timeout
            while True:
                rows = self.snap(consistent=False)
                on = {r["agent"] for r in rows if r["current"] == rel}
                if want <= on:
                    break
                if time.time() > deadline:
                    raise RuntimeError(f"wave {w}: {len(want - on)} of {len(want)} agents not on {rel}")
                time.sleep(0.2)
            t_on = time.time()
            if on - want:
                raise RuntimeError(f"wave {w}: {len(on - want)} agents beyond the wave took {rel}")
            adv = ro.advance(store, CHANNEL, s3_endpoint=self.endpoint, pointer_args={"keys": [key]})
            t_adv = time.time()
            out.append({"wave": w, "spec": adv["waves"][w]["spec"], "agents": len(want),
                        "all_on_s": round(t_on - t0, 2), "advance_s": round(t_adv - t_on, 2), "result": adv["result"]})
            print(f"rollout wave {w} ({out[-1]['spec']}): {len(want)} agents on {rel} {t_on - t0:.1f}s after the "
                  f"wave's pointer write; advance ({adv['targeted']} targeted, {adv['failed']} failed) took "
                  f"{t_adv - t_on:.2f}s: {adv['result']}")
            if adv["result"] not in ("advanced", "complete"):
                raise RuntimeError(f"rollout wave {w}: {adv['result']} {adv.get('reason', '')}")
            t0 = t_adv
        f["rollout"] = {"release": rel, "waves": out}

    def stop(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send("stop")
        for conn, proc in zip(self.conns, self.procs, strict=True):
            try:
                if conn.poll(30):
                    conn.recv()
            except (OSError, EOFError):
                pass
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        if self.moto and self.moto.poll() is None:
            self.moto.terminate()
            try:
                self.moto.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.moto.kill()
                self.moto.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self) -> int:
        a = self.args
        shutil.copytree(SAMPLE, self.tmp / "repo", ignore=shutil.ignore_patterns("__pycache__"))
        signing.keygen(self.tmp / "keys" / "release.key", self.tmp / "keys" / "release.pub")
        self.start_moto()
        print(f"moto_server on {self.endpoint} (pid {self.moto.pid if self.moto else '?'}); "
              f"{a.agents} agents in {a.processes} processes, interval {a.interval:g}s, jitter {a.jitter:g}, "
              f"{os.cpu_count()} CPUs")
        r1 = self.publish("release 1")
        sizes_1 = self.object_sizes()
        assert self.log
        m0 = self.log.mark()
        started = self.start_agents()
        rows, t_all = self.wait_all_on(r1["release"], a.sync_timeout)
        lines = self.log.lines(m0, self.log.mark())
        blob_gets = sum(x[1] == "GET" and "/blobs/" in x[2] for x in lines)
        blobs = sum("/blobs/" in k for k in sizes_1)
        first = [r["installed"][r1["release"]] - started for r in rows]
        self.figures["cold_start"] = {"all_on_release_1_s": round(t_all - started, 1),
                                      "install_p50_s": round(pct(first, 50), 2), "install_max_s": round(max(first), 2),
                                      "release_files": r1["files"], "release_unique_blobs": blobs,
                                      "blob_gets_per_agent": round(blob_gets / a.agents, 2),
                                      "gets_per_agent": round(sum(x[1] == "GET" for x in lines) / a.agents, 2)}
        c = self.figures["cold_start"]
        print(f"cold start: all {a.agents} agents installed release 1 ({r1['files']} files, {blobs} distinct) "
              f"within {t_all - started:.1f}s of launching the workers (p50 {pct(first, 50):.1f}s, "
              f"max {max(first):.1f}s); {c['gets_per_agent']} GETs per agent, {c['blob_gets_per_agent']} of them blobs")
        if a.rollout:  # first, so that its figures do not wait on the idle window and release 2
            self.rollout_run()
        self.idle()
        self.release(sizes_1)
        self.extrapolate()
        self.figures["complete"] = True
        return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=200, help="agents to run (default 200)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between an agent's polls (default 5)")
    p.add_argument("--jitter", type=float, default=0.2, help="the agents' jitter, a fraction of the interval (0.2)")
    p.add_argument("--idle-seconds", type=float, default=60.0, help="length of the idle window (default 60)")
    p.add_argument("--processes", type=int, default=4, help="worker processes the agents are spread over (4)")
    p.add_argument("--sync-timeout", type=float, default=300.0, help="seconds allowed for all agents to install "
                                                                     "release 1 (default 300)")
    p.add_argument("--rollout", metavar="WAVES", help="first roll a release out in these waves (e.g. 10,50,100): "
                                                      "time until each wave serves it, and each advance")
    p.add_argument("--release-timeout", type=float, default=120.0, help="seconds allowed beyond 3 intervals for "
                                                                        "all agents to install release 2 (120)")
    args = p.parse_args()
    if args.agents < 1 or args.processes < 1 or args.interval <= 0 or args.idle_seconds <= 0:
        p.error("--agents, --processes, --interval and --idle-seconds must be positive")
    args.processes = min(args.processes, args.agents)
    # Dummy credentials for moto (the agents sign with SigV4 from the environment); nothing reaches AWS.
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[k]
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",  # noqa: S105
                      AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1",
                      AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`cmd &`)
    bench = Bench(args)
    rc = 1
    try:
        rc = bench.run()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping agents and moto_server", file=sys.stderr)
        rc = 130
    except Exception as e:  # noqa: BLE001 - reported, then everything is stopped
        print(f"\nbenchmark failed: {type(e).__name__}: {e}", file=sys.stderr)
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    print(json.dumps({"bench": "release_agents", **bench.figures}, sort_keys=True))
    return rc


if __name__ == "__main__":
    sys.exit(main())
