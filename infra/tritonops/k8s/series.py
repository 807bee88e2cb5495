"""Every series a rendered ScaledObject reads exists because something the cluster sets up produces it.

For each ``prometheus`` trigger of each ScaledObject the triton stack renders, each metric name of its
query is matched to its producer (``tritonops.observability.producers``) and the producer to what brings
the series to Prometheus in this cluster:

- Triton's metrics: a ServiceMonitor the same render holds that selects the Service in front of the
  ScaledObject's Deployment;
- ingress-nginx's: the cluster contract's install command turns on the controller's metrics and its
  chart's ServiceMonitor, and the platform's Prometheus selects ServiceMonitors of every release;
- Envoy Gateway's: the cluster contract's Envoy Gateway command applies ``stacks/prerequisites/envoy-gateway.yaml``
  (``tritonops.k8s.gateway``), whose PodMonitor scrapes the proxies, and the platform's Prometheus selects
  PodMonitors of every release; and every route the wake query names is routed to its Service's cluster IP
  (a BackendTrafficPolicy with routingType Service), without which the request that must wake the
  service gets a direct 503 that no cluster counter sees;
- dcgm-exporter's: the platform stack runs the GPU Operator with dcgm-exporter and its ServiceMonitor,
  and the GPU Operator's components run on the Deployment's pool (not a Bottlerocket pool:
  ``tritonops.k8s.gpu_operator``).

A metric no producer is known for, or whose producer is missing, is a :class:`Problem` naming the
trigger's config key: ``tritonops render --check-config`` refuses it (a trigger on a series that never
exists keeps a service asleep, or at its floor, for ever). The other stacks of the cluster are read from
their stack files (``tritonops.k8s.cluster_contract.Cluster``); one not found is not held against.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tritonops.k8s import gateway, gpu_operator
from tritonops.k8s.config import TritonStackConfig, project_name
from tritonops.k8s.contract import Problem, locate
from tritonops.k8s.labels import NODE_POOL_LABEL, name_of
from tritonops.k8s.stacks.cluster_aws.eks import node_labels
from tritonops.k8s.stacks.platform import charts
from tritonops.k8s.stacks.triton.exposure import BACKEND_TRAFFIC_POLICY
from tritonops.observability import producers
from tritonops.observability.producers import DCGM_EXPORTER, ENVOY_GATEWAY, INGRESS_NGINX, TRITON

Obj = dict[str, Any]

# What the install command of ingress-nginx must set so its request counter reaches Prometheus.
INGRESS_NGINX_METRICS_FLAGS = ("controller.metrics.enabled=true", "controller.metrics.serviceMonitor.enabled=true")
# A trigger's name (scaling._trigger_name) -> the autoscaling field that adds it.
TRIGGER_FIELDS = {"pending": "pendingPerReplica", "rate": "requestsPerReplica", "queue": "queueMsPerReplica",
                  "gpu": "gpuUtilizationPerReplica", "wake": "minReplicas"}


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _triton_scraped(objs: list[Obj], ns: str, deploy: Obj) -> str | None:
    pod_labels = deploy["spec"]["template"]["metadata"].get("labels", {})
    services = [s for s in objs if s.get("kind") == "Service" and s["metadata"].get("namespace") == ns
                and _selects(s["spec"].get("selector") or {}, pod_labels)]
    for sm in (o for o in objs if o.get("kind") == "ServiceMonitor"):
        sel = (sm["spec"].get("selector") or {}).get("matchLabels") or {}
        names = (sm["spec"].get("namespaceSelector") or {}).get("matchNames") or [sm["metadata"].get("namespace")]
        if ns in names and any(_selects(sel, s["metadata"].get("labels") or {}) for s in services):
            return None
    return (f"no ServiceMonitor of this render selects the Service of Deployment {deploy['metadata']['name']} "
            "(Triton's metrics port is never scraped)")


def _prometheus_selects_all(cluster: Any) -> str | None:
    platform = cluster.platform
    if platform is None:
        return None
    if not platform.monitoring.enabled:
        return f"the platform stack ({cluster.platform_file}) runs no Prometheus (monitoring.enabled: false)"
    spec = charts.monitoring_release(platform).values["prometheus"]["prometheusSpec"]
    if spec.get("serviceMonitorSelectorNilUsesHelmValues", True):
        return (f"the platform's Prometheus ({cluster.platform_file}) selects only its own release's "
                "ServiceMonitors, not the one the ingress-nginx chart creates")
    return None


def _ingress_nginx_scraped(cluster: Any, command: str) -> str | None:
    missing = [f for f in INGRESS_NGINX_METRICS_FLAGS if f"--set {f}" not in command]
    if missing:
        return (f"the cluster contract's ingress-nginx install command does not set {', '.join(missing)}: no "
                f"ServiceMonitor brings the controller's metrics to Prometheus ({command})")
    return _prometheus_selects_all(cluster)


def _envoy_gateway_scraped(cluster: Any, command: str) -> str | None:
    """The contract's Envoy Gateway command applies the manifest whose PodMonitor scrapes the proxies."""
    if f"kubectl apply -f {gateway.MANIFEST}" not in command:
        return (f"the cluster contract's Envoy Gateway install command does not apply {gateway.MANIFEST}: no "
                f"PodMonitor brings the proxies' request counters to Prometheus ({command})")
    monitors = [o for o in gateway.objects() if o["kind"] == "PodMonitor"
                and _selects(o["spec"]["selector"].get("matchLabels") or {}, gateway.PROXY_POD_LABELS)
                and any(e.get("path") == gateway.PROXY_METRICS_PATH for e in o["spec"]["podMetricsEndpoints"])]
    if not monitors:
        return (f"{gateway.MANIFEST} holds no PodMonitor of the Envoy proxies' {gateway.PROXY_METRICS_PATH} "
                "(tritonops.k8s.gateway.objects)")
    platform = cluster.platform
    if platform is not None and platform.monitoring.enabled:
        spec = charts.monitoring_release(platform).values["prometheus"]["prometheusSpec"]
        if spec.get("podMonitorSelectorNilUsesHelmValues", True):
            return (f"the platform's Prometheus ({cluster.platform_file}) selects only its own release's "
                    f"PodMonitors, not {gateway.POD_MONITOR}")
    return _prometheus_selects_all(cluster)


