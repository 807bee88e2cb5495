"""Rules on a Triton workload's pods: GPU resources, health probes, non-root and hardened containers,
sizes, the restricted admin APIs, pinned images, prod high availability."""

from __future__ import annotations

from typing import Any

from policy_common import (
    ALLOW_SCALE_TO_ZERO,
    GPU,
    HEALTH,
    SCALED_OBJECT,
    Report,
    all_containers,
    is_prod,
    is_production,
    is_triton_workload,
    num,
    object_name,
    pod_spec,
    triton_containers,
)
from tritonops.core.triton_cli import RESTRICTED_APIS, RESTRICTED_FLAGS, restricted_groups


def validate_gpu_resources(args: Any, report_violation: Report) -> None:
    """Triton containers request and limit nvidia.com/gpu, with equal counts."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in triton_containers(args.props):
        res = c.get("resources") or {}
        limit = (res.get("limits") or {}).get(GPU)
        request = (res.get("requests") or {}).get(GPU)
        if num(limit) < 1:
            report_violation(f"{object_name(args.props, args.name)}: container {c.get('name')!r} has no {GPU} limit")
        elif request is not None and num(request) != num(limit):
            report_violation(
                f"{object_name(args.props, args.name)}: container {c.get('name')!r} requests {request} "
                f"{GPU} but limits {limit}"
            )
        elif request is None:
            report_violation(f"{object_name(args.props, args.name)}: container {c.get('name')!r} has no {GPU} request")


def validate_health_probes(args: Any, report_violation: Report) -> None:
    """Startup, readiness and liveness probes on Triton's /v2/health endpoints."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in triton_containers(args.props):
        for probe, prefix in HEALTH.items():
            path = (((c.get(probe) or {}).get("httpGet")) or {}).get("path", "")
            if not str(path).startswith(prefix):
                report_violation(
                    f"{object_name(args.props, args.name)}: container {c.get('name')!r} {probe} must be an "
                    f"httpGet on {prefix}* (got {path or 'none'})"
                )


def validate_non_root(args: Any, report_violation: Report) -> None:
    """Every container of a Triton pod (init containers and sidecars too) runs as non-root without
    privilege escalation."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    pod_sc = pod_spec(args.props).get("securityContext") or {}
    for c in all_containers(args.props):
        sc = c.get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        where = f"{object_name(args.props, args.name)}: container {c.get('name')!r}"
        if non_root is not True:
            report_violation(f"{where} must set securityContext.runAsNonRoot: true")
        if uid is not None and num(uid) == 0:
            report_violation(f"{where} runs as uid 0")
        if sc.get("allowPrivilegeEscalation") is not False:
            report_violation(f"{where} must set allowPrivilegeEscalation: false")
        if sc.get("privileged") is True:
            report_violation(f"{where} is privileged")


def validate_container_hardening(args: Any, report_violation: Report) -> None:
    """Every container of a Triton pod has a read-only root filesystem and drops all capabilities."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in all_containers(args.props):
        sc = c.get("securityContext") or {}
        where = f"{object_name(args.props, args.name)}: container {c.get('name')!r}"
        if sc.get("readOnlyRootFilesystem") is not True:
            report_violation(f"{where} must set securityContext.readOnlyRootFilesystem: true")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            report_violation(f"{where} must drop ALL capabilities (securityContext.capabilities.drop)")
        if (sc.get("capabilities") or {}).get("add"):
            report_violation(f"{where} adds capabilities {sc['capabilities']['add']}")


def validate_container_resources(args: Any, report_violation: Report) -> None:
    """Every container of a Triton pod requests cpu and memory and limits memory (a GPU node's
    memory is shared with Triton: an unbounded sidecar could get the server OOM-killed)."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in all_containers(args.props):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        where = f"{object_name(args.props, args.name)}: container {c.get('name')!r}"
        missing = [f"requests.{k}" for k in ("cpu", "memory") if not requests.get(k)]
        missing += [] if limits.get("memory") else ["limits.memory"]
        if missing:
            report_violation(f"{where} has no resources {', '.join(missing)}")


def validate_restricted_apis(args: Any, report_violation: Report) -> None:
    """Triton servers restrict every admin API group (model repository, config, shared memory,
    statistics, trace, logging) to callers with the admin header, over HTTP and gRPC."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in triton_containers(args.props):
        argv = [*(c.get("command") or []), *(c.get("args") or [])]
        for flag in RESTRICTED_FLAGS:
            missing = [g for g in RESTRICTED_APIS if g not in restricted_groups(argv, flag)]
            if missing:
                report_violation(
                    f"{object_name(args.props, args.name)}: container {c.get('name')!r} leaves {', '.join(missing)} "
                    f"open: start tritonserver with {flag}={','.join(RESTRICTED_APIS)}:<header>=<value>"
                )


def image_pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and not last.endswith(":latest")


def validate_pinned_images(args: Any, report_violation: Report) -> None:
    """Every container image of a Triton workload has an explicit tag (not latest) or a digest; in tier
    production (or with requireDigest) a digest: a tag can be moved to other content, a digest cannot."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    config = args.get_config()
    need_digest = bool(config.get("requireDigest")) or is_production(args.props)
    for c in all_containers(args.props):
        image = str(c.get("image", ""))
        where = f"{object_name(args.props, args.name)}: container {c.get('name')!r} image {image!r}"
        if not image_pinned(image):
            report_violation(f"{where} is not pinned (use an explicit tag other than latest, or a digest)")
        elif need_digest and "@sha256:" not in image:
            report_violation(f"{where} has no digest: in tier production pin REPOSITORY:TAG@sha256:DIGEST")


def validate_high_availability(args: Any, report_violation: Report) -> None:
    """In prod, Triton runs at least minReplicas replicas spread across nodes (and autoscales no lower)."""
    config = args.get_config()
    minimum = int(config.get("minReplicas", 2))
    if args.resource_type == SCALED_OBJECT:
        min_count = num((args.props.get("spec") or {}).get("minReplicaCount", 0))
        if not is_prod(args.props, config) or min_count >= minimum:
            return
        name = object_name(args.props, args.name)
        if min_count != 0:
            report_violation(f"{name}: prod ScaledObject minReplicaCount must be >= {minimum}")
        elif ((args.props.get("metadata") or {}).get("annotations") or {}).get(ALLOW_SCALE_TO_ZERO) != "true":
            report_violation(
                f"{name}: prod ScaledObject scales to zero without {ALLOW_SCALE_TO_ZERO}: \"true\" "
                f"(autoscaling.allowScaleToZero); otherwise minReplicaCount must be >= {minimum}"
            )
        return
    if not is_triton_workload(args.resource_type, args.props) or not is_prod(args.props, config):
        return
    name = object_name(args.props, args.name)
    if num((args.props.get("spec") or {}).get("replicas", 1)) < minimum:
        report_violation(f"{name}: prod Triton needs replicas >= {minimum}")
    spec = pod_spec(args.props)
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    hard_spread = [
        t
        for t in spec.get("topologySpreadConstraints") or []
        if t.get("topologyKey") == "kubernetes.io/hostname" and t.get("whenUnsatisfiable") == "DoNotSchedule"
    ]
    if not any(t.get("topologyKey") == "kubernetes.io/hostname" for t in anti) and not hard_spread:
        report_violation(
            f"{name}: prod Triton needs required pod anti-affinity or a DoNotSchedule topology spread "
            "on kubernetes.io/hostname, so one node failure cannot take every replica"
        )
