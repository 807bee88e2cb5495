"""The Gateway API way in, cluster side: Envoy Gateway's GatewayClass, the shared Gateway the triton stacks' routes
attach to, and the PodMonitor that brings its proxies' request counters to Prometheus.

These objects are the second half of the cluster contract's Envoy Gateway prerequisite
(``tritonops.k8s.cluster_contract.GATEWAY``): after ``helm upgrade --install`` of the pinned chart (which also
installs the Gateway API CRDs it was built against), the same command applies
``stacks/prerequisites/envoy-gateway.yaml``, the
YAML form of :func:`objects` (``tests/unit/k8s/test_gateway_default.py`` keeps the file equal to it). That command is
their one creator; no stack renders them. The PodMonitor needs the CRD the platform stack's kube-prometheus-stack
brings, so the command runs after the platform's first ``pulumi up``.

The manifest also creates the Gateway's namespace ``gateway`` (its one creator). The Gateway listens on HTTP 80
(gRPC over h2c) and HTTPS 443 with the certificate of Secret ``gateway/inference-tls``, which the user creates
after the command (the walkthrough does; until then only the HTTPS listener is unready). Envoy Gateway runs
the Gateway's Envoy proxies in its own namespace (:data:`tritonops.versions.ENVOY_GATEWAY_NAMESPACE`), which is
where the triton stack's NetworkPolicy admits inference traffic from.
"""

from __future__ import annotations

from typing import Any

import yaml

from tritonops.versions import ENVOY_GATEWAY_NAMESPACE

Obj = dict[str, Any]

GATEWAY_CLASS = "envoy-gateway"
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"  # Envoy Gateway's default controllerName
GATEWAY_NAME, GATEWAY_NAMESPACE = "inference", "gateway"
TLS_SECRET = "inference-tls"
MANIFEST = "stacks/prerequisites/envoy-gateway.yaml"  # in the checkout, from the repository root
# Envoy Gateway's labels on the proxy pods it runs, and their metrics port (name metrics, 19001, /stats/prometheus):
# envoyproxy/gateway v1.9.0 internal/infrastructure/kubernetes/proxy/resource.go (labels, port "metrics" =
# bootstrap.EnvoyStatsPort 19001 unless an EnvoyProxy disables Prometheus) and internal/xds/bootstrap/
# bootstrap.yaml.tpl (the /stats/prometheus route), read 2026-12-07.
PROXY_POD_LABELS = {"app.kubernetes.io/component": "proxy", "app.kubernetes.io/managed-by": "envoy-gateway"}
PROXY_METRICS_PORT, PROXY_METRICS_PATH = "metrics", "/stats/prometheus"
POD_MONITOR = "envoy-gateway-proxies"


def objects() -> list[Obj]:
    """Namespace, GatewayClass, Gateway and PodMonitor, in the order they are applied."""
    labels = {"app.kubernetes.io/part-of": "tritonops"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE, "labels": labels}},
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS, "labels": labels},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE, "labels": labels},
            "spec": {
                "gatewayClassName": GATEWAY_CLASS,
                "listeners": [
                    {"name": "http", "protocol": "HTTP", "port": 80, "allowedRoutes": {"namespaces": {"from": "All"}}},
                    {
                        "name": "https",
                        "protocol": "HTTPS",
                        "port": 443,
                        "tls": {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": TLS_SECRET}]},
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    },
                ],
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": POD_MONITOR, "namespace": ENVOY_GATEWAY_NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": dict(PROXY_POD_LABELS)},
                "podMetricsEndpoints": [{"port": PROXY_METRICS_PORT, "path": PROXY_METRICS_PATH}],
            },
        },
    ]


def manifest() -> str:
    """:func:`objects` as the multi-document YAML of :data:`MANIFEST`."""
    head = ("# Generated from tritonops.k8s.gateway.objects(); applied by the cluster contract's Envoy Gateway "
            "command.\n")
    return head + "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects())
