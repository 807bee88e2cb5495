"""Drift CronJob for a Triton model service: is the live Triton serving what the stack says, as it says?

Pure builders (dicts), added to each model service's objects by ``tritonops.k8s.stacks.triton.objects.service_objects``,
so ``pulumi up`` and ``tritonops render`` create the same objects. Every run of the release agent's
``check`` command (``infra/tritonops/agent/drift_probe.py``, the same code the edge nodes' timer runs, from the agent
zipapp in the namespace's ``tritonops-agent`` ConfigMap):

- calls the Service's repository index and statistics (restricted APIs: the admin header comes from
  the stack's Secret): a desired model not READY, an undesired one loaded, is drift;
- checks the live posture: the repository API over HTTP and gRPC refuses a caller without the header;
- lists the pods of each Deployment through the Kubernetes API (its own ServiceAccount, a Role with
  get/list on pods only) and compares their containers' images, commands and arguments with the
  Deployment as this module's builder renders it (``pods.json`` in the CronJob's ConfigMap), and each
  pod's release (its agent sidecar's ``/status``) with the release its channel names.

It fails the Job on drift (exit 1; 3 when the check could not run), which kube-prometheus-stack's
``KubeJobFailed`` alert reports. The check needs python3 and its standard library only, so it runs in
the agent's small image (``versions.AGENT_IMAGE``, not Triton's 8 GiB) on CPU nodes: never on a GPU
node, preferably the system pool's. Its ``activeDeadlineSeconds`` is ``waits.job_budget``: the image's
pull plus the check's calls (:func:`check_calls`), each with its deadline.
"""

from __future__ import annotations

import json
from typing import Any

from tritonops import versions
from tritonops.core.triton_http import SECRET_ENV
from tritonops.k8s import waits
from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import (
    GRPC_PORT,
    HTTP_PORT,
    NODE_POOL_LABEL,
    SYSTEM_POOL,
    TRITON_UID,
    canary_of,
    container_security_context,
    name_of,
    object_meta,
    off_gpu_nodes,
    selector,
    track_selector,
)
from tritonops.k8s.stacks.triton.budget import service_budget
from tritonops.k8s.stacks.triton.release_agent import AGENT_PATH, AGENT_PORT, agent_mount, agent_volume
from tritonops.k8s.stacks.triton.workload import deployment
from tritonops.observability.metrics import CANARY, STABLE

Obj = dict[str, Any]
SCHEDULE = "*/15 * * * *"
EXPECTED_DIR = "/etc/tritonops-drift"
PODS_KEY = "pods.json"
COMPONENT = "drift-check"


def drift_name(svc: ModelService) -> str:
    return f"{name_of(svc)}-drift"


def drift_labels(cfg: TritonStackConfig, svc: ModelService) -> dict[str, str]:
    return {**object_meta(drift_name(svc), cfg, svc)["labels"], "app.kubernetes.io/component": COMPONENT}


def check_args(cfg: TritonStackConfig, svc: ModelService) -> list[str]:
    """``python3 tritonops-agent.pyz check --url <Service> --expect <model> ...`` (no secret in argv)."""
    host = f"{name_of(svc)}.{cfg.namespace}.svc"
    url = f"http://{host}:{HTTP_PORT}"
    args = [
        "python3",
        AGENT_PATH,
        "check",
        "--url",
        url,
        "--header",
        cfg.admin_api.header,
        "--source",
        "triton",
        "--host",
        f"{cfg.environment}/{cfg.namespace}/{name_of(svc)}",
        # The pods' admin APIs are restricted (tritonops.k8s.stacks.triton.workload.triton_args), over HTTP and gRPC.
        "--restricted",
        "--grpc",
        f"{host}:{GRPC_PORT}",
        "--pods",
        f"{EXPECTED_DIR}/{PODS_KEY}",
    ]
    for model in sorted(m.name for m in svc.models):
        args += ["--expect", model]
    return args


def max_pods(svc: ModelService) -> dict[str, int]:
    """Track -> the most pods its Deployment runs at once: its replicas or the ScaledObject's maximum,
    plus one surging during a rollout."""
    stable = max(svc.replicas, svc.autoscaling.max_replicas if svc.autoscaling.enabled else 0)
    canary = canary_of(svc)
    return {STABLE: stable + 1, **({CANARY: canary.replicas + 1} if canary is not None else {})}


def check_calls(svc: ModelService) -> int:
    """The calls one run of :func:`check_args` makes at most: Triton's repository index and statistics,
    the two admin probes without the header over HTTP and one over gRPC, then per Deployment its pod list
    and, with a release agent, each pod's ``/status``."""
    per_pod = 1 if svc.release is not None else 0
    return 2 + 2 + 1 + sum(1 + per_pod * n for n in max_pods(svc).values())


