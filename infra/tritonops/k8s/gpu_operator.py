"""Where the NVIDIA GPU Operator's components run: per GPU node, from its labels and the chart's values.

The operator deploys each component (operand) as a DaemonSet whose nodeSelector is
``nvidia.com/gpu.deploy.<operand>=true``; it sets that label to ``true`` on every GPU node that lacks it,
and leaves a node alone where the label is already ``false`` (or ``nvidia.com/gpu.deploy.operands=false``
turns them all off). Its ClusterPolicy has no affinity of its own for the operands: the node labels are
how a pool keeps them off (NVIDIA, "GPU Operator: Installing", "Disabling operands on a node";
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html, read
2026-12-07; the labels in ``gpuStateLabels`` of controllers/state_manager.go, v26.3.3).

An EKS GPU AMI family that brings its own NVIDIA stack (``tritonops.world.AMI_FAMILIES``: Bottlerocket's
NVIDIA variants ship the driver, the toolkit and the device plugin as host services) gets every operand
label ``false`` from the cluster-aws stack (:func:`off_labels`): the operator's device plugin would double
Bottlerocket's, and its validator and dcgm-exporter wait on the operator's own toolkit and runtime class,
which such nodes do not have (dcgm-exporter fails with "Failed to initialize NVML" there:
https://github.com/bottlerocket-os/bottlerocket/issues/3992, read 2026-12-07). So no DCGM series exists
for pods on those pools; Triton's own ``nv_gpu_*`` metrics (its metrics port, the triton stack's
ServiceMonitor) are their GPU metrics. :func:`operands_on` says which operands run on a node: the
platform and triton checks and the tests read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonops import world

DEPLOY_LABEL = "nvidia.com/gpu.deploy.{}"
ALL_OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
DCGM_EXPORTER, VALIDATOR, DEVICE_PLUGIN = "dcgm-exporter", "operator-validator", "device-plugin"

# Operand -> (the chart values key that switches it, the chart's default) for the container workload
# (gpu-operator values.yaml v26.3.3, https://github.com/NVIDIA/gpu-operator/blob/v26.3.3/deployments/
# gpu-operator/values.yaml, read 2026-12-07). The validator has no switch: it runs wherever the operator
# deploys anything.
OPERANDS: dict[str, tuple[str | None, bool]] = {
    "driver": ("driver", True),
    "container-toolkit": ("toolkit", True),
    DEVICE_PLUGIN: ("devicePlugin", True),
    "gpu-feature-discovery": ("gfd", True),
    "dcgm": ("dcgm", False),
    DCGM_EXPORTER: ("dcgmExporter", True),
    "node-status-exporter": ("nodeStatusExporter", False),
    "mig-manager": ("migManager", True),
    VALIDATOR: (None, True),
}


def brings_own_stack(ami_type: str) -> bool:
    """The AMI family ships the NVIDIA device plugin (and so the whole host stack) itself."""
    family = world.AMI_FAMILIES.get(ami_type)
    return family is not None and family.device_plugin


def off_labels(ami_type: str) -> dict[str, str]:
    """Node labels that keep the GPU Operator's operands off a pool of this AMI family ({} where they run)."""
    if not brings_own_stack(ami_type):
        return {}
    return {DEPLOY_LABEL.format(op): "false" for op in OPERANDS}


def operands_on(node_labels: Mapping[str, str], values: Mapping[str, Any]) -> set[str]:
    """The operands the GPU Operator (chart ``values``) runs on a GPU node carrying ``node_labels``."""
    if node_labels.get(ALL_OPERANDS_LABEL) == "false":
        return set()
    out = set()
    for op, (key, default) in OPERANDS.items():
        enabled = default if key is None else bool((values.get(key) or {}).get("enabled", default))
        if enabled and node_labels.get(DEPLOY_LABEL.format(op), "true") != "false":
            out.add(op)
    return out
