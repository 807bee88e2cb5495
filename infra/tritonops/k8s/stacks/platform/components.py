"""The platform stack's Pulumi components over the chart builders of ``charts``: monitoring
(kube-prometheus-stack with its Secrets), the NVIDIA GPU Operator, KEDA. Imported by
:func:`program.program` only: ``tritonops render`` needs no Pulumi."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from tritonops.k8s.component import apply_objects, helm_release, install_chart, k8s_object, require_enabled
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


@dataclass
class GpuOperatorArgs:
    config: PlatformConfig

    def __post_init__(self) -> None:
        require_enabled(self.config.gpu_operator.enabled, "gpu_operator", "GpuOperator")


class GpuOperator(pulumi.ComponentResource):
    """NVIDIA GPU Operator (pinned chart): device plugin, DCGM exporter + ServiceMonitor, time-slicing/MIG."""

    def __init__(
        self,
        name: str,
        args: GpuOperatorArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:platform:GpuOperator", name, None, opts)
        self.release = install_chart(self, platform.gpu_operator_objects(args.config),
                                     platform.gpu_operator_release(args.config), depends_on)


@dataclass
class KedaArgs:
    config: PlatformConfig

    def __post_init__(self) -> None:
        require_enabled(self.config.keda.enabled, "keda", "Keda")


class Keda(pulumi.ComponentResource):
    """KEDA (pinned chart): scales Triton Deployments on Prometheus queries."""

    def __init__(
        self,
        name: str,
        args: KedaArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:platform:Keda", name, None, opts)
        self.release = install_chart(self, platform.keda_objects(args.config), platform.keda_release(args.config),
                                     depends_on)
