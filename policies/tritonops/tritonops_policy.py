"""CrossGuard rules for Triton on Kubernetes: one validator and one policy per rule.

The validators live by what they check: ``policy_workloads`` (a Triton workload's pods),
``policy_cluster`` (ScaledObjects, Helm releases, GPU NodePools) and ``policy_stack`` (whole-stack
coverage: PDBs, NetworkPolicies, namespaces), on what ``policy_common`` shares; this module makes
them the pack's policies.

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

from collections.abc import Callable
from typing import Any

from policy_cluster import (
    validate_gpu_node_pool_bounds,
    validate_helm_pinned,
    validate_scaled_object_fallback,
    validate_scaled_object_wake_up,
)
from policy_common import Report
from policy_stack import (
    validate_default_deny,
    validate_network_policy_coverage,
    validate_pdb_coverage,
    validate_pod_security,
)
from policy_workloads import (
    validate_container_hardening,
    validate_container_resources,
    validate_gpu_resources,
    validate_health_probes,
    validate_high_availability,
    validate_non_root,
    validate_pinned_images,
    validate_restricted_apis,
)
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    StackValidationPolicy,
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
