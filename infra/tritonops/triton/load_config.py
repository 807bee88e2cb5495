"""What one load run is: :class:`BenchConfig` (target, model, loop, bounds, engine), checked when made.

Both engines read it, the Python one (:mod:`tritonops.triton.bench`) and perf_analyzer's
(:mod:`tritonops.triton.perf_analyzer`), and ``tune`` builds one per candidate; it lives here so that
neither engine imports the other for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Protocol = Literal["http", "grpc"]
Mode = Literal["closed", "open"]
Engine = Literal["perf_analyzer", "python"]


@dataclass(frozen=True)
class BenchConfig:
    url: str  # host:port of Triton's HTTP or gRPC endpoint
    model: str
    protocol: Protocol = "http"
    mode: Mode = "closed"
    concurrency: int = 4  # closed loop: requests in flight
    rate: float = 100.0  # open loop: mean arrivals per second (Poisson)
    max_requests: int | None = 1000  # None: only max_seconds bounds the run
    max_seconds: float = 10.0
    batch_size: int = 1
    model_version: str = ""
    request_timeout_s: float = 30.0
    seed: int = 0
    allowed_hosts: tuple[str, ...] = ()
    engine: Engine = "python"
    stability_pct: float = 10.0  # perf_analyzer: how far windows may differ and still count as stable
    max_windows: int = 5  # perf_analyzer: max_seconds is split into this many windows (it needs 3 to judge)
    # The admin header ((name, value), triton.admin.admin_key) for the restricted APIs (model config,
    # statistics, repository): a secret, so never in repr() or a report (bench._config).
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        for name in ("concurrency", "max_requests", "batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value}")
        if self.max_windows < 3:
            raise ValueError(f"max_windows: must be >= 3 (perf_analyzer judges stability over 3), "
                             f"got {self.max_windows}")
        for name in ("rate", "max_seconds", "request_timeout_s", "stability_pct"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):  # nan and inf are refused too
                raise ValueError(f"{name}: must be a finite number > 0, got {value}")
        if self.protocol not in ("http", "grpc"):
            raise ValueError(f"protocol: must be http or grpc, got {self.protocol!r}")
        if self.mode not in ("closed", "open"):
            raise ValueError(f"mode: must be closed or open, got {self.mode!r}")
        if self.engine not in ("perf_analyzer", "python"):
            raise ValueError(f"engine: must be perf_analyzer or python, got {self.engine!r}")
