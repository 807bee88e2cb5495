"""GPU instance families on AWS and what one GPU of each offers.

The memory budget (``tritonops.k8s.stacks.triton.budget``) and the node-pool validation both read this table, so an
instance type outside it is refused before anything is created.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB_PER_GIB = 1024


@dataclass(frozen=True)
class GpuFamily:
    family: str
    gpu: str
    memory_mib: int  # usable memory of one GPU (what nvidia-smi reports as total)
    arch: str = "x86_64"


# Families of EC2 instance types with NVIDIA GPUs that EKS GPU AMIs support.
GPU_FAMILIES: dict[str, GpuFamily] = {
    f.family: f
    for f in (
        GpuFamily("g4dn", "T4", 15360),
        GpuFamily("g5", "A10G", 23028),
        GpuFamily("g6", "L4", 23034),
        GpuFamily("g6e", "L40S", 46068),
        GpuFamily("p4d", "A100-40GB", 40960),
        GpuFamily("p4de", "A100-80GB", 81920),
        GpuFamily("p5", "H100", 81559),
        GpuFamily("p5e", "H200", 143771),
    )
}

# EKS managed node group AMI types that ship the NVIDIA driver (and container toolkit).
GPU_AMI_TYPES = ("AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA")
# The same AMIs as Karpenter EC2NodeClass AMI families (amiSelectorTerms alias family).
KARPENTER_AMI_FAMILIES = {"AL2023_x86_64_NVIDIA": "al2023", "BOTTLEROCKET_x86_64_NVIDIA": "bottlerocket"}


def instance_family(instance_type: str) -> str:
    """``g5.2xlarge`` -> ``g5``."""
    return instance_type.split(".", 1)[0]


def gpu_family(instance_type: str) -> GpuFamily:
    """The GPU family of an EC2 instance type; ``ValueError`` naming the known families otherwise."""
    fam = instance_family(instance_type)
    if "." not in instance_type or fam not in GPU_FAMILIES:
        known = ", ".join(sorted(GPU_FAMILIES))
        raise ValueError(f"unknown GPU instance type family {fam!r} in {instance_type!r} (known: {known})")
    return GPU_FAMILIES[fam]
