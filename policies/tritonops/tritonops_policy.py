"""CrossGuard rules for Triton on Kubernetes: one validator and one policy per rule.

The validators take (args, report_violation) and read only ``args.resource_type``, ``args.props``,
``args.name``, ``args.get_config()`` (or ``args.resources`` for stack policies), so unit tests call
them directly with a collecting ``report_violation``. ``__main__.py`` wraps :data:`POLICIES` in the
``PolicyPack``; enforcement levels per environment come from ``config.<env>.json``
(``pulumi up --policy-pack policies/tritonops --policy-pack-config policies/tritonops/config.prod.json``).

A "Triton workload" is a Deployment whose pod template is labelled ``app.kubernetes.io/name: triton``
or runs a ``tritonserver`` image. Its Triton containers are those running the server; the release
agent (init container and sidecar, same image, running ``tritonops-agent.pyz``) is not one, but
every container of the pod, init containers included, must be non-root, hardened and sized.

A canary Deployment (pod label ``track: canary``) is a Triton workload like any other, except that
no PodDisruptionBudget needs to cover it: it is a small, fixed, short-lived slice beside the stable
Deployment of the same ``app.kubernetes.io/instance``, which must exist (and is covered).

Exposure: Triton's admin APIs answer only with the admin header (``--http-restricted-api`` and
``--grpc-restricted-protocol`` on every API group a router must not reach); every Triton pod is
covered by NetworkPolicies in both directions, none of which allows everything; its namespace denies
by default and enforces Pod Security "restricted".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

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
AGENT_FILE = "tritonops-agent.pyz"  # tritonops.k8s.stacks.triton.release_agent.AGENT_KEY (the pack does not import the package)
TRACK = "track"  # tritonops.k8s.labels.TRACK_LABEL: stable | canary
INSTANCE = "app.kubernetes.io/instance"
# Triton's API groups only the admin header may reach (tritonops.triton.admin.RESTRICTED_APIS): inference,
# metadata and health stay open, every other group of `tritonserver --help` is restricted.
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace", "logging")
RESTRICTED_FLAGS = ("--http-restricted-api", "--grpc-restricted-protocol")  # Triton's names for HTTP, gRPC
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
# Scale to zero (tritonops.k8s.stacks.triton.scaling.SCALE_TO_ZERO_ANNOTATION, tritonops.observability.keda.INGRESS_REQUESTS):
# prod's explicit consent, and the wake-up signal that exists while no Triton pod runs.
ALLOW_SCALE_TO_ZERO = "tritonops.io/allow-scale-to-zero"
WAKE_METRICS = ("nginx_ingress_controller_requests",)


# --- helpers -------------------------------------------------------------------------------------


def _pod_spec(props: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((props.get("spec") or {}).get("template") or {}).get("spec") or {}


def _pod_labels(props: Mapping[str, Any]) -> Mapping[str, str]:
    return (((props.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def _name(props: Mapping[str, Any], fallback: str) -> str:
    meta = props.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', fallback)}".lstrip("/")


def _is_agent_container(c: Mapping[str, Any]) -> bool:
    """The release agent (or drift check) run from the Triton image: not a Triton server."""
    return any(str(a).endswith(AGENT_FILE) for a in [*(c.get("command") or []), *(c.get("args") or [])])


def _is_triton_container(c: Mapping[str, Any]) -> bool:
    if _is_agent_container(c):
        return False
    return "tritonserver" in str(c.get("image", "")) or c.get("name") == "triton"


def is_triton_workload(resource_type: str, props: Mapping[str, Any]) -> bool:
    if resource_type != DEPLOYMENT:
        return False
    if _pod_labels(props).get("app.kubernetes.io/name") == "triton":
        return True
    return any(_is_triton_container(c) for c in _pod_spec(props).get("containers") or [])


def _triton_containers(props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in _pod_spec(props).get("containers") or [] if _is_triton_container(c)]


def _all_containers(props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = _pod_spec(props)
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
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


def _is_prod(props: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    return bool(config.get("requireHighAvailability")) or is_production(props)


# --- resource validators -------------------------------------------------------------------------


def validate_gpu_resources(args: Any, report_violation: Report) -> None:
    """Triton containers request and limit nvidia.com/gpu, with equal counts."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in _triton_containers(args.props):
        res = c.get("resources") or {}
        limit = (res.get("limits") or {}).get(GPU)
        request = (res.get("requests") or {}).get(GPU)
        if _num(limit) < 1:
            report_violation(f"{_name(args.props, args.name)}: container {c.get('name')!r} has no {GPU} limit")
        elif request is not None and _num(request) != _num(limit):
            report_violation(
                f"{_name(args.props, args.name)}: container {c.get('name')!r} requests {request} "
                f"{GPU} but limits {limit}"
            )
        elif request is None:
            report_violation(f"{_name(args.props, args.name)}: container {c.get('name')!r} has no {GPU} request")


