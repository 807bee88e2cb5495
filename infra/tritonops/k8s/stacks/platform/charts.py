"""Pure builders for the platform stack: the GPU Operator, kube-prometheus-stack and KEDA.

Each chart is a :class:`tritonops.k8s.helm.HelmRelease` (pinned chart, repository, namespace, values as data) plus the
plain objects around it (namespaces, the time-slicing ConfigMap, the Alertmanager config and Grafana
admin Secrets).
"""

from __future__ import annotations

from typing import Any

import yaml

from tritonops import versions
from tritonops.k8s.config import PRODUCTION, PlatformConfig
from tritonops.k8s.helm import HelmRelease
from tritonops.k8s.labels import TIER_LABEL

Obj = dict[str, Any]

TIME_SLICING_CONFIG_MAP = "time-slicing-config"
ALERTMANAGER_SECRET = "alertmanager-tritonops"
SECRETS_KEY = "alertmanagerSecrets"  # secret config object: secretKey -> webhook URL / routing key
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"  # secret config value: Grafana's admin password
GRAFANA_USER_KEY, GRAFANA_SECRET_PASSWORD_KEY = "admin-user", "admin-password"  # keys of the Secret


def labels(cfg: PlatformConfig) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": "tritonops",
        "app.kubernetes.io/managed-by": "tritonops",
        "tritonops.io/environment": cfg.environment,
        TIER_LABEL: cfg.tier,
    }


def namespace(cfg: PlatformConfig, name: str, extra: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**labels(cfg), **(extra or {})}},
    }


# --- GPU Operator --------------------------------------------------------------------------------


def time_slicing_config_map(cfg: PlatformConfig) -> Obj | None:
    """Device-plugin configs, one per name; a node opts in with nvidia.com/device-plugin.config=<name>."""
    op = cfg.gpu_operator
    if not op.time_slicing:
        return None
    data = {
        name: yaml.safe_dump(
            {
                "version": "v1",
                "flags": {"migStrategy": "none"},
                "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}},
            },
            sort_keys=False,
        )
        for name, replicas in sorted(op.time_slicing.items())
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": TIME_SLICING_CONFIG_MAP, "namespace": op.namespace, "labels": labels(cfg)},
        "data": data,
    }


def gpu_operator_release(cfg: PlatformConfig) -> HelmRelease:
    op = cfg.gpu_operator
    values: Obj = {
        "driver": {"enabled": op.driver_enabled},
        "toolkit": {"enabled": op.toolkit_enabled},
        "mig": {"strategy": op.mig_strategy},
        "nfd": {"enabled": True},
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {"enabled": op.dcgm_service_monitor, "interval": "15s", "honorLabels": False},
        },
        "daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        # The chart's pre-upgrade hook applies its CRDs (ClusterPolicy, NVIDIADriver) on a chart bump.
        "operator": {"upgradeCRD": True},
    }
    if op.time_slicing:
        values["devicePlugin"] = {"config": {"name": TIME_SLICING_CONFIG_MAP, "default": ""}}
    return HelmRelease(
        "gpu-operator",
        versions.GPU_OPERATOR_CHART,
        versions.GPU_OPERATOR_CHART_VERSION,
        versions.GPU_OPERATOR_REPO,
        op.namespace,
        values,
        crd_upgrade="hook",
        openapi_validation=False,
    )


def gpu_operator_objects(cfg: PlatformConfig) -> list[Obj]:
    op = cfg.gpu_operator
    # The operator's DaemonSets (driver, toolkit, device plugin) need privileged pods.
    objs = [namespace(cfg, op.namespace, {"pod-security.kubernetes.io/enforce": "privileged"})]
    ts = time_slicing_config_map(cfg)
    if ts is not None:
        objs.append(ts)
    return objs


# --- kube-prometheus-stack -----------------------------------------------------------------------


def alertmanager_config(cfg: PlatformConfig, secrets: dict[str, str]) -> Obj:
    """Alertmanager's configuration; webhook URLs and routing keys come from ``secrets``."""
    am = cfg.monitoring.alertmanager
    receivers: list[Obj] = [{"name": "null"}]
    for i, r in enumerate(am.receivers):
        if r.secret_key not in secrets:
            raise ValueError(
                f"tritonops-platform:{SECRETS_KEY}.{r.secret_key}: missing secret for receiver {r.name!r} "
                f"(monitoring.alertmanager.receivers[{i}].secretKey); set it with "
                f"`pulumi config set --secret --path '{SECRETS_KEY}.{r.secret_key}' VALUE`"
            )
        value = secrets[r.secret_key]
        if r.type == "slack":
            receivers.append(
                {
                    "name": r.name,
                    "slack_configs": [{"api_url": value, "channel": r.channel, "send_resolved": r.send_resolved}],
                }
            )
        elif r.type == "pagerduty":
            receivers.append(
                {
                    "name": r.name,
                    "pagerduty_configs": [{"routing_key": value, "send_resolved": r.send_resolved}],
                }
            )
        else:
            receivers.append({"name": r.name, "webhook_configs": [{"url": value, "send_resolved": r.send_resolved}]})
    route: Obj = {
        "receiver": am.default_receiver or "null",
        "group_by": list(am.group_by),
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
        "routes": [{"receiver": "null", "matchers": ['alertname="Watchdog"']}],
    }
    if am.critical_receiver:
        route["routes"].append({"receiver": am.critical_receiver, "matchers": ['severity="critical"']})
    return {"global": {"resolve_timeout": "5m"}, "route": route, "receivers": receivers}


