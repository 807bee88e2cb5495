"""The server pods of a Triton model service: the Triton container, ServiceAccount, Deployment per track,
Service per track, PodDisruptionBudget, and the PriorityClass they run at.

Canary (``release.canary``): a second Deployment ``triton-<svc>-canary`` runs the same pod on the
canary channel, with ``canary.replicas`` pods, behind its own Service (``tritonops.k8s.labels``
explains the ``track`` label that keeps the two apart). Autoscaling is ``tritonops.k8s.stacks.triton.scaling``;
the release agent's containers are ``tritonops.k8s.stacks.triton.release_agent``.
"""

from __future__ import annotations

import math
from typing import Any

from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import (
    GPU_RESOURCE,
    GRPC_PORT,
    HTTP_PORT,
    JOB_LABEL,
    METRICS_PORT,
    NODE_POOL_LABEL,
    SCRAPE_JOB,
    Obj,
    check_track,
    container_security_context,
    labels,
    name_of,
    object_meta,
    pod_security_context,
    require_canary,
    track_name,
    track_selector,
)
from tritonops.k8s.stacks.triton.budget import MIB, ServiceBudget, service_budget
from tritonops.k8s.stacks.triton.release_agent import (
    AGENT_PORT,
    AGENT_PORT_NAME,
    AGENT_SHA_ANNOTATION,
    RELEASE_LINK,
    RELEASE_ROOT,
    agent_bundle,
    release_agent_container,
    release_sync_container,
    release_volumes,
)
from tritonops.k8s.waits import pod_ready_budget, quantity_mib
from tritonops.observability.metrics import CANARY, STABLE
from tritonops.triton import args

PRIORITY_CLASS = "triton-serving"
MODEL_DIR = "/models"
ADMIN_ENV = "TRITON_ADMIN_KEY"
# Request-duration summaries (p95 per model and track, for the canary gate). Always on, canary or
# not: the cost is a summary update per request stage and ~35 series per model and pod (no throughput
# difference beyond run-to-run noise measured on the wheel's CPU tritonserver with a 0.5 ms model),
# and a flag that followed the canary would restart every stable pod when a canary comes or goes.
SUMMARY_LATENCIES = {"summary_latencies": "true"}
(SUMMARY_LATENCIES_ARG,) = args.metrics_config_args(SUMMARY_LATENCIES)


# --- the Triton container ------------------------------------------------------------------------


def _location(svc: ModelService) -> str:
    repo = svc.model_repository
    if repo is None:  # release: the agent's symlink to the active release
        return RELEASE_LINK
    return repo.uri if repo.type == "s3" and repo.uri else MODEL_DIR


def triton_args(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget) -> list[str]:
    if svc.release is not None:
        load: tuple[str, ...] = ("*",)  # whatever the release holds; the sidecar gates and switches it
    else:
        load = tuple(m.name for m in svc.models) if svc.model_control_mode == "explicit" else ()
    return ["tritonserver", *args.triton_args(args.settings(
        "pod",
        model_repository=_location(svc),
        model_control_mode=svc.model_control_mode,
        load_models=load,
        repository_poll_secs=svc.repository_poll_secs if svc.model_control_mode == "poll" else None,
        metrics_config=SUMMARY_LATENCIES,
        restricted_apis=args.RESTRICTED_APIS,
        admin_header=cfg.admin_api.header,
        admin_key_ref=f"$({ADMIN_ENV})",  # kubelet expands $(VAR) from the container env
        **memory_settings(svc, budget),
    ))]


def memory_settings(svc: ModelService, budget: ServiceBudget) -> dict[str, Any]:
    """The service's GPU memory budget as Triton settings: the pools and the model-load limit per GPU."""
    return {"cuda_memory_pool_bytes": (svc.memory.cuda_pool_mib * MIB,) * svc.gpus,
            "pinned_memory_pool_bytes": svc.memory.pinned_pool_mib * MIB,
            "model_load_gpu_limit": (budget.load_limit_fraction,) * svc.gpus}


