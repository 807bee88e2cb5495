"""A GPU pool of the cluster-aws stack as an EKS managed node group, and the node group helper the
system nodes use too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from tritonops.k8s.config import ClusterAwsConfig, GpuNodePoolConfig
from tritonops.k8s.stacks.cluster_aws import eks


@dataclass
class GpuNodePoolArgs:
    cluster: ClusterAwsConfig
    pool: GpuNodePoolConfig
    cluster_name: pulumi.Input[str]

    def __post_init__(self) -> None:
        if self.pool not in self.cluster.gpu_node_pools:
            raise ValueError(f"pool: {self.pool.name!r} is not one of cluster.gpu_node_pools")


class GpuNodePool(pulumi.ComponentResource):
    """EKS managed node group of GPU instances, tainted nvidia.com/gpu=true:NoSchedule and labelled."""

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:aws:GpuNodePool", name, None, opts)
        spec = eks.node_group_spec(args.cluster, args.pool)
        self.role, self.node_group = managed_node_group(name, f"{name}-nodes", spec, args.cluster_name, parent=self)
        self.register_outputs({"nodeGroupName": self.node_group.node_group_name, "roleArn": self.role.arn})


def managed_node_group(prefix: str, group_name: str, spec: dict[str, Any], cluster_name: pulumi.Input[str],
                       parent: pulumi.Resource | None = None) -> tuple[aws.iam.Role, aws.eks.NodeGroup]:
    """An EKS managed node group from an ``eks.*node_group_spec`` dict, with its IAM role and policies."""
    role = aws.iam.Role(
        f"{prefix}-role",
        assume_role_policy=eks.assume_role_policy("ec2.amazonaws.com"),
        tags=spec["tags"],
        opts=pulumi.ResourceOptions(parent=parent),
    )
    attachments = [
        aws.iam.RolePolicyAttachment(f"{prefix}-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn,
                                     opts=pulumi.ResourceOptions(parent=parent))
        for arn in eks.NODE_POLICIES
    ]
    group = aws.eks.NodeGroup(
        group_name,
        cluster_name=cluster_name,
        node_role_arn=role.arn,
        node_group_name=spec["node_group_name"],
        subnet_ids=spec["subnet_ids"],
        instance_types=spec["instance_types"],
        ami_type=spec["ami_type"],
        capacity_type=spec["capacity_type"],
        disk_size=spec["disk_size"],
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(**spec["scaling_config"]),
        update_config=aws.eks.NodeGroupUpdateConfigArgs(**spec["update_config"]),
        labels=spec["labels"],
        tags=spec["tags"],
        taints=[aws.eks.NodeGroupTaintArgs(**t) for t in spec["taints"]] if spec.get("taints") else None,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=attachments,
                                    ignore_changes=["scalingConfig.desiredSize"]),
    )
    return role, group
