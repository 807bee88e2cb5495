"""Pure builders for Karpenter on the cluster-aws stack: NodePools, EC2NodeClasses, interruption, IAM.

A GPU pool with ``provisioner: karpenter`` becomes one ``karpenter.sh/v1`` NodePool and one
``karpenter.k8s.aws/v1`` EC2NodeClass, from the same pool config a managed node group would use
(instance types from the catalog, taint and labels, AMI). Karpenter lives in the cluster-aws stack,
not in platform: its controller role, interruption queue, node role and the NodePools all derive
from this stack's config and outputs, and GPU nodes must be provisionable once the cluster exists.
The system pool stays a managed node group (the controller runs there).
"""

from __future__ import annotations

import json
from typing import Any

from tritonops import versions
from tritonops.k8s.catalog import KARPENTER_AMI_FAMILIES, gpu_family, instance_family
from tritonops.k8s.config import PRODUCTION, ClusterAwsConfig, GpuNodePoolConfig
from tritonops.k8s.helm import HelmRelease
from tritonops.k8s.labels import GPU_RESOURCE, NODE_POOL_LABEL
from tritonops.k8s.stacks.cluster_aws.eks import node_labels, tags

Obj = dict[str, Any]

NAMESPACE = "kube-system"  # where Karpenter's docs install it
SERVICE_ACCOUNT = "karpenter"
NODE_POOL_API = "karpenter.sh/v1"
NODE_CLASS_API = "karpenter.k8s.aws/v1"
ARCH = {"x86_64": "amd64", "arm64": "arm64"}
# Bottlerocket boots from a small OS volume (xvda) and keeps images and pods on the data volume (xvdb).
_ROOT_DEVICE = {"al2023": "/dev/xvda", "bottlerocket": "/dev/xvdb"}

# EventBridge rules that feed Karpenter's interruption queue (Karpenter's documented set).
INTERRUPTION_EVENTS: dict[str, Obj] = {
    "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
    "spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "instance-state-change": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
}


def karpenter_pools(cfg: ClusterAwsConfig) -> list[GpuNodePoolConfig]:
    return [p for p in cfg.gpu_node_pools if p.provisioner == "karpenter"]


def managed_pools(cfg: ClusterAwsConfig) -> list[GpuNodePoolConfig]:
    return [p for p in cfg.gpu_node_pools if p.provisioner == "managed"]


def queue_name(cfg: ClusterAwsConfig) -> str:
    return f"{cfg.cluster_name}-karpenter"


def controller_role_name(cfg: ClusterAwsConfig) -> str:
    return f"{cfg.cluster_name}-karpenter"


def node_role_name(cfg: ClusterAwsConfig) -> str:
    return f"{cfg.cluster_name}-karpenter-node"


def capacity_types(pool: GpuNodePoolConfig) -> list[str]:
    """SPOT pools allow on-demand too: Karpenter prefers spot and falls back to on-demand when no
    spot capacity of the allowed types is available."""
    return ["spot", "on-demand"] if pool.capacity_type == "SPOT" else ["on-demand"]


def disruption_budget_nodes(pool: GpuNodePoolConfig) -> int:
    """GPU nodes Karpenter may disrupt (consolidate, replace on drift) at the same time.

    Every non-empty node of a GPU pool runs Triton pods (the pool is tainted for GPU workloads), and
    Karpenter drains the nodes it disrupts in parallel. With k nodes draining, k pods of one service
    can be up for eviction at once (worst case: one of its pods on each node). Its PDB lets
    ``pdbMaxUnavailable`` of them go, so k = pdbMaxUnavailable is the most that never makes a drain
    wait on the PDB (a waiting drain holds a cordoned GPU node that serves nothing):
    nodes = pdbMaxUnavailable (1 with the triton stack's default PDB, maxUnavailable: 1).
    """
    assert pool.karpenter is not None
    return pool.karpenter.pdb_max_unavailable


def ec2_node_class(cfg: ClusterAwsConfig, pool: GpuNodePoolConfig) -> Obj:
    family = KARPENTER_AMI_FAMILIES[pool.ami_type]
    disks: list[Obj] = []
    if family == "bottlerocket":
        disks.append({"deviceName": "/dev/xvda", "ebs": _ebs(4)})
    disks.append({"deviceName": _ROOT_DEVICE[family], "ebs": _ebs(pool.disk_size_gib)})
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": pool.name, "labels": {NODE_POOL_LABEL: pool.name}},
        "spec": {
            "role": node_role_name(cfg),
            "amiSelectorTerms": [{"alias": versions.KARPENTER_AMI_ALIASES[family]}],
            "subnetSelectorTerms": [{"id": s} for s in cfg.subnet_ids],
            # EKS tags the cluster security group with the cluster's name.
            "securityGroupSelectorTerms": [{"tags": {"aws:eks:cluster-name": cfg.cluster_name}}],
            "blockDeviceMappings": disks,
            "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1},
            "tags": tags(cfg, **{"tritonops:node-pool": pool.name}),
        },
    }


