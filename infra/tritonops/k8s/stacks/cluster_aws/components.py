"""The cluster-aws stack's Pulumi components over its builders (eks, karpenter, autoscaler,
buckets): GPU node pools as managed node groups, release buckets, the EKS add-ons, Karpenter,
the cluster-autoscaler. Imported by :func:`program.program` only: ``tritonops render`` needs no Pulumi."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from tritonops.k8s.component import apply_objects, helm_release, k8s_object
from tritonops.k8s.config import ClusterAwsConfig, GpuNodePoolConfig
from tritonops.k8s.stacks.cluster_aws import autoscaler, buckets, eks, karpenter


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


class ReleaseBucket(pulumi.ComponentResource):
    """One release bucket (tritonops.k8s.stacks.cluster_aws.buckets): private, versioned, SSE-S3 encrypted,
    owner-enforced, and its publisher role."""

    def __init__(self, name: str, bucket: str, cfg: ClusterAwsConfig, account_id: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:aws:ReleaseBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = aws.s3.Bucket(name, bucket=bucket, tags=eks.tags(cfg),
                                      opts=pulumi.ResourceOptions(parent=self, protect=cfg.tier == "production"))
        aws.s3.BucketPublicAccessBlock(f"{name}-public-access", bucket=self.bucket.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=child)
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership", bucket=self.bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"), opts=child)
        aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=self.bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse", bucket=self.bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.
                BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="AES256"))],
            opts=child)
        self.publisher = aws.iam.Role(
            f"{name}-publisher", name=buckets.publisher_role_name(bucket),
            assume_role_policy=pulumi.Output.from_input(account_id).apply(buckets.publisher_trust),
            tags=eks.tags(cfg), opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        aws.iam.RolePolicy(f"{name}-publisher-s3", role=self.publisher.id, policy=buckets.publisher_policy(bucket),
                           opts=child)
        self.register_outputs({"bucket": self.bucket.bucket, "publisherRoleArn": self.publisher.arn})


class ClusterAddons(pulumi.ComponentResource):
    """The EKS add-ons the workloads need: the VPC CNI with NetworkPolicy enforcement on, the EBS CSI
    driver with its IRSA role, and the default gp3 StorageClass (through the provider in ``opts``)."""

    def __init__(
        self,
        name: str,
        cfg: ClusterAwsConfig,
        cluster_name: pulumi.Input[str],
        oidc: tuple[pulumi.Input[str], pulumi.Input[str]],  # the OIDC provider's ARN and issuer URL
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:aws:ClusterAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(depends_on))
        self.vpc_cni = aws.eks.Addon(
            f"{name}-vpc-cni", cluster_name=cluster_name, addon_name=eks.VPC_CNI_ADDON,
            configuration_values=eks.vpc_cni_configuration(), resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE", tags=eks.tags(cfg), opts=child,
        )
        ns, sa = eks.EBS_CSI_SERVICE_ACCOUNT
        trust = pulumi.Output.all(*oidc).apply(lambda v: eks.irsa_trust_policy(v[0], v[1], ns, sa))
        self.ebs_role = aws.iam.Role(
            f"{name}-ebs-csi-role", name=eks.ebs_csi_role_name(cfg), assume_role_policy=trust, tags=eks.tags(cfg),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),  # a fixed name
        )
        attach = aws.iam.RolePolicyAttachment(f"{name}-ebs-csi-policy", role=self.ebs_role.name,
                                              policy_arn=eks.EBS_CSI_POLICY, opts=pulumi.ResourceOptions(parent=self))
        self.ebs_csi = aws.eks.Addon(
            f"{name}-ebs-csi", cluster_name=cluster_name, addon_name=eks.EBS_CSI_ADDON,
            service_account_role_arn=self.ebs_role.arn, resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE", tags=eks.tags(cfg),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach, *depends_on]),
        )
        self.storage_class = k8s_object(eks.storage_class(), pulumi.ResourceOptions(parent=self,
                                                                                     depends_on=[self.ebs_csi]))
        self.register_outputs({"ebsCsiRoleArn": self.ebs_role.arn})


NODE_POLICIES = (*eks.NODE_POLICIES, f"{eks.AWS_POLICY}/AmazonSSMManagedInstanceCore")


@dataclass
class KarpenterArgs:
    cluster: ClusterAwsConfig
    cluster_name: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer: pulumi.Input[str]

    def __post_init__(self) -> None:
        if not karpenter.karpenter_pools(self.cluster):
            raise ValueError("cluster.gpu_node_pools: no pool has provisioner karpenter")


def _controller_trust(values: list[Any]) -> str:
    return eks.irsa_trust_policy(values[0], values[1], karpenter.NAMESPACE, karpenter.SERVICE_ACCOUNT)


class Karpenter(pulumi.ComponentResource):
    """Interruption queue and its EventBridge rules, node role with its EKS access entry, the IRSA
    controller role, the pinned chart, then an EC2NodeClass and a NodePool per Karpenter GPU pool.
    Kubernetes children use the provider given in ``opts.providers``."""

    def __init__(
        self,
        name: str,
        args: KarpenterArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:aws:Karpenter", name, None, opts)
        cfg = args.cluster
        tags = eks.tags(cfg)
        child = pulumi.ResourceOptions(parent=self)
        # Fixed names (the chart's settings and the IAM policy name them): whatever replaces one of these
        # deletes the old first, so the new never collides with a name that still exists.
        named = pulumi.ResourceOptions(parent=self, delete_before_replace=True)
        self.queue = aws.sqs.Queue(
            f"{name}-queue", name=karpenter.queue_name(cfg), message_retention_seconds=300,
            sqs_managed_sse_enabled=True, tags=tags, opts=named,
        )
        aws.sqs.QueuePolicy(f"{name}-queue-policy", queue_url=self.queue.url,
                            policy=self.queue.arn.apply(karpenter.queue_policy), opts=child)
        for event, pattern in karpenter.INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{event}", name=f"{cfg.cluster_name}-karpenter-{event}",
                event_pattern=json.dumps(pattern), tags=tags, opts=named,
            )
            aws.cloudwatch.EventTarget(f"{name}-{event}-target", rule=rule.name, arn=self.queue.arn,
                                       target_id="KarpenterInterruptionQueueTarget", opts=child)
        self.node_role = aws.iam.Role(
            f"{name}-node-role", name=karpenter.node_role_name(cfg),
            assume_role_policy=eks.assume_role_policy("ec2.amazonaws.com"), tags=tags, opts=named,
        )
        for arn in NODE_POLICIES:
            aws.iam.RolePolicyAttachment(f"{name}-node-{arn.rsplit('/', 1)[1]}", role=self.node_role.name,
                                         policy_arn=arn, opts=child)
        access = aws.eks.AccessEntry(f"{name}-node-access", cluster_name=args.cluster_name,
                                     principal_arn=self.node_role.arn, type="EC2_LINUX", tags=tags, opts=child)
        self.controller_role = aws.iam.Role(
            f"{name}-controller-role", name=karpenter.controller_role_name(cfg),
            assume_role_policy=pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(_controller_trust),
            tags=tags, opts=named,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-controller-policy", role=self.controller_role.id,
            policy=pulumi.Output.all(args.cluster_name, args.cluster_arn, self.node_role.arn, self.queue.arn).apply(
                lambda a: karpenter.controller_policy(*a)
            ),
            opts=child,
        )
        # The CRDs' chart first (Helm upgrades it with every version bump), then the controller without its crds/.
        self.crd_release = helm_release(karpenter.crd_release(), self, depends_on)
        self.release = helm_release(karpenter.release(cfg, self.controller_role.arn), self,
                                    [policy, access, self.queue, self.crd_release, *depends_on])
        self.objects = apply_objects(self, karpenter.objects(cfg), depends_on=[self.release])
        self.register_outputs({"queueName": self.queue.name, "controllerRoleArn": self.controller_role.arn,
                               "nodeRoleArn": self.node_role.arn})


@dataclass
class ClusterAutoscalerArgs:
    cluster: ClusterAwsConfig
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer: pulumi.Input[str]
    region: str

    def __post_init__(self) -> None:
        if not autoscaler.managed_gpu_pools(self.cluster):
            raise ValueError("cluster.gpu_node_pools: no managed pool can grow (maxSize > minSize)")


class ClusterAutoscaler(pulumi.ComponentResource):
    """IRSA role (kube-system:cluster-autoscaler) and the pinned chart that grows the managed GPU groups.
    The release uses the Kubernetes provider given in ``opts.providers``."""

    def __init__(
        self,
        name: str,
        args: ClusterAutoscalerArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:aws:ClusterAutoscaler", name, None, opts)
        cfg = args.cluster
        trust = pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
            lambda v: eks.irsa_trust_policy(v[0], v[1], autoscaler.NAMESPACE, autoscaler.SERVICE_ACCOUNT)
        )
        self.role = aws.iam.Role(
            f"{name}-role", name=autoscaler.role_name(cfg), assume_role_policy=trust, tags=eks.tags(cfg),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),  # a fixed name
        )
        policy = aws.iam.RolePolicy(f"{name}-policy", role=self.role.id, policy=autoscaler.policy(cfg.cluster_name),
                                    opts=pulumi.ResourceOptions(parent=self))
        rel = autoscaler.release(cfg, self.role.arn, args.region)
        self.release = helm_release(rel, self, [policy, *depends_on])
        self.register_outputs({"roleArn": self.role.arn})
