"""The platform stack's monitoring component: kube-prometheus-stack with its Alertmanager and Grafana
admin Secrets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from tritonops.k8s.components.base import apply_objects, helm_release, k8s_object, require_enabled
from tritonops.k8s.config import PlatformConfig
from tritonops.k8s.stacks.platform import charts as platform

Obj = dict[str, Any]


@dataclass
class MonitoringArgs:
    config: PlatformConfig
    secrets: pulumi.Input[dict[str, str]]  # secretKey -> webhook URL / routing key (a Pulumi secret)
    grafana_password: pulumi.Input[str]  # Grafana's admin password (a Pulumi secret)

    def __post_init__(self) -> None:
        require_enabled(self.config.monitoring.enabled, "monitoring", "Monitoring")


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack (pinned): Prometheus, Grafana with dashboards from ConfigMaps, Alertmanager."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:platform:Monitoring", name, None, opts)
        cfg = args.config
        objs = apply_objects(self, platform.monitoring_objects(cfg))
        # Derived from secrets, so it stays a secret; the Secret is created here, not inside apply.
        config_yaml = pulumi.Output.secret(args.secrets).apply(
            lambda s: _yaml(platform.alertmanager_config(cfg, dict(s or {})))
        )
        secrets = [
            k8s_object(
                obj,
                pulumi.ResourceOptions(parent=self, depends_on=objs, additional_secret_outputs=["stringData", "data"]),
            )
            for obj in (
                platform.alertmanager_secret(cfg, config_yaml),
                platform.grafana_admin_secret(cfg, pulumi.Output.secret(args.grafana_password)),
            )
        ]
        self.release = helm_release(platform.monitoring_release(cfg), self, [*objs, *secrets])
        self.register_outputs({"status": self.release.status})


def _yaml(doc: Obj) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)
