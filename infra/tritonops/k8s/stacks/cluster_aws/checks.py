"""The cluster-aws stack's rules across fields (after pydantic's field rules): GPU pools, the public
API endpoint and who reaches a private one, the access entries, the system pool."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from tritonops import world
from tritonops.k8s.catalog import GPU_AMI_TYPES, gpu_family
from tritonops.k8s.config import ConfigError
from tritonops.k8s.config_keys import DNS_LABEL, check_dns_label, config_key


def check(cfg: Any, source: str | None) -> None:
    _check_version(cfg, source)
    _check_instance_types(cfg, source)
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
    _check_api_access(cfg, source)
    _check_access_entries(cfg, source)
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


# An IAM role or user (what an access entry takes): arn:<partition>:iam::<account>:role|user/[path/]name.
IAM_PRINCIPAL_ARN = re.compile(r"^arn:aws(-cn|-us-gov)?:iam::\d{12}:(role|user)/[\w+=,.@/-]{1,512}$")
SECURITY_GROUP_ID = re.compile(r"^sg-([0-9a-f]{8}|[0-9a-f]{17})$")


def _check_api_access(cfg: Any, source: str | None) -> None:
    """Who reaches the API endpoint from inside the VPC: CIDRs and security groups admitted on 443 by the
    cluster security group. A private endpoint answers nobody else, so one of the two is required there."""
    for j, cidr in enumerate(cfg.api_access_cidrs):
        try:
            ipaddress.ip_network(cidr)
        except ValueError as exc:
            raise ConfigError(config_key("cluster-aws", ("apiAccessCidrs", j)), f"{cidr!r} is not a CIDR: {exc}",
                              source) from exc
    for j, group in enumerate(cfg.api_access_security_group_ids):
        if not SECURITY_GROUP_ID.match(group):
            raise ConfigError(config_key("cluster-aws", ("apiAccessSecurityGroupIds", j)),
                              f"{group!r} is not a security group id (sg- and 8 or 17 hex digits)", source)
    if not cfg.endpoint_public_access and not cfg.api_access_cidrs and not cfg.api_access_security_group_ids:
        raise ConfigError(
            config_key("cluster-aws", ("apiAccessCidrs",)),
            "the API endpoint is private (endpointPublicAccess: false) and the cluster security group admits "
            "nothing on 443 but the cluster's own nodes: `pulumi up` of the Kubernetes resources and kubectl would "
            "time out. List where they run from: apiAccessCidrs (the runner's or the VPC's CIDR) or "
            "apiAccessSecurityGroupIds (the runner's security group)",
            source,
        )


def _check_access_entries(cfg: Any, source: str | None) -> None:
    """Each principal an IAM role or user ARN (not an STS session, a group or an account root), each
    (principal, policy) once, namespaces DNS labels."""
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(cfg.access_entries):
        key = config_key("cluster-aws", ("accessEntries", i, "principalArn"))
        arn = entry.principal_arn
        if ":sts::" in arn and ":assumed-role/" in arn:
            raise ConfigError(key, f"{arn!r} is an STS session (what `aws sts get-caller-identity` prints for a "
                                   "role): give the role's own ARN, arn:aws:iam::ACCOUNT:role/NAME", source)
        if not IAM_PRINCIPAL_ARN.match(arn):
            raise ConfigError(key, f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::ACCOUNT:role/NAME or "
                                   ":user/NAME; for a group, give the role its members assume)", source)
        if (arn, entry.policy) in seen:
            raise ConfigError(config_key("cluster-aws", ("accessEntries", i, "policy")),
                              f"{entry.policy} is associated with {arn} twice (one association per policy: "
                              "list its namespaces in one entry)", source)
        seen.add((arn, entry.policy))
        for j, ns in enumerate(entry.namespaces):
            if not DNS_LABEL.match(ns):
                raise ConfigError(config_key("cluster-aws", ("accessEntries", i, "namespaces", j)),
                                  f"{ns!r} is not a namespace name (a DNS label: lowercase, digits, '-')", source)


def _check_version(cfg: Any, source: str | None) -> None:
    """A version EKS creates today (tritonops.world.today(): TRITONOPS_TODAY moves it) that every pinned
    chart supports."""
    key = config_key("cluster-aws", ("kubernetesVersion",))
    verdict, why = world.eks_support(cfg.kubernetes_version, world.today())
    if verdict == "error":
        raise ConfigError(key, why, source)
    problems = world.chart_problems(cfg.kubernetes_version)
    if problems:
        raise ConfigError(key, "; ".join(problems), source)


def version_warnings(cfg: Any) -> list[tuple[str, str]]:
    """(config key, message) of what is allowed but ends soon: extended support, or a support window
    ending within 90 days (render --check-config prints them and still exits 0)."""
    verdict, why = world.eks_support(cfg.kubernetes_version, world.today())
    return [(config_key("cluster-aws", ("kubernetesVersion",)), why)] if verdict == "warn" else []


def _check_instance_types(cfg: Any, source: str | None) -> None:
    """Every instance type a pool names has its sizes in tritonops.world (what the fit check reads)."""
    pools = [("systemNodePool",), *(("gpuNodePools", i) for i in range(len(cfg.gpu_node_pools)))]
    for loc, pool in zip(pools, [cfg.system_node_pool, *cfg.gpu_node_pools], strict=True):
        for j, itype in enumerate(pool.instance_types):
            try:
                world.instance_type(itype)
            except KeyError as exc:
                raise ConfigError(config_key("cluster-aws", (*loc, "instanceTypes", j)), exc.args[0], source) from None