def _ebs(gib: int) -> Obj:
    return {"volumeSize": f"{gib}Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}


def node_pool(cfg: ClusterAwsConfig, pool: GpuNodePoolConfig) -> Obj:
    k = pool.karpenter
    if k is None:
        raise ValueError(f"gpuNodePools {pool.name!r}: provisioner is {pool.provisioner!r}, not karpenter")
    families = sorted({instance_family(t) for t in pool.instance_types})
    arch = ARCH[gpu_family(pool.instance_types[0]).arch]
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": pool.name, "labels": {NODE_POOL_LABEL: pool.name}},
        "spec": {
            "template": {
                "metadata": {"labels": node_labels(pool)},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": families},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": list(pool.instance_types)},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types(pool)},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
                    ],
                    "taints": [{"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}],
                    "expireAfter": k.expire_after,
                },
            },
            "limits": {GPU_RESOURCE: k.max_gpus},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": k.consolidate_after,
                "budgets": [{"nodes": str(disruption_budget_nodes(pool))}],
            },
        },
    }


def objects(cfg: ClusterAwsConfig) -> list[Obj]:
    """EC2NodeClass then NodePool of every Karpenter pool (a NodePool refers to its class)."""
    return [o for p in karpenter_pools(cfg) for o in (ec2_node_class(cfg, p), node_pool(cfg, p))]


