"""The cluster-aws stack's rules across fields (after pydantic's field rules): GPU pools, the public
API endpoint, the system pool."""

from __future__ import annotations

import ipaddress
from typing import Any

from tritonops.k8s.catalog import GPU_AMI_TYPES, gpu_family
from tritonops.k8s.config import ConfigError
from tritonops.k8s.keys import check_dns_label, config_key


def check(cfg: Any, source: str | None) -> None:
    seen: set[str] = set()
    for i, pool in enumerate(cfg.gpu_node_pools):
        check_dns_label("cluster-aws", ("gpuNodePools", i, "name"), pool.name, source)
        if pool.name in seen:
            raise ConfigError(config_key("cluster-aws", ("gpuNodePools", i, "name")), "duplicate pool name", source)
        seen.add(pool.name)
        mem = set()
        for j, itype in enumerate(pool.instance_types):
            try:
                mem.add(gpu_family(itype).memory_mib)
            except ValueError as exc:
                raise ConfigError(
                    config_key("cluster-aws", ("gpuNodePools", i, "instanceTypes", j)), str(exc), source
                ) from exc
        if len(mem) > 1:
            raise ConfigError(
                config_key("cluster-aws", ("gpuNodePools", i, "instanceTypes")),
                "all instance types of a pool must have the same GPU memory (the memory budget relies on it)",
                source,
            )
        if (pool.provisioner == "karpenter") != (pool.karpenter is not None):
            raise ConfigError(
                config_key("cluster-aws", ("gpuNodePools", i, "karpenter")),
                "set exactly when provisioner is karpenter (maxGpus, consolidateAfter, expireAfter, ...)",
                source,
            )
        if pool.ami_type not in GPU_AMI_TYPES:  # pragma: no cover - Literal already refuses it
            raise ConfigError(config_key("cluster-aws", ("gpuNodePools", i, "amiType")), "not a GPU AMI", source)
        if pool.gpu_sharing and pool.ami_type.startswith("BOTTLEROCKET"):
            raise ConfigError(
                config_key("cluster-aws", ("gpuNodePools", i, "gpuSharing")),
                "Bottlerocket runs its own NVIDIA device plugin (the GPU Operator's is off on these nodes), "
                "which the operator's time-slicing config does not reach: use an AL2023 pool to share GPUs",
                source,
            )
        if not pool.min_size <= pool.desired_size <= pool.max_size:
            raise ConfigError(
                config_key("cluster-aws", ("gpuNodePools", i, "desiredSize")),
                f"must lie within minSize..maxSize ({pool.min_size}..{pool.max_size}), got {pool.desired_size}",
                source,
            )
    _check_public_endpoint(cfg, source)
    sys_pool = cfg.system_node_pool
    if not sys_pool.min_size <= sys_pool.desired_size <= sys_pool.max_size:
        raise ConfigError(
            config_key("cluster-aws", ("systemNodePool", "desiredSize")), "must lie within minSize..maxSize", source
        )


def _check_public_endpoint(cfg: Any, source: str | None) -> None:
    """A public API endpoint names who may reach it: EKS opens an empty list to 0.0.0.0/0."""
    key = config_key("cluster-aws", ("publicAccessCidrs",))
    if cfg.public_access_cidrs is None:  # not set yet: the user gives it; render and the engine refuse until then
        return
    if cfg.endpoint_public_access and not cfg.public_access_cidrs:
        raise ConfigError(key, "endpointPublicAccess is true: list the CIDRs that may reach the API endpoint "
                               "(EKS would open it to 0.0.0.0/0), or set endpointPublicAccess: false", source)
    if cfg.public_access_cidrs and not cfg.endpoint_public_access:
        raise ConfigError(key, "set only with endpointPublicAccess: true (the endpoint is private)", source)
    for j, cidr in enumerate(cfg.public_access_cidrs):
        try:
            ipaddress.ip_network(cidr)
        except ValueError as exc:
            raise ConfigError(config_key("cluster-aws", ("publicAccessCidrs", j)), f"{cidr!r} is not a CIDR: {exc}",
                              source) from exc
