"""Replace-safe names (issue 33, Deliver-5): a change that replaces a resource never replaces it into
a name that still exists. Pulumi creates the replacement before it deletes the old one unless the
resource says deleteBeforeReplace, so a fixed physical name either goes with deleteBeforeReplace or
changes with the inputs that replace it (the EKS node groups)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from k8s_harness import Captured, Mocks, committed, envs, run_program
from pydantic.alias_generators import to_camel
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.cluster_aws import eks

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
# AWS resources the stacks name themselves (the name input), and the one that may keep it: the cluster.
NAMED = ("aws:iam/role:Role", "aws:sqs/queue:Queue", "aws:cloudwatch/eventRule:EventRule")


def _physical(r: Captured) -> str | None:
    return r.inputs.get("nodeGroupName") or r.inputs.get("name")


def _changed_pools(env: str) -> dict[str, Any]:
    """Every GPU pool with another instance type and a bigger disk; the system pool's type too."""
    raw = copy.deepcopy(read_stack_file("cluster-aws", env)[0])
    pools = raw["gpuNodePools"]
    for p in pools:
        p["instanceTypes"] = [p["instanceTypes"][0].split(".")[0] + ".8xlarge"]
        p["diskSizeGib"] = p.get("diskSizeGib", 200) + 100
    system = {**raw.get("systemNodePool", {}), "instanceTypes": ["m6i.2xlarge"]}
    return {"gpuNodePools": pools, "systemNodePool": system}


def _collisions(before: Mocks, after: Mocks) -> list[str]:
    """Resources the change replaces (a node group's replacing input differs) whose replacement would
    be created under the name the old one still holds."""
    old = {(r.typ, r.name): r for r in before.resources}
    out = []
    for r in after.resources:
        prev = old.get((r.typ, r.name))
        if prev is None or r.typ != NODE_GROUP:
            continue
        replaced = any(prev.inputs.get(to_camel(k)) != r.inputs.get(to_camel(k)) for k in eks.REPLACING_INPUTS)
        if replaced and _physical(prev) == _physical(r) and not r.delete_before_replace:
            out.append(f"{r.typ} {r.name}: {_physical(r)}")
    return out


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_new_instance_type_and_disk_size_collide_with_no_name(env: str) -> None:
    """Before: nodeGroupName was <cluster>-<pool>; a new instance type or disk size replaced the group
    into the name the old group still held (EKS: ResourceInUseException), and nothing said so."""
    before = committed("cluster-aws", env)
    after = run_program("cluster-aws", env, overrides=_changed_pools(env))
    groups = [r for r in after.resources if r.typ == NODE_GROUP]
    assert groups
    olds = {_physical(r) for r in before.resources if r.typ == NODE_GROUP}
    assert all(_physical(r) not in olds for r in groups)  # every group was replaced, under a new name
    assert _collisions(before, after) == []


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_every_fixed_name_deletes_before_replacing(env: str) -> None:
    """IAM roles, the interruption queue and its rules carry names the chart and the policies use:
    whatever replaces them deletes the old one first."""
    mocks = committed("cluster-aws", env)
    named = [r for r in mocks.resources if r.typ in NAMED and r.inputs.get("name")]
    assert named  # the modelReaders' roles at least
    assert [f"{r.typ} {r.name}" for r in named if not r.delete_before_replace] == []


def test_collision_check_sees_a_fixed_node_group_name() -> None:
    """The check itself: two registrations of one group under one name, inputs changed, would collide."""
    a = Captured(NODE_GROUP, "g", {"nodeGroupName": "c-p", "instanceTypes": ["g5.xlarge"]})
    b = Captured(NODE_GROUP, "g", {"nodeGroupName": "c-p", "instanceTypes": ["g5.2xlarge"]})
    assert _collisions(Mocks([a]), Mocks([b])) == ["aws:eks/nodeGroup:NodeGroup g: c-p"]
    b.delete_before_replace = True
    assert _collisions(Mocks([a]), Mocks([b])) == []
