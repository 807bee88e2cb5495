"""Pure builders for the cluster-aws stack: EKS cluster, GPU managed node groups, IAM, who may reach
the cluster (access entries, the private endpoint's security-group rules) and its kubeconfig."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tritonops.core.keys import REPORTS_FOLDER
from tritonops.k8s import gpu_operator
from tritonops.k8s.catalog import gpu_family
from tritonops.k8s.config import ClusterAwsConfig, ConfigError, GpuNodePoolConfig
from tritonops.k8s.labels import GPU_NODE_LABEL, GPU_RESOURCE, NODE_POOL_LABEL, SYSTEM_POOL

Obj = dict[str, Any]

AWS_POLICY = "arn:aws:iam::aws:policy"
NODE_POLICIES = (
    f"{AWS_POLICY}/AmazonEKSWorkerNodePolicy",
    f"{AWS_POLICY}/AmazonEKS_CNI_Policy",
    f"{AWS_POLICY}/AmazonEC2ContainerRegistryReadOnly",
)
CLUSTER_POLICIES = (f"{AWS_POLICY}/AmazonEKSClusterPolicy",)
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# The GPU Operator deploys an operand on a node unless its nvidia.com/gpu.deploy.<operand> label is
# "false": Bottlerocket's NVIDIA variants run their own driver, toolkit and device plugin, so every operand
# (device plugin, validator, dcgm-exporter, ...) stays off there (tritonops.k8s.gpu_operator.off_labels).
DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
BOTTLEROCKET_AMIS = ("BOTTLEROCKET_x86_64_NVIDIA",)


def assume_role_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        },
        sort_keys=True,
    )


def tags(cfg: ClusterAwsConfig, **extra: str) -> dict[str, str]:
    return {
        "tritonops:environment": cfg.environment,
        "tritonops:cluster": cfg.cluster_name,
        **cfg.tags,
        **extra,
    }


def cluster_spec(cfg: ClusterAwsConfig) -> Obj:
    """aws.eks.Cluster arguments (less the role ARN, which the stack creates)."""
    return {
        "name": cfg.cluster_name,
        "version": cfg.kubernetes_version,
        "vpc_config": {
            "subnet_ids": list(cfg.subnet_ids),
            "endpoint_private_access": True,
            "endpoint_public_access": cfg.endpoint_public_access,
            **({"public_access_cidrs": list(cfg.public_access_cidrs)} if cfg.public_access_cidrs else {}),
        },
        "access_config": {"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": True},
        "enabled_cluster_log_types": ["api", "audit", "authenticator"],
        "tags": tags(cfg),
    }


def node_labels(pool: GpuNodePoolConfig) -> dict[str, str]:
    out = {
        NODE_POOL_LABEL: pool.name,
        GPU_NODE_LABEL: "true",
        "tritonops.io/gpu": gpu_family(pool.instance_types[0]).gpu,
    }
    if pool.gpu_sharing:
        out[DEVICE_PLUGIN_CONFIG_LABEL] = pool.gpu_sharing
    out.update(gpu_operator.off_labels(pool.ami_type))  # Bottlerocket: none of the GPU Operator's DaemonSets
    return {**out, **pool.labels}


# What replaces an EKS managed node group rather than updating it (the AWS provider's ForceNew inputs).
REPLACING_INPUTS = ("ami_type", "capacity_type", "disk_size", "instance_types", "subnet_ids")


def _named(cfg: ClusterAwsConfig, pool_name: str, spec: Obj) -> Obj:
    """``spec`` with ``node_group_name`` <cluster>-<pool>-<6 hex of its replacing inputs>: a change of
    instance types or disk size replaces the group under a new name, so Pulumi creates the new group
    (and moves the pods) before it deletes the old one, and no name collides."""
    digest = hashlib.sha256(json.dumps([spec[k] for k in REPLACING_INPUTS], sort_keys=True).encode()).hexdigest()
    return {"node_group_name": f"{cfg.cluster_name}-{pool_name}-{digest[:6]}", **spec}


def node_group_spec(cfg: ClusterAwsConfig, pool: GpuNodePoolConfig) -> Obj:
    """aws.eks.NodeGroup arguments of one GPU pool (less cluster name and role ARN)."""
    gpu_family(pool.instance_types[0])  # unknown families were refused by the config already
    return _named(cfg, pool.name, {
        "subnet_ids": list(cfg.subnet_ids),
        "instance_types": list(pool.instance_types),
        "ami_type": pool.ami_type,
        "capacity_type": pool.capacity_type,
        "disk_size": pool.disk_size_gib,
        "scaling_config": {
            "min_size": pool.min_size,
            "max_size": pool.max_size,
            "desired_size": pool.desired_size,
        },
        "update_config": {"max_unavailable": 1},
        "labels": node_labels(pool),
        "taints": [{"key": GPU_RESOURCE, "value": "true", "effect": "NO_SCHEDULE"}],
        "tags": tags(cfg, **{"tritonops:node-pool": pool.name}),
    })


def system_node_group_spec(cfg: ClusterAwsConfig) -> Obj:
    p = cfg.system_node_pool
    return _named(cfg, "system", {
        "subnet_ids": list(cfg.subnet_ids),
        "instance_types": list(p.instance_types),
        "ami_type": "AL2023_x86_64_STANDARD",
        "capacity_type": "ON_DEMAND",
        "disk_size": 50,
        "scaling_config": {"min_size": p.min_size, "max_size": p.max_size, "desired_size": p.desired_size},
        "update_config": {"max_unavailable": 1},
        "labels": {NODE_POOL_LABEL: SYSTEM_POOL},
        "tags": tags(cfg, **{"tritonops:node-pool": "system"}),
    })


# --- what the cluster provides its workloads: the EBS CSI driver, a default gp3 StorageClass, the VPC
# CNI with NetworkPolicy enforcement (EKS add-ons; the drivers' own IRSA roles) ---------------------

EBS_CSI_ADDON = "aws-ebs-csi-driver"
EBS_CSI_SERVICE_ACCOUNT = ("kube-system", "ebs-csi-controller-sa")
EBS_CSI_POLICY = f"{AWS_POLICY}/service-role/AmazonEBSCSIDriverPolicy"
VPC_CNI_ADDON = "vpc-cni"
DEFAULT_STORAGE_CLASS = "gp3"  # what a PVC without storageClassName gets (prod's Prometheus names it)


def ebs_csi_role_name(cfg: ClusterAwsConfig) -> str:
    return f"{cfg.cluster_name}-ebs-csi"


def vpc_cni_configuration() -> str:
    """The vpc-cni add-on's configuration: its network-policy agent on, so NetworkPolicies are enforced
    (without it EKS accepts them and enforces nothing)."""
    return json.dumps({"enableNetworkPolicy": "true"})


def storage_class() -> Obj:
    """The cluster's default StorageClass: encrypted gp3 volumes from the EBS CSI driver, bound where
    the pod lands (WaitForFirstConsumer: the volume's zone is the node's)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": DEFAULT_STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            "labels": {"app.kubernetes.io/part-of": "tritonops", "app.kubernetes.io/managed-by": "tritonops"},
        },
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