def _gateway_wake_counted(objs: list[Obj], ns: str | None, query: str) -> str | None:
    """Every route the wake query names is routed to its Service's cluster IP by a BackendTrafficPolicy
    (``routingType: Service``): with endpoint routing, Envoy Gateway answers a Service without endpoints with a
    direct response that no cluster counter sees (tritonops.k8s.stacks.triton.exposure.wake_routing_policy)."""
    routes = {o["metadata"]["name"] for o in objs if o.get("kind") in ("HTTPRoute", "GRPCRoute")
              and o["metadata"].get("namespace") == ns and f"/{ns}/" in query
              and re.search(rf"[(|]{re.escape(o['metadata']['name'])}[)|]", query)}
    by_service = {ref.get("name") for o in objs
                  if (o.get("apiVersion"), o.get("kind")) == BACKEND_TRAFFIC_POLICY
                  and o["metadata"].get("namespace") == ns and o["spec"].get("routingType") == "Service"
                  for ref in o["spec"].get("targetRefs") or []}
    missing = sorted(routes - by_service)
    if not routes:
        return f"the wake query names no HTTPRoute or GRPCRoute the stack renders in namespace {ns}"
    if missing:
        return (f"routes {missing} use endpoint routing: while the Service has no endpoints Envoy Gateway answers "
                "them with a direct 503 that no cluster counter sees; a BackendTrafficPolicy with routingType "
                "Service must target them (tritonops.k8s.stacks.triton.exposure.wake_routing_policy)")
    return None


def _dcgm_scraped(cluster: Any, deploy: Obj) -> str | None:
    platform = cluster.platform
    if platform is not None:
        op = platform.gpu_operator
        if not (op.enabled and op.dcgm_service_monitor):
            return (f"the platform stack ({cluster.platform_file}) runs no dcgm-exporter ServiceMonitor "
                    "(gpuOperator.enabled and gpuOperator.dcgmServiceMonitor must be true)")
        if (why := _prometheus_selects_all(cluster)) is not None:
            return why
    pool_name = (deploy["spec"]["template"]["spec"].get("nodeSelector") or {}).get(NODE_POOL_LABEL)
    pools = {p.name: p for p in cluster.aws.gpu_node_pools} if cluster.aws is not None else {}
    pool = pools.get(pool_name or "")
    if pool is None:
        return None
    values = charts.gpu_operator_release(platform).values if platform is not None else {}
    if gpu_operator.DCGM_EXPORTER not in gpu_operator.operands_on(node_labels(pool), values):
        return (f"dcgm-exporter does not run on pool {pool.name!r} ({pool.ami_type}, {cluster.aws_file}): the GPU "
                "Operator's components stay off it, so no DCGM series exists for its pods (Triton's own "
                "nv_gpu_utilization is their GPU metric)")
    return None


def problems(cfg: TritonStackConfig, objs: list[Obj], path: Path, cluster: Any,
             ingress_nginx_command: str, gateway_command: str = "") -> Iterator[Problem]:
    """A :class:`Problem` per (ScaledObject trigger, metric) whose series nothing in this cluster produces;
    ``cluster``: the cluster contract's ``Cluster``, ``ingress_nginx_command`` and ``gateway_command``: its
    install commands of ingress-nginx and Envoy Gateway."""
    index = {name_of(s): i for i, s in enumerate(cfg.model_services)}
    deploys = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o
               for o in objs if o.get("kind") == "Deployment"}
    pre = project_name("triton")
    for so in (o for o in objs if o.get("kind") == "ScaledObject"):
        ns = so["metadata"].get("namespace")
        target = so["spec"]["scaleTargetRef"]["name"]
        deploy = deploys.get((ns, target))
        for trig in so["spec"].get("triggers") or []:
            if trig.get("type") != "prometheus":
                continue
            field = TRIGGER_FIELDS.get(str(trig.get("name", "")).split("-", 1)[0], "autoscaling")
            key = f"{pre}:modelServices[{index.get(target, 0)}].autoscaling.{field}"
            for metric, producer in producers.series_of(trig["metadata"]["query"]).items():
                if producer is None:
                    why: str | None = ("nothing the stacks or the cluster contract's prerequisites set up emits it "
                                       "(tritonops.observability.producers)")
                elif producer.name == TRITON:
                    why = _triton_scraped(objs, ns, deploy) if deploy is not None else None
                elif producer.name == INGRESS_NGINX:
                    why = _ingress_nginx_scraped(cluster, ingress_nginx_command)
                elif producer.name == ENVOY_GATEWAY:
                    why = (_envoy_gateway_scraped(cluster, gateway_command)
                           or _gateway_wake_counted(objs, ns, trig["metadata"]["query"]))
                elif producer.name == DCGM_EXPORTER:
                    why = _dcgm_scraped(cluster, deploy) if deploy is not None else None
                else:
                    why = None
                if why is not None:
                    yield Problem(str(path), key, f"ScaledObject {so['metadata']['name']} trigger "
                                  f"{trig.get('name')!r} reads {metric}: {why}", locate(path, key))