def _probe(path: str, period: int, failures: int, timeout: int = 3) -> Obj:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def container(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget) -> Obj:
    res = svc.resources
    env: list[Obj] = [
        {
            "name": ADMIN_ENV,
            "valueFrom": {"secretKeyRef": {"name": cfg.admin_api.secret_name, "key": cfg.admin_api.secret_key}},
        }
    ]
    env.append({"name": "HOME", "value": "/tmp"})  # the root filesystem is read-only
    repo = svc.model_repository
    if repo is not None and repo.type == "s3" and repo.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": repo.region})
    mounts: list[Obj] = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
    if repo is not None and repo.type == "pvc":
        mounts.append(
            {
                "name": "models",
                "mountPath": MODEL_DIR,
                "readOnly": True,
                **({"subPath": repo.sub_path} if repo.sub_path else {}),
            }
        )
    if svc.release is not None:  # Triton only reads the releases the agent puts in place
        mounts.append({"name": "releases", "mountPath": RELEASE_ROOT, "readOnly": True})
    gpus = str(svc.gpus)
    return {
        "name": "triton",
        "image": svc.image,
        "imagePullPolicy": "IfNotPresent",
        "args": triton_args(cfg, svc, budget),
        "env": env,
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": res.cpu, "memory": res.memory, GPU_RESOURCE: gpus},
            "limits": {"memory": res.memory, GPU_RESOURCE: gpus},
        },
        # Loading models (an S3 download, TensorRT engines) can take minutes: the startup probe
        # holds liveness off for up to 10 minutes; readiness is Triton's strict readiness.
        "startupProbe": _probe("/v2/health/ready", period=10, failures=60),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=3),
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }


# --- the ServiceAccount, Deployments, Services and PodDisruptionBudget ------------------------------


IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"


def reader_arn_placeholder(role_name: str) -> str:
    """What ``render`` writes for a modelReader's ARN: only the cluster-aws stack's state knows the account."""
    return f"arn:aws:iam::<account-id>:role/{role_name}"


def service_account(cfg: TritonStackConfig, svc: ModelService, role_arn: Any = None) -> Obj:
    """The service's ServiceAccount, annotated for IRSA with ``svc.model_reader``'s role (``role_arn``:
    the cluster-aws stack's output, a Pulumi Output in the stack; None: the placeholder ``render``
    writes) or with an s3 ``modelRepository.roleArn``."""
    meta = object_meta(name_of(svc), cfg, svc)
    repo = svc.model_repository
    arn: Any = None
    if svc.model_reader is not None:
        arn = role_arn if role_arn is not None else reader_arn_placeholder(svc.model_reader)
    elif repo is not None and repo.type == "s3":
        arn = repo.role_arn
    if arn is not None:
        meta["annotations"] = {IRSA_ROLE_ANNOTATION: arn}
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta,
        "automountServiceAccountToken": False,
    }


def _affinity(svc: ModelService, track: str = STABLE) -> Obj:
    term = {"labelSelector": {"matchLabels": track_selector(svc, track)}, "topologyKey": "kubernetes.io/hostname"}
    if svc.spread:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }


def _spread(svc: ModelService, track: str = STABLE) -> list[Obj]:
    hard = "DoNotSchedule" if svc.spread else "ScheduleAnyway"
    return [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": track_selector(svc, track)},
        },
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": hard,
            "labelSelector": {"matchLabels": track_selector(svc, track)},
        },
    ]


def rollout_strategy(svc: ModelService) -> Obj:
    """Surge a pod when there may be room for it; with one pod per node required, replace in place.

    With required anti-affinity every node already runs a replica, so a surge pod would wait for a new
    GPU node; instead one pod at a time is replaced (config guarantees replicas > pdbMinAvailable, so
    the remaining pods still satisfy the PDB).
    """
    if svc.spread:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def deployment(
    cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget | None = None, track: str = STABLE
) -> Obj:
    """The server pods of one track: stable (``svc.replicas``, autoscaled) or canary (fixed replicas,
    on ``release.canary.channel``); the same pod otherwise."""
    check_track(svc, track)
    budget = budget or service_budget(svc, cfg)
    res = svc.resources
    volumes: list[Obj] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": res.shm}},
        {"name": "tmp", "emptyDir": {"sizeLimit": res.tmp}},
    ]
    repo = svc.model_repository
    if repo is not None and repo.type == "pvc":
        volumes.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": repo.claim_name, "readOnly": True},
            }
        )
    pod_annotations = {"tritonops.io/gpu-budget-mib": f"{budget.need_mib}/{budget.capacity_mib}"}
    containers = [container(cfg, svc, budget)]
    release: Obj = {}
    if svc.release is not None:
        volumes += release_volumes(svc)
        containers.append(release_agent_container(cfg, svc, track))
        release["initContainers"] = [release_sync_container(cfg, svc, track)]
        # A new agent rolls the pods: a running agent never sees its zipapp replaced under it.
        pod_annotations[AGENT_SHA_ANNOTATION] = agent_bundle()[1]
    pod_labels = labels(cfg, svc, track)
    pod_spec: Obj = {
        "serviceAccountName": name_of(svc),
        # IRSA's pod identity webhook projects its own web-identity token; no API token needed.
        "automountServiceAccountToken": False,
        "priorityClassName": PRIORITY_CLASS,
        "terminationGracePeriodSeconds": 60,
        "securityContext": pod_security_context(),
        "nodeSelector": {NODE_POOL_LABEL: svc.node_pool},
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": _affinity(svc, track),
        "topologySpreadConstraints": _spread(svc, track),
        **release,
        "containers": containers,
        "volumes": volumes,
    }
    reserve_ephemeral_storage(pod_spec)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(track_name(svc, track), cfg, svc, track),
        "spec": {
            "replicas": require_canary(svc).replicas if track == CANARY else svc.replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": track_selector(svc, track)},
            "strategy": rollout_strategy(svc),
            # One step of the rollout (a pod to Ready, new GPU node included) may take this long:
            # tritonops.k8s.waits derives it, and Pulumi's wait uses the same figure.
            "progressDeadlineSeconds": sum(pod_ready_budget(pod_spec).values()),
            "template": {"metadata": {"labels": pod_labels, "annotations": pod_annotations}, "spec": pod_spec},
        },
    }