# --- who reaches the cluster: access entries (authentication mode API) and the private endpoint's
# security-group rules ------------------------------------------------------------------------------

ACCESS_POLICY_ARN = "arn:{partition}:eks::aws:cluster-access-policy/{policy}"
API_PORT = 443  # the EKS API endpoint (the control plane's ENIs in the cluster subnets)


def _tail(value: str) -> str:
    """A logical-name part: lowercase, [a-z0-9-], at most 40 characters."""
    return "".join(c if c.isalnum() else "-" for c in value.lower()).strip("-")[:40]


def access_entries(cfg: ClusterAwsConfig) -> list[Obj]:
    """One aws.eks.AccessEntry per ``accessEntries`` principal (less the cluster name), each with the
    aws.eks.AccessPolicyAssociation arguments of its policies: ``{"name", "principal_arn", "type",
    "tags", "associations": [{"name", "principal_arn", "policy_arn", "access_scope"}]}``. Logical
    names derive from the principal and policy, so reordering the list replaces nothing."""
    out: dict[str, Obj] = {}
    for e in cfg.access_entries:
        digest = hashlib.sha256(e.principal_arn.encode()).hexdigest()[:6]
        name = f"access-{_tail(e.principal_arn.rsplit('/', 1)[-1])}-{digest}"
        entry = out.setdefault(e.principal_arn, {"name": name, "principal_arn": e.principal_arn, "type": "STANDARD",
                                                 "tags": tags(cfg), "associations": []})
        partition = e.principal_arn.split(":", 2)[1]
        scope: Obj = ({"type": "namespace", "namespaces": list(e.namespaces)} if e.namespaces
                      else {"type": "cluster"})
        entry["associations"].append({
            "name": f"{name}-{_tail(e.policy.removeprefix('AmazonEKS').removesuffix('Policy'))}",
            "principal_arn": e.principal_arn,
            "policy_arn": ACCESS_POLICY_ARN.format(partition=partition, policy=e.policy),
            "access_scope": scope,
        })
    return list(out.values())


