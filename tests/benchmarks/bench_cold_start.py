"""Benchmark: a replica's cold start in parts, as a pod starts one, next to the cooldown that must exceed it.

    .venv/bin/python tests/benchmarks/bench_cold_start.py [--rounds 2]
        [--large-mb 1024 | --large-mb 0] [--record] [--plot docs/cold-start-parts.png] [--plot-only] [--json]

For the sample repository (examples/model_repository) and a repository of ``--large-mb`` MiB made
locally (cold_start_repo.py: an ONNX model whose initialiser is that big, under .cache/cold_start/),
both published with ``tritonops.release.publish`` into a folder store served over HTTP on this
machine (as an air-gapped site's static mirror), a replica starts as a pod does:

* image: the Triton CPU image is on the node or not (``podman image exists``; its size is reported; pull
  time is a bandwidth figure, docs/time-to-serve.md);
* fetch + verify: the init container's command, ``tritonops-agent sync`` (the signed pointer and manifest
  checked, every file downloaded with its sha256 checked as it arrives), with the node cache absent,
  cold (an empty ``--cache`` folder) or warm (the cache filled by an earlier replica of the release);
* Triton start, each model's load and its warmup, from Triton's own log (``--log-verbose=1``: "loading",
  "running warmup sample", "successfully loaded"; models load side by side, so the part "warmup" is the
  longest model's warmup and "load" the rest of the span from the first "loading" to the last model loaded),
  then the server ready;
* first answered request and the tenth (the ensemble, else the first model; its first golden case): the
  first inference the replica ever answers, which in a pod is the release gate's own. The ten go on equal
  footing: one client, its connection open before the first (the readiness probe's), and each request
  after the same pause (``REQUEST_GAP_S``: a replica answering its users, not a tight loop that keeps its
  threads hot, which made the tenth look 3x faster than the first). Each is timed twice: at the client
  (the figure ``first_ms``/``tenth_ms``) and by Triton itself (``triton_first_ms``/``triton_tenth_ms``:
  its statistics API's success time, queue to response, no client or HTTP parsing in it);
* golden gate: ``tritonops.release.push.golden``, the check the release agent runs before the pod is Ready.

An edge node (case "edge") starts no Triton: its agent's ``pull --once`` (the node service's poll) fetches
the release from the node cache into its releases folder, switches the link and loads each model into the
Triton already running there, runs the golden gate and marks the release; its parts are the agent's start
and fetch up to Triton's first "loading" (fetch + verify), load, warmup, the rest of the apply (golden gate:
the gate, the mark, the agent's exit) and the first request after it.

Each release is published twice, as it is and with generated ``model_warmup`` (tritonops.model_repo.warmup,
``publish --warmup``), so the first request's latency shows with and without it. In the same run, each
round, three baselines for the fetch's MB/s (the agent's own ``fetch_seconds``: manifest read to release
installed; ``sync`` rates count the whole init container): the store's raw read (curl reading the largest
blob into /dev/null; each baseline runs in a process of its own, as the agent does: a reader in the
benchmark's process shares the GIL with the store's server thread), the same read hashed as the agent
hashes it (netio, sha256, nothing written),
and the node's write of a new file of that size (twice in a row: a VM that hands freed memory back to
its host at once, ``/sys/module/page_reporting``, makes the first write wait for the host and the second
land on the pages the first freed; the record keeps the guest's settings). ``--record`` writes tests/benchmarks/records/cold_start.json; ``--plot`` draws the parts as
stacked bars from that record (``--plot-only``: from the record as it is, nothing run). Then every stack
service with ``minReplicas: 0`` with its ``cooldownPeriod`` and ``modelLoadSeconds``: the configured load
time should not be below the measured spawn-to-gate maximum, and the cooldown must be longer (the config
check refuses it otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import http.server
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config, stack_envs
from tritonops.release.push import golden
from tritonops.triton import server

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "examples" / "model_repository"
CACHE = ROOT / ".cache" / "cold_start"
IMAGE = "localhost/tritonops-tritonserver-cpu"
CHANNELS = {False: "plain", True: "warmed"}  # the release as it is / with generated model_warmup
# The cases each round runs, in order: (node cache, generated warmup). "warm" reads the cache folder "cold"
# filled (an edge node's agents, --cache); "daemon" reads it through the node's cache daemon (a pod, --cache-url);
# "edge" is an edge node's agent applying the release to its running Triton, from that same cache folder.
CASES = (("absent", False), ("absent", True), ("cold", True), ("warm", True), ("daemon", True), ("edge", True))
MIN_RATE_MB = 100  # releases smaller than this get no MB/s figures (process start-up dominates)
REQUEST_GAP_S = 0.2  # the pause before each of the ten requests (the first included): equal footing
PARTS = ("fetch_verify", "triton_start", "load", "warmup", "ready", "first_request", "golden_gate")
_LOG_TIME = re.compile(r"^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) ")


@dataclass
class Replica:
    """One replica's start: seconds of each part (PARTS), and what it fetched and answered."""

    parts: dict[str, float]
    fetched_bytes: int
    models: dict[str, dict[str, float]]  # model -> {"load_s", "warmup_s"}
    first_ms: float
    tenth_ms: float
    steady_ms: float  # the median of requests 2 to 10
    triton_ms: list[float]  # Triton's own time of each of the ten (its statistics API)
    triton_load_warmup_s: float  # first "loading" to last "successfully loaded" (Triton's own)
    sync: dict[str, Any] = field(default_factory=dict)

    @property
    def to_first_answer_s(self) -> float:
        return sum(self.parts[p] for p in PARTS if p != "golden_gate")

    @property
    def spawn_to_gate_s(self) -> float:
        return sum(self.parts[p] for p in PARTS if p not in ("fetch_verify", "first_request"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_store(folder: Path) -> Iterator[str]:
    """The folder store served read-only over HTTP on 127.0.0.1 (a static mirror); yields its URL."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@contextmanager
def cache_daemon(cache: Path, store_url: str, timeout: float = 60) -> Iterator[str]:
    """The node's cache daemon (``tritonops-agent cache serve``) over ``cache``, as the DaemonSet runs it,
    started before the replica (it runs on the node already); yields its URL."""
    port = server.free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "tritonops.agent", "cache", "serve", "--cache", str(cache),
                             "--store", store_url, "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/ready", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the cache daemon did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def raw_read_mbps(url: str) -> float:
    """MB/s of one GET of ``url`` by curl, in its own process as the agent is, into /dev/null: the store's
    raw read (a reference tool; nothing hashed or written)."""
    out = subprocess.run(["curl", "-sS", "--fail", "-o", os.devnull, "-w", "%{size_download} %{time_total}", url],
                         capture_output=True, text=True, timeout=600, check=True).stdout.split()
    return int(out[0]) / 1e6 / float(out[1])


_VERIFIED_READ = """
import hashlib, sys, time
from tritonops.core import netio
url, sha256, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = hashlib.sha256()
t0 = time.monotonic()
resp = netio.request(url, deadline=600, limit=size, sink=h.update, chunk_size=netio.BLOB_CHUNK)
took = time.monotonic() - t0
if resp.status != 200 or resp.size != size or h.hexdigest() != sha256:
    sys.exit(f"{url}: HTTP {resp.status}, {resp.size} bytes, sha256 {h.hexdigest()[:16]}")
print(size / 1e6 / took)
"""


def verified_read_mbps(url: str, sha256: str, size: int) -> float:
    """MB/s of the agent's read of one file without its write, in a process of its own as the agent's is:
    the store's netio read in the agent's pieces (netio.BLOB_CHUNK), every byte hashed as it arrives,
    length and sha256 checked; nothing written."""
    done = subprocess.run([sys.executable, "-c", _VERIFIED_READ, url, sha256, str(size)], capture_output=True,
                          text=True, timeout=600, check=True)
    return float(done.stdout)


def node_write_mbps(folder: Path, size: int) -> float:
    """MB/s of writing ``size`` bytes into a new file in ``folder`` (the releases' filesystem) in 1 MiB
    pieces, no network and no hash (the write a fetch cannot avoid), then deleting it."""
    piece = os.urandom(1 << 20)
    path = folder / "node-write-test"
    t0 = time.monotonic()
    with open(path, "wb") as out:
        for _ in range(size // len(piece)):
            out.write(piece)
        out.write(piece[:size % len(piece)])
    took = time.monotonic() - t0
    path.unlink()
    return size / 1e6 / took


def page_reporting() -> dict[str, int]:
    """The guest kernel's free page reporting (a VM handing freed memory back to its host), where it has one:
    with ``min_free_ms`` 0 a page freed is returned at once, and the next write into it waits for the host."""
    folder = Path("/sys/module/page_reporting/parameters")
    out = {}
    for name in ("min_free_ms", "max_waiting_mib", "page_reporting_order"):
        with contextlib.suppress(OSError, ValueError):
            out[f"page_reporting_{name.removeprefix('page_reporting_')}"] = int((folder / name).read_text())
    return out


def _log_times(log: str) -> list[tuple[float, str]]:
    """(wall-clock seconds, line) of each timestamped line of a Triton log (its local time, this year)."""
    year = datetime.date.today().year
    out = []
    for line in log.splitlines():
        m = _LOG_TIME.match(line)
        if m:
            mo, d, h, mi, s, frac = m.groups()
            t = datetime.datetime(year, int(mo), int(d), int(h), int(mi), int(s)).timestamp()
            out.append((t + float(f"0.{frac}"), line))
    return out


def model_times(log: str, models: list[str]) -> tuple[dict[str, dict[str, float]], float, float]:
    """Per model {load_s, warmup_s} from Triton's log (its "loading" to its first warmup sample, that to its
    "successfully loaded"), and the wall times of the first "loading" and the last "successfully loaded"."""
    lines = _log_times(log)

    def first(pattern: str) -> float | None:
        return next((t for t, line in lines if re.search(pattern, line)), None)

    out: dict[str, dict[str, float]] = {}
    starts, ends = [], []
    for m in models:
        begin = first(rf'"loading: {re.escape(m)}:\d+"')
        end = first(rf"successfully loaded '{re.escape(m)}'")
        warm = first(rf"model '{re.escape(m)}' instance \S+ is running warmup sample")
        if end is None:
            raise RuntimeError(f"Triton's log shows no load of {m!r}")
        begin = end if begin is None else begin  # an ensemble: loaded when its steps are
        out[m] = {"load_s": (warm or end) - begin, "warmup_s": end - warm if warm else 0.0}
        starts.append(begin)
        ends.append(end)
    return out, min(starts), max(ends)


def _entry(repository: Path, models: list[str]) -> str:
    """The model a client calls: the ensemble, else the first model."""
    return next((m for m in models if 'platform: "ensemble"' in (repository / m / "config.pbtxt").read_text()),
                models[0])


def _request_ms(client: Any, model: str, case: Any) -> float:
    import tritonclient.http as httpclient

    inputs = []
    for name, tensor in case.inputs.items():
        i = httpclient.InferInput(name, tensor.shape, tensor.datatype)
        i.set_data_from_numpy(tensor.array())
        inputs.append(i)
    t0 = time.monotonic()
    client.infer(model, inputs)
    return (time.monotonic() - t0) * 1000


def _served(client: Any, model: str, count: int = 0, timeout: float = 10) -> tuple[int, int]:
    """(count, cumulative ns) of the model's successful requests from Triton's statistics API, once it counts
    at least ``count`` (a request's time is recorded just after its response is sent: it may lag the client)."""
    deadline = time.monotonic() + timeout
    while True:
        success = client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]["success"]
        if int(success["count"]) >= count or time.monotonic() > deadline:
            return int(success["count"]), int(success["ns"])
        time.sleep(0.005)


def _agent(command: str, store_url: str, channel: str, trusted_key: Path, home: Path, *extra: str,
           timeout: float = 600) -> dict[str, Any]:
    """``tritonops-agent COMMAND`` for the node folder ``home`` (models link, releases); its JSON result."""
    done = subprocess.run(
        [sys.executable, "-m", "tritonops.agent", command, "--store", store_url, "--channel", channel,
         "--link", str(home / "models"), "--releases", str(home / "releases"), "--trusted-key", str(trusted_key),
         *extra], capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode:
        raise RuntimeError(f"tritonops-agent {command} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _answered(triton: Any, link: Path, models: list[str], t0: float, t_spawn: float | None, t_ready: float,
              synced: dict[str, Any], timeout: float, gate: bool = True) -> Replica:
    """The first ten requests and (``gate``) the golden gate on a replica whose models are loaded, and the
    parts from ``t0`` (the release's fetch began), ``t_spawn`` (tritonserver started; None: it ran before)
    and ``t_ready``."""
    import tritonclient.http as httpclient
    from tritonops.model_repo.golden import Golden

    client = httpclient.InferenceServerClient(triton.http_url, network_timeout=timeout)
    entry = _entry(link, models)
    case = Golden.load(link / entry / "golden.json").cases[0]
    before, ns = _served(client, entry)
    latencies, served_ns = [], [ns]
    for i in range(10):
        time.sleep(REQUEST_GAP_S)
        latencies.append(_request_ms(client, entry, case))
        served_ns.append(_served(client, entry, before + i + 1)[1])
    gate_s = 0.0
    if gate:
        g0 = time.time()
        report = golden(triton.http_url, link, models, timeout=timeout)
        gate_s = time.time() - g0
        if not report["ok"]:
            raise RuntimeError(f"golden gate failed: {report.get('failed')}")
    per_model, first_loading, last_loaded = model_times(triton.log(), models)
    client.close()  # an open connection holds Triton's shutdown for its exit timeout (30 s)
    warmup_s = max(m["warmup_s"] for m in per_model.values())
    parts = {
        "fetch_verify": (first_loading if t_spawn is None else t_spawn) - t0,
        "triton_start": 0.0 if t_spawn is None else first_loading - t_spawn,
        # Models load side by side: the longest warmup is the part warmup adds; the rest of the span is load.
        "load": last_loaded - first_loading - warmup_s,
        "warmup": warmup_s,
        "ready": t_ready - last_loaded,
        "first_request": latencies[0] / 1000,
        "golden_gate": gate_s,
    }
    return Replica(parts=parts, fetched_bytes=int(synced.get("downloaded", 0)), models=per_model,
                   first_ms=latencies[0], tenth_ms=latencies[9], steady_ms=statistics.median(latencies[1:]),
                   triton_ms=[(b - a) / 1e6 for a, b in itertools.pairwise(served_ns)],
                   triton_load_warmup_s=last_loaded - first_loading, sync=synced)


def _models(link: Path) -> list[str]:
    return sorted(d.name for d in link.iterdir() if (d / "config.pbtxt").is_file())


def start_replica(store_url: str, channel: str, trusted_key: Path, home: Path, cache: Path | None,
                  cache_url: str | None = None, timeout: float = 600) -> Replica:
    """Start one replica as a pod does and time each part (the module's docstring)."""
    import tritonclient.http as httpclient

    link = home / "models"
    t0 = time.time()
    synced = _agent("sync", store_url, channel, trusted_key, home, *(["--cache", str(cache)] if cache else []),
                    *(["--cache-url", cache_url] if cache_url else []), timeout=timeout)
    t_spawn = time.time()
    models = _models(link)
    triton = server.start(link, model_control_mode="explicit", load_models=models, wait_ready=False,
                          extra_args=["--log-verbose=1"])
    try:
        client = httpclient.InferenceServerClient(triton.http_url, network_timeout=timeout)
        while True:
            if triton.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited {triton.process.returncode}:\n{triton.log()[-2000:]}")
            try:
                if client.is_server_ready():
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if time.time() - t_spawn > timeout:
                raise RuntimeError(f"Triton not ready after {timeout}s")
            time.sleep(0.02)
        client.close()
        return _answered(triton, link, models, t0, t_spawn, time.time(), synced, timeout)
    finally:
        triton.stop()


def start_on_edge(store_url: str, channel: str, trusted_key: Path, home: Path, cache: Path | None,
                  timeout: float = 600) -> Replica:
    """An edge node's agent (``tritonops-agent pull --once``, as the node's service polls) applying the
    channel's release to the node's running Triton (explicit model control, nothing loaded yet): fetch from
    the node ``cache``, the link switched, each model loaded through Triton's API, its warmup, the golden
    gate (the agent's, part of its apply: "golden gate" is the rest of the apply after the last model
    loaded); then the first request. Triton's own start is not a part: it runs on the node already."""
    link, empty = home / "models", home / "empty"
    empty.mkdir(parents=True)
    (home / "releases").mkdir()
    link.symlink_to(empty)
    triton = server.start(link, model_control_mode="explicit", extra_args=["--log-verbose=1"])
    try:
        t0 = time.time()
        applied = _agent("pull", store_url, channel, trusted_key, home, "--triton", f"http://{triton.http_url}",
                         *(["--cache", str(cache)] if cache else []), "--once", timeout=timeout)
        t_applied = time.time()
        if applied.get("result") != "applied":
            raise RuntimeError(f"tritonops-agent pull --once: {applied}")
        models = _models(link)
        rep = _answered(triton, link, models, t0, None, t_applied, applied, timeout, gate=False)
    finally:
        triton.stop()
    rep.parts["golden_gate"], rep.parts["ready"] = rep.parts["ready"], 0.0
    return rep


def publish_both(source: Path, store: Path, key: Path, work: Path) -> None:
    """Publish ``source`` as it is (channel plain) and with generated warmup (channel warmed) into ``store``."""
    from tritonops.model_repo import warmup
    from tritonops.release.publish import publish

    publish(source, str(store), CHANNELS[False], key)
    warmed = work / "warmed" / source.name
    shutil.copytree(source, warmed, ignore=shutil.ignore_patterns("__pycache__"))
    warmup.generate(warmed)
    publish(warmed, str(store), CHANNELS[True], key)


def largest_blob(store: Path) -> tuple[str, int]:
    blobs = [p for p in (store / "blobs").rglob("*") if p.is_file()]
    biggest = max(blobs, key=lambda p: p.stat().st_size)
    return biggest.relative_to(store).as_posix(), biggest.stat().st_size


def measure(name: str, source: Path, rounds: int, work: Path, console: Console) -> dict[str, Any]:
    """Every case of CASES, ``rounds`` times, for one repository; medians per case and part."""
    from tritonops.release_format import signing

    store = work / "store"
    key, pub = signing.keygen(work / "release.key", work / "release.pub")
    publish_both(source, store, key, work)
    blob, blob_bytes = largest_blob(store)
    runs: dict[str, list[Replica]] = {}
    raw: list[float] = []
    verified: list[float] = []
    fresh: list[float] = []
    recycled: list[float] = []
    with http_store(store) as url:
        for r in range(rounds):
            cache = work / f"cache-{r}"
            raw.append(raw_read_mbps(f"{url}/{blob}"))
            if blob_bytes >= MIN_RATE_MB * 1e6:
                verified.append(verified_read_mbps(f"{url}/{blob}", blob.rsplit("/", 1)[-1], blob_bytes))
                # Twice in a row: the second write lands on the page cache the first one freed.
                fresh.append(node_write_mbps(work, blob_bytes))
                recycled.append(node_write_mbps(work, blob_bytes))
                console.print(f"{name} round {r + 1}: the store's raw read {raw[-1]:.0f} MB/s, read + sha256 (no write) "
                              f"{verified[-1]:.0f} MB/s; the node's write of a new {blob_bytes / 1e6:.0f} MB file "
                              f"{fresh[-1]:.0f} MB/s, again at once {recycled[-1]:.0f} MB/s", highlight=False)
            for mode, warm in CASES:
                label = f"{mode}_{'warmup' if warm else 'plain'}"
                home = work / f"home-{r}-{label}"
                folder = cache if mode in ("cold", "warm", "edge") else None
                with cache_daemon(cache, url) if mode == "daemon" else nullcontext() as daemon:
                    rep = (start_on_edge(url, CHANNELS[warm], pub, home, folder) if mode == "edge" else
                           start_replica(url, CHANNELS[warm], pub, home, folder, cache_url=daemon))
                shutil.rmtree(home, ignore_errors=True)
                runs.setdefault(label, []).append(rep)
                console.print(f"{name} round {r + 1} {label}: fetched {rep.fetched_bytes / 1e6:.1f} MB "
                              f"(the agent's fetch {float(rep.sync.get('fetch_seconds', 0)):.2f} s), "
                              + ", ".join(f"{p} {rep.parts[p]:.2f}s" for p in PARTS)
                              + f"; first {rep.first_ms:.1f} ms, tenth {rep.tenth_ms:.1f} ms, 2-10 median "
                              f"{rep.steady_ms:.1f} ms (Triton's own: first {rep.triton_ms[0]:.2f} ms, tenth "
                              f"{rep.triton_ms[9]:.2f} ms)", highlight=False)
            shutil.rmtree(cache, ignore_errors=True)
    return {"runs": runs, "raw_mbps": raw, "verified_mbps": verified, "write_mbps": fresh, "rewrite_mbps": recycled,
            "largest_blob_bytes": blob_bytes}


def figures_of(name: str, result: dict[str, Any]) -> dict[str, float | int | str]:
    """The record's figures for one repository: medians over the rounds."""
    med = statistics.median
    out: dict[str, float | int | str] = {}
    runs: dict[str, list[Replica]] = result["runs"]
    for label, reps in runs.items():
        for p in PARTS:
            out[f"{name}_{label}_{p}_s"] = round(med(r.parts[p] for r in reps), 3)
        out[f"{name}_{label}_to_first_answer_s"] = round(med(r.to_first_answer_s for r in reps), 2)
        out[f"{name}_{label}_first_ms"] = round(med(r.first_ms for r in reps), 1)
        out[f"{name}_{label}_tenth_ms"] = round(med(r.tenth_ms for r in reps), 1)
        out[f"{name}_{label}_first_vs_tenth_x"] = round(med(r.first_ms / r.tenth_ms for r in reps), 2)
        out[f"{name}_{label}_first_vs_steady_x"] = round(med(r.first_ms / r.steady_ms for r in reps), 2)
        out[f"{name}_{label}_triton_first_ms"] = round(med(r.triton_ms[0] for r in reps), 2)
        out[f"{name}_{label}_triton_tenth_ms"] = round(med(r.triton_ms[9] for r in reps), 2)
        out[f"{name}_{label}_triton_first_vs_tenth_x"] = round(med(r.triton_ms[0] / r.triton_ms[9] for r in reps), 2)
        out[f"{name}_{label}_fetched_mb"] = round(med(r.fetched_bytes for r in reps) / 1e6, 3)
    total_mb = med(r.fetched_bytes for r in runs["absent_plain"]) / 1e6
    raw = med(result["raw_mbps"])
    out[f"{name}_release_mb"] = round(total_mb, 3)
    out[f"{name}_raw_read_mbps"] = round(raw)
    if total_mb >= MIN_RATE_MB:  # a rate of kB says nothing
        out[f"{name}_verified_read_mbps"] = round(med(result["verified_mbps"]))
        out[f"{name}_verified_read_of_raw_pct"] = round(100 * med(result["verified_mbps"]) / raw, 1)
        out[f"{name}_node_write_mbps"] = round(med(result["write_mbps"]))
        out[f"{name}_node_rewrite_mbps"] = round(med(result["rewrite_mbps"]))
    for label in ("absent_warmup", "cold_warmup") if total_mb >= MIN_RATE_MB else ():
        # The agent's fetch (its own fetch_seconds: manifest read to release installed), and the whole sync
        # process (its start-up, the signed pointer) as the part fetch_verify counts it.
        mbps = med(r.fetched_bytes / 1e6 / float(r.sync["fetch_seconds"]) for r in runs[label])
        out[f"{name}_{label}_fetch_mbps"] = round(mbps)
        out[f"{name}_{label}_fetch_of_raw_pct"] = round(100 * mbps / raw, 1)
        rounds = zip(runs[label], result["raw_mbps"], strict=True)
        out[f"{name}_{label}_fetch_max_of_raw_pct"] = round(
            100 * max(r.fetched_bytes / 1e6 / float(r.sync["fetch_seconds"]) / w for r, w in rounds), 1)
        sync = med(r.fetched_bytes / 1e6 / r.parts["fetch_verify"] for r in runs[label])
        out[f"{name}_{label}_sync_mbps"] = round(sync)
        out[f"{name}_{label}_sync_of_raw_pct"] = round(100 * sync / raw, 1)
    warm = runs["warm_warmup"]
    for model in warm[0].models:  # each model's load and warmup (Triton's log), warm cache, generated warmup
        for part in ("load_s", "warmup_s"):
            out[f"{name}_model_{model}_{part}"] = round(med(r.models[model][part] for r in warm), 3)
    out[f"{name}_warm_first_answer_vs_load_warmup_x"] = round(
        med(r.to_first_answer_s / r.triton_load_warmup_s for r in warm), 2)
    out[f"{name}_triton_load_warmup_s"] = round(med(r.triton_load_warmup_s for r in warm), 2)
    out[f"{name}_daemon_first_answer_vs_load_warmup_x"] = round(
        med(r.to_first_answer_s / r.triton_load_warmup_s for r in runs["daemon_warmup"]), 2)
    out[f"{name}_spawn_to_gate_max_s"] = round(max(r.spawn_to_gate_s for reps in runs.values() for r in reps), 2)
    return out


def scale_to_zero_services() -> list[tuple[str, str, int, float | None]]:
    out = []
    for env in stack_envs("triton"):  # every committed stack file
        cfg = load_stack_config("triton", env)
        assert isinstance(cfg, TritonStackConfig)
        for svc in cfg.model_services:
            a = svc.autoscaling
            if a.enabled and a.min_replicas == 0:
                out.append((env, svc.name, a.cooldown_period, a.model_load_seconds))
    return out


def image_mb() -> float | None:
    """Size of the Triton CPU image on this node (MB), None when it is not here (a pull would come first)."""
    try:
        out = subprocess.run(["podman", "images", "--format", "json", IMAGE], capture_output=True, text=True,
                             timeout=60, check=False)
        sizes = [int(i["Size"]) for i in json.loads(out.stdout or "[]")] if out.returncode == 0 else []
    except (OSError, ValueError, KeyError):
        return None
    return round(max(sizes) / 1e6, 1) if sizes else None


def plot(record_figures: dict[str, Any], path: Path) -> None:
    """The parts as stacked horizontal bars, one bar per repository and case, from the record's figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [(f"{name} {label.replace('_', ', ')}", name, label) for name in ("large", "sample")
            for label in ("absent_plain", "absent_warmup", "cold_warmup", "warm_warmup", "daemon_warmup", "edge_warmup")
            if f"{name}_{label}_fetch_verify_s" in record_figures]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(bars) + 1.6))
    for i, (_, name, label) in enumerate(bars):
        left = 0.0
        for j, part in enumerate(PARTS):
            width = float(record_figures[f"{name}_{label}_{part}_s"])
            ax.barh(i, width, left=left, color=f"C{j}", label=part.replace("_", " ") if i == 0 else None)
            left += width
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.invert_yaxis()
    image = "on the node, no pull" if record_figures.get("image_present") == "yes" else "pulled first (not drawn)"
    ax.set_xlabel(f"seconds (medians; node cache absent, cold or warm; with or without generated warmup; image {image})")
    ax.set_title("A replica's cold start in parts (bench_cold_start.py, record cold_start)")
    ax.legend(loc="lower right", fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=70)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--large-mb", type=int, default=1024, help="MiB of the local large repository (0: none)")
    p.add_argument("--record", action="store_true", help="write tests/benchmarks/records/cold_start.json")
    p.add_argument("--plot", type=Path, help="draw the parts from the record into this PNG")
    p.add_argument("--plot-only", action="store_true", help="only draw --plot from the record as it is")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    import record

    if args.plot_only:
        if not args.plot:
            p.error("--plot-only needs --plot")
        plot(record.read("cold_start")["figures"], args.plot)
        return 0
    load_at_start = os.getloadavg()[0]
    console = Console(record=True, quiet=args.json, width=200)
    repos = [("sample", SAMPLES)]
    if args.large_mb:
        CACHE.mkdir(parents=True, exist_ok=True)
        from cold_start_repo import large_repository

        repos.insert(0, ("large", large_repository(CACHE, args.large_mb)))
    image = image_mb()
    figures: dict[str, float | int | str] = {"image_present": "yes" if image else "no", "image_mb": image or 0,
                                             "rounds": args.rounds, "large_mb": args.large_mb, **page_reporting()}
    with tempfile.TemporaryDirectory(prefix="tritonops-cold-start-") as tmp:
        for name, source in repos:
            work = Path(tmp) / name
            work.mkdir()
            figures.update(figures_of(name, measure(name, source, args.rounds, work, console)))
            shutil.rmtree(work, ignore_errors=True)
    services = scale_to_zero_services()
    measured = float(figures["sample_spawn_to_gate_max_s"])
    if args.json:
        print(json.dumps({"figures": figures, "scale_to_zero": [
            {"env": env, "service": n, "cooldown_s": c, "model_load_s": ld} for env, n, c, ld in services]}, indent=2))
    t = Table(title="medians, seconds")
    t.add_column("repository, cache, warmup")
    for part in (*PARTS, "to first answer", "first ms", "tenth ms", "Triton first ms", "Triton tenth ms"):
        t.add_column(part.replace("_", " "), justify="right")
    for name, _ in repos:
        for mode, warm in CASES:
            label = f"{mode}_{'warmup' if warm else 'plain'}"
            f = {k.removeprefix(f"{name}_{label}_"): v for k, v in figures.items() if k.startswith(f"{name}_{label}_")}
            t.add_row(f"{name}, {mode}, {'warmup' if warm else 'none'}", *(f"{f[f'{q}_s']:.2f}" for q in PARTS),
                      f"{f['to_first_answer_s']:.2f}", f"{f['first_ms']:.1f}", f"{f['tenth_ms']:.1f}",
                      f"{f['triton_first_ms']:.2f}", f"{f['triton_tenth_ms']:.2f}")
    console.print(t)
    for name, _ in (r for r in repos if f"{r[0]}_cold_warmup_fetch_mbps" in figures):
        f = {k.removeprefix(f"{name}_"): v for k, v in figures.items() if k.startswith(f"{name}_")}
        console.print(f"{name}: release {f['release_mb']} MB; store raw read {f['raw_read_mbps']} MB/s; read + sha256 "
                      f"without the write {f['verified_read_mbps']} MB/s ({f['verified_read_of_raw_pct']}% of raw); "
                      f"the node's write of a new file {f['node_write_mbps']} MB/s, at once again "
                      f"{f['node_rewrite_mbps']} MB/s; the agent's cold fetch {f['cold_warmup_fetch_mbps']} MB/s "
                      f"({f['cold_warmup_fetch_of_raw_pct']}% of raw, best round {f['cold_warmup_fetch_max_of_raw_pct']}%), "
                      f"without a cache {f['absent_warmup_fetch_mbps']} MB/s ({f['absent_warmup_fetch_of_raw_pct']}%); "
                      f"the whole sync {f['cold_warmup_sync_mbps']} MB/s ({f['cold_warmup_sync_of_raw_pct']}%); warm-cache replica to its "
                      f"first answer {figures[f'{name}_warm_first_answer_vs_load_warmup_x']}x Triton's load+warmup "
                      f"({figures[f'{name}_triton_load_warmup_s']} s)", highlight=False)
    console.print(f"image {IMAGE}: {'present, ' + str(image) + ' MB' if image else 'not on this node'}")
    console.print("services that scale to zero (stacks/triton/Pulumi.<env>.yaml)")
    s = Table()
    for col in ("env", "service", "cooldownPeriod s", "modelLoadSeconds", "measured spawn-to-gate max s"):
        s.add_column(col)
    for env, name, cooldown, load in services:
        s.add_row(env, name, str(cooldown), f"{load:g}" if load else "-", f"{measured:.2f}")
    console.print(s)
    low = [name for _, name, _, load in services if load is not None and load < measured]
    if low:
        console.print(f"[yellow]modelLoadSeconds below the measured cold start for: {', '.join(low)}[/]")
    if args.record:
        path = record.write("cold_start", figures, console.export_text(), note=record.load_note(load_at_start))
        console.print(f"recorded {path}")
    if args.plot:
        plot(record.read("cold_start")["figures"] if args.record else figures, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
