"""KEDA's Prometheus trigger for Triton, and the formula that turns its value into replicas.

The scaling signal is Triton's ``nv_inference_pending_request_count`` (requests waiting for a
backend), averaged over a short window and summed over every replica of a model. KEDA hands that
total to the HPA as an ``AverageValue`` external metric, and the HPA asks for
``ceil(total / threshold)`` replicas, bounded by the ScaledObject's min and max
(:func:`desired_replicas`). The same formula is a recording rule
(``model:tritonops_desired_replicas:unbounded``) so dashboards and the "scaler at max" alert see
what the scaler sees.

Optional triggers (:func:`request_rate_query`, :func:`queue_time_query`, :func:`gpu_utilization_query`)
follow the same pattern:
each query sums a per-replica signal over the replicas, so every trigger is an ``AverageValue`` metric
(the only metric type KEDA 2.17 applies its fallback to) and the same :func:`desired_replicas` formula
holds. For a per-request average (queue time) the sum is ``average x replicas reporting``, which makes
``ceil(total / target)`` the HPA's ``Value`` formula ``ceil(replicas x average / target)``.

Scale to zero needs a signal that exists while no Triton pod runs (Triton's own series vanish with
the pods): :func:`ingress_requests_query` reads ingress-nginx's ``nginx_ingress_controller_requests``
counter (labels ``namespace`` (``exported_namespace`` once scraped), ``ingress``, ``status``, ...; it counts every
request it answers, a 503 for a Service without endpoints included), so KEDA activates the Deployment
when requests arrive at the service's Ingresses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tritonops.observability.metrics import PENDING, QUEUE_DURATION_US, REQUEST_SUCCESS

# ingress-nginx's request counter (internal/ingress/metric/collectors/socket.go: namespace
# nginx_ingress_controller, counter "requests"; labels status, method, path, namespace, ingress,
# service, canary, and host with --metrics-per-host, the default).
INGRESS_REQUESTS = "nginx_ingress_controller_requests"
# Envoy's per-cluster response counter, as Envoy Gateway's proxies export it at /stats/prometheus (container port
# "metrics", 19001): cluster stat upstream_rq_<N>xx, tags envoy_cluster_name and envoy_response_code_class
# (https://www.envoyproxy.io/docs/envoy/latest/configuration/upstream/cluster_manager/cluster_stats, read 2026-12-07).
# Verified in source (envoyproxy/gateway v1.9.0, read 2026-12-07; v1.9.1's release notes change none of it):
# - internal/gatewayapi/helpers.go irRouteDestinationName: a route rule's cluster is
#   "<httproute|grpcroute>/<namespace>/<route>/rule/<index>" (unless an EnvoyProxy turns on mergeBackends, which
#   names clusters after the Service, or sets telemetry.metrics.clusterStatName; tritonops sets neither);
# - internal/infrastructure/kubernetes/proxy/resource.go: the proxy's container port "metrics" (19001), path
#   /stats/prometheus.
# While the rule's Service has no ready endpoints, endpoint routing (the default) turns the rule into a 503 direct
# response that no cluster counter sees; the triton stack therefore renders, for a service that may scale to zero,
# a BackendTrafficPolicy with routingType Service (tritonops.k8s.stacks.triton.exposure.wake_routing_policy,
# which says why in full), so the router answers that request's 503 on the rule's cluster and this counter grows.
GATEWAY_REQUESTS = "envoy_cluster_upstream_rq_xx"
# dcgm-exporter's GPU utilisation gauge (0..100 %). With the GPU Operator's ServiceMonitor
# (honorLabels false) the pod it attributes a GPU to is in exported_namespace / exported_pod.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# The wake-up trigger only activates: a target this large never asks for more than one replica
# (ceil(requests / target) <= 1); Triton's own triggers size the Deployment once a pod runs.
WAKE_TARGET = 1_000_000_000

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
    return f"sum(avg_over_time({PENDING}{_model_selector(model)}[{window}]))"


def _model_selector(model: str | None) -> str:
    return f'{{model="{model}",track!="canary"}}' if model else '{track!="canary"}'


def request_rate_query(model: str | None = None, window: str = "1m") -> str:
    """PromQL: requests/s ``model`` served, summed over the replicas.

    Pending requests fall to nearly zero on over-provisioned replicas, so that signal alone scales them
    away and back; the served rate grows with load and holds the replicas the demand needs (beside it,
    the pending trigger still reacts to an overload, where the served rate stops at capacity).
    """
    return f"sum(rate({REQUEST_SUCCESS}{_model_selector(model)}[{window}]))"


def queue_time_query(model: str | None = None, window: str = "1m") -> str:
    """PromQL: average queue time per request (ms) of ``model``, times the replicas reporting it.

    ``rate(queue_duration_us) / rate(request_success)`` is Triton's average queue time; ``>= 0``
    drops the NaN of an idle window (0/0), which KEDA would pass on as a value.
    """
    sel = _model_selector(model)
    avg_ms = f"(sum(rate({QUEUE_DURATION_US}{sel}[{window}])) / sum(rate({REQUEST_SUCCESS}{sel}[{window}])) / 1000)"
    replicas = f"count(count by (instance) ({REQUEST_SUCCESS}{sel}))"
    return f"({avg_ms} * {replicas}) >= 0"


def gpu_utilization_query(namespace: str, deployment: str, window: str = "1m") -> str:
    """PromQL: GPU utilisation (%) of each pod of ``deployment`` (its GPUs averaged), summed over pods.

    DCGM attributes a GPU to the pod holding it; the pod-name pattern (``<deployment>-<replicaset
    hash>-<pod suffix>``) matches that Deployment's pods and no other's (a canary Deployment's pods
    carry one more dash-separated word).
    """
    pods = f"{deployment}-[a-z0-9]+-[a-z0-9]+"
    sel = f'{{exported_namespace="{namespace}",exported_pod=~"{pods}"}}'
    return f"sum(avg by (exported_pod) (avg_over_time({DCGM_GPU_UTIL}{sel}[{window}])))"


def ingress_requests_query(namespace: str, ingresses: list[str], window: str = "1m") -> str:
    """PromQL: requests ingress-nginx answered for ``ingresses`` (in ``namespace``) over ``window``.

    Scraped through a ServiceMonitor (honorLabels false, as the chart's and kube-prometheus-stack's
    defaults), the controller pod's own ``namespace`` target label wins and the Ingress's namespace
    moves to ``exported_namespace``, as DCGM's pod attribution does.
    """
    if not ingresses:
        raise ValueError("ingresses: the wake-up trigger needs at least one Ingress")
    names = "|".join(ingresses)
    return f'sum(increase({INGRESS_REQUESTS}{{exported_namespace="{namespace}",ingress=~"{names}"}}[{window}]))'


def gateway_requests_query(namespace: str, routes: list[str], window: str = "1m") -> str:
    """PromQL: responses Envoy Gateway's proxies gave for the rules of ``routes`` (HTTPRoute and GRPCRoute
    names in ``namespace``) over ``window``, a 503 for a Service without endpoints included."""
    if not routes:
        raise ValueError("routes: the wake-up trigger needs at least one route")
    names = "|".join(routes)
    clusters = f"(httproute|grpcroute)/{namespace}/({names})/rule/[0-9]+"
    return f'sum(increase({GATEWAY_REQUESTS}{{envoy_cluster_name=~"{clusters}"}}[{window}]))'


def trigger(
    expr: str,
    server_address: str,
    *,
    threshold: float,
    activation_threshold: float = 0.0,
    ignore_null_values: bool = True,
) -> dict[str, Any]:
    """A KEDA ``prometheus`` trigger (ScaledObject ``spec.triggers[]`` item): ``AverageValue``, so the
    ScaledObject's fallback covers it when Prometheus cannot answer."""
    if not server_address.startswith(("http://", "https://")):
        raise ValueError(f"server_address: must be an http(s) URL, got {server_address!r}")
    if threshold <= 0:
        raise ValueError(f"threshold: must be > 0, got {threshold}")
    return {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": server_address,
            "query": expr,
            "threshold": _num(threshold),
            "activationThreshold": _num(activation_threshold),
            # No traffic yet: an empty result means zero, not a scaler error.
            "ignoreNullValues": "true" if ignore_null_values else "false",
        },
    }


def prometheus_trigger(
    model: str | None,
    server_address: str,
    *,
    policy: ScalingPolicy | None = None,
    ignore_null_values: bool = True,
) -> dict[str, Any]:
    """The pending-requests trigger for one model."""
    policy = policy or ScalingPolicy()
    return trigger(
        query(model, policy.window),
        server_address,
        threshold=policy.threshold,
        activation_threshold=policy.activation_threshold,
        ignore_null_values=ignore_null_values,
    )


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
