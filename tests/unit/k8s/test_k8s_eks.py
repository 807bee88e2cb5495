"""EKS specs (tritonops.k8s.stacks.cluster_aws.eks): cluster, node groups, kubeconfig, IRSA and S3 read policies."""

from __future__ import annotations

import json

import yaml
from k8s_harness import user_stacks
from tritonops import versions
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.cluster_aws import eks

# --- EKS -----------------------------------------------------------------------------------------


def test_node_group_spec() -> None:
    cfg = load_stack_config("cluster-aws", "prod")
    spec = eks.node_group_spec(cfg, cfg.gpu_node_pools[1])  # type: ignore[union-attr]
    assert spec["ami_type"] == "BOTTLEROCKET_x86_64_NVIDIA" and spec["capacity_type"] == "ON_DEMAND"
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert spec["labels"][k8s_labels.NODE_POOL_LABEL] == "gpu-l40s"
    assert spec["labels"]["tritonops.io/gpu"] == "L40S"
    assert spec["scaling_config"] == {"min_size": 2, "max_size": 6, "desired_size": 2}
    assert spec["disk_size"] == 300


def test_dev_node_group_is_spot_and_time_sliced() -> None:
    cfg = load_stack_config("cluster-aws", "dev")
    spec = eks.node_group_spec(cfg, cfg.gpu_node_pools[0])  # type: ignore[union-attr]
    assert spec["capacity_type"] == "SPOT"
    assert spec["labels"][eks.DEVICE_PLUGIN_CONFIG_LABEL] == "shared-2"


def test_kubeconfig_uses_aws_exec_auth() -> None:
    doc = yaml.safe_load(eks.kubeconfig("c", "https://x", "Q0E=", "us-west-2"))
    user = doc["users"][0]["user"]["exec"]
    assert user["command"] == "aws" and user["args"][:2] == ["eks", "get-token"]
    assert doc["clusters"][0]["cluster"]["server"] == "https://x"


def test_cluster_spec() -> None:
    cfg = load_stack_config("cluster-aws", "prod", user_stacks())
    spec = eks.cluster_spec(cfg)  # type: ignore[arg-type]
    assert spec["name"] == "tritonops-prod" and spec["version"] == versions.KUBERNETES_VERSION
    assert spec["vpc_config"]["endpoint_public_access"] is False
    assert len(spec["vpc_config"]["subnet_ids"]) == 3
    assert "audit" in spec["enabled_cluster_log_types"]
    system = eks.system_node_group_spec(cfg)  # type: ignore[arg-type]
    assert "taints" not in system and system["labels"] == {k8s_labels.NODE_POOL_LABEL: "system"}
    assert system["scaling_config"]["min_size"] == 3


def test_irsa_trust_policy_scoped_to_one_service_account() -> None:
    doc = json.loads(
        eks.irsa_trust_policy(
            "arn:aws:iam::1:oidc-provider/oidc.eks.x/id/AB", "https://oidc.eks.x/id/AB", "triton", "triton-vision"
        )
    )
    (stmt,) = doc["Statement"]
    assert stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert stmt["Principal"] == {"Federated": "arn:aws:iam::1:oidc-provider/oidc.eks.x/id/AB"}
    assert stmt["Condition"]["StringEquals"] == {
        "oidc.eks.x/id/AB:sub": "system:serviceaccount:triton:triton-vision",
        "oidc.eks.x/id/AB:aud": "sts.amazonaws.com",
    }


def test_s3_read_policy_is_read_only_and_prefix_scoped() -> None:
    doc = json.loads(eks.s3_read_policy("models", "vision/"))
    actions = {a for s in doc["Statement"] for a in s["Action"]}
    assert actions == {"s3:GetObject", "s3:ListBucket"}
    get, lst = doc["Statement"]
    assert get["Resource"] == ["arn:aws:s3:::models/vision/*"]
    assert lst["Condition"]["StringLike"]["s3:prefix"] == ["vision", "vision/*"]
    assert json.loads(eks.s3_read_policy("models"))["Statement"][0]["Resource"] == ["arn:aws:s3:::models/*"]


def test_s3_read_policy_with_reports_may_put_only_under_the_prefixs_reports_folder() -> None:
    """The release agent's status reports (--report): s3:PutObject on <prefix>/reports/* and nothing wider;
    IAM's own judgement of it (moto_server) is test_k8s_eks_iam.py."""
    read = json.loads(eks.s3_read_policy("models", "/vision/"))["Statement"]
    doc = json.loads(eks.s3_read_policy("models", "/vision/", reports=True))["Statement"]
    assert doc[:2] == read and doc[2:] == [
        {"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": ["arn:aws:s3:::models/vision/reports/*"]}]
    whole = json.loads(eks.s3_read_policy("models", reports=True))["Statement"]
    assert whole[2]["Resource"] == ["arn:aws:s3:::models/reports/*"]
    writes = {a for s in read for a in s["Action"] if not a.startswith(("s3:Get", "s3:List"))}
    assert writes == set()  # without reports the role stays read-only
