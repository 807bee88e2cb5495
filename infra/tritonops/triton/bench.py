"""Load for Triton: closed loop (concurrency N) or open loop (Poisson arrivals), two engines.

``perf_analyzer`` (:mod:`tritonops.triton.perf_analyzer`, Triton's own C++ load generator) measures:
``tritonops bench`` and ``tritonops tune`` use it, so their figures are perf_analyzer's. ``python``
sends requests through tritonclient's asyncio clients: half the throughput on a small machine, but it
keeps going when requests fail (errors are counted by kind) and a caller can stop it at any moment,
which is what fault and soak tests need.

Every run is bounded in time (and, if asked, in requests), is preceded by a check that the server
answers and the model is ready, and only loopback targets (or hosts the caller explicitly allows,
e.g. the project's own test containers) are accepted. The report holds throughput and latency
percentiles, errors, and the server-side breakdown (queue / compute input / infer / output per
request, batch size) taken from Triton's statistics API as the difference between a snapshot before
and after the run.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import random
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from tritonops.triton import perf_analyzer
from tritonops.triton.admin import client_headers, restricted_hint
from tritonops.triton.bounds import bound
from tritonops.triton.load_config import BenchConfig

# A ceiling on in-flight requests in open-loop mode: arrivals beyond it are counted as
# "client_overload" errors instead of piling up without bound.
MAX_IN_FLIGHT = 1024


class TargetNotAllowed(ValueError):
    """The load target is neither loopback nor an explicitly allowed host."""


class UnknownModel(ValueError):
    """The server answers but does not serve the named model (version)."""


class ServerError(RuntimeError):
    """Triton answered a call with something other than success: a refusal (403), a failure (5xx), garbage."""


class ServerUnreachable(ServerError):
    """Nothing answers at the target's address (or it is not live)."""


T = TypeVar("T")


def answer(cfg: BenchConfig, what: str, call: Callable[[], T]) -> T:
    """``call()`` (one tritonclient call to ``cfg.url``), any failure of it one line: :class:`ServerError`."""
    try:
        return call()
    except Exception as e:  # noqa: BLE001 - whatever the server sent (403, 500, not JSON, not HTTP)
        raise _server_error(cfg, what, e) from None


