"""Karpenter GPU pools: builders against the pinned CRD schemas, config, the cluster-aws program under
Pulumi mocks (interruption queue and rules, IRSA controller role, node role, chart, NodePools), policy."""

from __future__ import annotations

import copy
import functools
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from k8s_harness import ROOT, as_ints, committed, envs, k8s_objects, user_stacks
from tritonops import versions
from tritonops.k8s.config import ClusterAwsConfig, ConfigError
from tritonops.k8s.parse import parse_config
from tritonops.k8s.programs import render_set
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.cluster_aws import karpenter
from tritonops.k8s.stacks.cluster_aws.eks import node_labels
from tritonops.k8s.stacks.triton import workload

DATA = Path(__file__).parent / "data" / "karpenter"
CRDS = {"NodePool": "karpenter.sh_nodepools.yaml", "EC2NodeClass": "karpenter.k8s.aws_ec2nodeclasses.yaml"}
ENVS = pytest.mark.parametrize("env", envs("cluster-aws"))
PACK = ROOT / "policies" / "tritonops"
sys.path.insert(0, str(PACK))
import policy_cluster as pcl  # noqa: E402


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    crd = yaml.safe_load((DATA / CRDS[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())


def _errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(obj["kind"]).iter_errors(obj)]


def _cfg(env: str, **pool_changes: Any) -> ClusterAwsConfig:
    raw = copy.deepcopy(read_stack_file("cluster-aws", env, user_stacks())[0])
    for pool in raw["gpuNodePools"]:
        if pool.get("provisioner") == "karpenter":
            pool.update(pool_changes)
    cfg = parse_config("cluster-aws", raw)
    assert isinstance(cfg, ClusterAwsConfig)
    return cfg


def _karpenter_objects(env: str) -> list[dict[str, Any]]:
    return [o for o in build("cluster-aws", env, user_stacks()).objects if o["kind"] in CRDS]


# --- the pinned CRD schemas ----------------------------------------------------------------------


def test_crd_test_data_matches_the_pinned_chart() -> None:
    readme = (DATA / "README.md").read_text()
    assert f"chart {versions.KARPENTER_CHART_VERSION}" in readme and f"v{versions.KARPENTER_CHART_VERSION}" in readme
    assert karpenter.NODE_POOL_API == "karpenter.sh/v1" and karpenter.NODE_CLASS_API == "karpenter.k8s.aws/v1"


@ENVS
def test_rendered_nodepools_and_nodeclasses_match_the_crd_schemas(env: str) -> None:
    objs = _karpenter_objects(env)
    assert sorted(o["kind"] for o in objs) == ["EC2NodeClass", "NodePool"]
    for obj in objs:
        assert _errors(obj) == [], obj["metadata"]["name"]


def test_bottlerocket_nodeclass_matches_the_crd_schema() -> None:
    cfg = _cfg("dev", amiType="BOTTLEROCKET_x86_64_NVIDIA", gpuSharing=None)  # Bottlerocket: no time-slicing
    cls = karpenter.ec2_node_class(cfg, karpenter.karpenter_pools(cfg)[0])
    assert _errors(cls) == []
    assert [d["deviceName"] for d in cls["spec"]["blockDeviceMappings"]] == ["/dev/xvda", "/dev/xvdb"]
    assert cls["spec"]["amiSelectorTerms"] == [{"alias": versions.KARPENTER_AMI_ALIASES["bottlerocket"]}]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "disruption", "consolidationPolicy"), "Sometimes"),
        (("spec", "disruption", "budgets", 0, "nodes"), "ten"),
        (("spec", "template", "spec", "taints", 0, "effect"), "NO_SCHEDULE"),
        (("spec", "template", "spec", "expireAfter"), "30 days"),
    ],
)
def test_the_schema_check_refuses_a_broken_nodepool(path: tuple, value: Any) -> None:
    obj = copy.deepcopy(karpenter.node_pool(_cfg("dev"), karpenter.karpenter_pools(_cfg("dev"))[0]))
    target = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert _errors(obj)


# --- builders ------------------------------------------------------------------------------------


