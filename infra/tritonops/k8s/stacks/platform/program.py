"""The platform stack's program: its charts and objects, as data for ``tritonops render`` (:func:`render`)
and as the Pulumi program ``stacks/platform/__main__.py`` runs (:func:`program`)."""

from __future__ import annotations

import json
from typing import Any

from tritonops.k8s.config import ConfigError, PlatformConfig, project_name
from tritonops.k8s.engine import kube_provider, pulumi_config
from tritonops.k8s.rendered import RenderSet, secret_ref
from tritonops.k8s.stacks.platform import charts as platform


def render(out: RenderSet, cfg: PlatformConfig) -> RenderSet:
    """The chart releases, their objects and the engine-held Secrets of the platform stack, into ``out``."""
    stack = out.stack
    if cfg.monitoring.enabled:
        out.objects += platform.monitoring_objects(cfg)
        out.releases.append(platform.monitoring_release(cfg))
        out.secrets.append(
            secret_ref(platform.alertmanager_secret(cfg, None), project_name(stack) + ":" + platform.SECRETS_KEY)
        )
        out.secrets.append(
            secret_ref(
                platform.grafana_admin_secret(cfg, None), project_name(stack) + ":" + platform.GRAFANA_PASSWORD_KEY
            )
        )
    if cfg.gpu_operator.enabled:
        out.objects += platform.gpu_operator_objects(cfg)
        out.releases.append(platform.gpu_operator_release(cfg))
    if cfg.keda.enabled:
        out.objects += platform.keda_objects(cfg)
        out.releases.append(platform.keda_release(cfg))
    if cfg.monitoring.enabled:  # as program(): the others' ServiceMonitors need its CRDs
        first = out.releases[0].name
        out.release_deps = {r.name: [first] for r in out.releases[1:]}
    return out


def _alertmanager_secrets(cfg: PlatformConfig) -> Any:
    """The secret config object, checked for every referenced key before anything is created."""
    import pulumi
    from pulumi.runtime.config import get_config

    key = f"{project_name('platform')}:{platform.SECRETS_KEY}"
    raw = get_config(key)
    values = json.loads(raw) if raw else {}
    if not isinstance(values, dict):
        raise ConfigError(key, "must be an object of secretKey -> value")
    platform.alertmanager_config(cfg, values)  # raises naming the missing key
    return pulumi.Output.secret(values)


def _grafana_password() -> Any:
    """Grafana's admin password from the secret config value; refused when unset (never a chart default)."""
    import pulumi

    password = pulumi.Config().get_secret(platform.GRAFANA_PASSWORD_KEY)
    if password is None:
        raise ConfigError(
            f"{project_name('platform')}:{platform.GRAFANA_PASSWORD_KEY}",
            f"set Grafana's admin password: pulumi config set --secret {platform.GRAFANA_PASSWORD_KEY} VALUE",
        )
    return password


def program() -> dict[str, Any]:
    """The platform Pulumi program: monitoring first, then the GPU Operator and KEDA."""
    import pulumi

    from tritonops.k8s.stacks.platform import components  # Pulumi's: only here, never in render

    cfg = pulumi_config("platform")
    assert isinstance(cfg, PlatformConfig)
    # Checked before anything (the provider included) is created.
    secrets: Any = _alertmanager_secrets(cfg) if cfg.monitoring.enabled else {}
    grafana_password: Any = _grafana_password() if cfg.monitoring.enabled else None
    provider = kube_provider("platform", cfg.cluster)
    opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    out: dict[str, Any] = {}
    # Monitoring first: the others' ServiceMonitors need its CRDs.
    after: list[Any] = []
    if cfg.monitoring.enabled:
        out["monitoring"] = components.Monitoring(
            "monitoring", components.MonitoringArgs(cfg, secrets, grafana_password), opts
        )
        after.append(out["monitoring"])
    if cfg.gpu_operator.enabled:
        out["gpu_operator"] = components.GpuOperator("gpu-operator", components.GpuOperatorArgs(cfg), opts,
                                                     depends_on=after)
    if cfg.keda.enabled:
        out["keda"] = components.Keda("keda", components.KedaArgs(cfg), opts, depends_on=after)
    releases = render(RenderSet("platform", ""), cfg).releases
    pulumi.export("releases", {r.name: f"{r.chart}@{r.version}" for r in releases})
    return out
