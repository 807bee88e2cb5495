"""EKS specs (tritonops.k8s.stacks.cluster_aws.eks): cluster, node groups, kubeconfig, IRSA and S3 read policies."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import typer
import yaml
from k8s_harness import CLUSTER_SECURITY_GROUP, STACKS_DIR, Mocks, as_ints, committed, run_program, user_stacks
from tritonops import versions
from tritonops.cli.k8s import render as render_cmd
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s.config import ConfigError
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.cluster_aws import eks
from typer.testing import CliRunner

app = typer.Typer()
app.command("render")(render_cmd)
app.command("noop")(lambda: None)  # two commands: typer keeps the `render` subcommand name

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


# --- who reaches the cluster: access entries, the kubeconfig's AWS identity, a private endpoint ------

CI_ROLE = "arn:aws:iam::111122223333:role/ci-deployer"
TEAM_ROLE = "arn:aws:iam::111122223333:role/teams/ml-platform"
ENTRIES = [
    {"principalArn": CI_ROLE, "policy": "AmazonEKSClusterAdminPolicy"},
    {"principalArn": TEAM_ROLE, "policy": "AmazonEKSEditPolicy", "namespaces": ["triton", "monitoring"]},
    {"principalArn": TEAM_ROLE, "policy": "AmazonEKSViewPolicy"},
]


def test_access_entries_become_an_access_entry_per_principal_with_its_policy_associations() -> None:
    """Under the mocks, with the argument names of the installed pulumi_aws (its eks.AccessEntry and
    eks.AccessPolicyAssociation): one entry per principal, one association per policy and scope."""
    mocks = run_program("cluster-aws", "dev", {"accessEntries": ENTRIES})
    (cluster,) = mocks.of_type("aws:eks/cluster:Cluster")
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    entries = {e.inputs["principalArn"]: e.inputs for e in mocks.of_type("aws:eks/accessEntry:AccessEntry")
               if e.inputs["type"] == "STANDARD"}  # Karpenter's node role has its own (EC2_LINUX)
    assert set(entries) == {CI_ROLE, TEAM_ROLE}
    assert all(e["clusterName"] == "tritonops-dev" and e["type"] == "STANDARD" for e in entries.values())
    assocs = {(a.inputs["principalArn"], a.inputs["policyArn"].rsplit("/", 1)[1]): a.inputs
              for a in mocks.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")}
    assert set(assocs) == {(CI_ROLE, "AmazonEKSClusterAdminPolicy"), (TEAM_ROLE, "AmazonEKSEditPolicy"),
                           (TEAM_ROLE, "AmazonEKSViewPolicy")}
    admin = assocs[(CI_ROLE, "AmazonEKSClusterAdminPolicy")]
    assert admin["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    assert admin["accessScope"] == {"type": "cluster"} and admin["clusterName"] == "tritonops-dev"
    assert assocs[(TEAM_ROLE, "AmazonEKSEditPolicy")]["accessScope"] == {
        "type": "namespace", "namespaces": ["triton", "monitoring"]}


def test_committed_stacks_add_no_access_entry_and_render_writes_the_runners_rule() -> None:
    entries = committed("cluster-aws", "prod").of_type("aws:eks/accessEntry:AccessEntry")
    assert [e.inputs["type"] for e in entries] == ["EC2_LINUX"]  # Karpenter's node role only
    rules = [a["spec"] for a in build("cluster-aws", "prod", user_stacks()).aws
             if a["type"] == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"]
    assert rules == [{"security_group_id": "<cluster security group>", "name": "api-access-10-0-0-0-16",
                      "ip_protocol": "tcp", "from_port": 443,
                      "to_port": 443, "cidr_ipv4": "10.0.0.0/16",
                      "description": "Kubernetes API of tritonops-prod from 10.0.0.0/16 (tritonops apiAccessCidrs)"}]


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ({"principalArn": "arn:aws:sts::111122223333:assumed-role/ci-deployer/gh-123", "policy": "AmazonEKSViewPolicy"},
         "accessEntries[0].principalArn", "STS session"),
        ({"principalArn": "arn:aws:iam::111122223333:group/admins", "policy": "AmazonEKSViewPolicy"},
         "accessEntries[0].principalArn", "not an IAM role or user ARN"),
        ({"principalArn": "arn:aws:iam::111122223333:root", "policy": "AmazonEKSViewPolicy"},
         "accessEntries[0].principalArn", "not an IAM role or user ARN"),
        ({"principalArn": "ci-deployer", "policy": "AmazonEKSViewPolicy"},
         "accessEntries[0].principalArn", "not an IAM role or user ARN"),
        ({"principalArn": CI_ROLE, "policy": "AmazonEKSReadOnlyPolicy"}, "accessEntries[0].policy",
         "AmazonEKSClusterAdminPolicy"),
        ({"principalArn": CI_ROLE, "policy": "AmazonEKSEditPolicy", "namespaces": ["Triton"]},
         "accessEntries[0].namespaces[0]", "not a namespace name"),
    ],
)
def test_a_bad_access_entry_is_refused_naming_its_key(entry: dict, key: str, words: str) -> None:
    mocks = Mocks()
    with pytest.raises(ConfigError) as exc:
        run_program("cluster-aws", "dev", {"accessEntries": [entry]}, mocks=mocks)
    assert any(e.key == f"tritonops-cluster-aws:{key}" and words in e.message for e in exc.value.errors), exc.value
    assert "Pulumi.dev.yaml" in str(exc.value)
    assert mocks.resources == []


def test_a_policy_given_twice_to_one_principal_is_refused() -> None:
    twice = [ENTRIES[0], {**ENTRIES[0], "namespaces": ["triton"]}]
    with pytest.raises(ConfigError) as exc:
        run_program("cluster-aws", "dev", {"accessEntries": twice}, mocks=Mocks())
    assert exc.value.key == "tritonops-cluster-aws:accessEntries[1].policy"


def _exec(kubeconfig: str) -> dict:
    return yaml.safe_load(kubeconfig)["users"][0]["user"]["exec"]


def _provider_kubeconfig(mocks: Mocks) -> str:
    (provider,) = [r for r in mocks.of_type("pulumi:providers:kubernetes") if r.name == "cluster-aws-k8s"]
    return str(provider.inputs["kubeconfig"])


def test_kubeconfig_runs_get_token_as_the_stacks_aws_profile_and_role() -> None:
    plain = _exec(_provider_kubeconfig(committed("cluster-aws", "dev")))
    assert "env" not in plain and "--role-arn" not in plain["args"]
    ci = json.dumps([{"roleArn": CI_ROLE, "sessionName": "pulumi"}])
    mocks = run_program("cluster-aws", "dev", {"aws:profile": "ml-prod", "aws:assumeRoles": ci})
    user = _exec(_provider_kubeconfig(mocks))
    assert user["env"] == [{"name": "AWS_PROFILE", "value": "ml-prod"}]
    assert user["args"] == ["eks", "get-token", "--cluster-name", "tritonops-dev", "--region", "us-west-2",
                            "--role-arn", CI_ROLE]
    assert _exec(eks.kubeconfig("c", "https://x", "Q0E=", "eu-west-1", profile="p"))["env"] == [
        {"name": "AWS_PROFILE", "value": "p"}]


def test_a_chain_of_assumed_roles_is_refused_before_any_resource() -> None:
    chain = json.dumps([{"roleArn": CI_ROLE}, {"roleArn": TEAM_ROLE}])
    mocks = Mocks()
    with pytest.raises(ConfigError) as exc:
        run_program("cluster-aws", "dev", {"aws:assumeRoles": chain}, mocks=mocks)
    assert exc.value.key == "aws:assumeRoles" and "Pulumi.dev.yaml" in str(exc.value)
    assert mocks.resources == []


def test_a_private_endpoint_gets_the_runners_rule_on_the_cluster_security_group() -> None:
    """prod (endpointPublicAccess: false) admits its apiAccessCidrs on 443 of the group EKS creates."""
    (rule,) = committed("cluster-aws", "prod").of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    got = as_ints(rule.inputs)
    assert got["securityGroupId"] == CLUSTER_SECURITY_GROUP
    assert (got["ipProtocol"], got["fromPort"], got["toPort"], got["cidrIpv4"]) == ("tcp", 443, 443, "10.0.0.0/16")
    runner_sg = "sg-0123456789abcdef0"
    private = {"endpointPublicAccess": False, "publicAccessCidrs": [], "apiAccessSecurityGroupIds": [runner_sg]}
    (rule,) = run_program("cluster-aws", "dev", private).of_type(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert rule.inputs["referencedSecurityGroupId"] == runner_sg and "cidrIpv4" not in rule.inputs
    assert rule.inputs["securityGroupId"] == CLUSTER_SECURITY_GROUP


def test_a_private_endpoint_without_runner_access_is_refused_by_check_config(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    for stack in ("cluster-aws", "platform", "triton"):
        shutil.copytree(STACKS_DIR / stack, stacks / stack, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    path = stacks / "cluster-aws" / "Pulumi.prod.yaml"
    path.write_text("\n".join(ln for ln in path.read_text().splitlines() if "apiAccessCidrs" not in ln) + "\n")
    args = ["render", "--check-config", "--stack", "cluster-aws", "--env", "prod", "--project-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert re.search(rf"{re.escape(str(path))}:\d+: tritonops-cluster-aws:apiAccessCidrs: the API endpoint is private",
                     out), out
    assert "apiAccessSecurityGroupIds" in out


@pytest.mark.parametrize(
    ("override", "key"),
    [({"apiAccessCidrs": ["10.0.0.0/33"]}, "apiAccessCidrs[0]"),
     ({"apiAccessSecurityGroupIds": ["sg-12"]}, "apiAccessSecurityGroupIds[0]")],
)
def test_a_bad_runner_cidr_or_group_names_its_key(override: dict, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        run_program("cluster-aws", "prod", override, mocks=Mocks())
    assert exc.value.key == f"tritonops-cluster-aws:{key}"
