"""Capacity that grows and is not taken by the wrong work: CPU pods off GPU nodes, the GPU Operator's
device plugin off on Bottlerocket, ephemeral storage reserved for every emptyDir (issue 33, Deliver-4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_harness import as_ints, committed, envs, triton_config
from tritonops import versions
from tritonops.k8s import waits
from tritonops.k8s.config import ClusterAwsConfig, ConfigError
from tritonops.k8s.labels import GPU_RESOURCE
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.cluster_aws import autoscaler, eks, karpenter
from tritonops.k8s.stacks.triton import objects as triton


def _pods(env: str) -> list[tuple[str, dict[str, Any]]]:
    cfg = triton_config(env)
    out = []
    for svc in cfg.model_services:
        for o in triton.service_objects(cfg, svc):
            if o["kind"] == "Deployment":
                out.append((o["metadata"]["name"], o["spec"]["template"]["spec"]))
            elif o["kind"] == "CronJob":
                out.append((o["metadata"]["name"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return out


def _gpu_node_labels(env: str) -> list[dict[str, str]]:
    cfg = load_stack_config("cluster-aws", env)
    assert isinstance(cfg, ClusterAwsConfig)
    return [eks.node_labels(p) for p in cfg.gpu_node_pools]


def _schedulable(pod: dict[str, Any], node: dict[str, str], taints: list[dict[str, str]]) -> bool:
    """The scheduler's node selector, required node affinity and taint rules, as far as the pods use them."""
    if any(node.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    terms = (
        pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    ).get("nodeSelectorTerms")
    if terms is not None:
        ops = {
            "In": lambda e: node.get(e["key"]) in e["values"],
            "NotIn": lambda e: node.get(e["key"]) not in e["values"],
            "Exists": lambda e: e["key"] in node,
            "DoesNotExist": lambda e: e["key"] not in node,
        }
        if not any(all(ops[e["operator"]](e) for e in t.get("matchExpressions", [])) for t in terms):
            return False
    tolerated = {(t.get("key"), t.get("effect")) for t in pod.get("tolerations", [])}
    return all((t["key"], t["effect"]) in tolerated for t in taints)


GPU_TAINT = [{"key": GPU_RESOURCE, "effect": "NoSchedule"}]


@pytest.mark.parametrize("env", envs())
def test_cpu_pods_never_land_on_gpu_nodes(env: str) -> None:
    """Before: the drift CronJob selected the service's GPU pool and tolerated its taint (every 15 min)."""
    gpu_nodes = _gpu_node_labels(env)
    system_node = {"tritonops.io/node-pool": "system"}
    checked = 0
    for name, pod in _pods(env):
        wants_gpu = any(GPU_RESOURCE in c.get("resources", {}).get("requests", {}) for c in pod["containers"])
        if wants_gpu:
            continue
        checked += 1
        assert not any(t.get("key") == GPU_RESOURCE for t in pod.get("tolerations", [])), name
        for labels in gpu_nodes:  # neither tainted nor untainted: even a GPU node without its taint
            assert not _schedulable(pod, labels, GPU_TAINT) and not _schedulable(pod, labels, []), (name, labels)
        assert _schedulable(pod, system_node, []), name
    assert checked >= 1  # the drift CronJob at least


def test_bottlerocket_pools_turn_off_the_operators_device_plugin() -> None:
    cfg = load_stack_config("cluster-aws", "prod")
    assert isinstance(cfg, ClusterAwsConfig)
    by_ami = {p.ami_type: p for p in cfg.gpu_node_pools}
    bottlerocket = by_ami["BOTTLEROCKET_x86_64_NVIDIA"]  # prod gpu-l40s (a Karpenter pool)
    assert eks.node_labels(bottlerocket)[eks.DEVICE_PLUGIN_DEPLOY_LABEL] == "false"
    assert eks.DEVICE_PLUGIN_DEPLOY_LABEL not in eks.node_labels(by_ami["AL2023_x86_64_NVIDIA"])
    # the nodes Karpenter launches for it carry the label from their first moment
    pool = karpenter.node_pool(cfg, bottlerocket)
    assert pool["spec"]["template"]["metadata"]["labels"][eks.DEVICE_PLUGIN_DEPLOY_LABEL] == "false"
    # a managed Bottlerocket group too
    managed = bottlerocket.model_copy(update={"provisioner": "managed", "karpenter": None})
    assert eks.node_group_spec(cfg, managed)["labels"][eks.DEVICE_PLUGIN_DEPLOY_LABEL] == "false"


@pytest.mark.parametrize("env", envs())
def test_every_emptydir_has_ephemeral_storage_requested_and_limited(env: str) -> None:
    """Before: 41 GiB of emptyDirs (tmp, releases) with no ephemeral-storage request: the scheduler
    placed pods on nodes whose disk could not hold them, and the kubelet evicted them later."""
    checked = 0
    for name, pod in _pods(env):
        disk = sum(
            waits.quantity_mib(v["emptyDir"]["sizeLimit"])
            for v in pod.get("volumes", [])
            if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory"
        )
        if not disk:
            continue
        checked += 1
        for v in pod["volumes"]:
            if "emptyDir" in v:
                assert "sizeLimit" in v["emptyDir"], (name, v["name"])
        for group in ("initContainers", "containers"):
            for c in pod.get(group, []):
                res = c["resources"]
                assert res["requests"]["ephemeral-storage"] == res["limits"]["ephemeral-storage"], (name, c["name"])
        total = sum(waits.quantity_mib(c["resources"]["limits"]["ephemeral-storage"]) for c in pod["containers"])
        assert total >= disk, (name, total, disk)
    assert checked >= 1


def test_bottlerocket_pool_refuses_time_slicing() -> None:
    """The operator's time-slicing config reaches only its own device plugin, which Bottlerocket runs without."""
    raw = read_stack_file("cluster-aws", "prod")[0]
    raw["gpuNodePools"][1] = {**raw["gpuNodePools"][1], "gpuSharing": "shared-2"}
    with pytest.raises(ConfigError, match=r"gpuNodePools\[1\]\.gpuSharing: Bottlerocket runs its own"):
        parse_config("cluster-aws", raw)


# --- managed GPU groups grow: cluster-autoscaler ---------------------------------------------------


def test_managed_gpu_group_gets_cluster_autoscaler_with_its_irsa_role() -> None:
    """Before: nothing changed a managed group's desired size, so prod vision stopped at gpu-a10g's 3
    nodes while KEDA asked for up to 10."""
    mocks = committed("cluster-aws", "prod")
    (rel,) = [r for r in mocks.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "cluster-autoscaler"]
    assert (rel.inputs["chart"], rel.inputs["version"]) == (
        versions.CLUSTER_AUTOSCALER_CHART, versions.CLUSTER_AUTOSCALER_CHART_VERSION)
    assert rel.inputs["repositoryOpts"]["repo"] == versions.CLUSTER_AUTOSCALER_REPO
    values = as_ints(rel.inputs["values"])
    assert values["autoDiscovery"] == {"clusterName": "tritonops-prod"} and values["awsRegion"] == "us-west-2"
    assert values["image"]["tag"].startswith(f"v{versions.KUBERNETES_VERSION}.")  # its minor is the cluster's
    roles = {r.inputs["name"]: r for r in mocks.of_type("aws:iam/role:Role") if "name" in r.inputs}
    cfg = load_stack_config("cluster-aws", "prod")
    assert isinstance(cfg, ClusterAwsConfig)
    role = roles[autoscaler.role_name(cfg)]
    sa = values["rbac"]["serviceAccount"]
    assert sa["annotations"]["eks.amazonaws.com/role-arn"] == f"arn:aws:iam::111122223333:role/{role.name}"
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert f"system:serviceaccount:kube-system:{sa['name']}" in trust.values()
    (policy,) = [p for p in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("cluster-autoscaler")]
    scale = json.loads(policy.inputs["policy"])["Statement"][1]
    assert scale["Condition"] == {"StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/tritonops-prod": "owned"}}
    # dev and staging have only Karpenter pools: no cluster-autoscaler
    for env in ("dev", "staging"):
        assert not [r for r in committed("cluster-aws", env).of_type("kubernetes:helm.sh/v3:Release")
                    if r.inputs["name"] == "cluster-autoscaler"]


@pytest.mark.parametrize("env", envs())
def test_every_keda_max_has_capacity_in_its_pool(env: str) -> None:
    """Each autoscaled service's KEDA max fits what its pool can grow to (at least one GPU per node):
    a managed group's maxSize with cluster-autoscaler installed, a Karpenter pool's maxGpus."""
    cluster = load_stack_config("cluster-aws", env)
    assert isinstance(cluster, ClusterAwsConfig)
    pools = {p.name: p for p in cluster.gpu_node_pools}
    growing = {p.name for p in autoscaler.managed_gpu_pools(cluster)}
    for svc in triton_config(env).model_services:
        if not svc.autoscaling.enabled:
            continue
        pool = pools[svc.node_pool]
        need = svc.autoscaling.max_replicas * svc.gpus
        if pool.provisioner == "karpenter":
            assert pool.karpenter is not None and pool.karpenter.max_gpus >= need, (svc.name, pool.name)
        else:
            assert pool.name in growing and pool.max_size >= need, (svc.name, pool.name)
