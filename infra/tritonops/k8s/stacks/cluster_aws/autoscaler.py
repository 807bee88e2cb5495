"""cluster-autoscaler for the managed GPU node groups of the cluster-aws stack, as data.

Karpenter pools grow up to their NodePool ``limits`` (tritonops.k8s.stacks.cluster_aws.karpenter); an EKS managed node
group only moves within ``minSize..maxSize`` when something sets its desired size. Without it a
service's KEDA ``maxReplicaCount`` ends at the group's desired size (prod vision: 3 of 10). EKS tags
the groups' Auto Scaling groups for auto-discovery (``k8s.io/cluster-autoscaler/<cluster>: owned``)
and the controller reads a group's labels and taints from ``eks:DescribeNodegroup``, so a group at
zero still scales up for a pod that needs its GPUs. Pure data: the stack creates the IRSA role and
the release (tritonops.k8s.stacks.cluster_aws.program).
"""

from __future__ import annotations

import json
from typing import Any

from tritonops import versions
from tritonops.k8s.config import ClusterAwsConfig, GpuNodePoolConfig
from tritonops.k8s.helm import HelmRelease
from tritonops.k8s.labels import NODE_POOL_LABEL, Obj

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"


def managed_gpu_pools(cfg: ClusterAwsConfig) -> list[GpuNodePoolConfig]:
    """The pools only the cluster-autoscaler grows: managed groups whose maxSize exceeds minSize."""
    return [p for p in cfg.gpu_node_pools if p.provisioner == "managed" and p.max_size > p.min_size]


def role_name(cfg: ClusterAwsConfig) -> str:
    return f"{cfg.cluster_name}-cluster-autoscaler"


def policy(cluster_name: str) -> str:
    """Read the groups anywhere; change only the groups tagged as this cluster's."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "Describe",
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                        "eks:DescribeNodegroup",
                    ],
                    "Resource": "*",
                },
                {
                    "Sid": "ScaleOwnGroups",
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
                    },
                },
            ],
        }
    )


def release(cfg: ClusterAwsConfig, role_arn: Any, region: str) -> HelmRelease:
    """The pinned chart on the system nodes; ``role_arn`` is the IRSA role (an Output in the stack)."""
    values: Obj = {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cfg.cluster_name},
        "image": {"tag": versions.CLUSTER_AUTOSCALER_IMAGE_TAGS[cfg.kubernetes_version]},
        "rbac": {
            "serviceAccount": {
                "create": True,
                "name": SERVICE_ACCOUNT,
                "annotations": {"eks.amazonaws.com/role-arn": role_arn},
            }
        },
        "nodeSelector": {NODE_POOL_LABEL: "system"},
        "extraArgs": {
            "balance-similar-node-groups": True,
            "expander": "least-waste",
            # Triton's /tmp and releases are emptyDirs: without this no GPU node would ever scale down.
            "skip-nodes-with-local-storage": False,
        },
        "resources": {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "600Mi"}},
    }
    return HelmRelease(
        "cluster-autoscaler",
        versions.CLUSTER_AUTOSCALER_CHART,
        versions.CLUSTER_AUTOSCALER_CHART_VERSION,
        versions.CLUSTER_AUTOSCALER_REPO,
        NAMESPACE,
        values,
    )
