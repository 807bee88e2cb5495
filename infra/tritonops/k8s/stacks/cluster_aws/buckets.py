"""The release buckets of the cluster-aws stack, as data: every bucket a ``modelReaders`` entry reads,
created private, versioned and encrypted, with a publisher role for the one that writes releases.

The reader roles (``modelReaders``, IRSA) only read their prefix; ``tritonops release publish`` runs
as ``<bucket>-publisher`` (assumed from the account by CI, whose own policy must allow
``sts:AssumeRole`` on it), which may list the bucket and read and write its objects, never delete
a version: versioning keeps every overwritten channel pointer and release.
"""

from __future__ import annotations

import json

from tritonops.k8s.config import ClusterAwsConfig


def release_buckets(cfg: ClusterAwsConfig) -> list[str]:
    """The buckets the model services read (each modelReaders bucket once, in order)."""
    return list(dict.fromkeys(r.bucket for r in cfg.model_readers))


def publisher_role_name(bucket: str) -> str:
    return f"{bucket}-publisher"[:64]


def publisher_trust(account_id: str) -> str:
    """Principals of this account that their own IAM policy lets assume the role (CI's role)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account_id}:root"},
                       "Action": "sts:AssumeRole"}],
    })


def publisher_policy(bucket: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}"]},
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        ],
    }, sort_keys=True)


def bucket_spec(bucket: str) -> dict[str, object]:
    """What render writes for a bucket: the settings the stack applies."""
    return {
        "name": bucket,
        "versioning": "Enabled",
        "server_side_encryption": "AES256",
        "public_access_block": {"block_public_acls": True, "block_public_policy": True,
                                "ignore_public_acls": True, "restrict_public_buckets": True},
        "object_ownership": "BucketOwnerEnforced",
        "publisher_role": publisher_role_name(bucket),
    }
