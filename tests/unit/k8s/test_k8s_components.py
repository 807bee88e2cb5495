"""Each ComponentResource under Pulumi mocks: type token, children, secrets, validation."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from k8s_harness import as_ints, is_secret, run_fn, unwrap
from tritonops import versions
from tritonops.k8s import labels
from tritonops.k8s.component import k8s_object
from tritonops.k8s.config import ClusterAwsConfig, PlatformConfig, TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.cluster_aws.components import GpuNodePool, GpuNodePoolArgs
from tritonops.k8s.stacks.platform import charts as platform
from tritonops.k8s.stacks.platform.components import (
    GpuOperator,
    GpuOperatorArgs,
    Keda,
    KedaArgs,
    Monitoring,
    MonitoringArgs,
)
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.k8s.stacks.triton.components import (
    TritonNamespace,
    TritonNamespaceArgs,
    TritonService,
    TritonServiceArgs,
)


def _cfg(stack: str, env: str) -> Any:
    return load_stack_config(stack, env)


def test_gpu_node_pool_creates_tainted_node_group_and_role() -> None:
    cfg: ClusterAwsConfig = _cfg("cluster-aws", "prod")
    pool = cfg.gpu_node_pools[0]
    mocks = run_fn(lambda: [GpuNodePool("gpu-a10g", GpuNodePoolArgs(cfg, pool, "tritonops-prod"))])
    assert [r.name for r in mocks.of_type("tritonops:aws:GpuNodePool")] == ["gpu-a10g"]
    (ng,) = mocks.of_type("aws:eks/nodeGroup:NodeGroup")
    i = as_ints(ng.inputs)
    assert i["clusterName"] == "tritonops-prod"
    assert i["instanceTypes"] == ["g5.2xlarge", "g5.4xlarge"]
    assert i["amiType"] == "AL2023_x86_64_NVIDIA" and i["capacityType"] == "ON_DEMAND"
    assert i["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert i["scalingConfig"] == {"minSize": 3, "maxSize": 10, "desiredSize": 3}
    assert i["diskSize"] == 200 and i["labels"][labels.NODE_POOL_LABEL] == "gpu-a10g"
    assert i["nodeRoleArn"].endswith("gpu-a10g-role")
    arns = {r.inputs["policyArn"] for r in mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    assert any(a.endswith("AmazonEKSWorkerNodePolicy") for a in arns) and len(arns) == 3


def test_gpu_node_pool_args_refuse_foreign_pool() -> None:
    cfg: ClusterAwsConfig = _cfg("cluster-aws", "prod")
    other: ClusterAwsConfig = _cfg("cluster-aws", "dev")
    with pytest.raises(ValueError, match="pool: 'gpu-l4'"):
        GpuNodePoolArgs(cfg, other.gpu_node_pools[0], "x")


def test_gpu_operator_release_and_time_slicing() -> None:
    cfg: PlatformConfig = _cfg("platform", "dev")
    mocks = run_fn(lambda: [GpuOperator("gpu-operator", GpuOperatorArgs(cfg))])
    assert mocks.of_type("tritonops:platform:GpuOperator")
    (rel,) = mocks.of_type("kubernetes:helm.sh/v3:Release")
    assert rel.inputs["chart"] == "gpu-operator" and rel.inputs["version"] == versions.GPU_OPERATOR_CHART_VERSION
    assert rel.inputs["repositoryOpts"] == {"repo": versions.GPU_OPERATOR_REPO}
    assert rel.inputs["namespace"] == "gpu-operator" and rel.inputs["atomic"] is True
    assert as_ints(rel.inputs["values"]) == platform.gpu_operator_release(cfg).values
    (cm,) = mocks.of_type("kubernetes:core/v1:ConfigMap")
    assert cm.inputs["metadata"]["name"] == platform.TIME_SLICING_CONFIG_MAP


def test_monitoring_alertmanager_config_is_a_secret() -> None:
    cfg: PlatformConfig = _cfg("platform", "prod")
    secrets = pulumi.Output.secret({"slackOps": "https://hooks/ops", "pagerdutyRoutingKey": "rk-1"})
    password = pulumi.Output.secret("grafana-pw-1")
    mocks = run_fn(lambda: [Monitoring("monitoring", MonitoringArgs(cfg, secrets, password))])
    secrets = {s.inputs["metadata"]["name"]: s for s in mocks.of_type("kubernetes:core/v1:Secret")}
    secret, grafana = secrets[platform.ALERTMANAGER_SECRET], secrets[cfg.monitoring.grafana_admin_secret]
    assert is_secret(secret.inputs["stringData"])
    text = unwrap(secret.inputs["stringData"])["alertmanager.yaml"]
    assert "rk-1" in text and "https://hooks/ops" in text
    assert is_secret(grafana.inputs["stringData"])
    assert unwrap(grafana.inputs["stringData"]) == {"admin-user": "admin", "admin-password": "grafana-pw-1"}
    (rel,) = mocks.of_type("kubernetes:helm.sh/v3:Release")
    assert rel.inputs["chart"] == "kube-prometheus-stack"
    assert rel.inputs["name"] == "kube-prometheus-stack"  # fixed: KEDA's Prometheus URL depends on it
    assert "rk-1" not in str(rel.inputs)  # the receiver secrets never reach the Helm values
    assert "grafana-pw-1" not in str(rel.inputs)  # nor Grafana's password


def test_keda_release() -> None:
    cfg: PlatformConfig = _cfg("platform", "prod")
    mocks = run_fn(lambda: [Keda("keda", KedaArgs(cfg))])
    (rel,) = mocks.of_type("kubernetes:helm.sh/v3:Release")
    assert (rel.inputs["chart"], rel.inputs["version"]) == ("keda", versions.KEDA_CHART_VERSION)
    (ns,) = mocks.of_type("kubernetes:core/v1:Namespace")
    assert ns.inputs["metadata"]["name"] == "keda"


def test_disabled_components_refuse_to_build() -> None:
    cfg: PlatformConfig = _cfg("platform", "prod")
    off = cfg.model_copy(update={"keda": cfg.keda.model_copy(update={"enabled": False})})
    with pytest.raises(ValueError, match="config.keda.enabled"):
        KedaArgs(off)


def test_triton_namespace_children_and_admin_secret() -> None:
    cfg: TritonStackConfig = _cfg("triton", "prod")
    mocks = run_fn(lambda: [TritonNamespace("triton", TritonNamespaceArgs(cfg, "s3cret"))])
    kinds = sorted(r.typ for r in mocks.resources)
    assert "kubernetes:scheduling.k8s.io/v1:PriorityClass" in kinds
    assert "kubernetes:monitoring.coreos.com/v1:PrometheusRule" in kinds
    (secret,) = mocks.of_type("kubernetes:core/v1:Secret")
    assert is_secret(secret.inputs["stringData"]) and unwrap(secret.inputs["stringData"]) == {"token": "s3cret"}


def test_triton_service_children_match_builders() -> None:
    cfg: TritonStackConfig = _cfg("triton", "prod")
    svc = cfg.model_services[0]
    arn = "arn:aws:iam::111122223333:role/tritonops-prod-model-reader"  # prod's modelReader (cluster-aws's output)
    mocks = run_fn(lambda: [TritonService(svc.name, TritonServiceArgs(cfg, svc, arn))])
    assert [r.name for r in mocks.of_type("tritonops:triton:TritonService")] == ["vision"]
    captured = {
        (r.inputs["kind"], r.inputs["metadata"]["name"]): as_ints(r.inputs)
        for r in mocks.resources
        if r.typ.startswith("kubernetes:")
    }
    for obj in triton.service_objects(cfg, svc, arn):
        assert captured[(obj["kind"], obj["metadata"]["name"])] == obj
    assert mocks.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    assert mocks.of_type("kubernetes:gateway.networking.k8s.io/v1:GRPCRoute")


def test_triton_service_args_validate() -> None:
    cfg: TritonStackConfig = _cfg("triton", "prod")
    dev: TritonStackConfig = _cfg("triton", "dev")
    with pytest.raises(ValueError, match="service: 'vision'"):
        TritonServiceArgs(cfg, dev.model_services[0], "arn:aws:iam::111122223333:role/tritonops-dev-model-reader")
    empty = cfg.model_services[0].model_copy(update={"models": []})
    with pytest.raises(ValueError):
        TritonServiceArgs(cfg.model_copy(update={"model_services": [empty]}), empty)


def test_custom_resource_with_extra_top_level_fields_refused() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {}, "status": {}}
    with pytest.raises(ValueError, match="only metadata and spec"):
        run_fn(lambda: [k8s_object(obj, pulumi.ResourceOptions())])
