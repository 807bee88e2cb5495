"""The platform stack's rules across fields (after pydantic's field rules): cluster source, GPU
sharing, Alertmanager receivers."""

from __future__ import annotations

from typing import Any

from tritonops.k8s.config import ConfigError
from tritonops.k8s.config_keys import check_object_name, config_key


def check(cfg: Any, source: str | None) -> None:
    if cfg.cluster.cluster_stack and cfg.cluster.kubeconfig:
        raise ConfigError(config_key("platform", ("cluster",)), "set clusterStack or kubeconfig, not both", source)
    for name, replicas in cfg.gpu_operator.time_slicing.items():
        if replicas < 2:
            raise ConfigError(
                config_key("platform", ("gpuOperator", "timeSlicing", name)),
                f"time-slicing replicas must be >= 2, got {replicas}",
                source,
            )
    if cfg.gpu_operator.time_slicing and cfg.gpu_operator.mig_strategy != "none":
        raise ConfigError(config_key("platform", ("gpuOperator", "migStrategy")), "use time-slicing or MIG, not both",
                          source)
    check_object_name(
        ("monitoring", "grafanaAdminSecret"), cfg.monitoring.grafana_admin_secret, "Secret", source, "platform"
    )
    am = cfg.monitoring.alertmanager
    names = [r.name for r in am.receivers]
    for field, value in (
        ("defaultReceiver", am.default_receiver),
        ("criticalReceiver", am.critical_receiver),
    ):
        if value is not None and value not in names:
            raise ConfigError(
                config_key("platform", ("monitoring", "alertmanager", field)),
                f"no receiver named {value!r} (receivers: {', '.join(names) or 'none'})",
                source,
            )
    for i, r in enumerate(am.receivers):
        if r.type == "slack" and not r.channel:
            raise ConfigError(
                config_key("platform", ("monitoring", "alertmanager", "receivers", i, "channel")),
                "a slack receiver needs a channel",
                source,
            )