async def answer_async(cfg: BenchConfig, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """:func:`answer` for the asyncio clients."""
    try:
        return await call()
    except Exception as e:  # noqa: BLE001
        raise _server_error(cfg, what, e) from None


def _server_error(cfg: BenchConfig, what: str, e: BaseException) -> ServerError:
    if isinstance(e, ServerError):
        return e
    kind = "" if isinstance(e, InferenceServerException | OSError) else "an answer that is not Triton's: "
    return ServerError(restricted_hint(f"{cfg.url}: {what}: {kind}{_reason(e)}"))


def headers(cfg: BenchConfig) -> dict[str, str]:
    """The admin header for ``cfg.protocol``'s client calls ({} when there is none)."""
    return client_headers(cfg.protocol, dict(cfg.headers))


def split_url(url: str) -> tuple[str, int | None]:
    """``host:port``, ``http://host:port`` or ``[::1]:port`` -> (host, port)."""
    parts = urlsplit(url if "://" in url else f"//{url}")
    return parts.hostname or "", parts.port


def check_target(url: str, allowed_hosts: Iterable[str] = ()) -> str:
    """Return ``url``'s host if it may receive load, else raise :class:`TargetNotAllowed`.

    Loopback addresses are allowed; a name is allowed when every address it resolves to is loopback,
    or when it is listed in ``allowed_hosts`` (the project's own hosts, named explicitly).
    """
    host, _port = split_url(url)
    if not host:
        raise TargetNotAllowed(f"target {url!r}: no host")
    if host in set(allowed_hosts):
        return host
    try:
        addrs = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError as e:
            raise TargetNotAllowed(f"target {url!r}: cannot resolve {host!r} ({e})") from None
        addrs = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if addrs and all(a.is_loopback for a in addrs):
        return host
    raise TargetNotAllowed(
        f"target {url!r}: {host} is not loopback; load is only sent to 127.0.0.1/::1 or to hosts "
        "named with --allow-host"
    )


@dataclass
class ServerBreakdown:
    """Per-request averages from Triton's statistics API over the run (milliseconds)."""

    requests: int = 0  # successful requests the server counted
    failures: int = 0
    inferences: int = 0
    executions: int = 0
    queue_ms: float = 0.0
    compute_input_ms: float = 0.0
    compute_infer_ms: float = 0.0
    compute_output_ms: float = 0.0
    request_ms: float = 0.0  # server end-to-end (success)

    @property
    def batch_size(self) -> float:
        return self.inferences / self.executions if self.executions else 0.0


@dataclass
class BenchReport:
    config: dict[str, Any]
    sent: int
    succeeded: int
    elapsed_s: float
    throughput_rps: float  # successful requests per second
    inferences_per_s: float  # throughput x batch size
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float | None  # None: perf_analyzer does not report it
    errors: dict[str, int] = field(default_factory=dict)
    server: ServerBreakdown = field(default_factory=ServerBreakdown)
    stopped_by: str = "count"  # "count", "time" or "caller" (should_stop returned True)
    engine: str = "python"
    # Several rounds (tune's median): half their throughput range over the median, the noise measured;
    # 0 for one measurement.
    spread: float = 0.0

    @classmethod
    def unmeasured(cls, cfg: BenchConfig, errors: dict[str, int], server: ServerBreakdown | None = None,
                   elapsed_s: float = 0.0) -> BenchReport:
        """A run that produced no figures (NaN), only errors and what the server counted."""
        server = server or ServerBreakdown()
        nan = float("nan")
        return cls(config=_config(cfg), sent=server.requests + server.failures, succeeded=server.requests,
                   elapsed_s=elapsed_s, throughput_rps=0.0, inferences_per_s=0.0, p50_ms=nan, p95_ms=nan,
                   p99_ms=nan, mean_ms=nan, max_ms=None, errors=errors, server=server, engine=cfg.engine)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a figure that could not be measured (NaN) is None."""
        d: dict[str, Any] = {k: None if isinstance(v, float) and math.isnan(v) else v
                             for k, v in asdict(self).items()}
        d["server"]["batch_size"] = round(self.server.batch_size, 3)
        found = bound(self.server, None if math.isnan(self.mean_ms) else self.mean_ms)
        d["bound"] = found.to_dict() if found else None  # what bounds it: Triton's counters (triton.bounds)
        return d


def _config(cfg: BenchConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(cfg).items() if k not in ("allowed_hosts", "headers")}


def _percentiles(latencies: list[float]) -> tuple[float, float, float, float, float]:
    if not latencies:
        nan = float("nan")
        return nan, nan, nan, nan, nan
    a = np.asarray(latencies) * 1000.0
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return float(p50), float(p95), float(p99), float(a.mean()), float(a.max())


def _model_stats(stats: dict[str, Any], model: str) -> dict[str, Any]:
    for s in stats.get("model_stats", []):
        if s.get("name") == model:
            return s
    return {}


def _stat(s: dict[str, Any], key: str, part: str = "ns") -> int:
    return int(s.get("inference_stats", {}).get(key, {}).get(part, 0))


def breakdown(before: dict[str, Any], after: dict[str, Any], model: str) -> ServerBreakdown:
    """Server-side deltas between two ``get_inference_statistics`` snapshots (JSON form)."""
    b, a = _model_stats(before, model), _model_stats(after, model)
    n = _stat(a, "success", "count") - _stat(b, "success", "count")

    def per_req_ms(key: str) -> float:
        return (_stat(a, key) - _stat(b, key)) / n / 1e6 if n else 0.0

    return ServerBreakdown(
        requests=n,
        failures=_stat(a, "fail", "count") - _stat(b, "fail", "count"),
        inferences=int(a.get("inference_count", 0)) - int(b.get("inference_count", 0)),
        executions=int(a.get("execution_count", 0)) - int(b.get("execution_count", 0)),
        queue_ms=per_req_ms("queue"),
        compute_input_ms=per_req_ms("compute_input"),
        compute_infer_ms=per_req_ms("compute_infer"),
        compute_output_ms=per_req_ms("compute_output"),
        request_ms=per_req_ms("success"),
    )


def error_kind(exc: BaseException) -> str:
    """A short, stable label for an error: server status, timeout, connection, ..."""
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "").replace("StatusCode.", "")
        if status == "DEADLINE_EXCEEDED":
            return "timeout"
        if status:
            return f"server:{status}"
        msg = (exc.message() or "").lower()
        if "timeout" in msg or "deadline" in msg:
            return "timeout"
        if "connect" in msg or "unavailable" in msg:
            return "connection"
        return "server"
    if isinstance(exc, ConnectionError | OSError):
        return "connection"
    return type(exc).__name__


def _sync_client(cfg: BenchConfig) -> Any:
    if cfg.protocol == "http":
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(cfg.url, connection_timeout=10.0,
                                                network_timeout=cfg.request_timeout_s)
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(cfg.url)


def _stats_shape(stats: Any) -> dict[str, Any]:
    """The statistics answer, checked to be the shape :func:`breakdown` reads."""
    if not isinstance(stats, dict) or not isinstance(stats.get("model_stats", []), list) or not all(
            isinstance(m, dict) for m in stats.get("model_stats", [])):
        raise ValueError(f"statistics of an unexpected shape: {str(stats)[:80]!r}")
    return stats


def _sync_stats(client: Any, cfg: BenchConfig) -> dict[str, Any]:
    extra = {} if cfg.protocol == "http" else {"as_json": True}
    return answer(cfg, "statistics", lambda: _stats_shape(
        client.get_inference_statistics(cfg.model, headers=headers(cfg), **extra)))


def _stats_once(cfg: BenchConfig) -> dict[str, Any]:
    client = answer(cfg, "connect", lambda: _sync_client(cfg))
    try:
        return _sync_stats(client, cfg)
    finally:
        client.close()


def _reason(e: BaseException) -> str:
    text = e.message() if isinstance(e, InferenceServerException) else str(e)
    if isinstance(e, InferenceServerException) and e.status() and str(e.status()) not in (text or ""):
        text = f"[{e.status()}] {text}"
    return ((text or "").strip().splitlines() or [type(e).__name__])[0][:200]


def preflight(cfg: BenchConfig) -> dict[str, Any]:
    """The model's configuration, once the server answers and the model is ready.

    ServerUnreachable when nothing (live) answers at ``cfg.url``; UnknownModel when the model (version)
    is not ready there; ServerError when the configuration is refused (a restricted API without the admin
    key) or is not Triton's answer. Either way no load has been sent.
    """
    client = answer(cfg, "connect", lambda: _sync_client(cfg))
    what = f"{cfg.model}" + (f" version {cfg.model_version}" if cfg.model_version else "")
    try:
        try:
            live = client.is_server_live()
        except Exception as e:  # noqa: BLE001 - refused, reset, not HTTP: nothing that is Triton answers
            raise ServerUnreachable(f"{cfg.url}: no Triton answers over {cfg.protocol} ({_reason(e)})") from None
        if not live:
            raise ServerUnreachable(f"{cfg.url}: Triton answers but is not live")
        try:
            ready = client.is_model_ready(cfg.model, cfg.model_version)
        except InferenceServerException as e:
            raise UnknownModel(f"model {what!r} is not served at {cfg.url} ({_reason(e)})") from None
        except Exception as e:  # noqa: BLE001
            raise _server_error(cfg, f"{what} ready", e) from None
        if not ready:
            raise UnknownModel(f"model {what!r} is not loaded and ready at {cfg.url}")
        return answer(cfg, f"the configuration of {what}", lambda: _model_config(client, cfg))
    finally:
        client.close()


def _model_config(client: Any, cfg: BenchConfig) -> dict[str, Any]:
    if cfg.protocol == "http":
        config = client.get_model_config(cfg.model, cfg.model_version, headers=headers(cfg))
    else:
        config = client.get_model_config(cfg.model, cfg.model_version, headers=headers(cfg), as_json=True)["config"]
    if not isinstance(config, dict) or not isinstance(config.get("input", []), list):
        raise ValueError(f"a model configuration of an unexpected shape: {str(config)[:80]!r}")
    return config


class _Client:
    """The few calls the python engine needs, over either asyncio client."""

    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.client: Any
        if cfg.protocol == "http":
            import tritonclient.http as mod
            import tritonclient.http.aio as aio

            # conn_timeout is aiohttp's total timeout per request.
            self.client = aio.InferenceServerClient(
                cfg.url, conn_limit=max(cfg.concurrency, 100), conn_timeout=cfg.request_timeout_s
            )
        else:
            import tritonclient.grpc as mod
            import tritonclient.grpc.aio as aio

            self.client = aio.InferenceServerClient(cfg.url)
        self.mod = mod

    async def stats(self) -> dict[str, Any]:
        extra = {} if self.cfg.protocol == "http" else {"as_json": True}

        async def call() -> dict[str, Any]:
            return _stats_shape(await self.client.get_inference_statistics(
                self.cfg.model, headers=headers(self.cfg), **extra))
        return await answer_async(self.cfg, "statistics", call)

    def inputs(self, config: dict[str, Any], rng: np.random.Generator) -> list[Any]:
        batched = int(config.get("max_batch_size", 0)) > 0
        out = []
        for spec in config.get("input", []):
            dims = [1 if int(d) < 0 else int(d) for d in spec.get("dims", [])]
            shape = [self.cfg.batch_size, *dims] if batched else dims
            datatype = str(spec["data_type"]).removeprefix("TYPE_")
            datatype = "BYTES" if datatype == "STRING" else datatype
            if datatype == "BYTES":
                data = np.full(shape, b"tritonops", dtype=np.object_)
            else:
                dtype = triton_to_np_dtype(datatype)
                data = rng.standard_normal(shape).astype(dtype)
            tensor = self.mod.InferInput(spec["name"], shape, datatype)
            tensor.set_data_from_numpy(data)
            out.append(tensor)
        return out

    async def infer(self, inputs: list[Any]) -> None:
        # Per-request timeouts are the clients' own (gRPC deadline, aiohttp total timeout): an
        # asyncio.wait_for per request would cost a task each and cap the generator's rate.
        if self.cfg.protocol == "grpc":
            await self.client.infer(self.cfg.model, inputs, model_version=self.cfg.model_version,
                                    client_timeout=self.cfg.request_timeout_s)
        else:
            await self.client.infer(self.cfg.model, inputs, model_version=self.cfg.model_version)

    async def close(self) -> None:
        await self.client.close()


@dataclass
class _Tally:
    """What one python-engine run has sent and counted so far; :meth:`one` sends one request."""

    client: _Client
    inputs: list[Any]
    on_done: Callable[[int], None] | None
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    stopped_by: str = "count"

    def done(self) -> None:
        if self.on_done:
            self.on_done(1)

    async def one(self) -> None:
        t0 = time.perf_counter()
        try:
            await self.client.infer(self.inputs)
        except Exception as e:  # noqa: BLE001 - every failure is counted by kind
            self.errors[error_kind(e)] += 1
        else:
            self.latencies.append(time.perf_counter() - t0)
        self.done()


async def _closed_loop(cfg: BenchConfig, run: _Tally, limit: float, deadline: float,
                       should_stop: Callable[[], bool] | None) -> None:
    """``cfg.concurrency`` workers, each sending its next request when the last one is answered."""
    async def worker() -> None:
        while True:
            if run.sent >= limit:
                return
            if time.perf_counter() >= deadline:
                run.stopped_by = "time"
                return
            if should_stop is not None and should_stop():
                run.stopped_by = "caller"
                return
            run.sent += 1
            await run.one()

    await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))


async def _open_loop(cfg: BenchConfig, run: _Tally, limit: float, start: float, deadline: float,
                     should_stop: Callable[[], bool] | None) -> None:
    """Poisson arrivals at ``cfg.rate``, answered or not; past MAX_IN_FLIGHT a request counts as client_overload."""
    rng = random.Random(cfg.seed)
    in_flight: set[asyncio.Task[None]] = set()
    next_at = start
    while run.sent < limit:
        next_at += rng.expovariate(cfg.rate)
        if next_at >= deadline:
            run.stopped_by = "time"
            break
        if should_stop is not None and should_stop():
            run.stopped_by = "caller"
            break
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        run.sent += 1
        if len(in_flight) >= MAX_IN_FLIGHT:
            run.errors["client_overload"] += 1
            run.done()
            continue
        task = asyncio.create_task(run.one())
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.wait(in_flight, timeout=cfg.request_timeout_s + 1)


async def _settled_stats(client: _Client, cfg: BenchConfig, before: dict[str, Any],
                         answered: int) -> dict[str, Any]:
    """The server's statistics once they count the ``answered`` requests, succeeded or failed (or after 2 s).

    Triton records a request's statistics when it releases the request, which can be just after the
    client has its response: wait (briefly) until the server has counted them all.
    """
    after = await client.stats()
    settle = time.perf_counter() + 2.0
    while ((d := breakdown(before, after, cfg.model)).requests + d.failures < answered
           and time.perf_counter() < settle):
        await asyncio.sleep(0.05)
        after = await client.stats()
    return after


async def _run_python(
    cfg: BenchConfig,
    model_config: dict[str, Any],
    on_done: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BenchReport:
    client = _Client(cfg)
    limit = cfg.max_requests if cfg.max_requests is not None else math.inf
    try:
        run = _Tally(client, client.inputs(model_config, np.random.default_rng(cfg.seed)), on_done)
        before = await client.stats()
        start = time.perf_counter()
        deadline = start + cfg.max_seconds
        if cfg.mode == "closed":
            await _closed_loop(cfg, run, limit, deadline, should_stop)
        else:
            await _open_loop(cfg, run, limit, start, deadline, should_stop)
        elapsed = time.perf_counter() - start
        # The server counts what it answered: successes, and failures it answered with a status.
        answered = len(run.latencies) + sum(n for k, n in run.errors.items() if k.startswith("server:"))
        after = await _settled_stats(client, cfg, before, answered)
    finally:
        await client.close()
    return _python_report(cfg, run, elapsed, breakdown(before, after, cfg.model))


def _python_report(cfg: BenchConfig, run: _Tally, elapsed: float, server: ServerBreakdown) -> BenchReport:
    p50, p95, p99, mean, mx = _percentiles(run.latencies)
    ok = len(run.latencies)
    return BenchReport(
        config=_config(cfg),
        sent=run.sent,
        succeeded=ok,
        elapsed_s=elapsed,
        throughput_rps=ok / elapsed if elapsed > 0 else 0.0,
        inferences_per_s=ok * cfg.batch_size / elapsed if elapsed > 0 else 0.0,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        mean_ms=mean,
        max_ms=mx,
        errors=dict(sorted(run.errors.items())),
        server=server,
        stopped_by=run.stopped_by,
    )


def _run_perf_analyzer(cfg: BenchConfig) -> BenchReport:
    """One perf_analyzer measurement; the server breakdown covers its whole run (warm-up windows too)."""
    pa = perf_analyzer.find()
    failed: perf_analyzer.PerfAnalyzerError | None = None
    before = _stats_once(cfg)  # no connection of ours stays open while perf_analyzer runs
    start = time.perf_counter()
    try:
        m = pa.measure(cfg)
    except perf_analyzer.PerfAnalyzerError as e:
        failed = e
    elapsed = time.perf_counter() - start
    server = breakdown(before, _stats_once(cfg), cfg.model)
    if failed is not None:
        if not server.failures:
            raise failed
        # perf_analyzer stops at the first failed request; the server counted how many failed.
        return BenchReport.unmeasured(cfg, {"server": server.failures}, server, elapsed)
    return BenchReport(
        config=_config(cfg), sent=server.requests + server.failures, succeeded=server.requests, elapsed_s=elapsed,
        throughput_rps=m.inferences_per_s / cfg.batch_size, inferences_per_s=m.inferences_per_s,
        p50_ms=m.p50_ms, p95_ms=m.p95_ms, p99_ms=m.p99_ms, mean_ms=m.mean_ms, max_ms=None, server=server,
        stopped_by="count" if cfg.max_requests is not None else "time", engine="perf_analyzer",
    )


def run(
    cfg: BenchConfig,
    on_done: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BenchReport:
    """Run one bounded load test with ``cfg.engine``.

    Raises TargetNotAllowed, ServerUnreachable or UnknownModel before any load is sent, and
    PerfAnalyzerError when perf_analyzer is missing or cannot measure. With the python engine,
    ``on_done(n)`` is called as requests complete (progress) and ``should_stop()``, when given, is
    polled before each request and ends the run early (in-flight requests still complete).
    """
    check_target(cfg.url, cfg.allowed_hosts)
    if cfg.engine == "perf_analyzer" and cfg.protocol == "grpc" and cfg.headers:
        raise ValueError("perf_analyzer sends no headers over gRPC, and Triton's restricted APIs need the admin "
                         "key: measure over HTTP (--protocol http) or with --engine python")
    model_config = preflight(cfg)
    if cfg.engine == "perf_analyzer":
        if should_stop is not None:
            raise ValueError("should_stop: the perf_analyzer engine runs to its own bounds; use engine='python'")
        return _run_perf_analyzer(cfg)
    return asyncio.run(_run_python(cfg, model_config, on_done, should_stop))