def release(cfg: ClusterAwsConfig, controller_role_arn: Any) -> HelmRelease:
    """The pinned chart; ``controller_role_arn`` is the IRSA role (a Pulumi Output in the stack)."""
    values: Obj = {
        "replicas": 2 if cfg.tier == PRODUCTION else 1,
        "serviceAccount": {
            "name": SERVICE_ACCOUNT,
            "annotations": {"eks.amazonaws.com/role-arn": controller_role_arn},
        },
        "settings": {"clusterName": cfg.cluster_name, "interruptionQueue": queue_name(cfg)},
        "nodeSelector": {NODE_POOL_LABEL: "system"},  # never on the nodes it provisions
        "controller": {"resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}},
    }
    return HelmRelease(
        "karpenter",
        f"{versions.KARPENTER_REPO}/{versions.KARPENTER_CHART}",
        versions.KARPENTER_CHART_VERSION,
        "",
        NAMESPACE,
        values,
        crd_upgrade="crd-chart",
        skip_crds=True,  # from crd_release, which Helm upgrades: the main chart's crds/ only ever install
    )


def crd_release() -> HelmRelease:
    """Karpenter's CRDs (NodePool, NodeClaim, EC2NodeClass) as their own chart at the controller's version,
    installed before it: Karpenter's upgrade guide's way to have Helm upgrade them."""
    return HelmRelease(
        "karpenter-crd",
        f"{versions.KARPENTER_REPO}/{versions.KARPENTER_CRD_CHART}",
        versions.KARPENTER_CHART_VERSION,
        "",
        NAMESPACE,
        crd_upgrade="templates",
    )


def queue_policy(queue_arn: str) -> str:
    """EventBridge (and SQS) may send to the queue; nothing may use it without TLS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                },
                {
                    "Sid": "DenyHTTP",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sqs:*",
                    "Resource": queue_arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                },
            ],
        },
        sort_keys=True,
    )


def controller_policy(cluster_name: str, cluster_arn: str, node_role_arn: str, queue_arn: str) -> str:
    """Karpenter's documented controller permissions (its v1 CloudFormation reference), scoped to this
    cluster's tags, its node role and its interruption queue. Partition, region and account come from
    the cluster's ARN."""
    _, partition, _, region, account, _ = cluster_arn.split(":", 5)
    ec2 = f"arn:{partition}:ec2:{region}"
    profile = f"arn:{partition}:iam::{account}:instance-profile/*"
    owned = {f"kubernetes.io/cluster/{cluster_name}": "owned"}
    request_owned = {f"aws:RequestTag/{k}": v for k, v in owned.items()} | {
        "aws:RequestTag/eks:eks-cluster-name": cluster_name
    }
    resource_owned = {f"aws:ResourceTag/{k}": v for k, v in owned.items()}
    created = [f"{ec2}:*:{r}/*" for r in (
        "fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")]
    nodepool = {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    region_tag = {"aws:RequestTag/topology.kubernetes.io/region": region}
    nodeclass = {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}

    def allow(sid: str, action: str | list[str], resource: str | list[str], condition: Obj | None = None) -> Obj:
        st: Obj = {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource}
        return st | ({"Condition": condition} if condition else {})

    statements = [
        allow("AllowScopedEC2InstanceAccessActions", ["ec2:RunInstances", "ec2:CreateFleet"],
              [f"{ec2}::image/*", f"{ec2}::snapshot/*", f"{ec2}:*:security-group/*", f"{ec2}:*:subnet/*",
               f"{ec2}:*:capacity-reservation/*", f"{ec2}:*:placement-group/*"]),
        allow("AllowScopedEC2LaunchTemplateAccessActions", ["ec2:RunInstances", "ec2:CreateFleet"],
              f"{ec2}:*:launch-template/*",
              {"StringEquals": resource_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}),
        allow("AllowScopedEC2InstanceActionsWithTags", ["ec2:RunInstances", "ec2:CreateFleet",
                                                         "ec2:CreateLaunchTemplate"],
              created, {"StringEquals": request_owned, "StringLike": nodepool}),
        allow("AllowScopedResourceCreationTagging", "ec2:CreateTags", created,
              {"StringEquals": request_owned | {"ec2:CreateAction": ["RunInstances", "CreateFleet",
                                                                     "CreateLaunchTemplate"]},
               "StringLike": nodepool}),
        allow("AllowScopedResourceTagging", "ec2:CreateTags", f"{ec2}:*:instance/*",
              {"StringEquals": resource_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
               "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
               "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim",
                                                             "Name"]}}),
        allow("AllowScopedDeletion", ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
              [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
              {"StringEquals": resource_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}),
        allow("AllowPassingInstanceRole", "iam:PassRole", node_role_arn,
              {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com"]}}),
        allow("AllowScopedInstanceProfileCreationActions", "iam:CreateInstanceProfile", profile,
              {"StringEquals": request_owned | region_tag, "StringLike": nodeclass}),
        allow("AllowScopedInstanceProfileTagActions", "iam:TagInstanceProfile", profile,
              {"StringEquals": resource_owned | {"aws:ResourceTag/topology.kubernetes.io/region": region}
               | request_owned | region_tag,
               "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"} | nodeclass}),
        allow("AllowScopedInstanceProfileActions",
              ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
              profile,
              {"StringEquals": resource_owned | {"aws:ResourceTag/topology.kubernetes.io/region": region},
               "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}}),
        allow("AllowInstanceProfileReadActions", ["iam:GetInstanceProfile", "iam:ListInstanceProfiles"], "*"),
        allow("AllowAPIServerEndpointDiscovery", "eks:DescribeCluster", cluster_arn),
        allow("AllowInterruptionQueueActions", ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
              queue_arn),
        allow("AllowRegionalReadActions",
              ["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
               "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
               "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
               "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
              "*", {"StringEquals": {"aws:RequestedRegion": region}}),
        allow("AllowSSMReadActions", "ssm:GetParameter", f"arn:{partition}:ssm:{region}::parameter/aws/service/*"),
        allow("AllowPricingReadActions", "pricing:GetProducts", "*"),
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def aws_resources(cfg: ClusterAwsConfig) -> list[Obj]:
    """What ``tritonops render`` lists for Karpenter (the stack creates the same)."""
    if not karpenter_pools(cfg):
        return []
    return [
        {"type": "aws:sqs/queue:Queue", "spec": {"name": queue_name(cfg), "messageRetentionSeconds": 300,
                                                 "sqsManagedSseEnabled": True}},
        *[
            {"type": "aws:cloudwatch/eventRule:EventRule",
             "spec": {"name": f"{cfg.cluster_name}-karpenter-{n}", "eventPattern": pattern,
                      "target": queue_name(cfg)}}
            for n, pattern in INTERRUPTION_EVENTS.items()
        ],
        {"type": "aws:iam/role:Role", "spec": {"name": node_role_name(cfg), "trust": "ec2.amazonaws.com",
                                               "accessEntry": "EC2_LINUX"}},
        {"type": "aws:iam/role:Role",
         "spec": {"name": controller_role_name(cfg),
                  "trust": f"IRSA (cluster OIDC): system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"}},
    ]