def test_nodepool_selects_catalog_families_with_the_managed_pools_taint_and_labels() -> None:
    cfg = _cfg("prod")
    (pool,) = karpenter.karpenter_pools(cfg)
    spec = karpenter.node_pool(cfg, pool)["spec"]
    reqs = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    assert reqs["karpenter.k8s.aws/instance-family"] == ["g6e"]
    assert reqs["node.kubernetes.io/instance-type"] == pool.instance_types
    assert reqs["kubernetes.io/arch"] == ["amd64"]
    assert spec["template"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert spec["template"]["metadata"]["labels"] == node_labels(pool)
    assert spec["template"]["spec"]["nodeClassRef"]["name"] == pool.name
    assert spec["limits"] == {"nvidia.com/gpu": 6}
    assert spec["template"]["spec"]["expireAfter"] == "720h"
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert spec["disruption"]["consolidateAfter"] == "15m"


@pytest.mark.parametrize(("capacity", "types"), [("SPOT", ["spot", "on-demand"]), ("ON_DEMAND", ["on-demand"])])
def test_spot_falls_back_to_on_demand(capacity: str, types: list[str]) -> None:
    cfg = _cfg("dev", capacityType=capacity)
    reqs = karpenter.node_pool(cfg, karpenter.karpenter_pools(cfg)[0])["spec"]["template"]["spec"]["requirements"]
    assert {r["key"]: r["values"] for r in reqs}["karpenter.sh/capacity-type"] == types


@pytest.mark.parametrize("allowed", [1, 3])
def test_disruption_budget_is_the_pdbs_evictions(allowed: int) -> None:
    cfg = _cfg("dev", karpenter={"maxGpus": 4, "pdbMaxUnavailable": allowed})
    budgets = karpenter.node_pool(cfg, karpenter.karpenter_pools(cfg)[0])["spec"]["disruption"]["budgets"]
    assert budgets == [{"nodes": str(allowed)}]


def test_default_budget_follows_the_triton_stacks_default_pdb() -> None:
    tcfg = load_stack_config("triton", "dev")
    svc = next(s for s in tcfg.model_services if s.pdb_min_available is None)
    pdb = workload.pod_disruption_budget(tcfg, svc)
    cfg = _cfg("dev", karpenter={"maxGpus": 2})  # pdbMaxUnavailable left to its default
    nodes = karpenter.node_pool(cfg, karpenter.karpenter_pools(cfg)[0])["spec"]["disruption"]["budgets"][0]["nodes"]
    assert nodes == str(pdb["spec"]["maxUnavailable"])


def test_nodeclass_uses_the_node_role_pinned_ami_and_cluster_network() -> None:
    cfg = _cfg("dev")
    spec = karpenter.ec2_node_class(cfg, karpenter.karpenter_pools(cfg)[0])["spec"]
    assert spec["role"] == "tritonops-dev-karpenter-node"
    assert spec["amiSelectorTerms"] == [{"alias": versions.KARPENTER_AMI_ALIASES["al2023"]}]
    assert "@latest" not in spec["amiSelectorTerms"][0]["alias"]
    assert spec["subnetSelectorTerms"] == [{"id": s} for s in cfg.subnet_ids] and len(cfg.subnet_ids) == 2
    assert spec["securityGroupSelectorTerms"] == [{"tags": {"aws:eks:cluster-name": "tritonops-dev"}}]
    assert spec["blockDeviceMappings"][0]["ebs"]["volumeSize"] == "100Gi"
    assert spec["metadataOptions"]["httpTokens"] == "required"


# --- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"karpenter": None}, "gpuNodePools[0].karpenter"),
        ({"provisioner": "managed"}, "gpuNodePools[0].karpenter"),
        ({"karpenter": {"maxGpus": 2, "expireAfter": "30 days"}}, "gpuNodePools[0].karpenter.expireAfter"),
        ({"karpenter": {"maxGpus": 0}}, "gpuNodePools[0].karpenter.maxGpus"),
        ({"karpenter": {"consolidateAfter": "5m"}}, "gpuNodePools[0].karpenter.maxGpus"),
    ],
)
def test_bad_karpenter_config_names_the_key(change: dict[str, Any], key: str) -> None:
    raw = copy.deepcopy(read_stack_file("cluster-aws", "dev")[0])
    for k, v in change.items():
        if v is None:
            raw["gpuNodePools"][0].pop(k)
        else:
            raw["gpuNodePools"][0][k] = v
    with pytest.raises(ConfigError) as exc:
        parse_config("cluster-aws", raw)
    assert exc.value.key == f"tritonops-cluster-aws:{key}"


