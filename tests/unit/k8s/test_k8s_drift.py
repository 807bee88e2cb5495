"""The drift CronJob (tritonops.k8s.stacks.triton.drift_cronjob) runs the agent's `check` from the namespace's ConfigMap."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tritonops import versions
from tritonops.agent.cli import parser as agent_parser
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s import waits
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.triton import drift_cronjob as drift
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.k8s.stacks.triton import release_agent, workload


def _triton(env: str = "prod") -> TritonStackConfig:
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


# --- the drift CronJob runs the agent's `check` ------------------------------------------------------


def test_drift_cron_job_runs_the_agent_check_from_the_config_map() -> None:
    cfg = _triton("prod")
    svc = cfg.model_services[0]
    job = drift.cron_job(cfg, svc)
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][:2] == ["python3", release_agent.AGENT_PATH]
    a = agent_parser().parse_args(c["command"][2:])
    assert a.cmd == "check" and a.url == f"http://triton-{svc.name}.{cfg.namespace}.svc:8000"
    assert a.expect == sorted(m.name for m in svc.models) and a.header == cfg.admin_api.header
    assert (a.source, a.host) == ("triton", f"prod/{cfg.namespace}/triton-{svc.name}")
    # The posture (admin APIs refuse a caller without the header, HTTP and gRPC) and the pods.
    assert a.restricted and a.grpc == (f"triton-{svc.name}.{cfg.namespace}.svc", k8s_labels.GRPC_PORT)
    assert a.pods == f"{drift.EXPECTED_DIR}/{drift.PODS_KEY}"
    env = _by_name(c["env"])
    assert env["TRITONOPS_ADMIN_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-api", "key": "token"}
    expected_cm = f"triton-{svc.name}-drift-expected"
    assert pod["volumes"] == [release_agent.agent_volume(), {"name": "expected", "configMap": {"name": expected_cm}}]
    assert _by_name(c["volumeMounts"])["agent"]["mountPath"] == release_agent.AGENT_DIR
    assert _by_name(c["volumeMounts"])["expected"]["mountPath"] == drift.EXPECTED_DIR
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # Its own account, allowed to read pods and nothing else.
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (f"triton-{svc.name}-drift", True)
    objs = {(o["kind"], o["metadata"]["name"]): o for o in drift.drift_objects(cfg, svc)}
    role = objs[("Role", f"triton-{svc.name}-drift")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    binding = objs[("RoleBinding", f"triton-{svc.name}-drift")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": cfg.namespace}]
    assert objs[("ServiceAccount", pod["serviceAccountName"])]["automountServiceAccountToken"] is False
    # The pods' expected containers come from the Deployment builder itself.
    pods = json.loads(objs[("ConfigMap", expected_cm)]["data"][drift.PODS_KEY])
    dep = workload.deployment(cfg, svc)
    (stable,) = pods["deployments"]
    assert stable["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert [(x["name"], x["image"], x["args"]) for x in stable["containers"]] == [
        (x["name"], x["image"], x.get("args")) for x in dep["spec"]["template"]["spec"]["containers"]]
    assert objs[("CronJob", drift.drift_name(svc))] == job
    # The zipapp comes from the namespace's ConfigMap, not a per-service copy.
    assert release_agent.AGENT_CONFIG_MAP in {o["metadata"]["name"] for o in triton.namespace_objects(cfg)}


def test_drift_check_argv_runs_and_reports_an_unreachable_triton(tmp_path: Path) -> None:
    """The CronJob's command, with the Service URL swapped for a closed port: the agent runs the
    check (exit 1 with a finding, not an argparse usage error, 2) and keeps the secret off argv."""
    cfg = _triton("prod")
    svc = cfg.model_services[0]
    agent = tmp_path / release_agent.AGENT_KEY
    agent.write_bytes(base64.b64decode(release_agent.agent_config_map(cfg)["binaryData"][release_agent.AGENT_KEY]))
    cmd = drift.check_args(cfg, svc)
    url, grpc = cmd[cmd.index("--url") + 1], cmd[cmd.index("--grpc") + 1]
    i = cmd.index("--pods")
    cmd = cmd[:i] + cmd[i + 2:]  # no Kubernetes API here (tests/unit/drift/test_drift_kube.py has one)
    swap = {release_agent.AGENT_PATH: str(agent), url: "http://127.0.0.1:9", grpc: "127.0.0.1:9"}
    argv = [swap.get(a, a) for a in cmd]
    env = {"PATH": os.environ["PATH"], "TRITONOPS_ADMIN_SECRET": "s3cr3t-value"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["source"] == "triton" and [f["resource"] for f in doc["findings"]] == ["triton"]
    assert "s3cr3t-value" not in out.stdout + out.stderr


# --- the drift Job: the agent's small image, CPU nodes, a deadline derived like every other wait -------


@pytest.mark.parametrize(("env", "index"), [("dev", 0), ("prod", 0), ("prod", 1)])
def test_drift_job_runs_from_the_agents_small_image_within_its_derived_deadline(env: str, index: int) -> None:
    """Not the Triton image (8 GiB onto 50 GiB system disks, a 164 s pull at waits.PULL_MIB_S against a
    typed 120 s deadline): the agent's image, pinned by digest, and a deadline that covers its pull and
    every call of the check."""
    cfg = _triton(env)
    svc = cfg.model_services[index]
    spec = drift.cron_job(cfg, svc)["spec"]["jobTemplate"]["spec"]
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == versions.AGENT_IMAGE and c["image"] != svc.image
    assert "@sha256:" in c["image"] and waits.image_pull_s(c["image"]) < waits.image_pull_s(svc.image)
    budget = waits.job_budget(pod, drift.check_calls(svc))
    assert spec["activeDeadlineSeconds"] == sum(budget.values())
    assert spec["activeDeadlineSeconds"] >= waits.image_pull_s(c["image"]) + drift.check_calls(svc) * waits.CHECK_CALL_S
    assert spec["activeDeadlineSeconds"] * 2 < 15 * 60  # well inside the */15 schedule (concurrencyPolicy Forbid)


def test_the_agents_image_has_the_python_the_agent_needs() -> None:
    """The agent runs on python3 >= 3.10 with the standard library (tritonops.agent's rules): the image's tag."""
    tag = versions.AGENT_IMAGE.split("@", 1)[0].rsplit(":", 1)[1]
    major, minor = (int(x) for x in tag.split("-", 1)[0].split(".")[:2])
    assert (major, minor) >= (3, 10), tag
    assert versions.AGENT_IMAGE.split("@", 1)[0].rsplit(":", 1)[0].endswith("/python")


def test_drift_deadline_grows_with_the_pods_it_asks() -> None:
    """Each pod the check may find (replicas or the ScaledObject's maximum, plus one surging) adds its
    /status call: the deadline is derived, not typed."""
    cfg = _triton("prod")
    svc = cfg.model_services[0]
    assert svc.release is not None and svc.autoscaling.enabled
    more = svc.model_copy(update={"autoscaling": svc.autoscaling.model_copy(
        update={"max_replicas": svc.autoscaling.max_replicas + 3})})

    def deadline(s: Any) -> int:
        return int(drift.cron_job(cfg, s)["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"])

    assert drift.check_calls(more) == drift.check_calls(svc) + 3
    assert deadline(more) == deadline(svc) + 3 * waits.CHECK_CALL_S


def test_drift_job_lands_on_cpu_nodes_preferably_the_system_pool() -> None:
    cfg = _triton("prod")
    pod = drift.cron_job(cfg, cfg.model_services[0])["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    node = pod["affinity"]["nodeAffinity"]
    assert node["requiredDuringSchedulingIgnoredDuringExecution"] == (
        k8s_labels.off_gpu_nodes()["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"])
    (pref,) = node["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["preference"]["matchExpressions"] == [
        {"key": k8s_labels.NODE_POOL_LABEL, "operator": "In", "values": [k8s_labels.SYSTEM_POOL]}]
    assert "tolerations" not in pod
    assert all(k8s_labels.GPU_RESOURCE not in c["resources"]["requests"] for c in pod["containers"])