def system_affinity() -> Obj:
    """Never a GPU node (required), the system pool's nodes where the cluster has one (preferred: a
    cluster from elsewhere may not label its CPU nodes so)."""
    term = {"matchExpressions": [{"key": NODE_POOL_LABEL, "operator": "In", "values": [SYSTEM_POOL]}]}
    node = off_gpu_nodes()["nodeAffinity"]
    return {"nodeAffinity": {**node,
                             "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}


def cron_job(cfg: TritonStackConfig, svc: ModelService, schedule: str = SCHEDULE) -> Obj:
    """Compare the live Triton's READY models with ``svc.models`` every ``schedule``."""
    # The pod mounts its account's token: it lists the namespace's pods (Role: get/list pods only).
    meta = object_meta(drift_name(svc), cfg, svc, annotations={
        "checkov.io/skip1": "CKV_K8S_38=the drift check lists the pods through the API (get/list pods only)"})
    pod_labels = drift_labels(cfg, svc)
    secret_ref = {"name": cfg.admin_api.secret_name, "key": cfg.admin_api.secret_key}
    pod = {
        "restartPolicy": "Never",
        # Its own account: get/list pods in the namespace, nothing else.
        "serviceAccountName": drift_name(svc),
        "automountServiceAccountToken": True,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": TRITON_UID,
            "runAsGroup": TRITON_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # A CPU job: never on (nor tolerating) the GPU nodes whose capacity Triton needs.
        "affinity": system_affinity(),
        "containers": [
            {
                "name": "drift-check",
                "image": versions.AGENT_IMAGE,  # python3 and its standard library: all the check runs
                "imagePullPolicy": "IfNotPresent",
                "command": check_args(cfg, svc),
                "env": [{"name": SECRET_ENV, "valueFrom": {"secretKeyRef": secret_ref}}],
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"memory": "128Mi"},
                },
                "securityContext": container_security_context(),
                "volumeMounts": [
                    agent_mount(),
                    {"name": "expected", "mountPath": EXPECTED_DIR, "readOnly": True},
                ],
            }
        ],
        "volumes": [
            agent_volume(),
            {"name": "expected", "configMap": {"name": f"{drift_name(svc)}-expected"}},
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta,
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 300,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": sum(waits.job_budget(pod, check_calls(svc)).values()),
                    "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": pod_labels}, "spec": pod},
                },
            },
        },
    }


def expected_pods(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """What the pods must run: each Deployment's selector and containers, from the same builder."""
    budget = service_budget(svc, cfg)
    tracks = [STABLE, *([CANARY] if canary_of(svc) is not None else [])]
    deployments = []
    for track in tracks:
        pod = deployment(cfg, svc, budget, track)["spec"]["template"]["spec"]
        deployments.append({
            "name": deployment(cfg, svc, budget, track)["metadata"]["name"],
            "selector": track_selector(svc, track),
            **{kind: [{k: c.get(k) for k in ("name", "image", "command", "args")} for c in pod.get(kind, [])]
               for kind in ("containers", "initContainers")},
        })
    return {"namespace": cfg.namespace, "deployments": deployments,
            "agent_status_port": AGENT_PORT if svc.release is not None else None}


def expected_config_map(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(f"{drift_name(svc)}-expected", cfg, svc),
        "data": {PODS_KEY: json.dumps(expected_pods(cfg, svc), indent=1, sort_keys=True) + "\n"},
    }


def service_account(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(drift_name(svc), cfg, svc),
            "automountServiceAccountToken": False}  # mounted by the CronJob's pod only


def role(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """Read the namespace's pods; nothing else (no Secrets, no writes)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(drift_name(svc), cfg, svc),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }


def role_binding(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(drift_name(svc), cfg, svc),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": drift_name(svc)},
        "subjects": [{"kind": "ServiceAccount", "name": drift_name(svc), "namespace": cfg.namespace}],
    }


def network_policy(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """The drift check reaches the release agents' /status on the service's pods (both directions)."""
    port = [{"port": AGENT_PORT, "protocol": "TCP"}]
    drift_pods = {"matchLabels": drift_labels(cfg, svc)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(drift_name(svc), cfg, svc),
        "spec": {
            "podSelector": {"matchLabels": selector(svc)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": drift_pods}], "ports": port}],
        },
    }


def egress_policy(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    port = [{"port": AGENT_PORT, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(f"{drift_name(svc)}-egress", cfg, svc),
        "spec": {
            "podSelector": {"matchLabels": drift_labels(cfg, svc)},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": selector(svc)}}], "ports": port}],
        },
    }


def drift_objects(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """The CronJob (it runs the agent from the namespace's ``tritonops-agent`` ConfigMap), its account
    and Role, the pods it expects, and (with a release agent to ask) the network path to the agents."""
    objs = [service_account(cfg, svc), role(cfg, svc), role_binding(cfg, svc), expected_config_map(cfg, svc)]
    if svc.release is not None:
        objs += [network_policy(cfg, svc), egress_policy(cfg, svc)]
    return [*objs, cron_job(cfg, svc)]
