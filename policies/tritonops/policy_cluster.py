"""Rules on what scales and provisions Triton: KEDA ScaledObjects (fallback, wake-up from zero), pinned
Helm charts, bounded GPU NodePools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policy_common import (
    GPU,
    HELM_RELEASE,
    SCALED_OBJECT,
    WAKE_METRICS,
    Report,
    num,
    object_name,
)


def validate_scaled_object_fallback(args: Any, report_violation: Report) -> None:
    """ScaledObjects fall back (never below minReplicaCount, never to zero) when their metrics source is
    unreachable."""
    if args.resource_type != SCALED_OBJECT:
        return
    spec = args.props.get("spec") or {}
    fb = spec.get("fallback") or {}
    name = object_name(args.props, args.name)
    if not fb:
        report_violation(f"{name}: ScaledObject has no fallback: a Prometheus outage would leave scaling blind")
        return
    if num(fb.get("failureThreshold")) < 1 or num(fb.get("replicas")) < 1:
        report_violation(f"{name}: fallback needs failureThreshold >= 1 and replicas >= 1")
    for trig in spec.get("triggers") or []:
        # KEDA 2.17 applies a fallback only to AverageValue metrics (the trigger default).
        if trig.get("metricType", "AverageValue") != "AverageValue":
            report_violation(
                f"{name}: trigger {trig.get('name') or trig.get('type')!r} uses metricType "
                f"{trig.get('metricType')}; KEDA ignores the fallback for it (use AverageValue)"
            )
    if fb.get("behavior", "static") == "static" and num(fb.get("replicas")) < num(spec.get("maxReplicaCount", 100)):
        report_violation(
            f"{name}: static fallback to {fb.get('replicas')} replicas can scale serving down during "
            "an outage; use behavior currentReplicasIfHigher (or fallback replicas = maxReplicaCount)"
        )


def validate_scaled_object_wake_up(args: Any, report_violation: Report) -> None:
    """A ScaledObject that scales to zero has a trigger on a signal that exists while no pod runs, and holds
    its first scale-in (initialCooldownPeriod) so the first up sees a pod serve."""
    if args.resource_type != SCALED_OBJECT:
        return
    spec = args.props.get("spec") or {}
    if num(spec.get("minReplicaCount", 0)) != 0:
        return
    if num(spec.get("initialCooldownPeriod", 0)) <= 0:
        report_violation(
            f"{object_name(args.props, args.name)}: ScaledObject scales to zero with no initialCooldownPeriod: "
            "KEDA removes the pod as soon as it exists, and the first up passes without a replica ever serving"
        )
    queries = [str((trig.get("metadata") or {}).get("query", "")) for trig in spec.get("triggers") or []]
    if not any(metric in q for q in queries for metric in WAKE_METRICS):
        report_violation(
            f"{object_name(args.props, args.name)}: ScaledObject scales to zero with no trigger on a signal that "
            f"exists while no pod runs ({', '.join(WAKE_METRICS)}): requests would never wake it"
        )


def validate_helm_pinned(args: Any, report_violation: Report) -> None:
    """Helm releases name an exact chart version."""
    if args.resource_type != HELM_RELEASE:
        return
    version = str(args.props.get("version") or "")
    if not version or any(ch in version for ch in "*^~><x ") or version == "latest":
        report_violation(
            f"{args.props.get('name') or args.name}: chart {args.props.get('chart')!r} version "
            f"{version or 'unset'} is not pinned"
        )


NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
# Requirement keys that select GPU instances (Karpenter's well-known labels), and the EC2 families
# with NVIDIA GPUs (tritonops.k8s.catalog.GPU_FAMILIES: g4dn, g5, g6, g6e, p4d, p4de, p5, p5e, and kin).
GPU_REQUIREMENT_KEYS = ("karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-name",
                        "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-memory")
GPU_FAMILY_PREFIXES = ("g4dn", "g5", "g6", "p3", "p4", "p5", "p6")


def _is_gpu_family(value: str) -> bool:
    return str(value).split(".", 1)[0].startswith(GPU_FAMILY_PREFIXES)


def is_gpu_node_pool(props: Mapping[str, Any]) -> bool:
    """A NodePool that provisions GPU nodes: it requires GPU families or GPU attributes, or carries
    the nvidia.com/gpu taint."""
    spec = (((props.get("spec") or {}).get("template") or {}).get("spec")) or {}
    for req in spec.get("requirements") or []:
        key, values = req.get("key"), req.get("values") or []
        if key in GPU_REQUIREMENT_KEYS and req.get("operator") not in ("DoesNotExist", "NotIn"):
            return True
        if key in ("karpenter.k8s.aws/instance-family", "node.kubernetes.io/instance-type") and (
            req.get("operator") == "In" and any(_is_gpu_family(v) for v in values)
        ):
            return True
    return any(t.get("key") == GPU for t in spec.get("taints") or [])


def validate_gpu_node_pool_bounds(args: Any, report_violation: Report) -> None:
    """GPU NodePools set limits (a cap on what Karpenter may buy) and at least one disruption budget
    (consolidation and drift replacement never take more GPU nodes at once than the budget allows)."""
    if args.resource_type != NODE_POOL or not is_gpu_node_pool(args.props):
        return
    spec = args.props.get("spec") or {}
    name = object_name(args.props, args.name)
    if not spec.get("limits"):
        report_violation(f"{name}: GPU NodePool has no spec.limits (set e.g. nvidia.com/gpu)")
    if not ((spec.get("disruption") or {}).get("budgets")):
        report_violation(f"{name}: GPU NodePool has no spec.disruption.budgets (Karpenter's default lets 10% go)")
