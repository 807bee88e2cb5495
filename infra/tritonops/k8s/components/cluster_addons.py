"""The cluster-aws stack's EKS add-ons component: VPC CNI, EBS CSI driver, default StorageClass."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws

from tritonops.k8s.components.base import k8s_object
from tritonops.k8s.config import ClusterAwsConfig
from tritonops.k8s.stacks.cluster_aws import eks


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
