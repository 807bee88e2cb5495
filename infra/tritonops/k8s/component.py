"""What every tritonops Pulumi component is made of: one Pulumi resource per builder dict, the objects
in apply order with their waits, a pinned Helm chart, and a chart component's shared steps.

Each component (in ``tritonops.k8s.stacks.<stack>.components``, next to the builders it uses) takes a
typed args dataclass, validates it before creating anything, creates its children with ``parent=self``
from the builders' dicts, and registers its outputs. No resource is ever created inside ``Output.apply``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tritonops.k8s import waits
from tritonops.k8s.helm import HelmRelease

Obj = dict[str, Any]

# Core kinds get their typed resource class; everything else (CRDs) is an apiextensions.CustomResource
# with the type token kubernetes:<group>/<version>:<Kind>.
_CORE: dict[tuple[str, str], Any] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("networking.k8s.io/v1", "Ingress"): k8s.networking.v1.Ingress,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("storage.k8s.io/v1", "StorageClass"): k8s.storage.v1.StorageClass,
}
_TOP_LEVEL = {  # top-level fields of core kinds -> Python argument names
    "stringData": "string_data",
    "binaryData": "binary_data",
    "automountServiceAccountToken": "automount_service_account_token",
    "globalDefault": "global_default",
    "preemptionPolicy": "preemption_policy",
    "imagePullSecrets": "image_pull_secrets",
    "roleRef": "role_ref",
    "reclaimPolicy": "reclaim_policy",
    "volumeBindingMode": "volume_binding_mode",
    "allowVolumeExpansion": "allow_volume_expansion",
}


def resource_name(obj: Obj) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{obj['kind'].lower()}-{ns + '-' if ns else ''}{meta['name']}"


def k8s_object(obj: Obj, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The Pulumi resource for one builder dict (a typed class for core kinds, CustomResource otherwise)."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    cls = _CORE.get((obj["apiVersion"], obj["kind"]))
    name = resource_name(obj)
    if cls is not None:
        kwargs = {_TOP_LEVEL.get(k, k): v for k, v in body.items()}
        return cls(name, opts=opts, **kwargs)  # type: ignore[no-any-return,unused-ignore]
    unknown = set(body) - {"metadata", "spec"}
    if unknown:
        raise ValueError(
            f"{obj['kind']} {obj['metadata']['name']}: custom resources carry only metadata and spec, "
            f"got {sorted(unknown)}"
        )
    return k8s.apiextensions.CustomResource(
        name,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=body["metadata"],
        spec=body.get("spec"),
        opts=opts,
    )


def apply_objects(
    parent: pulumi.Resource,
    objs: Sequence[Obj],
    depends_on: Sequence[pulumi.Resource] = (),
    ignore_replicas: bool = False,
) -> list[pulumi.CustomResource]:
    """Namespaces first, then everything else depending on them; each object that waits gets the
    timeouts tritonops.k8s.waits derives for it."""
    created: list[pulumi.CustomResource] = []
    planned = waits.plan(list(objs))
    namespaces = [
        k8s_object(o, pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)))
        for o in objs
        if o["kind"] == "Namespace"
    ]
    created += namespaces
    for o in objs:
        if o["kind"] == "Namespace":
            continue
        ignore = ["spec.replicas"] if ignore_replicas and o["kind"] == "Deployment" else None
        wait = planned.get(waits.key(o))
        timeouts = wait.custom_timeouts() if wait is not None else None
        created.append(
            k8s_object(
                o,
                pulumi.ResourceOptions(
                    parent=parent,
                    depends_on=[*namespaces, *depends_on],
                    ignore_changes=ignore,
                    custom_timeouts=pulumi.CustomTimeouts(**timeouts) if timeouts else None,
                ),
            )
        )
    return created


def helm_release(
    rel: HelmRelease,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
    values: pulumi.Input[Obj] | None = None,
) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        f"{rel.name}-release",
        name=rel.name,
        chart=rel.chart,
        version=rel.version,
        # an OCI chart carries its registry in the chart reference: no repository options
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=rel.repo) if rel.repo else None,
        namespace=rel.namespace,
        create_namespace=False,
        values=values if values is not None else rel.values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=900,
        skip_crds=rel.skip_crds,
        disable_openapi_validation=not rel.openapi_validation,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def require_enabled(enabled: bool, switch: str, component: str) -> None:
    """A chart component's args refuse a config whose switch is off: the program should not create it."""
    if not enabled:
        raise ValueError(f"config.{switch}.enabled: {component} created while disabled")


def install_chart(
    parent: pulumi.ComponentResource,
    objs: Sequence[Obj],
    rel: HelmRelease,
    depends_on: Sequence[pulumi.Resource] = (),
) -> k8s.helm.v3.Release:
    """A chart component's body: the objects the chart needs first (namespace, ConfigMaps), then the
    pinned chart after them (and after ``depends_on``); registers the release's status."""
    created = apply_objects(parent, objs)
    release = helm_release(rel, parent, [*created, *depends_on])
    parent.register_outputs({"status": release.status})
    return release
