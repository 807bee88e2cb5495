"""The cluster contract (tritonops.k8s.cluster_contract): every kind the stacks render has what serves it, and
``tritonops render --check-config`` refuses, naming file, line and config key, a stack file that renders
something nothing provides: an Ingress whose class no controller serves, a PVC with an unknown StorageClass,
a KEDA maxReplicaCount beyond its GPU pool's reachable GPUs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from k8s_harness import STACK_FILES, STACKS_DIR, user_stacks
from tritonops.cli import app
from tritonops.k8s import cluster_contract as cc
from tritonops.k8s.config import STACKS
from tritonops.k8s.gitops import flux_objects
from tritonops.k8s.render import build
from typer.testing import CliRunner

runner = CliRunner()


def _copy_stacks(tmp_path: Path) -> Path:
    stacks = tmp_path / "stacks"
    for stack in STACKS:
        shutil.copytree(STACKS_DIR / stack, stacks / stack, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    return stacks


def _check(tmp_path: Path, stack: str, env: str) -> tuple[int, str]:
    result = runner.invoke(app, ["render", "--check-config", "--stack", stack, "--env", env,
                                 "--project-dir", str(tmp_path)])
    return result.exit_code, " ".join(result.output.split())


def _edit(path: Path, old: str, new: str) -> int:
    """Replace the first ``old`` line; return its 1-based line number."""
    text = path.read_text()
    line = text.splitlines().index(old.rstrip("\n")) + 1
    path.write_text(text.replace(old, new, 1))
    return line


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_every_shipped_stack_file_is_clean(stack: str, env: str) -> None:
    assert [str(p) for p in cc.check(stack, env)] == []


def test_the_contract_knows_every_kind_the_stacks_render() -> None:
    """Each object of every shipped stack file (and the helm/ Flux objects) has its needs in CONTRACT."""
    kinds = set()
    for stack, env in STACK_FILES:
        rs = build(stack, env, user_stacks())
        kinds |= {(o["apiVersion"], o["kind"]) for o in rs.objects + flux_objects(rs.releases, rs.release_deps)}
    missing = sorted(kinds - set(cc.CONTRACT))
    assert missing == []
    assert ("keda.sh/v1alpha1", "ScaledObject") in kinds and ("gateway.networking.k8s.io/v1", "HTTPRoute") in kinds
    for needs in cc.CONTRACT.values():  # every need says where it comes from: a stack, or a command
        assert needs and all(n.provider.stack in STACKS or n.provider.command for n in needs)


def test_a_kind_missing_from_the_contract_fails_the_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _copy_stacks(tmp_path)
    monkeypatch.delitem(cc.CONTRACT, ("keda.sh/v1alpha1", "ScaledObject"))
    code, out = _check(tmp_path, "triton", "dev")
    assert code == 2
    assert "renders ScaledObject (keda.sh/v1alpha1), which the cluster contract does not know" in out


def test_a_route_to_a_gateway_nobody_creates_names_the_gateway_key(tmp_path: Path) -> None:
    path = _copy_stacks(tmp_path) / "triton" / "Pulumi.dev.yaml"
    line = _edit(path, "    gatewayName: inference\n", "    gatewayName: public\n")
    code, out = _check(tmp_path, "triton", "dev")
    assert code == 2, out
    assert f"{path}:{line}: tritonops-triton:ingress.gatewayName:" in out
    assert "attaches to Gateway gateway/public: no stack creates it" in out and "known: gateway/inference" in out
    assert "Traceback" not in out


def test_an_ingress_with_no_controller_names_the_class_key(tmp_path: Path) -> None:
    """The legacy ingress-nginx mode (dev ships in gateway mode): an IngressClass nothing serves."""
    path = _copy_stacks(tmp_path) / "triton" / "Pulumi.dev.yaml"
    _edit(path, "    mode: gateway\n", "    mode: ingress\n    className: nginx\n"
          "    tlsSecret: dev-tritonops-example-com-tls\n")
    line = _edit(path, "    className: nginx\n", "    className: traefik\n")
    code, out = _check(tmp_path, "triton", "dev")
    assert code == 2, out
    assert f"{path}:{line}: tritonops-triton:ingress.className:" in out
    assert "spec.ingressClassName is 'traefik': no ingress controller serves it" in out
    assert "Traceback" not in out


def test_a_pvc_with_an_unknown_storage_class_names_the_key(tmp_path: Path) -> None:
    path = _copy_stacks(tmp_path) / "platform" / "Pulumi.prod.yaml"
    line = _edit(path, "    storageClass: gp3\n", "    storageClass: fast-nvme\n")
    code, out = _check(tmp_path, "platform", "prod")
    assert code == 2, out
    assert f"{path}:{line}: tritonops-platform:monitoring.storageClass: StorageClass 'fast-nvme'" in out


def test_keda_max_above_a_karpenter_pool_names_max_replicas(tmp_path: Path) -> None:
    """dev: gpu-l4 is a Karpenter NodePool with limit 2 GPUs, 2 time-slices each: 4. vision at max 3 plus its
    canary's 1 replica would need 4 (fits); at 4, 5 (does not)."""
    stacks = _copy_stacks(tmp_path)
    path = stacks / "triton" / "Pulumi.dev.yaml"
    text = path.read_text()
    at = text.index("        maxReplicas: 2\n")
    line = text[:at].count("\n") + 1
    path.write_text(text[:at] + "        maxReplicas: 3\n" + text[at + len("        maxReplicas: 2\n"):])
    assert _check(tmp_path, "triton", "dev")[0] == 0
    path.write_text(text[:at] + "        maxReplicas: 4\n" + text[at + len("        maxReplicas: 2\n"):])
    code, out = _check(tmp_path, "triton", "dev")
    assert code == 2, out
    assert f"{path}:{line}: tritonops-triton:modelServices[0].autoscaling.maxReplicas:" in out
    assert "ScaledObject triton-vision spec.maxReplicaCount 4: pool 'gpu-l4' reaches 4 nvidia.com/gpu" in out
    assert "Karpenter NodePool limit nvidia.com/gpu: 2 x 2 time-slices" in out
    assert "can ask for 5 at their most (triton-vision 4 + triton-vision-canary 1)" in out


