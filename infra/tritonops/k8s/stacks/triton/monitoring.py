"""What Prometheus and Grafana get from the triton stack: each service's ServiceMonitor, and the
namespace's PrometheusRule and dashboards ConfigMap (rules and dashboards from ``tritonops.observability``,
one source for Kubernetes and edge hosts).
"""

from __future__ import annotations

import json

from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import JOB_LABEL, SCRAPE_JOB, TRACK_LABEL, Obj, name_of, object_meta, selector
from tritonops.k8s.stacks.triton.release_agent import AGENT_PORT_NAME
from tritonops.k8s.stacks.triton.scaling import scaling_policy
from tritonops.observability.keda_trigger import ScalingPolicy
from tritonops.observability.rules import RuleSettings, rule_groups


def service_monitor(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """Triton's metrics, and with a release source the agent's (tritonops_release_*), as job "triton".

    It selects both tracks' Services and copies the pods' ``track`` label onto their series
    (podTargetLabels): the canary gate compares ``track="canary"`` with ``track="stable"``.
    """
    endpoints: list[Obj] = [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}]
    if svc.release is not None:
        endpoints.append({"port": AGENT_PORT_NAME, "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": object_meta(name_of(svc), cfg, svc),
        "spec": {
            "jobLabel": JOB_LABEL,
            "selector": {"matchLabels": selector(svc)},
            "namespaceSelector": {"matchNames": [cfg.namespace]},
            "podTargetLabels": [TRACK_LABEL],
            "endpoints": endpoints,
        },
    }


def _widest_policy(cfg: TritonStackConfig) -> ScalingPolicy:
    """The scaling bounds the shared alert rules use: the largest maxReplicas of any service."""
    widest = max(cfg.model_services, key=lambda s: s.autoscaling.max_replicas)
    return scaling_policy(widest)


def prometheus_rule(cfg: TritonStackConfig) -> Obj:
    groups = rule_groups(RuleSettings(job=SCRAPE_JOB, scaling=_widest_policy(cfg)))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": object_meta("tritonops", cfg),
        "spec": {"groups": groups},
    }


def dashboards_config_map(cfg: TritonStackConfig) -> Obj:
    """Grafana's dashboard sidecar loads every ConfigMap carrying the dashboard label (needs the 'obs' extra)."""
    from tritonops.observability.dashboards import dashboards

    meta = object_meta("tritonops-dashboards", cfg)
    meta["labels"] = {**meta["labels"], cfg.grafana_dashboard_label: "1"}
    data = {
        fname: json.dumps(d, sort_keys=True)
        for fname, d in sorted(dashboards(_widest_policy(cfg), job=SCRAPE_JOB).items())
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
