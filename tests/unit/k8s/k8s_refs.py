"""Every reference a set of Kubernetes objects makes to other objects, and what resolves them (a test helper).

Pure (no Pulumi): the input is the objects as ``tritonops render`` writes them and as the stack
programs register them (plain dicts). :func:`references` lists, for each object, what it names:

- Secrets and ConfigMaps: container ``env[].valueFrom`` and ``envFrom``, volumes (``secret``,
  ``configMap``, ``projected`` sources), ``imagePullSecrets``, Ingress ``tls[].secretName``;
- ServiceAccounts (``serviceAccountName``, the namespace's ``default`` when unset; RoleBinding
  subjects), PersistentVolumeClaims, PriorityClasses, Roles behind RoleBindings;
- Services behind Ingress backends and HTTPRoute/GRPCRoute ``backendRefs``, the Gateway of a route's
  ``parentRefs``, the IngressClass of an Ingress, the Deployment a KEDA ScaledObject scales, the
  EC2NodeClass of a Karpenter NodePool;
- the custom resource definition of every object whose API group is not built into Kubernetes.

:func:`resolve` checks them against what exists: the objects the stacks create, what
``secrets-required.yaml`` lists (created by the user with the command it gives), the kinds the
platform charts install (:data:`CHART_KINDS`) and what Kubernetes itself provides
(:data:`KUBERNETES_PROVIDED`). A reference that nothing satisfies is returned as dangling.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tritonops import versions

Obj = dict[str, Any]
CRD = "CustomResourceDefinition"  # target kind of a custom object's definition; its name is "<group>/<Kind>"

# API groups served by the Kubernetes API server itself ("" is the core group).
BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)

# Kinds without a namespace (a reference to one ignores the referring object's namespace).
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "PriorityClass",
        "IngressClass",
        "ClusterRole",
        "StorageClass",
        CRD,
        "NodePool",
        "EC2NodeClass",
        "ClusterPolicy",
        "ClusterTriggerAuthentication",
    }
)

# The custom kinds each chart the stacks install defines (its crds/ folder at the pinned version).
CHART_KINDS: dict[str, frozenset[tuple[str, str]]] = {
    versions.KUBE_PROMETHEUS_STACK_CHART: frozenset(
        ("monitoring.coreos.com", k)
        for k in (
            "Alertmanager",
            "AlertmanagerConfig",
            "PodMonitor",
            "Probe",
            "Prometheus",
            "PrometheusAgent",
            "PrometheusRule",
            "ScrapeConfig",
            "ServiceMonitor",
            "ThanosRuler",
        )
    ),
    versions.KEDA_CHART: frozenset(
        {
            ("keda.sh", "ScaledObject"),
            ("keda.sh", "ScaledJob"),
            ("keda.sh", "TriggerAuthentication"),
            ("keda.sh", "ClusterTriggerAuthentication"),
            ("eventing.keda.sh", "CloudEventSource"),
            ("eventing.keda.sh", "ClusterCloudEventSource"),
        }
    ),
    versions.GPU_OPERATOR_CHART: frozenset(
        {
            ("nvidia.com", "ClusterPolicy"),
            ("nvidia.com", "NVIDIADriver"),
            ("nfd.k8s-sigs.io", "NodeFeature"),
            ("nfd.k8s-sigs.io", "NodeFeatureGroup"),
            ("nfd.k8s-sigs.io", "NodeFeatureRule"),
        }
    ),
    versions.CLUSTER_AUTOSCALER_CHART: frozenset(),  # no CRDs
    f"{versions.KARPENTER_REPO}/{versions.KARPENTER_CHART}": frozenset(
        {("karpenter.sh", "NodePool"), ("karpenter.sh", "NodeClaim"), ("karpenter.k8s.aws", "EC2NodeClass")}
    ),
    # the same CRDs as templates, installed first (the controller's release skips its crds/)
    f"{versions.KARPENTER_REPO}/{versions.KARPENTER_CRD_CHART}": frozenset(
        {("karpenter.sh", "NodePool"), ("karpenter.sh", "NodeClaim"), ("karpenter.k8s.aws", "EC2NodeClass")}
    ),
}

# Gateway API kinds: installed with the cluster's Gateway controller (not by a chart of these stacks).
GATEWAY_API_KINDS = frozenset(
    ("gateway.networking.k8s.io", k)
    for k in ("Gateway", "GatewayClass", "HTTPRoute", "GRPCRoute", "ReferenceGrant", "BackendTLSPolicy")
)


@dataclass(frozen=True)
class Target:
    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


# What a cluster has without any stack: every namespace's `default` ServiceAccount is added by
# :func:`kubernetes_provided` for the namespaces in use; the two system PriorityClasses always exist.
KUBERNETES_PROVIDED = frozenset(
    {
        Target("PriorityClass", None, "system-cluster-critical"),
        Target("PriorityClass", None, "system-node-critical"),
        Target("Namespace", None, "default"),
        Target("Namespace", None, "kube-system"),
        Target("Namespace", None, "kube-public"),
        Target("ConfigMap", "*", "kube-root-ca.crt"),  # published in every namespace
    }
)


@dataclass(frozen=True)
class Ref:
    """``source`` names ``target`` at ``field`` (a path into the source object)."""

    source: Target
    field: str
    target: Target
    key: str | None = None  # the Secret/ConfigMap key it reads, when it names one
    optional: bool = False  # Kubernetes starts the pod without it (``optional: true``)

    def __str__(self) -> str:
        key = f" key {self.key!r}" if self.key else ""
        return f"{self.source} {self.field} -> {self.target}{key}"


def group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def target_of(obj: Mapping[str, Any]) -> Target:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    ns = None if kind in CLUSTER_SCOPED else (meta.get("namespace") or "default")
    return Target(kind, ns, str(meta.get("name")))


def _t(kind: str, ns: str | None, name: Any) -> Target:
    return Target(kind, None if kind in CLUSTER_SCOPED else ns, str(name))


def _pod_spec(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return "spec", spec
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return "spec.template.spec", (spec.get("template") or {}).get("spec") or {}
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return "spec.jobTemplate.spec.template.spec", (job.get("template") or {}).get("spec") or {}
    return None


def _pod_refs(src: Target, ns: str | None, path: str, pod: Mapping[str, Any]) -> Iterator[Ref]:
    sa = pod.get("serviceAccountName") or pod.get("serviceAccount") or "default"
    yield Ref(src, f"{path}.serviceAccountName", _t("ServiceAccount", ns, sa))
    if pod.get("priorityClassName"):
        yield Ref(src, f"{path}.priorityClassName", _t("PriorityClass", None, pod["priorityClassName"]))
    for i, s in enumerate(pod.get("imagePullSecrets") or []):
        yield Ref(src, f"{path}.imagePullSecrets[{i}].name", _t("Secret", ns, s.get("name")))
    for i, vol in enumerate(pod.get("volumes") or []):
        vp = f"{path}.volumes[{i}]"
        if "secret" in vol:
            s = vol["secret"]
            for key in _item_keys(s):
                yield Ref(src, f"{vp}.secret.secretName", _t("Secret", ns, s.get("secretName")), key,
                          bool(s.get("optional")))
        if "configMap" in vol:
            c = vol["configMap"]
            for key in _item_keys(c):
                yield Ref(src, f"{vp}.configMap.name", _t("ConfigMap", ns, c.get("name")), key,
                          bool(c.get("optional")))
        if "persistentVolumeClaim" in vol:
            yield Ref(src, f"{vp}.persistentVolumeClaim.claimName",
                      _t("PersistentVolumeClaim", ns, vol["persistentVolumeClaim"].get("claimName")))
        for j, source in enumerate((vol.get("projected") or {}).get("sources") or []):
            for field, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
                if field in source:
                    p = source[field]
                    for key in _item_keys(p):
                        yield Ref(src, f"{vp}.projected.sources[{j}].{field}.name", _t(kind, ns, p.get("name")),
                                  key, bool(p.get("optional")))
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(pod.get(group) or []):
            cp = f"{path}.{group}[{i}]"
            for j, env in enumerate(c.get("env") or []):
                vf = env.get("valueFrom") or {}
                for field, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                    if field in vf:
                        r = vf[field]
                        yield Ref(src, f"{cp}.env[{j}].valueFrom.{field}", _t(kind, ns, r.get("name")),
                                  r.get("key"), bool(r.get("optional")))
            for j, ef in enumerate(c.get("envFrom") or []):
                for field, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                    if field in ef:
                        r = ef[field]
                        yield Ref(src, f"{cp}.envFrom[{j}].{field}", _t(kind, ns, r.get("name")), None,
                                  bool(r.get("optional")))


def _item_keys(source: Mapping[str, Any]) -> list[str | None]:
    """The keys a volume projects (``items``); [None]: all of them (no key named)."""
    return [str(item["key"]) for item in source.get("items") or [] if "key" in item] or [None]


def _route_refs(src: Target, ns: str | None, spec: Mapping[str, Any]) -> Iterator[Ref]:
    for i, parent in enumerate(spec.get("parentRefs") or []):
        if parent.get("kind", "Gateway") == "Gateway":
            yield Ref(src, f"spec.parentRefs[{i}]", _t("Gateway", parent.get("namespace") or ns, parent.get("name")))
    for i, rule in enumerate(spec.get("rules") or []):
        for j, b in enumerate(rule.get("backendRefs") or []):
            if b.get("kind", "Service") == "Service" and b.get("group", "") == "":
                yield Ref(src, f"spec.rules[{i}].backendRefs[{j}]",
                          _t("Service", b.get("namespace") or ns, b.get("name")))


def _ingress_refs(src: Target, ns: str | None, spec: Mapping[str, Any]) -> Iterator[Ref]:
    if spec.get("ingressClassName"):
        yield Ref(src, "spec.ingressClassName", _t("IngressClass", None, spec["ingressClassName"]))
    for i, tls in enumerate(spec.get("tls") or []):
        if tls.get("secretName"):
            yield Ref(src, f"spec.tls[{i}].secretName", _t("Secret", ns, tls["secretName"]))
    default = (spec.get("defaultBackend") or {}).get("service")
    if default:
        yield Ref(src, "spec.defaultBackend.service.name", _t("Service", ns, default.get("name")))
    for i, rule in enumerate(spec.get("rules") or []):
        for j, p in enumerate((rule.get("http") or {}).get("paths") or []):
            svc = (p.get("backend") or {}).get("service")
            if svc:
                yield Ref(src, f"spec.rules[{i}].http.paths[{j}].backend.service.name",
                          _t("Service", ns, svc.get("name")))


def object_refs(obj: Mapping[str, Any]) -> list[Ref]:
    """What one object names."""
    src = target_of(obj)
    ns = src.namespace
    kind = src.kind
    spec = obj.get("spec") or {}
    out: list[Ref] = []
    group = group_of(str(obj.get("apiVersion", "")))
    if group not in BUILTIN_GROUPS:
        out.append(Ref(src, "apiVersion/kind", Target(CRD, None, f"{group}/{kind}")))
    if ns is not None and kind != "Namespace":
        out.append(Ref(src, "metadata.namespace", Target("Namespace", None, ns)))
    pod = _pod_spec(obj)
    if pod is not None:
        out += _pod_refs(src, ns, pod[0], pod[1])
    if kind == "ServiceAccount":
        for i, s in enumerate(obj.get("imagePullSecrets") or []):
            out.append(Ref(src, f"imagePullSecrets[{i}].name", _t("Secret", ns, s.get("name"))))
    elif kind == "Ingress":
        out += _ingress_refs(src, ns, spec)
    elif kind in ("HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"):
        out += _route_refs(src, ns, spec)
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        role = obj.get("roleRef") or {}
        out.append(Ref(src, "roleRef", _t(str(role.get("kind")), ns, role.get("name"))))
        for i, s in enumerate(obj.get("subjects") or []):
            if s.get("kind") == "ServiceAccount":
                out.append(Ref(src, f"subjects[{i}]", _t("ServiceAccount", s.get("namespace") or ns, s.get("name"))))
    elif kind == "ScaledObject":
        t = spec.get("scaleTargetRef") or {}
        out.append(Ref(src, "spec.scaleTargetRef", _t(str(t.get("kind", "Deployment")), ns, t.get("name"))))
        for i, trig in enumerate(spec.get("triggers") or []):
            auth = trig.get("authenticationRef")
            if auth:
                out.append(Ref(src, f"spec.triggers[{i}].authenticationRef",
                               _t(str(auth.get("kind", "TriggerAuthentication")), ns, auth.get("name"))))
    elif kind == "NodePool" and group == "karpenter.sh":
        ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        out.append(Ref(src, "spec.template.spec.nodeClassRef", _t(str(ref.get("kind")), None, ref.get("name"))))
    return out


def references(objs: Iterable[Mapping[str, Any]]) -> list[Ref]:
    return [r for o in objs for r in object_refs(o)]


@dataclass(frozen=True)
class Provided:
    """One object that exists for references to resolve to; ``keys`` None: its keys are not known."""

    target: Target
    keys: frozenset[str] | None = None
    source: str = ""  # who creates it: "stack triton", "secrets-required.yaml", "chart keda", "Kubernetes"


_PULUMI_SECRET = "4dabf18193072939515e22adb298388d"  # Pulumi's wire marker of a secret value


def _data_keys(obj: Mapping[str, Any]) -> frozenset[str] | None:
    if obj.get("kind") not in ("Secret", "ConfigMap"):
        return None
    keys: set[str] = set()
    for field in ("data", "stringData", "binaryData"):
        value = obj.get(field)
        if isinstance(value, Mapping) and value.get(_PULUMI_SECRET) is not None:
            value = value.get("value")  # a secret as Pulumi registers it: {<sig>: ..., "value": {...}}
        if isinstance(value, Mapping):
            keys |= set(value)
        elif value is not None:  # an Output or a secret wrapper: keys unknown
            return None
    return frozenset(keys)


def provided_by_objects(objs: Iterable[Mapping[str, Any]], source: str) -> list[Provided]:
    return [Provided(target_of(o), _data_keys(o), source) for o in objs]


def provided_by_charts(charts: Iterable[str]) -> list[Provided]:
    """The CRDs the named charts install; a chart missing from :data:`CHART_KINDS` is an error."""
    out = []
    for chart in charts:
        if chart not in CHART_KINDS:
            raise KeyError(f"chart {chart!r}: its custom kinds are not in k8s_refs.CHART_KINDS")
        out += [Provided(Target(CRD, None, f"{g}/{k}"), None, f"chart {chart}") for g, k in sorted(CHART_KINDS[chart])]
    return out


def provided_by_required(entries: Iterable[Mapping[str, Any]], source: str = "secrets-required.yaml") -> list[Provided]:
    """Entries of secrets-required.yaml (``secrets`` and ``prerequisites``): kind (default Secret),
    namespace, name and keys."""
    out = []
    for e in entries:
        kind = str(e.get("kind", "Secret"))
        keys = e.get("keys")
        out.append(Provided(_t(kind, e.get("namespace"), e["name"]), frozenset(keys) if keys else None, source))
    return out


def kubernetes_provided(namespaces: Iterable[str]) -> list[Provided]:
    out = [Provided(t, None, "Kubernetes") for t in KUBERNETES_PROVIDED if t.namespace != "*"]
    for ns in sorted(set(namespaces)):
        out.append(Provided(Target("ServiceAccount", ns, "default"), None, "Kubernetes"))
        out += [Provided(Target(t.kind, ns, t.name), None, "Kubernetes") for t in KUBERNETES_PROVIDED
                if t.namespace == "*"]
    return out


def dangling(refs: Iterable[Ref], provided: Iterable[Provided]) -> list[str]:
    """Each reference that nothing provides (or whose key the provider lacks), as one line naming the
    referring object and field. Optional references (``optional: true``) are not required."""
    index: dict[Target, Provided] = {}
    for p in provided:
        old = index.get(p.target)
        if old is None:
            index[p.target] = p
        elif old.keys is not None:  # several providers: the union of their keys (unknown wins)
            index[p.target] = Provided(p.target, None if p.keys is None else old.keys | p.keys, old.source)
    out = []
    for r in refs:
        if r.optional:
            continue
        have = index.get(r.target)
        if have is None:
            out.append(f"{r}: not created by any stack nor listed in secrets-required.yaml")
        elif r.key is not None and have.keys is not None and r.key not in have.keys:
            out.append(f"{r}: {have.source} creates it without key {r.key!r} (keys: {', '.join(sorted(have.keys))})")
    return out
