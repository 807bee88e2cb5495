"""What bounds a measured setting, read from Triton's own counters (the statistics API's per-request times).

A request's time splits into what Triton counted (queue, compute input, compute infer, compute output,
and the rest of its own request time: scheduling and the response) and what it did not (the client's
latency beyond Triton's request time: the HTTP/gRPC frontend, the network, the client). The largest
share names the bound and what could lift it:

* queue: requests wait for a free instance or the dynamic batcher's delay: more instances, or a delay
  that fits the load;
* compute infer: the model itself: batching fills the device, a faster device or model;
* compute input + output: moving tensors in and out (for the Python backend: its shared-memory hand-off
  to the stub): fewer, larger requests (batching), or a backend without the hand-off;
* outside Triton's counters: the frontend, the network and the client: gRPC, more concurrency.

A GPU at 36% utilization whose model computes 9% of the request time is bound by the rest, not by the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Counters(Protocol):
    """Per-request averages of Triton's statistics API over a run (``bench.ServerBreakdown``), milliseconds."""

    requests: int
    queue_ms: float
    compute_input_ms: float
    compute_infer_ms: float
    compute_output_ms: float
    request_ms: float

LIFT = {
    "queue": "requests wait in Triton's queue (for a free instance, or the dynamic batcher's delay): more "
             "instances, or a queue delay that fits the load",
    "compute infer": "the model's own compute bounds it: batching fills the device; beyond that a faster "
                     "device or model",
    "input/output": "moving tensors in and out bounds it (the Python backend's hand-off to its stub): fewer, "
                    "larger requests (batching), or a backend without the hand-off",
    "frontend/client": "the frontend, the network and the client bound it: gRPC instead of HTTP, more "
                      "concurrency, or a client closer to the server",
}


@dataclass(frozen=True)
class Bound:
    """The shares of one request's time (0..1, summing to 1) and the largest of them."""

    shares: dict[str, float]

    @property
    def name(self) -> str:
        return max(self.shares, key=lambda k: self.shares[k])

    def sentence(self) -> str:
        infer = self.shares["compute infer"]
        parts = ", ".join(f"{k} {v:.0%}" for k, v in self.shares.items() if k != "compute infer")
        return f"the model computes {infer:.0%} of the request time ({parts}): {LIFT[self.name]}"

    def to_dict(self) -> dict[str, Any]:
        return {"bound": self.name, "shares": {k: round(v, 3) for k, v in self.shares.items()},
                "says": self.sentence()}


def bound(server: Counters, client_mean_ms: float | None = None) -> Bound | None:
    """The shares of a request's time from Triton's counters and the client's mean latency; None when the
    server counted no successful request (nothing to read)."""
    if server.requests <= 0 or server.request_ms <= 0:
        return None
    total = max(server.request_ms, client_mean_ms or 0.0)
    counted = server.queue_ms + server.compute_input_ms + server.compute_infer_ms + server.compute_output_ms
    shares = {
        "queue": server.queue_ms,
        "compute infer": server.compute_infer_ms,
        "input/output": server.compute_input_ms + server.compute_output_ms,
        # Triton's own request time beyond its four counters (scheduling, the response), and all the client
        # waited beyond Triton's request time: neither is the model's.
        "frontend/client": max(0.0, server.request_ms - counted) + (total - server.request_ms),
    }
    whole = sum(shares.values())
    return Bound({k: v / whole for k, v in shares.items()}) if whole > 0 else None