def test_keda_max_above_a_managed_group_names_max_replicas(tmp_path: Path) -> None:
    """prod: gpu-a10g is a managed node group of at most 10 one-GPU nodes; vision's KEDA max is 10."""
    stacks = _copy_stacks(tmp_path)
    _edit(stacks / "cluster-aws" / "Pulumi.prod.yaml", "      maxSize: 10\n", "      maxSize: 3\n")
    code, out = _check(tmp_path, "triton", "prod")
    assert code == 2, out
    assert "tritonops-triton:modelServices[0].autoscaling.maxReplicas:" in out
    assert "pool 'gpu-a10g' reaches 3 nvidia.com/gpu (managed node group maxSize 3 x 1 GPU per node" in out


def test_a_node_pool_the_cluster_lacks_is_named(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    path = stacks / "cluster-aws" / "Pulumi.prod.yaml"
    path.write_text(path.read_text().replace("- name: gpu-l40s", "- name: gpu-l40s-b"))
    code, out = _check(tmp_path, "triton", "prod")
    assert code == 2 and "tritonops-triton:modelServices[1].nodePool: node pool 'gpu-l40s'" in out


def test_json_names_the_key() -> None:
    result = runner.invoke(app, ["render", "--check-config", "--stack", "triton", "--env", "dev", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["ok"].endswith("Pulumi.dev.yaml")


def test_the_cluster_stack_name_forms() -> None:
    assert cc._cluster_env("organization/tritonops-cluster-aws/dev") == "dev"
    assert cc._cluster_env("acme/tritonops-cluster-aws/prod") == "prod"
    assert cc._cluster_env("tritonops-cluster-aws/prod") == "prod"
    assert cc._cluster_env("acme/other-project/prod") is None
    assert cc.gpus_per_instance("g5.2xlarge") == 1 and cc.gpus_per_instance("g5.12xlarge") == 4


def test_the_stack_reference_name_is_backend_neutral() -> None:
    """``<project>/<stack>`` gets the organization the program runs under: the literal ``organization`` on a
    self-managed backend, the user's organization on Pulumi Cloud; a full name is kept."""
    from tritonops.k8s.engine import stack_reference_name

    assert stack_reference_name("tritonops-cluster-aws/dev", "organization") == "organization/tritonops-cluster-aws/dev"
    assert stack_reference_name("tritonops-cluster-aws/dev", "acme") == "acme/tritonops-cluster-aws/dev"
    assert stack_reference_name("dev", "acme") == "acme/tritonops-cluster-aws/dev"
    assert stack_reference_name("other/tritonops-cluster-aws/dev", "acme") == "other/tritonops-cluster-aws/dev"


def test_a_kind_whose_platform_chart_is_off_names_the_platform_key(tmp_path: Path) -> None:
    """triton dev renders a ScaledObject; the platform stack of the same cluster (same clusterStack) turns KEDA
    off: the check names the platform file's keda.enabled."""
    stacks = _copy_stacks(tmp_path)
    path = stacks / "platform" / "Pulumi.dev.yaml"
    line = _edit(path, "    enabled: true\n", "    enabled: false\n")
    code, out = _check(tmp_path, "triton", "dev")
    assert code == 2, out
    assert f"{path}:{line}: tritonops-platform:keda.enabled: is false, but stack triton renders ScaledObject" in out
