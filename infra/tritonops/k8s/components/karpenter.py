"""The Karpenter component of the cluster-aws stack: thin, every value comes from
tritonops.k8s.stacks.cluster_aws.karpenter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from tritonops.k8s.components.base import apply_objects, helm_release
from tritonops.k8s.config import ClusterAwsConfig
from tritonops.k8s.stacks.cluster_aws import eks, karpenter

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