def validate_health_probes(args: Any, report_violation: Report) -> None:
    """Startup, readiness and liveness probes on Triton's /v2/health endpoints."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in _triton_containers(args.props):
        for probe, prefix in HEALTH.items():
            path = (((c.get(probe) or {}).get("httpGet")) or {}).get("path", "")
            if not str(path).startswith(prefix):
                report_violation(
                    f"{_name(args.props, args.name)}: container {c.get('name')!r} {probe} must be an "
                    f"httpGet on {prefix}* (got {path or 'none'})"
                )


def validate_non_root(args: Any, report_violation: Report) -> None:
    """Every container of a Triton pod (init containers and sidecars too) runs as non-root without
    privilege escalation."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    pod_sc = _pod_spec(args.props).get("securityContext") or {}
    for c in _all_containers(args.props):
        sc = c.get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        where = f"{_name(args.props, args.name)}: container {c.get('name')!r}"
        if non_root is not True:
            report_violation(f"{where} must set securityContext.runAsNonRoot: true")
        if uid is not None and _num(uid) == 0:
            report_violation(f"{where} runs as uid 0")
        if sc.get("allowPrivilegeEscalation") is not False:
            report_violation(f"{where} must set allowPrivilegeEscalation: false")
        if sc.get("privileged") is True:
            report_violation(f"{where} is privileged")


