"""The server pods of a model service (tritonops.k8s.stacks.triton.workload): Triton's container and arguments, the
Deployment's scheduling, hardening and rollout, and selectors that match only the server pods."""

from __future__ import annotations

import copy
import os
import re
import site
import subprocess
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import container, container_args, direct_config, triton_config
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.k8s.stacks.triton import workload
from tritonops.k8s.stacks.triton.budget import service_budget
from tritonops.triton.args import RESTRICTED

# --- Triton Deployment ---------------------------------------------------------------------------


def test_deployment_gpu_limits_tolerations_and_node_pool() -> None:
    cfg = triton_config()
    svc = cfg.model_services[0]
    dep = workload.deployment(cfg, svc)
    pod = dep["spec"]["template"]["spec"]
    res = container(dep)["resources"]
    assert res["limits"]["nvidia.com/gpu"] == res["requests"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {k8s_labels.NODE_POOL_LABEL: "gpu-a10g"}
    assert pod["priorityClassName"] == workload.PRIORITY_CLASS


def test_deployment_probes_on_triton_health_endpoints() -> None:
    c = container(workload.deployment(triton_config(), triton_config().model_services[0]))
    assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    # model loading may take startup failureThreshold x period seconds before liveness applies
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 300


def test_deployment_runs_non_root_hardened() -> None:
    dep = workload.deployment(triton_config(), triton_config().model_services[0])
    pod_sc = dep["spec"]["template"]["spec"]["securityContext"]
    sc = container(dep)["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container(dep)["volumeMounts"]}
    assert {"/tmp", "/dev/shm"} <= mounts  # writable scratch despite the read-only root


def test_spread_is_hard_only_when_configured() -> None:
    prod, dev = triton_config("prod"), triton_config("dev")
    hard = workload.deployment(prod, prod.model_services[0])["spec"]["template"]["spec"]
    soft = workload.deployment(dev, dev.model_services[0])["spec"]["template"]["spec"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in hard["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in soft["affinity"]["podAntiAffinity"]
    host = [t for t in hard["topologySpreadConstraints"] if t["topologyKey"] == "kubernetes.io/hostname"]
    assert host[0]["whenUnsatisfiable"] == "DoNotSchedule"
    host = [t for t in soft["topologySpreadConstraints"] if t["topologyKey"] == "kubernetes.io/hostname"]
    assert host[0]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_triton_args_explicit_mode_loads_each_model() -> None:
    cfg = direct_config()
    args = container_args(workload.deployment(cfg, cfg.model_services[0]))
    assert args["--model-repository"] == ["s3://tritonops-models-prod/vision"]
    assert args["--model-control-mode"] == ["explicit"]
    assert args["--load-model"] == ["resnet50", "densenet_onnx"]
    assert args["--strict-model-config"] == ["true"]
    assert args["--metrics-port"] == ["8002"] and args["--allow-gpu-metrics"] == ["true"]
    assert "--repository-poll-secs" not in args


def test_triton_args_poll_mode_from_pvc() -> None:
    cfg = direct_config()
    dep = workload.deployment(cfg, cfg.model_services[1])
    args = container_args(dep)
    assert args["--model-control-mode"] == ["poll"] and args["--repository-poll-secs"] == ["60"]
    assert args["--model-repository"] == [workload.MODEL_DIR]
    assert "--load-model" not in args
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["models"]["persistentVolumeClaim"] == {"claimName": "embeddings-models", "readOnly": True}


def test_admin_apis_restricted_behind_header_from_secret() -> None:
    cfg = triton_config()
    dep = workload.deployment(cfg, cfg.model_services[0])
    args = container_args(dep)
    expected = f"{RESTRICTED}:triton-admin-key=$({workload.ADMIN_ENV})"
    assert args["--http-restricted-api"] == [expected]
    assert args["--grpc-restricted-protocol"] == [expected]
    assert set(RESTRICTED.split(",")) >= {"model-repository", "model-config", "shared-memory"}
    env = {e["name"]: e for e in container(dep)["env"]}
    assert env[workload.ADMIN_ENV]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-api", "key": "token"}
    assert "inference" not in RESTRICTED and "health" not in RESTRICTED


def test_memory_pools_and_load_limit_from_the_budget() -> None:
    cfg = triton_config()
    svc = cfg.model_services[0]
    args = container_args(workload.deployment(cfg, svc))
    b = service_budget(svc, cfg)
    assert args["--cuda-memory-pool-byte-size"] == [f"0:{svc.memory.cuda_pool_mib * 1024 * 1024}"]
    assert args["--pinned-memory-pool-byte-size"] == [str(svc.memory.pinned_pool_mib * 1024 * 1024)]
    assert args["--model-load-gpu-limit"] == [f"0:{b.load_limit_fraction}"]
    assert 0 < b.load_limit_fraction < 1


def test_multi_gpu_pod_gets_per_device_args() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][0]["gpus"] = 2
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    dep = workload.deployment(cfg, cfg.model_services[0])
    args = container_args(dep)
    assert [a.split(":")[0] for a in args["--model-load-gpu-limit"]] == ["0", "1"]
    assert len(args["--cuda-memory-pool-byte-size"]) == 2
    assert container(dep)["resources"]["limits"]["nvidia.com/gpu"] == "2"


def _tritonserver() -> Path | None:
    for sp in site.getsitepackages():
        binary = Path(sp) / "pytriton" / "tritonserver" / "bin" / "tritonserver"
        if binary.is_file():
            return binary
    return None


def test_every_triton_flag_exists_in_tritonserver() -> None:
    """The flags we pass are tritonserver 2.51's own (checked against the real binary's --help)."""
    binary = _tritonserver()
    if binary is None:
        pytest.skip("nvidia-pytriton (the `triton` extra) is not installed")
    libs = binary.parents[3] / "nvidia_pytriton.libs"
    out = subprocess.run(
        [str(binary), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LD_LIBRARY_PATH": str(libs)},
    )
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", out.stdout + out.stderr, re.M))
    assert "--model-repository" in known
    for env in ("dev", "prod"):
        cfg = triton_config(env)
        for svc in cfg.model_services:
            for flag in container_args(workload.deployment(cfg, svc)):
                assert flag in known, f"tritonserver has no {flag}"


def test_rollout_never_waits_for_a_new_gpu_node_when_spread() -> None:
    prod, dev = triton_config("prod"), triton_config("dev")
    hard = workload.deployment(prod, prod.model_services[0])["spec"]["strategy"]["rollingUpdate"]
    assert hard == {"maxSurge": 0, "maxUnavailable": 1}
    svc = prod.model_services[0]
    assert svc.replicas - hard["maxUnavailable"] >= (svc.pdb_min_available or 0)
    soft = workload.deployment(dev, dev.model_services[0])["spec"]["strategy"]["rollingUpdate"]
    assert soft == {"maxSurge": 1, "maxUnavailable": 0}


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]]
    return [spec["template"]] if "template" in spec else []


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_selectors_match_only_the_server_pods(env: str) -> None:
    """PDB, Service, NetworkPolicy and spread select the Deployment's pods and no other pod of the service."""
    cfg = triton_config(env)
    for svc in cfg.model_services:
        objs = triton.service_objects(cfg, svc)
        sel = k8s_labels.selector(svc)
        for obj in objs:
            for tpl in _pod_templates(obj):
                labels = tpl["metadata"]["labels"]
                matches = all(labels.get(k) == v for k, v in sel.items())
                assert matches == (obj["kind"] == "Deployment"), f"{obj['kind']} {obj['metadata']['name']}"
