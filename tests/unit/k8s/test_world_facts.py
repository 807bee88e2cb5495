"""The stack files held against the world's facts (tritonops.world, issue 43 items 1 and 2): the Kubernetes
version EKS creates on the day the check runs (the clock moved with TRITONOPS_TODAY), the charts that
support it, cluster-autoscaler's minor, a pod that no instance type of its pool can hold, and a GPU
Operator that would install a second driver over the AMI's."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
from k8s_harness import STACK_FILES, STACKS_DIR
from tritonops import versions, world
from tritonops.cli import app
from tritonops.k8s import cluster_contract, fit
from tritonops.k8s.catalog import GPU_AMI_TYPES
from tritonops.k8s.config import ConfigError
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.cluster_aws import autoscaler
from typer.testing import CliRunner


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    shutil.copytree(STACKS_DIR, tmp_path / "stacks")
    return tmp_path / "stacks"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _check(stack: str, env: str, stacks: Path, *, today: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["render", "--check-config", "--stack", stack, "--env", env,
                                      "--project-dir", str(stacks.parent), "--json"],
                                env={"TRITONOPS_TODAY": today} if today else {})
    return result.exit_code, result.stdout


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_every_shipped_stack_file_holds_against_the_world_today(stack: str, env: str) -> None:
    load_stack_config(stack, env)  # today's date: the version is one EKS creates, every chart supports it
    assert cluster_contract.check(stack, env) == []


def test_the_shipped_version_is_in_standard_support_for_months() -> None:
    v = world.EKS_VERSIONS[versions.KUBERNETES_VERSION]
    read = world.EKS_VERSIONS_SOURCE.read
    assert v.released <= read and v.end_of_standard - read >= dt.timedelta(days=90)
    assert world.newest_in_standard(read) == versions.KUBERNETES_VERSION


def test_1_30_is_refused_today_with_the_version_to_use(stacks: Path) -> None:
    """Before: 1.30 (past EKS extended support since 2026-07-23) passed every check."""
    _edit(stacks / "cluster-aws/Pulumi.dev.yaml", 'kubernetesVersion: "1.35"', 'kubernetesVersion: "1.30"')
    code, out = _check("cluster-aws", "dev", stacks)
    doc = json.loads(out)
    assert code == 2 and doc["key"] == "tritonops-cluster-aws:kubernetesVersion"
    assert "Pulumi.dev.yaml:7:" in doc["error"] and "ended extended support of Kubernetes 1.30 on 2026-07-23" in doc["error"]


def test_the_clock_moved_past_the_shipped_versions_support_refuses_it(stacks: Path) -> None:
    end = world.EKS_VERSIONS[versions.KUBERNETES_VERSION].end_of_extended
    code, _ = _check("cluster-aws", "dev", stacks, today=str(end))
    assert code == 0
    code, out = _check("cluster-aws", "dev", stacks, today=str(end + dt.timedelta(days=1)))
    assert code == 2 and f"ended extended support of Kubernetes {versions.KUBERNETES_VERSION}" in json.loads(out)["error"]


def test_a_window_ending_within_90_days_warns_and_passes(stacks: Path) -> None:
    end = world.EKS_VERSIONS[versions.KUBERNETES_VERSION].end_of_standard
    code, out = _check("cluster-aws", "dev", stacks, today=str(end - dt.timedelta(days=91)))
    assert code == 0 and json.loads(out)["warnings"] == []
    code, out = _check("cluster-aws", "dev", stacks, today=str(end - dt.timedelta(days=30)))
    (warning,) = json.loads(out)["warnings"]
    assert code == 0 and warning["key"] == "tritonops-cluster-aws:kubernetesVersion"
    assert f"leaves EKS standard support on {end}, in 30 days" in warning["warning"]


def test_a_version_a_pinned_chart_does_not_support_is_refused(stacks: Path) -> None:
    """1.32 is still in EKS extended support until 2027-03-23, but KEDA 2.20 is tested on 1.33-1.35 only."""
    _edit(stacks / "cluster-aws/Pulumi.dev.yaml", 'kubernetesVersion: "1.35"', 'kubernetesVersion: "1.32"')
    code, out = _check("cluster-aws", "dev", stacks, today="2027-01-04")
    error = json.loads(out)["error"]
    assert code == 2 and f"chart keda {versions.KEDA_CHART_VERSION} supports Kubernetes 1.33 - 1.35, not 1.32" in error
    assert "cluster-autoscaler has no image pinned for Kubernetes 1.32" in error


def test_cluster_autoscaler_follows_the_clusters_minor(stacks: Path) -> None:
    """Before: with kubernetesVersion 1.33 the render still pinned cluster-autoscaler v1.30.7."""
    _edit(stacks / "cluster-aws/Pulumi.prod.yaml", 'kubernetesVersion: "1.35"', 'kubernetesVersion: "1.33"')
    cfg = load_stack_config("cluster-aws", "prod", stacks)
    tag = autoscaler.release(cfg, "arn:aws:iam::111122223333:role/ca", "us-west-2").values["image"]["tag"]
    assert world.minor_of(tag) == "1.33" == world.minor_of(versions.CLUSTER_AUTOSCALER_IMAGE_TAGS["1.33"])


def test_an_instance_type_without_facts_is_refused(stacks: Path) -> None:
    _edit(stacks / "cluster-aws/Pulumi.prod.yaml", "instanceTypes: [m6i.xlarge]", "instanceTypes: [m6i.metal]")
    with pytest.raises(ConfigError) as exc:
        load_stack_config("cluster-aws", "prod", stacks)
    assert exc.value.key == "tritonops-cluster-aws:systemNodePool.instanceTypes[0]"
    assert "'m6i.metal' is not in tritonops.world.INSTANCE_TYPES" in str(exc.value)


def test_prod_embeddings_as_it_was_can_never_be_scheduled(stacks: Path) -> None:
    """Before: 8 CPU and 32Gi (plus the agent's sidecar) on g6e.xlarge (4 vCPU, 3,920m allocatable) passed."""
    _edit(stacks / "cluster-aws/Pulumi.prod.yaml", "instanceTypes: [g6e.2xlarge]", "instanceTypes: [g6e.xlarge]")
    _edit(stacks / "triton/Pulumi.prod.yaml", "instanceType: g6e.2xlarge", "instanceType: g6e.xlarge")
    text = (stacks / "triton/Pulumi.prod.yaml").read_text()
    (stacks / "triton/Pulumi.prod.yaml").write_text(text.replace('cpu: "6"', 'cpu: "8"'))
    code, out = _check("triton", "prod", stacks)
    doc = json.loads(out)
    assert code == 2 and doc["key"] == "tritonops-triton:modelServices[1].resources"
    assert "Deployment triton-embeddings on pool 'gpu-l40s'" in doc["error"] and "g6e.xlarge 3765m CPU" in doc["error"]


def test_a_gpu_operator_driver_over_the_amis_driver_is_refused(stacks: Path) -> None:
    _edit(stacks / "platform/Pulumi.prod.yaml", "driverEnabled: false", "driverEnabled: true")
    code, out = _check("platform", "prod", stacks)
    doc = json.loads(out)
    assert code == 2 and doc["key"] == "tritonops-platform:gpuOperator.driverEnabled"
    assert "BOTTLEROCKET_x86_64_NVIDIA" in doc["error"] and "ship the NVIDIA driver" in doc["error"]


def test_pod_requests_count_sidecars_beside_the_containers_and_the_largest_init() -> None:
    res = lambda cpu, mem: {"resources": {"requests": {"cpu": cpu, "memory": mem}}}  # noqa: E731
    pod = {"initContainers": [{"name": "sync", **res("2", "1Gi")},
                              {"name": "agent", "restartPolicy": "Always", **res("100m", "256Mi")}],
           "containers": [{"name": "triton", "resources": {"limits": {"cpu": "1", "memory": "2Gi",
                                                                       "nvidia.com/gpu": 1}}}]}
    assert fit.pod_requests(pod) == fit.Requests(2000, 2304, 1)  # the init's CPU, containers + sidecar memory
    small = world.INSTANCE_TYPES["m6i.large"]
    assert fit.node_room(small).cpu_m == small.alloc_cpu_m - sum(d.cpu_m for d in world.NODE_DAEMONSETS)
    assert fit.misfit(pod, ["g6.xlarge"]) is None
    assert "no instance type of its pool can hold it" in (fit.misfit(pod, ["m6i.large"]) or "")


def test_every_fact_row_is_dated_and_sourced() -> None:
    sources = [world.EKS_VERSIONS_SOURCE, world.INSTANCE_TYPES_SOURCE,
               *(a.source for a in world.AMI_FAMILIES.values()), *(c.source for c in world.CHART_SUPPORT.values()),
               *(d.source for d in world.NODE_DAEMONSETS)]
    assert all(s.url.startswith("https://") and s.read <= dt.date(2026, 12, 7) for s in sources)
    for t in world.INSTANCE_TYPES.values():
        assert 0 < t.alloc_cpu_m < t.vcpu * 1000 and 0 < t.alloc_memory_mib < t.memory_mib and t.max_pods > 0
        assert bool(t.gpus) == bool(t.gpu) == bool(t.gpu_memory_mib)
    assert set(world.AMI_FAMILIES) == set(GPU_AMI_TYPES)  # every AMI a pool may name says what it ships