# Beyond its emptyDirs, what a container writes to the node's disk: its logs (the root filesystem is
# read-only). The kubelet evicts a pod whose emptyDirs and logs exceed the sum of its containers' limits.
CONTAINER_LOGS = "1Gi"


def reserve_ephemeral_storage(pod: Obj) -> Obj:
    """Request and limit ``ephemeral-storage`` for every disk-backed emptyDir (in place): each one's
    ``sizeLimit`` is counted to the first container that mounts it read-write (its writer), init
    containers apart (they run before the others), plus CONTAINER_LOGS each. Memory-backed emptyDirs
    (``/dev/shm``) count against the memory limit instead."""
    sizes = {
        v["name"]: quantity_mib(v["emptyDir"]["sizeLimit"])
        for v in pod.get("volumes", [])
        if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory"
    }
    for group in (pod.get("initContainers", []), pod["containers"]):
        left = dict(sizes)
        for c in group:
            mine = [m["name"] for m in c.get("volumeMounts", []) if m["name"] in left and not m.get("readOnly")]
            mib = quantity_mib(CONTAINER_LOGS) + sum(left.pop(n) for n in mine)
            res = c.setdefault("resources", {})
            for kind in ("requests", "limits"):
                res.setdefault(kind, {})["ephemeral-storage"] = f"{math.ceil(mib)}Mi"
        if left and group is pod["containers"]:
            raise ValueError(f"emptyDir volumes {sorted(left)}: no container writes them")
    return pod


def service(cfg: TritonStackConfig, svc: ModelService, track: str = STABLE) -> Obj:
    """The pods of one track. ``triton-<svc>`` (stable) is what in-cluster clients, the drift check
    and the routes call; ``triton-<svc>-canary`` receives the canary's weight from the router."""
    check_track(svc, track)
    meta = object_meta(track_name(svc, track), cfg, svc, track)
    meta["labels"] = {**meta["labels"], JOB_LABEL: SCRAPE_JOB}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": track_selector(svc, track),
            "ports": [
                {
                    "name": "http",
                    "port": HTTP_PORT,
                    "targetPort": "http",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
                {
                    "name": "metrics",
                    "port": METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
                *(
                    [
                        {
                            "name": AGENT_PORT_NAME,
                            "port": AGENT_PORT,
                            "targetPort": AGENT_PORT_NAME,
                            "protocol": "TCP",
                            "appProtocol": "http",
                        }
                    ]
                    if svc.release is not None
                    else []
                ),
            ],
        },
    }


def pod_disruption_budget(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """The stable pods only. A canary is a small, fixed, short-lived slice of a service: a budget on it
    would hold up node drains for pods whose loss costs at most its weight's share of the routed
    requests until the Deployment replaces them (the ScaledObject, likewise, scales stable only)."""
    spec: Obj = {"selector": {"matchLabels": track_selector(svc, STABLE)}}
    if svc.pdb_min_available is not None:
        spec["minAvailable"] = svc.pdb_min_available
    else:
        spec["maxUnavailable"] = 1
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(name_of(svc), cfg, svc),
        "spec": spec,
    }


def priority_class(cfg: TritonStackConfig) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS, "labels": labels(cfg)},
        "value": cfg.priority,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "Triton Inference Server pods: scheduled ahead of batch work on GPU nodes.",
    }
