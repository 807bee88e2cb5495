"""Which producer emits which Prometheus series, and how the series reaches Prometheus.

A KEDA trigger, an alert or a dashboard reads a series by name; the series exists only because some
exporter emits it and some scrape configuration brings it to the Prometheus the query asks. This table
says, per metric name, who that is: Triton's own metrics port (scraped through the ServiceMonitor the
triton stack renders per model service), ingress-nginx's controller (scraped through the ServiceMonitor
its chart creates with ``controller.metrics.serviceMonitor.enabled=true``, the cluster contract's install
command), Envoy Gateway's proxies (the gateway mode's wake signal: a PodMonitor the contract's Envoy Gateway
command applies) and dcgm-exporter (the GPU Operator's DaemonSet and ServiceMonitor, platform stack
``gpuOperator.dcgmServiceMonitor``; it runs only where the operator's components run, never on
Bottlerocket pools). ``tritonops.k8s.cluster_contract`` holds every rendered ScaledObject query against
it (:func:`producer_of`): a metric no producer emits, or whose producer the cluster does not set up, is a
``render --check-config`` problem, not a service that never wakes.

Pure data: no Kubernetes, no Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonops.observability import keda_trigger as keda
from tritonops.observability.metrics import TRITON_METRICS, metric_names

TRITON, INGRESS_NGINX, DCGM_EXPORTER = "triton", "ingress-nginx", "dcgm-exporter"
ENVOY_GATEWAY = "envoy-gateway"


@dataclass(frozen=True)
class Producer:
    """``metrics``: the names it emits (of those the project reads); ``scrape``: what brings them to
    Prometheus; ``source``: where the names are defined, read on ``read``."""

    name: str
    metrics: frozenset[str]
    scrape: str
    source: str
    read: str


PRODUCERS: dict[str, Producer] = {
    p.name: p
    for p in (
        Producer(
            TRITON,
            TRITON_METRICS,
            "ServiceMonitor <service> (stack triton, one per model service: port metrics, /metrics)",
            "https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/metrics.html",
            "2026-12-07",
        ),
        Producer(
            INGRESS_NGINX,
            frozenset({keda.INGRESS_REQUESTS}),
            "ServiceMonitor of the ingress-nginx chart (controller.metrics.serviceMonitor.enabled=true in the "
            "cluster contract's install command), selected by the platform's Prometheus",
            "https://github.com/kubernetes/ingress-nginx/blob/helm-chart-4.15.1/internal/ingress/metric/collectors/"
            "socket.go",
            "2026-12-07",
        ),
        Producer(
            ENVOY_GATEWAY,
            frozenset({keda.GATEWAY_REQUESTS}),
            "PodMonitor envoy-gateway-proxies (port metrics, /stats/prometheus) of "
            "stacks/prerequisites/envoy-gateway.yaml, which "
            "the cluster contract's Envoy Gateway install command applies, selected by the platform's Prometheus",
            "https://www.envoyproxy.io/docs/envoy/latest/configuration/upstream/cluster_manager/cluster_stats",
            "2026-12-07",
        ),
        Producer(
            DCGM_EXPORTER,
            frozenset({keda.DCGM_GPU_UTIL}),
            "ServiceMonitor of the GPU Operator's dcgm-exporter (stack platform, gpuOperator.dcgmServiceMonitor); "
            "only on GPU pools where the operator's components run (not Bottlerocket)",
            "https://github.com/NVIDIA/dcgm-exporter/blob/main/etc/default-counters.csv",
            "2026-12-07",
        ),
    )
}


def producer_of(metric: str) -> Producer | None:
    """The producer that emits ``metric``, or None when this table knows none."""
    return next((p for p in PRODUCERS.values() if metric in p.metrics), None)


def series_of(query: str) -> dict[str, Producer | None]:
    """Each metric name ``query`` reads -> its producer (None: nothing known emits it)."""
    return {name: producer_of(name) for name in sorted(metric_names(query))}