def api_access_rules(cfg: ClusterAwsConfig) -> list[Obj]:
    """aws.vpc.SecurityGroupIngressRule arguments (less ``security_group_id``: the cluster security group
    EKS creates) that admit ``apiAccessCidrs`` and ``apiAccessSecurityGroupIds`` to the API on 443."""
    base = {"ip_protocol": "tcp", "from_port": API_PORT, "to_port": API_PORT}
    rules = []
    for cidr in cfg.api_access_cidrs:
        family = "cidr_ipv6" if ":" in cidr else "cidr_ipv4"
        rules.append({"name": f"api-access-{_tail(cidr)}", **base, family: cidr,
                      "description": f"Kubernetes API of {cfg.cluster_name} from {cidr} (tritonops apiAccessCidrs)",
                      "tags": tags(cfg)})
    for group in cfg.api_access_security_group_ids:
        rules.append({"name": f"api-access-{group}", **base, "referenced_security_group_id": group,
                      "description": f"Kubernetes API of {cfg.cluster_name} from {group} "
                                     "(tritonops apiAccessSecurityGroupIds)",
                      "tags": tags(cfg)})
    return rules


def exec_identity(profile: str | None, assume_roles: str | None, source: str | None = None
                  ) -> tuple[str | None, str | None]:
    """(AWS profile, role ARN) the kubeconfig's ``aws eks get-token`` runs with: the stack's ``aws:profile``
    and the role of its ``aws:assumeRoles`` (the AWS provider's config, a JSON list), so whoever runs
    the stack reaches the cluster as the identity that created it (and holds its admin access entry).
    A chain of roles is refused: ``get-token --role-arn`` assumes one."""
    role = None
    if assume_roles:
        try:
            roles = json.loads(assume_roles)
        except ValueError:
            roles = None
        if not isinstance(roles, list) or not all(isinstance(r, dict) for r in roles):
            raise ConfigError("aws:assumeRoles", "expected a list of {roleArn: ...} (the AWS provider's config)",
                              source)
        if len(roles) > 1:
            raise ConfigError("aws:assumeRoles", f"a chain of {len(roles)} roles: the kubeconfig's `aws eks "
                              "get-token --role-arn` assumes one; list one role, or put the chain in an AWS "
                              "profile (role_arn, source_profile) and name it with aws:profile", source)
        if roles:
            role = roles[0].get("roleArn")
            if not isinstance(role, str) or not role:
                raise ConfigError("aws:assumeRoles", "its role has no roleArn", source)
    return profile or None, role


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str, profile: str | None = None,
               role_arn: str | None = None) -> str:
    """A kubeconfig that authenticates with ``aws eks get-token`` (no long-lived credentials), as the AWS
    ``profile`` (AWS_PROFILE in the exec plugin's environment, as ``aws eks update-kubeconfig --profile``
    writes it) and through ``role_arn`` (``--role-arn``) when the stack runs with them."""
    args = ["eks", "get-token", "--cluster-name", cluster_name, "--region", region]
    if role_arn:
        args += ["--role-arn", role_arn]
    exec_: Obj = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws", "args": args}
    if profile:
        exec_["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [{"name": cluster_name, "user": {"exec": exec_}}],
    }
    return json.dumps(doc)


def irsa_trust_policy(oidc_provider_arn: str, issuer_url: str, namespace: str, service_account: str) -> str:
    """Only this ServiceAccount (through the cluster's OIDC provider) may assume the role."""
    host = issuer_url.removeprefix("https://")
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": oidc_provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                            f"{host}:aud": "sts.amazonaws.com",
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )


def s3_read_policy(bucket: str, prefix: str = "", reports: bool = False) -> str:
    """Read-only access to one model repository prefix (list the prefix, get its objects).

    ``reports``: the release agent also writes its staged-rollout status reports (``--report``:
    ``<prefix>/reports/<channel>/<agent>.json``, a SigV4 PUT with the pod's own credentials), so the
    role may ``s3:PutObject`` under ``<prefix>/reports/`` and nowhere else: never a release's blobs,
    manifests, ids or channel pointers, never another prefix of the bucket."""
    base = prefix.strip("/")
    key = f"{base}/*" if base else "*"
    statements: list[Obj] = [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"arn:aws:s3:::{bucket}/{key}"]},
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{bucket}"],
            **({"Condition": {"StringLike": {"s3:prefix": [base, key]}}} if base else {}),
        },
    ]
    if reports:
        folder = f"{base}/{REPORTS_FOLDER}" if base else REPORTS_FOLDER
        statements.append({"Effect": "Allow", "Action": ["s3:PutObject"],
                           "Resource": [f"arn:aws:s3:::{bucket}/{folder}/*"]})
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def node_pools_summary(cfg: ClusterAwsConfig) -> dict[str, Obj]:
    """What the triton stack's ``nodePools`` must agree with: pool -> instance type and GPU."""
    return {
        p.name: {
            "instanceType": p.instance_types[0],
            "gpu": gpu_family(p.instance_types[0]).gpu,
            "gpuSharing": p.gpu_sharing,
        }
        for p in cfg.gpu_node_pools
    }