def test_no_karpenter_pool_no_karpenter() -> None:
    raw = copy.deepcopy(read_stack_file("cluster-aws", "dev")[0])
    pool = raw["gpuNodePools"][0]
    pool.pop("provisioner"), pool.pop("karpenter")
    rs = render_set("cluster-aws", "dev", parse_config("cluster-aws", raw))
    # the managed group that took its place grows with cluster-autoscaler instead
    assert [r.name for r in rs.releases] == ["cluster-autoscaler"]
    assert [o["kind"] for o in rs.objects] == ["StorageClass"]  # no NodePool, no EC2NodeClass
    assert [a["type"] for a in rs.aws].count("aws:eks/nodeGroup:NodeGroup") == 2
    assert not any(a["type"].startswith(("aws:sqs", "aws:cloudwatch")) for a in rs.aws)


# --- the cluster-aws program under Pulumi mocks --------------------------------------------------


@ENVS
def test_stack_creates_the_same_nodepools_render_writes(env: str) -> None:
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    captured = sorted(k8s_objects(committed("cluster-aws", env)), key=key)
    assert captured == sorted(build("cluster-aws", env, user_stacks()).objects, key=key)
    assert {o["kind"] for o in captured} == {"NodePool", "EC2NodeClass", "StorageClass"}


@ENVS
def test_system_pool_stays_managed_and_karpenter_pools_get_no_node_group(env: str) -> None:
    mocks = committed("cluster-aws", env)
    # <cluster>-<pool>-<6 hex of the inputs that replace it> (tritonops.k8s.stacks.cluster_aws.eks._named)
    groups = {g.inputs["nodeGroupName"][:-7] for g in mocks.of_type("aws:eks/nodeGroup:NodeGroup")}
    cfg = load_stack_config("cluster-aws", env)
    assert isinstance(cfg, ClusterAwsConfig)
    expected = {f"tritonops-{env}-system"} | {f"tritonops-{env}-{p.name}" for p in karpenter.managed_pools(cfg)}
    assert groups == expected
    assert len(mocks.of_type("tritonops:aws:Karpenter")) == 1


@ENVS
def test_interruption_queue_and_event_rules(env: str) -> None:
    mocks = committed("cluster-aws", env)
    (queue,) = mocks.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["name"] == f"tritonops-{env}-karpenter" and queue.inputs["sqsManagedSseEnabled"] is True
    arn = f"arn:aws:sqs:us-west-2:111122223333:tritonops-{env}-karpenter"
    patterns = sorted(json.loads(r.inputs["eventPattern"])["detail-type"][0] for r in mocks.of_type(
        "aws:cloudwatch/eventRule:EventRule"))
    assert patterns == [
        "AWS Health Event",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "EC2 Spot Instance Interruption Warning",
    ]
    targets = mocks.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert len(targets) == 4 and {t.inputs["arn"] for t in targets} == {arn}
    (qp,) = mocks.of_type("aws:sqs/queuePolicy:QueuePolicy")
    allow, deny = json.loads(qp.inputs["policy"])["Statement"]
    assert "events.amazonaws.com" in allow["Principal"]["Service"] and allow["Resource"] == arn
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