def alertmanager_secret(cfg: PlatformConfig, config_yaml: Any) -> Obj:
    """The Secret Alertmanager reads its config from (``config_yaml``: a Pulumi secret in ``pulumi up``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": ALERTMANAGER_SECRET,
            "namespace": cfg.monitoring.namespace,
            "labels": labels(cfg),
        },
        "type": "Opaque",
        "stringData": {"alertmanager.yaml": config_yaml},
    }


def grafana_admin_secret(cfg: PlatformConfig, password: Any) -> Obj:
    """Grafana's admin login (``password``: a Pulumi secret in ``pulumi up``); the chart reads it
    through ``grafana.admin.existingSecret`` and creates no Secret (nor default password) of its own."""
    mon = cfg.monitoring
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": mon.grafana_admin_secret, "namespace": mon.namespace, "labels": labels(cfg)},
        "type": "Opaque",
        "stringData": {GRAFANA_USER_KEY: mon.grafana_admin_user, GRAFANA_SECRET_PASSWORD_KEY: password},
    }


def monitoring_release(cfg: PlatformConfig) -> HelmRelease:
    mon = cfg.monitoring
    storage: Obj = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": mon.prometheus_storage}},
    }
    if mon.storage_class:
        storage["storageClassName"] = mon.storage_class
    values: Obj = {
        "prometheus": {
            "prometheusSpec": {
                "replicas": mon.prometheus_replicas,
                "retention": mon.prometheus_retention,
                # Pick up every ServiceMonitor/PodMonitor/PrometheusRule, not only this release's.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "storageSpec": {"volumeClaimTemplate": {"spec": storage}},
            }
        },
        "alertmanager": {
            "alertmanagerSpec": {
                "replicas": mon.alertmanager_replicas,
                # Configuration comes from our Secret (receivers from config, keys from Pulumi secrets).
                "useExistingSecret": True,
                "configSecret": ALERTMANAGER_SECRET,
            }
        },
        "grafana": {
            # The login comes from our Secret, never from the chart's default admin password.
            "admin": {
                "existingSecret": mon.grafana_admin_secret,
                "userKey": GRAFANA_USER_KEY,
                "passwordKey": GRAFANA_SECRET_PASSWORD_KEY,
            },
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": mon.grafana_dashboard_label,
                    "labelValue": "1",
                    "searchNamespace": "ALL",
                }
            }
        },
        # The chart's CRD-upgrade Job (a pre-upgrade hook, chart >= 68) applies the Prometheus Operator's CRDs
        # of this chart version on a chart bump.
        "crds": {"enabled": True, "upgradeJob": {"enabled": True}},
    }
    return HelmRelease(
        mon.release_name,
        versions.KUBE_PROMETHEUS_STACK_CHART,
        versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
        versions.KUBE_PROMETHEUS_STACK_REPO,
        mon.namespace,
        values,
        crd_upgrade="hook",
    )


def monitoring_objects(cfg: PlatformConfig) -> list[Obj]:
    # node-exporter needs host namespaces.
    return [namespace(cfg, cfg.monitoring.namespace, {"pod-security.kubernetes.io/enforce": "privileged"})]


# --- KEDA ----------------------------------------------------------------------------------------


def keda_release(cfg: PlatformConfig) -> HelmRelease:
    replicas = 2 if cfg.tier == PRODUCTION else 1
    values: Obj = {
        "operator": {"replicaCount": replicas},
        "metricsServer": {"replicaCount": replicas},
        "prometheus": {
            "operator": {"enabled": True, "serviceMonitor": {"enabled": cfg.monitoring.enabled}},
            "metricServer": {"enabled": True, "serviceMonitor": {"enabled": cfg.monitoring.enabled}},
        },
    }
    return HelmRelease(
        "keda",
        versions.KEDA_CHART,
        versions.KEDA_CHART_VERSION,
        versions.KEDA_REPO,
        cfg.keda.namespace,
        values,
        crd_upgrade="templates",  # the chart's templates/crds/: Helm upgrades them with the chart
    )


def keda_objects(cfg: PlatformConfig) -> list[Obj]:
    return [namespace(cfg, cfg.keda.namespace, {"pod-security.kubernetes.io/enforce": "restricted"})]
