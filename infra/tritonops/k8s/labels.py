"""The names, labels, ports and security contexts every Kubernetes object of a Triton model service shares.

Every server pod carries the label ``track`` (``stable`` or ``canary``, Kubernetes' own canary
convention): each Deployment, its Service and the PodDisruptionBudget select one track
(:func:`track_selector`), so neither Deployment adopts the other's pods and the stable Service never
sends to a canary pod. The stable Deployment's selector includes ``track: stable`` whether or not a
canary is configured, so adding or removing a canary never touches the stable Deployment's selector
(immutable in Kubernetes). A Deployment created before tracks existed is replaced once when it gains
the label.

Pure functions over the stack's config: no Pulumi, no other builder.
"""

from __future__ import annotations

from typing import Any

from tritonops.core.triton_cli import GRPC_PORT, HTTP_PORT, METRICS_PORT  # noqa: F401 - the objects' ports
from tritonops.k8s.config import CanaryConfig, ModelService, TritonStackConfig
from tritonops.observability.metrics import CANARY, STABLE, TRACK

TIER_LABEL = "tritonops.io/tier"  # on the objects the builders make: what the policy pack reads
Obj = dict[str, Any]

SCRAPE_JOB = "triton"  # the `job` label tritonops.observability's rules and dashboards select on
JOB_LABEL = "tritonops.io/scrape-job"
GPU_RESOURCE = "nvidia.com/gpu"
NODE_POOL_LABEL = "tritonops.io/node-pool"
SYSTEM_POOL = "system"  # NODE_POOL_LABEL of the CPU nodes for system work (cluster-aws's system node group)
# Every GPU node carries it (tritonops.k8s.stacks.cluster_aws.eks.node_labels; the GPU Operator's feature
# discovery too).
GPU_NODE_LABEL = "nvidia.com/gpu.present"


def off_gpu_nodes() -> Obj:
    """Required node affinity that keeps CPU work off GPU nodes (a node without the label qualifies)."""
    term = {"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "NotIn", "values": ["true"]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
TRITON_UID = 1000  # triton-server user of the NGC image
TRACK_LABEL = TRACK  # pod label: stable | canary (Prometheus gets it through podTargetLabels)
TRACKS = (STABLE, CANARY)


def name_of(svc: ModelService) -> str:
    return f"triton-{svc.name}"


def track_name(svc: ModelService, track: str = STABLE) -> str:
    """The Deployment and Service of one track: ``triton-<svc>`` (stable), ``triton-<svc>-canary``."""
    check_track(svc, track)
    return name_of(svc) if track == STABLE else f"{name_of(svc)}-{track}"


def check_track(svc: ModelService, track: str) -> None:
    if track not in TRACKS:
        raise ValueError(f"track: {track!r} is not one of {', '.join(TRACKS)}")
    if track == CANARY:
        require_canary(svc)


def canary_of(svc: ModelService) -> CanaryConfig | None:
    """The service's ``release.canary``, or None."""
    return svc.release.canary if svc.release is not None else None


def require_canary(svc: ModelService) -> CanaryConfig:
    canary = canary_of(svc)
    if canary is None:
        raise ValueError(f"track: model service {svc.name!r} has no release.canary")
    return canary


def labels(cfg: TritonStackConfig, svc: ModelService | None = None, track: str | None = None) -> dict[str, str]:
    out = {
        "app.kubernetes.io/part-of": "tritonops",
        "app.kubernetes.io/managed-by": "tritonops",
        "tritonops.io/environment": cfg.environment,
        TIER_LABEL: cfg.tier,
    }
    if svc is not None:
        out |= selector(svc) | {"app.kubernetes.io/version": image_tag(svc.image)}
    if track is not None:
        out[TRACK_LABEL] = track
    return out


def image_tag(image: str) -> str:
    """TAG of ``REPOSITORY:TAG[@sha256:DIGEST]`` (the version label; with a digest, the digest is what runs)."""
    return image.split("@", 1)[0].rsplit(":", 1)[1]


SERVER_POD_LABELS = {"app.kubernetes.io/name": "triton", "app.kubernetes.io/component": "inference-server"}


def selector(svc: ModelService) -> dict[str, str]:
    """The server pods of one model service (other pods of the service, e.g. jobs, set another component)."""
    return {**SERVER_POD_LABELS, "app.kubernetes.io/instance": name_of(svc)}


def track_selector(svc: ModelService, track: str = STABLE) -> dict[str, str]:
    """The server pods of one track: what a Deployment, its Service and the PDB select."""
    return selector(svc) | {TRACK_LABEL: track}


def object_meta(
    name: str, cfg: TritonStackConfig, svc: ModelService | None = None, track: str | None = None, **extra: Any
) -> Obj:
    return {"name": name, "namespace": cfg.namespace, "labels": labels(cfg, svc, track), **extra}


def container_security_context() -> Obj:
    """Every container of a Triton pod (server, release agent, drift check): restricted."""
    return {
        "runAsNonRoot": True,
        "runAsUser": TRITON_UID,
        "runAsGroup": TRITON_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security_context() -> Obj:
    """The pod-level context of a Triton pod: non-root as the image's triton-server user, RuntimeDefault seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": TRITON_UID,
        "runAsGroup": TRITON_UID,
        "fsGroup": TRITON_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