@ENVS
def test_controller_role_is_irsa_with_karpenters_actions(env: str) -> None:
    mocks = committed("cluster-aws", env)
    roles = {r.inputs.get("name"): r for r in mocks.of_type("aws:iam/role:Role")}
    trust = json.loads(roles[f"tritonops-{env}-karpenter"].inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    cond = trust["Condition"]["StringEquals"]
    assert cond["oidc.eks.us-west-2.amazonaws.com/id/ABCDEF:sub"] == "system:serviceaccount:kube-system:karpenter"
    (policy,) = [p for p in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if p.name == "karpenter-controller-policy"]
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    assert statements["AllowInterruptionQueueActions"]["Resource"] == (
        f"arn:aws:sqs:us-west-2:111122223333:tritonops-{env}-karpenter"
    )
    assert statements["AllowPassingInstanceRole"]["Resource"].endswith("/karpenter-node-role")
    assert statements["AllowScopedDeletion"]["Condition"]["StringEquals"] == {
        f"aws:ResourceTag/kubernetes.io/cluster/tritonops-{env}": "owned"
    }
    assert statements["AllowAPIServerEndpointDiscovery"]["Resource"].endswith(f":cluster/tritonops-{env}")
    actions = {a for s in statements.values() for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"ec2:CreateFleet", "ec2:RunInstances", "ec2:TerminateInstances", "iam:CreateInstanceProfile",
            "pricing:GetProducts", "ssm:GetParameter", "sqs:ReceiveMessage"} <= actions


@ENVS
def test_node_role_has_an_access_entry(env: str) -> None:
    mocks = committed("cluster-aws", env)
    (entry,) = mocks.of_type("aws:eks/accessEntry:AccessEntry")
    assert entry.inputs["type"] == "EC2_LINUX"
    assert entry.inputs["principalArn"].endswith("/karpenter-node-role")
    roles = {r.name: r for r in mocks.of_type("aws:iam/role:Role")}
    assert roles["karpenter-node-role"].inputs["name"] == f"tritonops-{env}-karpenter-node"


@ENVS
def test_chart_is_pinned_and_wired_to_queue_and_role(env: str) -> None:
    mocks = committed("cluster-aws", env)
    (rel,) = [r for r in mocks.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "karpenter"]
    assert rel.inputs["chart"] == f"{versions.KARPENTER_REPO}/{versions.KARPENTER_CHART}"
    assert rel.inputs["version"] == versions.KARPENTER_CHART_VERSION
    values = as_ints(rel.inputs["values"])
    assert values["settings"] == {"clusterName": f"tritonops-{env}", "interruptionQueue": f"tritonops-{env}-karpenter"}
    assert values["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"].endswith("/karpenter-controller-role")
    assert values["nodeSelector"] == {"tritonops.io/node-pool": "system"}
    (provider,) = mocks.of_type("pulumi:providers:kubernetes")
    assert "kubeconfig" in provider.inputs


# --- policy --------------------------------------------------------------------------------------


class _Args:
    def __init__(self, props: dict[str, Any]) -> None:
        self.resource_type, self.props, self.name = pcl.NODE_POOL, props, "np"


def _violations(props: dict[str, Any]) -> list[str]:
    found: list[str] = []
    pcl.validate_gpu_node_pool_bounds(_Args(props), lambda msg, urn=None: found.append(msg))
    return found


def _nodepool() -> dict[str, Any]:
    return copy.deepcopy(next(o for o in _karpenter_objects("prod") if o["kind"] == "NodePool"))


def test_policy_passes_the_rendered_gpu_nodepool() -> None:
    assert _violations(_nodepool()) == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["spec"].pop("limits"),
        lambda p: p["spec"]["disruption"].pop("budgets"),
        lambda p: p["spec"]["disruption"].update({"budgets": []}),
    ],
)
def test_policy_refuses_a_gpu_nodepool_without_limits_or_budget(mutate: Any) -> None:
    props = _nodepool()
    mutate(props)
    assert len(_violations(props)) == 1


@pytest.mark.parametrize(
    "requirements",
    [
        [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p5"]}],
        [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.2xlarge"]}],
        [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]}],
    ],
)
def test_policy_recognises_gpu_nodepools_by_requirements(requirements: list[dict[str, Any]]) -> None:
    props = {"metadata": {"name": "np"}, "spec": {"template": {"spec": {"requirements": requirements}}}}
    assert len(_violations(props)) == 2


def test_policy_recognises_gpu_nodepools_by_taint_and_ignores_cpu_pools() -> None:
    cpu = {"spec": {"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6i", "c7g"]}]}}}}
    assert _violations(cpu) == []
    cpu["spec"]["template"]["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert len(_violations(cpu)) == 2


def test_readme_nodepool_snippet_is_the_rendered_one(tmp_path: Path) -> None:
    from tritonops.k8s.render import render

    render("cluster-aws", "dev", tmp_path, user_stacks())
    rendered = (tmp_path / "01-nodepool-gpu-l4.yaml").read_text().splitlines()
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    snippet = text.split("(`01-nodepool-gpu-l4.yaml`):\n\n```yaml\n", 1)[1].split("```", 1)[0]
    lines = [ln for ln in snippet.splitlines() if ln.strip() != "..."]
    assert len(lines) > 20 and all(ln in rendered for ln in lines)


def test_karpenter_args_refuse_a_cluster_without_karpenter_pools() -> None:
    from tritonops.k8s.stacks.cluster_aws.components import KarpenterArgs

    raw = copy.deepcopy(read_stack_file("cluster-aws", "dev")[0])
    pool = raw["gpuNodePools"][0]
    pool.pop("provisioner"), pool.pop("karpenter")
    cfg = parse_config("cluster-aws", raw)
    assert isinstance(cfg, ClusterAwsConfig)
    with pytest.raises(ValueError, match="no pool has provisioner karpenter"):
        KarpenterArgs(cfg, "c", "arn:aws:eks:us-west-2:1:cluster/c", "arn", "https://oidc")
