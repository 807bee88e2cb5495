"""The cluster-aws stack's cluster-autoscaler component: its IRSA role and pinned chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from tritonops.k8s.components.base import helm_release
from tritonops.k8s.config import ClusterAwsConfig
from tritonops.k8s.stacks.cluster_aws import autoscaler, eks


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
