"""The triton stack's objects, assembled: what ``pulumi up`` registers and ``tritonops render`` writes.

``service_objects`` returns what one model service needs, in apply order (ServiceAccount, Deployments,
Services, PodDisruptionBudget, NetworkPolicy, ServiceMonitor, ScaledObject, Ingresses or Gateway API
routes (with, for a service that may scale to zero, Envoy Gateway's BackendTrafficPolicy that routes them
to the Services' cluster IPs: ``exposure.wake_routing_policy``), the drift CronJob); ``namespace_objects``
what the stack needs once (Namespace, the namespace's NetworkPolicies, PriorityClass, PrometheusRule,
dashboards ConfigMap, the release agent's ConfigMap, trusted-keys ConfigMaps). The objects themselves come from
the builders: ``labels``, ``workload``, ``release_agent``, ``exposure``, ``scaling``, ``monitoring``, ``drift``.
Pure dicts: no Pulumi.
"""

from __future__ import annotations

from typing import Any

from tritonops.k8s import waits
from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import Obj, canary_of, labels, object_meta
from tritonops.k8s.stacks.triton.budget import service_budget
from tritonops.k8s.stacks.triton.drift_cronjob import drift_objects
from tritonops.k8s.stacks.triton.exposure import (
    default_deny_policy,
    gateway_routes,
    ingresses,
    kube_api_egress_policy,
    namespace_egress_policy,
    network_policy,
    wake_routing_policy,
)
from tritonops.k8s.stacks.triton.monitoring import dashboards_config_map, prometheus_rule, service_monitor
from tritonops.k8s.stacks.triton.node_cache import node_cache_objects
from tritonops.k8s.stacks.triton.release_agent import agent_config_map, trusted_keys_config_maps
from tritonops.k8s.stacks.triton.scaling import scaled_object
from tritonops.k8s.stacks.triton.workload import (
    deployment,
    pod_disruption_budget,
    priority_class,
    service,
    service_account,
)
from tritonops.observability.metrics import CANARY
from tritonops.triton.admin import client_headers


def admin_headers(cfg: TritonStackConfig, token: str) -> dict[str, dict[str, str]]:
    """What a client sends to reach the restricted APIs, per protocol."""
    h = {cfg.admin_api.header: token}
    return {"http": client_headers("http", h), "grpc": client_headers("grpc", h)}


def service_objects(cfg: TritonStackConfig, svc: ModelService, role_arn: Any = None) -> list[Obj]:
    """Everything one model service needs, in apply order (``role_arn``: see :func:`service_account`)."""
    budget = service_budget(svc, cfg)
    canary = [CANARY] if canary_of(svc) is not None else []
    objs = [
        service_account(cfg, svc, role_arn),
        deployment(cfg, svc, budget),
        *[deployment(cfg, svc, budget, track) for track in canary],
        service(cfg, svc),
        *[service(cfg, svc, track) for track in canary],
        pod_disruption_budget(cfg, svc),
        network_policy(cfg, svc),
        service_monitor(cfg, svc),
    ]
    if svc.autoscaling.enabled:
        objs.append(scaled_object(cfg, svc))
    if cfg.ingress.mode == "ingress":
        objs += ingresses(cfg, svc)
    elif cfg.ingress.mode == "gateway":
        objs += gateway_routes(cfg, svc)
        if svc.autoscaling.enabled and svc.autoscaling.min_replicas == 0:
            objs.append(wake_routing_policy(cfg, svc))  # the wake request must reach a route's cluster
    objs += drift_objects(cfg, svc)  # CronJob: the live Triton vs svc.models (drift_cronjob.py)
    return waits.annotate(objs)  # pulumi.com/skipAwait where readiness is the canary gate's


# --- once per stack ------------------------------------------------------------------------------


def namespace(cfg: TritonStackConfig) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": cfg.namespace,
            "labels": {
                **labels(cfg),
                "pod-security.kubernetes.io/enforce": cfg.pod_security,
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
        },
    }


def admin_secret(cfg: TritonStackConfig, token: Any) -> Obj:
    """The header value guarding Triton's admin APIs (``token`` is a Pulumi secret under ``pulumi up``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(cfg.admin_api.secret_name, cfg),
        "type": "Opaque",
        "stringData": {cfg.admin_api.secret_key: token},
    }


def namespace_objects(cfg: TritonStackConfig, dashboards: bool = True) -> list[Obj]:
    """``dashboards`` False: without the dashboards ConfigMap (a plain ConfigMap whose content needs the
    'obs' extra; tritonops.k8s.cluster_contract checks the rest on the base install)."""
    return [
        namespace(cfg),
        default_deny_policy(cfg),
        namespace_egress_policy(cfg),
        kube_api_egress_policy(cfg),
        priority_class(cfg),
        prometheus_rule(cfg),
        *([dashboards_config_map(cfg)] if dashboards else []),
        agent_config_map(cfg),
        *trusted_keys_config_maps(cfg),
        *node_cache_objects(cfg),  # release.nodeCache: the per-node cache daemon, in its own namespace
    ]
