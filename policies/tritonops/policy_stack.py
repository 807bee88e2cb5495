"""Rules on a whole stack: PDB and NetworkPolicy coverage of every Triton pod, default deny and Pod
Security "restricted" in its namespaces."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from policy_common import (
    INSTANCE,
    NAMESPACE,
    NETWORK_POLICY,
    PDB,
    POD_SECURITY_ENFORCE,
    TRACK,
    Report,
    is_triton_workload,
    object_name,
    pod_labels,
    selects,
)


def _triton_deployments(resources: Iterable[Any]) -> list[Any]:
    return [r for r in resources if is_triton_workload(r.resource_type, r.props)]


def _same_ns(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (a.get("metadata") or {}).get("namespace") == (b.get("metadata") or {}).get("namespace")


def _is_canary(props: Mapping[str, Any]) -> bool:
    return pod_labels(props).get(TRACK) == "canary"


def validate_pdb_coverage(args: Any, report_violation: Report) -> None:
    """Every Triton Deployment is selected by a PodDisruptionBudget in its namespace; a canary
    Deployment (track: canary) needs none, but needs a stable Deployment of its instance beside it."""
    pdbs = [r for r in args.resources if r.resource_type == PDB]
    deployments = _triton_deployments(args.resources)
    for d in deployments:
        labels = pod_labels(d.props)
        if _is_canary(d.props):
            stable = [
                o for o in deployments
                if not _is_canary(o.props) and _same_ns(o.props, d.props)
                and pod_labels(o.props).get(INSTANCE) == labels.get(INSTANCE)
            ]
            if not stable or labels.get(INSTANCE) is None:
                report_violation(
                    f"{object_name(d.props, d.name)}: a canary Deployment without a stable Deployment of instance "
                    f"{labels.get(INSTANCE)!r} in its namespace: a canary needs no PodDisruptionBudget only "
                    "beside the stable Deployment that carries the service"
                )
            continue
        if not any(
            _same_ns(p.props, d.props) and selects((p.props.get("spec") or {}).get("selector"), labels) for p in pdbs
        ):
            report_violation(f"{object_name(d.props, d.name)}: no PodDisruptionBudget selects this Triton Deployment")


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
        labels = pod_labels(d.props)
        directions: set[str] = set()
        for p in policies:
            spec = p.props.get("spec") or {}
            selector = spec.get("podSelector")
            if not (_same_ns(p.props, d.props) and (_selects_all(selector) or selects(selector, labels))):
                continue
            holes = allow_all_rules(spec)
            for hole in holes:
                report_violation(
                    f"{object_name(d.props, d.name)}: NetworkPolicy {object_name(p.props, p.name)} allows all {hole} "
                    "traffic, so no other policy limits it"
                )
            directions |= set(_policy_types(spec)) - set(t.capitalize() for t in holes)
        for direction in ("Ingress", "Egress"):
            if direction not in directions:
                report_violation(
                    f"{object_name(d.props, d.name)}: no NetworkPolicy limits this Triton Deployment's "
                    f"{direction.lower()}"
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
