"""The platform stack's releases (tritonops.k8s.stacks.platform.charts): GPU Operator, monitoring, Alertmanager, KEDA."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tritonops import versions
from tritonops.k8s.config import ConfigError, PlatformConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.platform import charts as platform


def _platform(env: str = "prod") -> PlatformConfig:
    cfg = load_stack_config("platform", env)
    assert isinstance(cfg, PlatformConfig)
    return cfg


# --- platform ------------------------------------------------------------------------------------


def test_gpu_operator_release_pinned_and_toggles() -> None:
    rel = platform.gpu_operator_release(_platform("dev"))
    assert (rel.chart, rel.version, rel.repo) == (
        versions.GPU_OPERATOR_CHART,
        versions.GPU_OPERATOR_CHART_VERSION,
        versions.GPU_OPERATOR_REPO,
    )
    assert rel.values["driver"]["enabled"] is False and rel.values["toolkit"]["enabled"] is False
    assert rel.values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert rel.values["devicePlugin"]["config"]["name"] == platform.TIME_SLICING_CONFIG_MAP
    assert "devicePlugin" not in platform.gpu_operator_release(_platform("prod")).values


def test_time_slicing_config_map() -> None:
    cm = platform.time_slicing_config_map(_platform("dev"))
    assert cm is not None
    doc = yaml.safe_load(cm["data"]["shared-2"])
    assert doc["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    assert platform.time_slicing_config_map(_platform("prod")) is None


def test_mig_strategy_passed_through() -> None:
    raw = copy.deepcopy(read_stack_file("platform", "prod")[0])
    raw["gpuOperator"]["migStrategy"] = "mixed"
    cfg = parse_config("platform", raw)
    assert isinstance(cfg, PlatformConfig)
    assert platform.gpu_operator_release(cfg).values["mig"] == {"strategy": "mixed"}
    raw["gpuOperator"]["timeSlicing"] = {"x": 2}
    with pytest.raises(ConfigError, match="gpuOperator.migStrategy"):
        parse_config("platform", raw)


def test_alertmanager_config_from_receivers_and_secrets() -> None:
    cfg = _platform("prod")
    doc = platform.alertmanager_config(cfg, {"slackOps": "https://hooks/ops", "pagerdutyRoutingKey": "rk"})
    by_name = {r["name"]: r for r in doc["receivers"]}
    assert by_name["ops-slack"]["slack_configs"][0]["api_url"] == "https://hooks/ops"
    assert by_name["oncall-pagerduty"]["pagerduty_configs"][0]["routing_key"] == "rk"
    assert doc["route"]["receiver"] == "ops-slack"
    assert {"receiver": "oncall-pagerduty", "matchers": ['severity="critical"']} in doc["route"]["routes"]
    with pytest.raises(ValueError, match=r"tritonops-platform:alertmanagerSecrets\.pagerdutyRoutingKey"):
        platform.alertmanager_config(cfg, {"slackOps": "x"})


def test_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool (Debian prometheus-alertmanager) is not installed")
    doc = platform.alertmanager_config(
        _platform("prod"), {"slackOps": "https://hooks.example/ops", "pagerdutyRoutingKey": "rk"}
    )
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_monitoring_release_values() -> None:
    rel = platform.monitoring_release(_platform("prod"))
    assert rel.version == versions.KUBE_PROMETHEUS_STACK_CHART_VERSION
    spec = rel.values["prometheus"]["prometheusSpec"]
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False and spec["ruleSelectorNilUsesHelmValues"] is False
    assert spec["replicas"] == 2
    assert rel.values["alertmanager"]["alertmanagerSpec"]["configSecret"] == platform.ALERTMANAGER_SECRET
    assert rel.values["grafana"]["sidecar"]["dashboards"]["label"] == "grafana_dashboard"
    assert "slack" not in yaml.safe_dump(rel.values)  # no receiver secrets in Helm values


def test_keda_release() -> None:
    assert platform.keda_release(_platform("prod")).values["operator"]["replicaCount"] == 2
    assert platform.keda_release(_platform("dev")).version == versions.KEDA_CHART_VERSION


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_gpu_operator_skips_driver_where_the_ami_ships_it(env: str) -> None:
    from tritonops.k8s.catalog import GPU_AMI_TYPES

    cluster = load_stack_config("cluster-aws", env)
    ops = _platform(env).gpu_operator
    if all(p.ami_type in GPU_AMI_TYPES for p in cluster.gpu_node_pools):  # type: ignore[union-attr]
        assert not ops.driver_enabled and not ops.toolkit_enabled
