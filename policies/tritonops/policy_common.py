"""What every rule of the pack shares: the resource types and labels it reads, and how it finds a Triton
workload, its containers and its tier (``tritonops_policy`` explains what a Triton workload is)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Report = Callable[..., None]

# The stack's tier on every object the tritonops builders make (tritonops.k8s.labels.TIER_LABEL).
TIER_LABEL = "tritonops.io/tier"

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
GPU = "nvidia.com/gpu"
HEALTH = {"startupProbe": "/v2/health/", "readinessProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live"}
AGENT_FILE = "tritonops-agent.pyz"  # tritonops.k8s.stacks.triton.release_agent.AGENT_KEY
TRACK = "track"  # tritonops.k8s.labels.TRACK_LABEL: stable | canary
INSTANCE = "app.kubernetes.io/instance"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
# Scale to zero (tritonops.k8s.stacks.triton.scaling.SCALE_TO_ZERO_ANNOTATION; tritonops.observability.keda_trigger's
# GATEWAY_REQUESTS, Envoy Gateway's per-route cluster counter, and INGRESS_REQUESTS, legacy ingress-nginx's):
# prod's explicit consent, and the wake-up signal that exists while no Triton pod runs.
ALLOW_SCALE_TO_ZERO = "tritonops.io/allow-scale-to-zero"
WAKE_METRICS = ("envoy_cluster_upstream_rq_xx", "nginx_ingress_controller_requests")


# --- helpers -------------------------------------------------------------------------------------


def pod_spec(props: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((props.get("spec") or {}).get("template") or {}).get("spec") or {}


def pod_labels(props: Mapping[str, Any]) -> Mapping[str, str]:
    return (((props.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def object_name(props: Mapping[str, Any], fallback: str) -> str:
    meta = props.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', fallback)}".lstrip("/")


def is_agent_container(c: Mapping[str, Any]) -> bool:
    """The release agent (or drift check) run from the Triton image: not a Triton server."""
    return any(str(a).endswith(AGENT_FILE) for a in [*(c.get("command") or []), *(c.get("args") or [])])


def is_triton_container(c: Mapping[str, Any]) -> bool:
    if is_agent_container(c):
        return False
    return "tritonserver" in str(c.get("image", "")) or c.get("name") == "triton"


def is_triton_workload(resource_type: str, props: Mapping[str, Any]) -> bool:
    if resource_type != DEPLOYMENT:
        return False
    if pod_labels(props).get("app.kubernetes.io/name") == "triton":
        return True
    return any(is_triton_container(c) for c in pod_spec(props).get("containers") or [])


def triton_containers(props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in pod_spec(props).get("containers") or [] if is_triton_container(c)]


def all_containers(props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod_spec(props)
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """matchLabels/matchExpressions(In, Exists) of a label selector against pod labels."""
    if not selector:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "Exists" and key not in labels):
            return False
        if (op == "NotIn" and labels.get(key) in values) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def is_production(props: Mapping[str, Any]) -> bool:
    """The object's stack is of tier production (label ``tritonops.io/tier``, from the stack's ``tier`` key):
    what selects the strict rules, never the environment's or the stack's name."""
    labels = (props.get("metadata") or {}).get("labels") or {}
    return labels.get(TIER_LABEL) == "production"


def is_prod(props: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    return bool(config.get("requireHighAvailability")) or is_production(props)
