"""What ``tune`` searches and with what settings: :class:`Setting` (one point), :class:`Space` (every point a
model allows) and :class:`TuneConfig` (one run of ``tritonops tune``, one default each).

They live apart from the search (:mod:`tritonops.triton.tune`, which imports Triton's client) so that
``tritonops tune --help`` shows the defaults without loading it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

from tritonops.triton.load_config import BenchConfig, Engine, Protocol

Search = Literal["climb", "grid"]


@dataclass(frozen=True)
class Setting:
    """One point of the sweep."""

    dynamic_batching: bool
    instances: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    # How the clients send: not part of the model's configuration (write_recommendation leaves it out), but
    # the frontend can bound a setting (bounds.LIFT), and gRPC may lift it.
    protocol: Protocol = "http"

    @property
    def label(self) -> str:
        over = "" if self.protocol == "http" else f", {self.protocol}"
        if not self.dynamic_batching:
            return f"batching off, {self.instances} inst{over}"
        pref = ",".join(map(str, self.preferred_batch_sizes)) or "-"
        return f"batching pref={pref} delay={self.max_queue_delay_us}us, {self.instances} inst{over}"


# The instance counts and queue delays (microseconds) searched unless told otherwise.
INSTANCE_COUNTS = (1, 2)
QUEUE_DELAYS_US = (0, 500, 2000)
# Requests sent to each setting after its reload, before it is measured.
WARMUP_REQUESTS = 50


@dataclass(frozen=True)
class Space:
    """What the tuner may change: dynamic batching (a model with a batch dimension), instances, delays."""

    max_batch_size: int
    instance_counts: tuple[int, ...] = INSTANCE_COUNTS
    queue_delays_us: tuple[int, ...] = QUEUE_DELAYS_US
    protocols: tuple[Protocol, ...] = ("http",)  # with "grpc": the search also measures over gRPC

    def __post_init__(self) -> None:
        if not self.instance_counts or min(self.instance_counts) < 1:
            raise ValueError(f"instance counts: need at least one, each >= 1, got {list(self.instance_counts)}")
        if not self.queue_delays_us or min(self.queue_delays_us) < 0:
            raise ValueError(f"queue delays: need at least one, each >= 0, got {list(self.queue_delays_us)}")

    @property
    def counts(self) -> list[int]:
        return sorted(set(self.instance_counts))

    @property
    def delays(self) -> list[int]:
        return sorted(set(self.queue_delays_us))

    def grid(self) -> list[Setting]:
        """Every setting: batching off, and on with no preferred size / the max batch size, per delay and
        count; each over every protocol (HTTP first)."""
        grid = [Setting(False, n) for n in self.counts]
        if self.max_batch_size > 0:  # a model without a batch dimension cannot batch dynamically
            for n in self.counts:
                for pref in ((), (self.max_batch_size,)):
                    grid += [Setting(True, n, pref, delay) for delay in self.delays]
        return [dataclasses.replace(s, protocol=p) for p in self.protocols for s in grid]


@dataclass(frozen=True)
class TuneConfig:
    """What one tune run is (the settings of ``tritonops tune``, one default each), checked when made.

    :attr:`load` is the :class:`BenchConfig` each setting is measured with; :meth:`space` what is searched
    for a model of a given max batch size; :func:`run` tunes with it.
    """

    url: str  # host:port of Triton's HTTP endpoint (tune reloads models through its repository API)
    model: str
    budget_ms: float = 50.0  # the p95 latency a recommendation must keep
    # 16, not bench's 4: dynamic batching gains only when requests wait together, and with 4 in flight a
    # batch never holds more than 4; 16 lets the batcher fill batches that show what it is worth.
    concurrency: int = 16
    max_requests: int | None = None  # per setting; None: only max_seconds bounds each measurement
    max_seconds: float = 5.0  # measurement time budget per setting
    engine: Engine = "perf_analyzer"  # the reference
    stability_pct: float = BenchConfig.stability_pct
    instance_counts: tuple[int, ...] = INSTANCE_COUNTS
    queue_delays_us: tuple[int, ...] = QUEUE_DELAYS_US
    search: Search = "climb"
    grpc_url: str | None = None  # host:port of Triton's gRPC endpoint: the search also tries gRPC
    warmup_requests: int = WARMUP_REQUESTS
    # The admin header for the restricted APIs (BenchConfig.headers): a secret, never in repr().
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    allowed_hosts: tuple[str, ...] = ()  # non-loopback hosts that may receive load (BenchConfig's)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.budget_ms) and self.budget_ms > 0):  # --budget-ms, as the CLI names it
            raise ValueError(f"budget-ms: must be a finite number > 0, got {self.budget_ms}")
        _ = self.load  # BenchConfig checks the load's own bounds
        if self.search not in ("climb", "grid"):
            raise ValueError(f"search: must be climb or grid, got {self.search!r}")
        if self.grpc_url and self.headers and self.engine == "perf_analyzer":
            raise ValueError("grpc-url: perf_analyzer sends no headers over gRPC, and this Triton's restricted "
                             "APIs need the admin key: tune over HTTP only, or with --engine python")

    @property
    def load(self) -> BenchConfig:
        return BenchConfig(url=self.url, model=self.model, concurrency=self.concurrency,
                           max_requests=self.max_requests, max_seconds=self.max_seconds, engine=self.engine,
                           stability_pct=self.stability_pct, headers=self.headers,
                           allowed_hosts=self.allowed_hosts)

    def space(self, max_batch_size: int) -> Space:
        return Space(max_batch_size, self.instance_counts, self.queue_delays_us,
                     ("http", "grpc") if self.grpc_url else ("http",))