def validate_container_hardening(args: Any, report_violation: Report) -> None:
    """Every container of a Triton pod has a read-only root filesystem and drops all capabilities."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in _all_containers(args.props):
        sc = c.get("securityContext") or {}
        where = f"{_name(args.props, args.name)}: container {c.get('name')!r}"
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
    for c in _all_containers(args.props):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        where = f"{_name(args.props, args.name)}: container {c.get('name')!r}"
        missing = [f"requests.{k}" for k in ("cpu", "memory") if not requests.get(k)]
        missing += [] if limits.get("memory") else ["limits.memory"]
        if missing:
            report_violation(f"{where} has no resources {', '.join(missing)}")


def restricted_groups(args: Iterable[Any], flag: str) -> set[str]:
    """API groups ``flag`` restricts (``--flag=GROUPS:KEY=VALUE`` or ``--flag GROUPS:KEY=VALUE``, repeatable;
    a setting without a non-empty KEY=VALUE restricts nothing)."""
    argv = [str(a) for a in args]
    values = [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]
    values += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    groups: set[str] = set()
    for value in values:
        apis, _, header = value.partition(":")
        key, _, secret = header.partition("=")
        if key and secret:
            groups |= {g.strip() for g in apis.split(",")}
    return groups


def validate_restricted_apis(args: Any, report_violation: Report) -> None:
    """Triton servers restrict every admin API group (model repository, config, shared memory,
    statistics, trace, logging) to callers with the admin header, over HTTP and gRPC."""
    if not is_triton_workload(args.resource_type, args.props):
        return
    for c in _triton_containers(args.props):
        argv = [*(c.get("command") or []), *(c.get("args") or [])]
        for flag in RESTRICTED_FLAGS:
            missing = [g for g in RESTRICTED_APIS if g not in restricted_groups(argv, flag)]
            if missing:
                report_violation(
                    f"{_name(args.props, args.name)}: container {c.get('name')!r} leaves {', '.join(missing)} "
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
    for c in _all_containers(args.props):
        image = str(c.get("image", ""))
        where = f"{_name(args.props, args.name)}: container {c.get('name')!r} image {image!r}"
        if not image_pinned(image):
            report_violation(f"{where} is not pinned (use an explicit tag other than latest, or a digest)")
        elif need_digest and "@sha256:" not in image:
            report_violation(f"{where} has no digest: in tier production pin REPOSITORY:TAG@sha256:DIGEST")


def validate_high_availability(args: Any, report_violation: Report) -> None:
    """In prod, Triton runs at least minReplicas replicas spread across nodes (and autoscales no lower)."""
    config = args.get_config()
    minimum = int(config.get("minReplicas", 2))
    if args.resource_type == SCALED_OBJECT:
        min_count = _num((args.props.get("spec") or {}).get("minReplicaCount", 0))
        if not _is_prod(args.props, config) or min_count >= minimum:
            return
        name = _name(args.props, args.name)
        if min_count != 0:
            report_violation(f"{name}: prod ScaledObject minReplicaCount must be >= {minimum}")
        elif ((args.props.get("metadata") or {}).get("annotations") or {}).get(ALLOW_SCALE_TO_ZERO) != "true":
            report_violation(
                f"{name}: prod ScaledObject scales to zero without {ALLOW_SCALE_TO_ZERO}: \"true\" "
                f"(autoscaling.allowScaleToZero); otherwise minReplicaCount must be >= {minimum}"
            )
        return
    if not is_triton_workload(args.resource_type, args.props) or not _is_prod(args.props, config):
        return
    name = _name(args.props, args.name)
    if _num((args.props.get("spec") or {}).get("replicas", 1)) < minimum:
        report_violation(f"{name}: prod Triton needs replicas >= {minimum}")
    spec = _pod_spec(args.props)
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


def validate_scaled_object_fallback(args: Any, report_violation: Report) -> None:
    """ScaledObjects fall back (never below minReplicaCount, never to zero) when their metrics source is
    unreachable."""
    if args.resource_type != SCALED_OBJECT:
        return
    spec = args.props.get("spec") or {}
    fb = spec.get("fallback") or {}
    name = _name(args.props, args.name)
    if not fb:
        report_violation(f"{name}: ScaledObject has no fallback: a Prometheus outage would leave scaling blind")
        return
    if _num(fb.get("failureThreshold")) < 1 or _num(fb.get("replicas")) < 1:
        report_violation(f"{name}: fallback needs failureThreshold >= 1 and replicas >= 1")
    for trig in spec.get("triggers") or []:
        # KEDA 2.17 applies a fallback only to AverageValue metrics (the trigger default).
        if trig.get("metricType", "AverageValue") != "AverageValue":
            report_violation(
                f"{name}: trigger {trig.get('name') or trig.get('type')!r} uses metricType "
                f"{trig.get('metricType')}; KEDA ignores the fallback for it (use AverageValue)"
            )
    if fb.get("behavior", "static") == "static" and _num(fb.get("replicas")) < _num(spec.get("maxReplicaCount", 100)):
        report_violation(
            f"{name}: static fallback to {fb.get('replicas')} replicas can scale serving down during "
            "an outage; use behavior currentReplicasIfHigher (or fallback replicas = maxReplicaCount)"
        )


def validate_scaled_object_wake_up(args: Any, report_violation: Report) -> None:
    """A ScaledObject that scales to zero has a trigger on a signal that exists while no pod runs."""
    if args.resource_type != SCALED_OBJECT:
        return
    spec = args.props.get("spec") or {}
    if _num(spec.get("minReplicaCount", 0)) != 0:
        return
    queries = [str((trig.get("metadata") or {}).get("query", "")) for trig in spec.get("triggers") or []]
    if not any(metric in q for q in queries for metric in WAKE_METRICS):
        report_violation(
            f"{_name(args.props, args.name)}: ScaledObject scales to zero with no trigger on a signal that "
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
    name = _name(args.props, args.name)
    if not spec.get("limits"):
        report_violation(f"{name}: GPU NodePool has no spec.limits (set e.g. nvidia.com/gpu)")
    if not ((spec.get("disruption") or {}).get("budgets")):
        report_violation(f"{name}: GPU NodePool has no spec.disruption.budgets (Karpenter's default lets 10% go)")


# --- stack validators ----------------------------------------------------------------------------


def _triton_deployments(resources: Iterable[Any]) -> list[Any]:
    return [r for r in resources if is_triton_workload(r.resource_type, r.props)]


def _same_ns(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (a.get("metadata") or {}).get("namespace") == (b.get("metadata") or {}).get("namespace")


def _is_canary(props: Mapping[str, Any]) -> bool:
    return _pod_labels(props).get(TRACK) == "canary"


def validate_pdb_coverage(args: Any, report_violation: Report) -> None:
    """Every Triton Deployment is selected by a PodDisruptionBudget in its namespace; a canary
    Deployment (track: canary) needs none, but needs a stable Deployment of its instance beside it."""
    pdbs = [r for r in args.resources if r.resource_type == PDB]
    deployments = _triton_deployments(args.resources)
    for d in deployments:
        labels = _pod_labels(d.props)
        if _is_canary(d.props):
            stable = [
                o for o in deployments
                if not _is_canary(o.props) and _same_ns(o.props, d.props)
                and _pod_labels(o.props).get(INSTANCE) == labels.get(INSTANCE)
            ]
            if not stable or labels.get(INSTANCE) is None:
                report_violation(
                    f"{_name(d.props, d.name)}: a canary Deployment without a stable Deployment of instance "
                    f"{labels.get(INSTANCE)!r} in its namespace: a canary needs no PodDisruptionBudget only "
                    "beside the stable Deployment that carries the service"
                )
            continue
        if not any(
            _same_ns(p.props, d.props) and _selects((p.props.get("spec") or {}).get("selector"), labels) for p in pdbs
        ):
            report_violation(f"{_name(d.props, d.name)}: no PodDisruptionBudget selects this Triton Deployment")


def _selects_all(selector: Mapping[str, Any] | None) -> bool:
    return selector is not None and not selector.get("matchLabels") and not selector.get("matchExpressions")


def _policy_types(spec: Mapping[str, Any]) -> list[str]:
    """Kubernetes' default: Ingress, plus Egress when the policy has egress rules."""
    return list(spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]))


