"""KEDA's Prometheus trigger for Triton, and the formula that turns its value into replicas.

The scaling signal is Triton's ``nv_inference_pending_request_count`` (requests waiting for a
backend), averaged over a short window and summed over every replica of a model. KEDA hands that
total to the HPA as an ``AverageValue`` external metric, and the HPA asks for
``ceil(total / threshold)`` replicas, bounded by the ScaledObject's min and max
(:func:`desired_replicas`). The same formula is a recording rule
(``model:tritonops_desired_replicas:unbounded``) so dashboards and the "scaler at max" alert see
what the scaler sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tritonops.observability.metrics import PENDING

# HPA's default --horizontal-pod-autoscaler-tolerance.
HPA_TOLERANCE = 0.1


@dataclass(frozen=True)
class ScalingPolicy:
    """What a ScaledObject for Triton says: target pending requests per replica, and bounds."""

    threshold: float = 5.0  # pending requests per replica the HPA aims at (AverageValue target)
    activation_threshold: float = 0.0  # KEDA activates (scales from zero) above this total
    min_replicas: int = 1
    max_replicas: int = 10
    window: str = "1m"  # avg_over_time window that smooths the pending gauge

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise ValueError(f"threshold: must be > 0, got {self.threshold}")
        if self.min_replicas < 0:
            raise ValueError(f"min_replicas: must be >= 0, got {self.min_replicas}")
        if self.max_replicas < max(1, self.min_replicas):
            raise ValueError(
                f"max_replicas: must be >= max(1, min_replicas={self.min_replicas}), got {self.max_replicas}"
            )


def query(model: str | None = None, window: str = "1m") -> str:
    """PromQL for the scaler: pending requests for ``model`` (all models if None), summed over replicas."""
    # A canary's queue (a slower release under test) must not scale the stable Deployment.
    selector = f'{{model="{model}",track!="canary"}}' if model else '{track!="canary"}'
    return f"sum(avg_over_time({PENDING}{selector}[{window}]))"


def prometheus_trigger(
    model: str | None,
    server_address: str,
    *,
    policy: ScalingPolicy | None = None,
    ignore_null_values: bool = True,
) -> dict[str, Any]:
    """A KEDA ``prometheus`` trigger (ScaledObject ``spec.triggers[]`` item) for one model."""
    policy = policy or ScalingPolicy()
    if not server_address.startswith(("http://", "https://")):
        raise ValueError(f"server_address: must be an http(s) URL, got {server_address!r}")
    return {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": server_address,
            "query": query(model, policy.window),
            "threshold": _num(policy.threshold),
            "activationThreshold": _num(policy.activation_threshold),
            # No traffic yet: an empty result means zero pending, not a scaler error.
            "ignoreNullValues": "true" if ignore_null_values else "false",
        },
    }


def desired_replicas(
    metric_total: float,
    policy: ScalingPolicy | None = None,
    *,
    current_replicas: int | None = None,
    tolerance: float = HPA_TOLERANCE,
) -> int:
    """Replicas the HPA asks for, given the trigger query's value (AverageValue semantics).

    ``ceil(metric_total / threshold)`` bounded by ``[min_replicas, max_replicas]``. With
    ``current_replicas`` the HPA's tolerance applies: when the per-replica value is within
    ``tolerance`` of the target, the replica count does not change. With ``min_replicas == 0`` KEDA
    deactivates (zero replicas) while the value is at or below the activation threshold.
    """
    policy = policy or ScalingPolicy()
    if math.isnan(metric_total) or metric_total < 0:
        raise ValueError(f"metric_total: must be a non-negative number, got {metric_total}")
    if policy.min_replicas == 0 and metric_total <= policy.activation_threshold:
        return 0
    raw = math.ceil(metric_total / policy.threshold)
    if current_replicas:
        ratio = metric_total / (policy.threshold * current_replicas)
        if abs(ratio - 1.0) <= tolerance:
            raw = current_replicas
    return max(max(policy.min_replicas, 1), min(policy.max_replicas, raw))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
