"""Pure builders for the cluster-aws stack: EKS cluster, GPU managed node groups, IAM, kubeconfig."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tritonops.k8s.catalog import gpu_family
from tritonops.k8s.config import ClusterAwsConfig, GpuNodePoolConfig
from tritonops.k8s.labels import GPU_NODE_LABEL, GPU_RESOURCE, NODE_POOL_LABEL

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
# "false": Bottlerocket's NVIDIA variants run their own device plugin, so the operator's stays off there.
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
    if pool.ami_type in BOTTLEROCKET_AMIS:
        out[DEVICE_PLUGIN_DEPLOY_LABEL] = "false"
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
        "labels": {NODE_POOL_LABEL: "system"},
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


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with ``aws eks get-token`` (no long-lived credentials)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [
            {
                "name": cluster_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region],
                    }
                },
            }
        ],
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


REPORTS_FOLDER = "reports"  # tritonops.agent.rollout.report_key: <prefix>/reports/<channel>/<agent id>.json


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