def _open_peer(peer: Mapping[str, Any]) -> bool:
    """A peer that matches every address: {}, all namespaces' pods, or an ipBlock of prefix length 0."""
    block = peer.get("ipBlock")
    if block is not None:
        try:
            return ipaddress.ip_network(str(block.get("cidr")), strict=False).prefixlen == 0
        except ValueError:
            return False
    ns, pods = peer.get("namespaceSelector"), peer.get("podSelector")
    return (ns is None and pods is None) or (_selects_all(ns) and (pods is None or _selects_all(pods)))


def allow_all_rules(spec: Mapping[str, Any]) -> list[str]:
    """The directions a NetworkPolicy opens to everyone: an ingress rule without sources or with an open
    source (on any port: the server's ports are what matter), an egress rule to an open destination on
    every port (an open destination on named ports, e.g. a model store's 443, is a limit, not a hole)."""
    found = []
    for rule in spec.get("ingress") or []:
        peers = rule.get("from") or []
        if not peers or any(_open_peer(p) for p in peers):
            found.append("ingress")
            break
    for rule in spec.get("egress") or []:
        peers = rule.get("to") or []
        if (not peers or any(_open_peer(p) for p in peers)) and not rule.get("ports"):
            found.append("egress")
            break
    return found


def validate_network_policy_coverage(args: Any, report_violation: Report) -> None:
    """Every Triton Deployment is selected by NetworkPolicies in its namespace for ingress and egress, and
    none selecting it allows all traffic (an allow-all policy does not count: it undoes the others)."""
    policies = [r for r in args.resources if r.resource_type == NETWORK_POLICY]
    for d in _triton_deployments(args.resources):
        labels = _pod_labels(d.props)
        directions: set[str] = set()
        for p in policies:
            spec = p.props.get("spec") or {}
            selector = spec.get("podSelector")
            if not (_same_ns(p.props, d.props) and (_selects_all(selector) or _selects(selector, labels))):
                continue
            holes = allow_all_rules(spec)
            for hole in holes:
                report_violation(
                    f"{_name(d.props, d.name)}: NetworkPolicy {_name(p.props, p.name)} allows all {hole} "
                    "traffic, so no other policy limits it"
                )
            directions |= set(_policy_types(spec)) - set(t.capitalize() for t in holes)
        for direction in ("Ingress", "Egress"):
            if direction not in directions:
                report_violation(
                    f"{_name(d.props, d.name)}: no NetworkPolicy limits this Triton Deployment's {direction.lower()}"
                )


def _triton_namespaces(resources: Iterable[Any]) -> list[str]:
    return sorted({(d.props.get("metadata") or {}).get("namespace") or "" for d in _triton_deployments(resources)})


def validate_default_deny(args: Any, report_violation: Report) -> None:
    """The namespace of every Triton Deployment has a default-deny NetworkPolicy: every pod, both
    directions, no rules (what no other policy allows is refused)."""
    policies = [r for r in args.resources if r.resource_type == NETWORK_POLICY]
    for ns in _triton_namespaces(args.resources):
        specs = [
            p.props.get("spec") or {}
            for p in policies
            if ((p.props.get("metadata") or {}).get("namespace") or "") == ns
        ]
        if not any(
            _selects_all(spec.get("podSelector"))
            and {"Ingress", "Egress"} <= set(_policy_types(spec))
            and not spec.get("ingress")
            and not spec.get("egress")
            for spec in specs
        ):
            report_violation(
                f"namespace {ns or '(default)'}: no default-deny NetworkPolicy (podSelector {{}}, policyTypes "
                "Ingress and Egress, no rules) beside its Triton Deployments"
            )


