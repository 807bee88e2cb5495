"""Capacity that grows and is not taken by the wrong work: CPU pods off GPU nodes, the GPU Operator's
device plugin off on Bottlerocket, ephemeral storage reserved for every emptyDir (issue 33, Deliver-4)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_harness import envs, triton_config
from tritonops.k8s import eks, karpenter, triton, waits
from tritonops.k8s.config import ClusterAwsConfig, ConfigError
from tritonops.k8s.labels import GPU_RESOURCE
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file


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
