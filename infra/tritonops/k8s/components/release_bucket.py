"""The cluster-aws stack's release bucket component."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from tritonops.k8s.config import ClusterAwsConfig
from tritonops.k8s.stacks.cluster_aws import buckets, eks


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