def validate_pod_security(args: Any, report_violation: Report) -> None:
    """The namespace of every Triton Deployment is created by the stack and enforces Pod Security
    "restricted" (label pod-security.kubernetes.io/enforce)."""
    namespaces = {
        (r.props.get("metadata") or {}).get("name"): (r.props.get("metadata") or {}).get("labels") or {}
        for r in args.resources
        if r.resource_type == NAMESPACE
    }
    for ns in _triton_namespaces(args.resources):
        if ns not in namespaces:
            report_violation(f"namespace {ns or '(default)'}: Triton runs in a namespace the stack does not create")
        elif namespaces[ns].get(POD_SECURITY_ENFORCE) != "restricted":
            report_violation(
                f"namespace {ns}: {POD_SECURITY_ENFORCE} is {namespaces[ns].get(POD_SECURITY_ENFORCE)!r}, "
                "not 'restricted'"
            )


# --- the policies --------------------------------------------------------------------------------

MANDATORY = EnforcementLevel.MANDATORY

def _resource(name: str, validate: Any, **kw: Any) -> ResourceValidationPolicy:
    """One rule: kebab-case name, the validator's docstring as description, mandatory by default
    (environments lower it through policy config)."""
    return ResourceValidationPolicy(name=name, description=validate.__doc__ or "", validate=validate,
                                    enforcement_level=MANDATORY, **kw)


def _stack(name: str, validate: Any) -> StackValidationPolicy:
    return StackValidationPolicy(name=name, description=validate.__doc__ or "", validate=validate,
                                 enforcement_level=MANDATORY)


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    _resource("triton-gpu-resources", validate_gpu_resources),
    _resource("triton-health-probes", validate_health_probes),
    _resource("triton-non-root", validate_non_root),
    _resource("triton-container-hardening", validate_container_hardening),
    _resource("triton-container-resources", validate_container_resources),
    _resource("triton-restricted-apis", validate_restricted_apis),
    _resource("triton-pinned-images", validate_pinned_images, config_schema=PolicyConfigSchema(properties={
        "requireDigest": {"type": "boolean", "default": False},
    })),
    _resource("triton-high-availability", validate_high_availability, config_schema=PolicyConfigSchema(properties={
        "requireHighAvailability": {"type": "boolean", "default": False},
        "minReplicas": {"type": "integer", "default": 2, "minimum": 1},
    })),
    _resource("scaledobject-fallback", validate_scaled_object_fallback),
    _resource("scaledobject-wake-up", validate_scaled_object_wake_up),
    _resource("helm-chart-pinned", validate_helm_pinned),
    _resource("gpu-nodepool-bounds", validate_gpu_node_pool_bounds),
    _stack("triton-pdb-coverage", validate_pdb_coverage),
    _stack("triton-network-policy-coverage", validate_network_policy_coverage),
    _stack("namespace-default-deny", validate_default_deny),
    _stack("namespace-pod-security-restricted", validate_pod_security),
]
RESOURCE_VALIDATORS: dict[str, Callable[[Any, Report], None]] = {
    "triton-gpu-resources": validate_gpu_resources,
    "triton-health-probes": validate_health_probes,
    "triton-non-root": validate_non_root,
    "triton-container-hardening": validate_container_hardening,
    "triton-container-resources": validate_container_resources,
    "triton-restricted-apis": validate_restricted_apis,
    "triton-pinned-images": validate_pinned_images,
    "triton-high-availability": validate_high_availability,
    "scaledobject-fallback": validate_scaled_object_fallback,
    "scaledobject-wake-up": validate_scaled_object_wake_up,
    "helm-chart-pinned": validate_helm_pinned,
    "gpu-nodepool-bounds": validate_gpu_node_pool_bounds,
}
STACK_VALIDATORS: dict[str, Callable[[Any, Report], None]] = {
    "triton-pdb-coverage": validate_pdb_coverage,
    "triton-network-policy-coverage": validate_network_policy_coverage,
    "namespace-default-deny": validate_default_deny,
    "namespace-pod-security-restricted": validate_pod_security,
}
