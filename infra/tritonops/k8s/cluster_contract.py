"""The cluster contract: for every object kind the stacks render, what must serve it and where it comes from.

An object is only half of what a first ``pulumi up`` needs: an Ingress needs an ingress controller
behind its class, a ScaledObject needs KEDA's CRD, operator and admission webhook, a PVC needs a
StorageClass and a CSI driver, a Deployment needs nodes with the GPUs it asks for. :data:`CONTRACT`
names, per ``(apiVersion, kind)``, each :class:`Need` (a controller, a CRD with its group/version, a
StorageClass, an IngressClass/GatewayClass, a webhook, node capacity, the CNI's policy engine) and its
:class:`Provider`: one of our stacks (which), or a declared prerequisite with the command that
provides it. The named things the objects pick (a class, a StorageClass) are declared in
:data:`STORAGE_CLASSES` and :data:`INGRESS_CLASSES`, next to any our stacks render themselves.

:func:`check` is what ``tritonops render --check-config`` adds to the config rules: it renders the
stack's objects (no Pulumi, no cluster) and returns a :class:`~tritonops.k8s.contract.Problem` (file,
line, config key) for each object nothing provides: a kind missing from the contract, an Ingress
whose class no controller serves, a PVC whose StorageClass nobody creates, and a GPU pool whose
reachable GPUs (Karpenter NodePool limits, or a managed node group's max size) are fewer than its
services' KEDA ``maxReplicaCount`` x GPUs per replica, and a ScaledObject trigger reading a series that
nothing this cluster sets up produces (:mod:`tritonops.k8s.series`). The other stacks of the same cluster (the
cluster-aws stack ``cluster.clusterStack`` names, the platform stack whose ``cluster.clusterStack`` is
the same) are read from their stack files beside it. ``tritonops preflight`` checks the same
prerequisites on a live cluster (:mod:`tritonops.k8s.preflight`).

**One creator per name.** Every named thing (a bucket, a namespace, a Secret, a ConfigMap) has exactly
one creator, and the stacks own what they use: cluster-aws the release buckets and the IRSA roles that
read them, each stack its namespaces and the objects in them, including every Secret whose value is
Pulumi secret config (``pulumi config set --secret``: the admin-API token, Grafana's password,
Alertmanager's keys). The user creates by hand only what no stack can: the prerequisites below, outside
the stacks' namespaces and before the stack that needs them, and the objects ``secrets-required.yaml``
lists with a ``command``. Such an object lives in a namespace its stack creates, so it is made *after*
that stack's first ``pulumi up`` (preflight reports it ``later`` until the namespace exists), and a
first up must not wait for it: a Secret the pods need at their start comes from Pulumi secret config
or is replaced by what a stack creates (``modelReader``, cluster-aws's IRSA role, instead of
``credentialsSecret``). ``tests/unit/test_walkthrough.py`` holds docs/kubernetes.md's walkthrough to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonops.k8s import gateway, series
from tritonops.k8s.config import (
    ClusterAwsConfig,
    ConfigError,
    GpuNodePoolConfig,
    PlatformConfig,
    StackConfig,
    TritonStackConfig,
    project_name,
)
from tritonops.k8s.contract import Problem, locate
from tritonops.k8s.labels import GPU_RESOURCE, NODE_POOL_LABEL, name_of
from tritonops.k8s.stack_file import load_stack_config, stack_envs, stack_file
from tritonops.k8s.stacks.cluster_aws.eks import EBS_CSI_ADDON
from tritonops.versions import (
    ENVOY_GATEWAY_CHART,
    ENVOY_GATEWAY_CHART_VERSION,
    ENVOY_GATEWAY_NAMESPACE,
    GATEWAY_API_VERSION,
    INGRESS_NGINX_CHART_VERSION,
)

Obj = dict[str, Any]



@dataclass(frozen=True)
class Provider:
    """Who provides a need: ``stack`` (one of ours, created by its ``pulumi up``) or, with ``command``,
    a prerequisite the user installs before the stack that needs it; ``after``: the stacks whose ``pulumi
    up`` the command needs first (a CRD its chart renders objects of)."""

    name: str
    stack: str | None = None
    command: str | None = None
    after: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"stack {self.stack}" if self.stack else f"prerequisite: {self.command}"


@dataclass(frozen=True)
class Need:
    """What must serve an object: ``what`` is one of controller, crd, storageclass, ingressclass,
    gatewayclass, webhook, capacity, cni, api; ``name`` says which (a CRD as ``plural.group/version``)."""

    what: str
    name: str
    provider: Provider


# --- providers -----------------------------------------------------------------------------------

EKS = Provider("EKS control plane: API server, controller manager, scheduler", stack="cluster-aws")
SYSTEM_NODES = Provider("system managed node group (CPU pods)", stack="cluster-aws")
GPU_POOLS = Provider("GPU node pools (gpuNodePools: Karpenter NodePool limits, managed group maxSize)",
                     stack="cluster-aws")
KARPENTER = Provider("Karpenter controller and CRDs (chart karpenter)", stack="cluster-aws")
DEVICE_PLUGIN = Provider("NVIDIA device plugin (GPU Operator; Bottlerocket's own)", stack="platform")
PROMETHEUS_OPERATOR = Provider("Prometheus Operator and CRDs (chart kube-prometheus-stack)", stack="platform")
KEDA = Provider("KEDA operator, metrics API server and admission webhook (chart keda)", stack="platform")
VPC_CNI_POLICY = Provider(
    "VPC CNI network policy agent (aws-node's aws-eks-nodeagent, --enable-network-policy=true)",
    stack="cluster-aws",
    command="aws eks update-addon --cluster-name CLUSTER --addon-name vpc-cni "
    "--configuration-values '{\"enableNetworkPolicy\":\"true\"}'",
)
# Legacy: ingress-nginx is retired upstream (tritonops.versions says why it stays and which release). Its
# request counter wakes a service at zero (tritonops.observability.producers): the chart's ServiceMonitor
# brings it to the platform's Prometheus, so the ServiceMonitor CRD (stack platform) must exist first.
INGRESS_NGINX = Provider(
    "ingress-nginx controller (IngressClass nginx; legacy: retired upstream, final release pinned)",
    command="helm upgrade --install ingress-nginx ingress-nginx --repo https://kubernetes.github.io/ingress-nginx "
    f"--version {INGRESS_NGINX_CHART_VERSION} --namespace ingress-nginx --create-namespace "
    "--set controller.metrics.enabled=true --set controller.metrics.serviceMonitor.enabled=true",
    after=("platform",),
)
# The default way in: Envoy Gateway (tritonops.versions says why and which release). Its chart installs the
# Gateway API CRDs it was built against; the manifest (tritonops.k8s.gateway) adds the GatewayClass, the shared
# Gateway gateway/inference the routes attach to and the PodMonitor that brings the proxies' request counters (the
# wake trigger's series) to Prometheus: its CRD comes with stack platform, so the command runs after that up.
GATEWAY_COMMAND = (
    f"helm upgrade --install eg {ENVOY_GATEWAY_CHART} --version {ENVOY_GATEWAY_CHART_VERSION} "
    f"--namespace {ENVOY_GATEWAY_NAMESPACE} --create-namespace --wait && kubectl apply -f {gateway.MANIFEST}"
)
GATEWAY_API = Provider(
    f"Gateway API CRDs {GATEWAY_API_VERSION} (standard channel; the Envoy Gateway chart's)",
    command=GATEWAY_COMMAND,
    after=("platform",),
)
GATEWAY = Provider(
    f"Envoy Gateway {ENVOY_GATEWAY_CHART_VERSION} (GatewayClass {gateway.GATEWAY_CLASS}), Gateway "
    f"{gateway.GATEWAY_NAMESPACE}/{gateway.GATEWAY_NAME} and PodMonitor {gateway.POD_MONITOR}",
    command=GATEWAY_COMMAND,
    after=("platform",),
)
EBS_CSI = Provider(
    "EBS CSI driver (EKS add-on, IRSA role) and StorageClass gp3 (default)",
    stack="cluster-aws",
    command=f"aws eks create-addon --cluster-name CLUSTER --addon-name {EBS_CSI_ADDON} "
    "--service-account-role-arn EBS_CSI_ROLE_ARN && kubectl apply -f gp3-storageclass.yaml",
)
USER_OBJECTS = Provider("Secrets and ConfigMaps the user creates, after the stack's first up made their namespace",
                        command="the `command` of each entry of secrets-required.yaml (tritonops render)")
FLUX = Provider("Flux helm-controller and source-controller (GitOps only: `pulumi up` installs the charts itself)",
                command="flux install")

# Named things objects pick, declared as prerequisites: name -> (provider, default class?).
STORAGE_CLASSES: dict[str, tuple[Provider, bool]] = {"gp3": (EBS_CSI, True)}
INGRESS_CLASSES: dict[str, tuple[Provider, bool]] = {"nginx": (INGRESS_NGINX, False)}
# Gateways routes may attach to, (namespace, name) -> provider: the one the Envoy Gateway command's manifest creates.
GATEWAYS: dict[tuple[str, str], Provider] = {(gateway.GATEWAY_NAMESPACE, gateway.GATEWAY_NAME): GATEWAY}


def _api(kind: str) -> tuple[Need, ...]:
    return (Need("api", f"{kind} (built-in API)", EKS),)


def _crd(plural: str, group: str, version: str, provider: Provider) -> Need:
    return Need("crd", f"{plural}.{group}/{version}", provider)


_POD_NEEDS = (
    Need("controller", "kube-controller-manager, kube-scheduler", EKS),
    Need("capacity", "nodes for its pod (system pool for CPU pods, GPU pool by tritonops.io/node-pool)", GPU_POOLS),
    Need("capacity", "nvidia.com/gpu on GPU nodes", DEVICE_PLUGIN),
)

CONTRACT: dict[tuple[str, str], tuple[Need, ...]] = {
    ("v1", "Namespace"): _api("Namespace"),
    ("v1", "ConfigMap"): _api("ConfigMap"),
    ("v1", "Secret"): (*_api("Secret"), Need("controller", "values from Pulumi secret config or the user",
                                             USER_OBJECTS)),
    ("v1", "ServiceAccount"): _api("ServiceAccount"),
    ("v1", "Service"): (*_api("Service"), Need("controller", "endpoint slices and kube-proxy (EKS add-on)", EKS)),
    ("v1", "PersistentVolumeClaim"): (
        Need("storageclass", "the claim's storageClassName, or the default StorageClass", EBS_CSI),
        Need("controller", "a CSI driver provisioning its volume", EBS_CSI),
    ),
    ("apps/v1", "Deployment"): _POD_NEEDS,
    ("batch/v1", "CronJob"): (_POD_NEEDS[0], Need("capacity", "CPU nodes (system pool)", SYSTEM_NODES)),
    ("policy/v1", "PodDisruptionBudget"): (*_api("PodDisruptionBudget"),
                                           Need("controller", "disruption controller, eviction API", EKS)),
    ("scheduling.k8s.io/v1", "PriorityClass"): _api("PriorityClass"),
    ("rbac.authorization.k8s.io/v1", "Role"): _api("Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _api("RoleBinding"),
    ("networking.k8s.io/v1", "NetworkPolicy"): (
        *_api("NetworkPolicy"),
        Need("cni", "a CNI that enforces NetworkPolicy (EKS: the VPC CNI's network policy option)", VPC_CNI_POLICY),
    ),
    ("networking.k8s.io/v1", "Ingress"): (
        Need("ingressclass", "spec.ingressClassName: an IngressClass and its controller", INGRESS_NGINX),
    ),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): (
        _crd("httproutes", "gateway.networking.k8s.io", "v1", GATEWAY_API),
        Need("gatewayclass", "the parent Gateway, its GatewayClass and controller", GATEWAY),
    ),
    ("gateway.networking.k8s.io/v1", "GRPCRoute"): (
        _crd("grpcroutes", "gateway.networking.k8s.io", "v1", GATEWAY_API),
        Need("gatewayclass", "the parent Gateway, its GatewayClass and controller", GATEWAY),
    ),
    # Envoy Gateway's own policy kind: the wake routing of a service that may scale to zero
    # (tritonops.k8s.stacks.triton.exposure.wake_routing_policy).
    ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy"): (
        _crd("backendtrafficpolicies", "gateway.envoyproxy.io", "v1alpha1", GATEWAY),
        Need("controller", "Envoy Gateway (its routes' cluster endpoints)", GATEWAY),
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        _crd("servicemonitors", "monitoring.coreos.com", "v1", PROMETHEUS_OPERATOR),
        Need("controller", "prometheus-operator", PROMETHEUS_OPERATOR),
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): (
        _crd("prometheusrules", "monitoring.coreos.com", "v1", PROMETHEUS_OPERATOR),
        Need("controller", "prometheus-operator", PROMETHEUS_OPERATOR),
        Need("webhook", "kube-prometheus-stack's PrometheusRule admission webhook", PROMETHEUS_OPERATOR),
    ),
    ("keda.sh/v1alpha1", "ScaledObject"): (
        _crd("scaledobjects", "keda.sh", "v1alpha1", KEDA),
        Need("controller", "keda-operator and the external metrics API (keda-operator-metrics-apiserver)", KEDA),
        Need("webhook", "keda-admission-webhooks (validates the ScaledObject)", KEDA),
        Need("capacity", "maxReplicaCount x GPUs per replica within its pool's reachable GPUs", GPU_POOLS),
    ),
    ("karpenter.sh/v1", "NodePool"): (
        _crd("nodepools", "karpenter.sh", "v1", KARPENTER),
        Need("controller", "karpenter", KARPENTER),
    ),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): (
        _crd("ec2nodeclasses", "karpenter.k8s.aws", "v1", KARPENTER),
        Need("controller", "karpenter", KARPENTER),
    ),
    # Kinds the stacks may render as they take over prerequisites (a StorageClass, an IngressClass, a Gateway)
    # or run more workloads; listed so the check names what serves them rather than an unknown kind.
    ("storage.k8s.io/v1", "StorageClass"): (*_api("StorageClass"),
                                            Need("controller", "the CSI driver its provisioner names", EBS_CSI)),
    ("networking.k8s.io/v1", "IngressClass"): (*_api("IngressClass"),
                                               Need("controller", "the controller spec.controller names",
                                                    INGRESS_NGINX)),
    ("gateway.networking.k8s.io/v1", "Gateway"): (
        _crd("gateways", "gateway.networking.k8s.io", "v1", GATEWAY_API),
        Need("gatewayclass", "spec.gatewayClassName: a GatewayClass and its controller", GATEWAY),
    ),
    ("apps/v1", "StatefulSet"): _POD_NEEDS,
    ("apps/v1", "DaemonSet"): _POD_NEEDS,
    ("batch/v1", "Job"): (_POD_NEEDS[0], Need("capacity", "CPU nodes (system pool)", SYSTEM_NODES)),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): _api("ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _api("ClusterRoleBinding"),
    # helm/ of `tritonops render` (GitOps): Flux applies the same charts `pulumi up` installs.
    ("source.toolkit.fluxcd.io/v1", "HelmRepository"): (_crd("helmrepositories", "source.toolkit.fluxcd.io", "v1",
                                                             FLUX),),
    ("helm.toolkit.fluxcd.io/v2", "HelmRelease"): (_crd("helmreleases", "helm.toolkit.fluxcd.io", "v2", FLUX),),
}


def needs_of(obj: Obj) -> tuple[Need, ...] | None:
    return CONTRACT.get((str(obj.get("apiVersion")), str(obj.get("kind"))))


def table() -> list[tuple[str, str, str, str]]:
    """(apiVersion kind, need, what it is, where it comes from): the contract as rows (docs, report)."""
    return [
        (f"{api} {kind}", f"{n.what}: {n.name}", n.provider.name, n.provider.where)
        for (api, kind), needs in CONTRACT.items()
        for n in needs
    ]


# --- the cluster a stack runs on -----------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """The stacks of one cluster as their stack files configure them (None: not found beside it)."""

    aws: ClusterAwsConfig | None
    aws_file: Path | None
    platform: PlatformConfig | None
    platform_file: Path | None = None


def _cluster_env(cluster_stack: str | None) -> str | None:
    """The cluster-aws stack name of a StackReference name (``[org/]tritonops-cluster-aws/<stack>``)."""
    if not cluster_stack:
        return None
    parts = cluster_stack.split("/")
    if len(parts) > 1 and parts[-2] != project_name("cluster-aws"):
        return None
    return parts[-1]


def cluster_of(stack: str, env: str, cfg: StackConfig, stacks_dir: Path | None) -> Cluster:
    """cluster-aws is its own cluster; platform and triton name theirs with ``cluster.clusterStack``."""
    if isinstance(cfg, ClusterAwsConfig):
        aws_env: str | None = env
        source = None
    else:
        source = cfg.cluster.cluster_stack
        aws_env = _cluster_env(source)
    aws = aws_file = None
    if aws_env and aws_env in stack_envs("cluster-aws", stacks_dir):
        try:
            loaded = cfg if stack == "cluster-aws" else load_stack_config("cluster-aws", aws_env, stacks_dir)
        except ConfigError:
            loaded = None  # its own --check-config names that; nothing is known of this cluster here
        if isinstance(loaded, ClusterAwsConfig):
            aws, aws_file = loaded, stack_file("cluster-aws", aws_env, stacks_dir)
    platform = cfg if isinstance(cfg, PlatformConfig) else None
    platform_file = stack_file("platform", env, stacks_dir) if platform is not None else None
    if platform is None and source:
        for penv in stack_envs("platform", stacks_dir):
            try:
                other = load_stack_config("platform", penv, stacks_dir)
            except ConfigError:
                continue  # its own --check-config names that
            if isinstance(other, PlatformConfig) and other.cluster.cluster_stack == source:
                platform, platform_file = other, stack_file("platform", penv, stacks_dir)
                break
    return Cluster(aws, aws_file, platform, platform_file)


# --- the checks ----------------------------------------------------------------------------------


def _problem(path: Path, key: str, message: str) -> Problem:
    return Problem(str(path), key, message, locate(path, key))


def _unknown_kinds(objs: list[Obj], path: Path, stack: str) -> Iterator[Problem]:
    seen: set[tuple[str, str]] = set()
    for o in objs:
        kind = (str(o.get("apiVersion")), str(o.get("kind")))
        if needs_of(o) is None and kind not in seen:
            seen.add(kind)
            yield Problem(str(path), f"{project_name(stack)}:(rendered {kind[0]} {kind[1]})",
                          f"renders {kind[1]} ({kind[0]}), which the cluster contract does not know: nothing "
                          "says what serves it (tritonops.k8s.cluster_contract.CONTRACT)")


def implied_claims(stack: str, cfg: StackConfig) -> list[tuple[str, str | None]]:
    """PVCs the charts create from our values: (config key, storageClassName or None for the default)."""
    if isinstance(cfg, PlatformConfig) and cfg.monitoring.enabled:
        return [(f"{project_name(stack)}:monitoring.storageClass", cfg.monitoring.storage_class)]
    return []


def _provided_classes(kind: str, declared: dict[str, tuple[Provider, bool]], ours: list[Obj]) -> dict[str, bool]:
    """Class name -> is it the default: the declared prerequisites and the classes our stacks render."""
    out = {name: default for name, (_, default) in declared.items()}
    for o in ours:
        if o.get("kind") == kind:
            ann = (o.get("metadata") or {}).get("annotations") or {}
            default = any(v == "true" for k, v in ann.items() if k.endswith("is-default-class"))
            out[str(o["metadata"]["name"])] = default
    return out


def _storage(stack: str, cfg: StackConfig, path: Path, ours: list[Obj]) -> Iterator[Problem]:
    classes = _provided_classes("StorageClass", STORAGE_CLASSES, ours)
    claims = implied_claims(stack, cfg) + [
        (f"{project_name(stack)}:(rendered PersistentVolumeClaim {o['metadata']['name']})",
         (o.get("spec") or {}).get("storageClassName"))
        for o in ours if o.get("kind") == "PersistentVolumeClaim"
    ]
    for key, name in claims:
        if name is None and not any(classes.values()):
            yield _problem(path, key, "a PersistentVolumeClaim with no storageClassName needs a default "
                           "StorageClass, and none is provided (declared: "
                           f"{', '.join(sorted(classes)) or 'none'})")
        elif name is not None and name not in classes:
            yield _problem(path, key, f"StorageClass {name!r}: no stack creates it and it is no declared "
                           f"prerequisite (known: {', '.join(sorted(classes))}); the PVC would stay Pending")


def _ingress(stack: str, objs: list[Obj], path: Path, ours: list[Obj]) -> Iterator[Problem]:
    classes = _provided_classes("IngressClass", INGRESS_CLASSES, ours)
    key = f"{project_name(stack)}:ingress.className"
    for o in objs:
        if o.get("kind") != "Ingress":
            continue
        name = (o.get("spec") or {}).get("ingressClassName")
        what = f"Ingress {o['metadata'].get('namespace')}/{o['metadata']['name']} spec.ingressClassName"
        if name is None and not any(classes.values()):
            yield _problem(path, key, f"{what} is unset and no default IngressClass is provided")
            return
        if name is not None and name not in classes:
            yield _problem(path, key, f"{what} is {name!r}: no ingress controller serves it (no stack creates "
                           f"that IngressClass and it is no declared prerequisite; known: "
                           f"{', '.join(sorted(classes))})")
            return


def _gateway(stack: str, objs: list[Obj], path: Path, ours: list[Obj]) -> Iterator[Problem]:
    """Every HTTPRoute/GRPCRoute parentRef names a Gateway the contract's command or one of our stacks creates."""
    known = set(GATEWAYS) | {(str(o["metadata"].get("namespace")), str(o["metadata"]["name"]))
                             for o in ours if o.get("kind") == "Gateway"}
    for o in objs:
        if o.get("kind") not in ("HTTPRoute", "GRPCRoute"):
            continue
        for ref in (o.get("spec") or {}).get("parentRefs") or []:
            if ref.get("kind", "Gateway") != "Gateway":
                continue
            parent = (str(ref.get("namespace") or o["metadata"].get("namespace")), str(ref["name"]))
            if parent not in known:
                key = "gatewayName" if parent[0] in {ns for ns, _ in known} else "gatewayNamespace"
                yield _problem(path, f"{project_name(stack)}:ingress.{key}",
                               f"{o['kind']} {o['metadata'].get('namespace')}/{o['metadata']['name']} attaches to "
                               f"Gateway {parent[0]}/{parent[1]}: no stack creates it and it is no declared "
                               f"prerequisite (known: {', '.join(f'{ns}/{n}' for ns, n in sorted(known))})")
                return


def gpus_per_instance(instance_type: str) -> int:
    """GPUs of one instance of the type (tritonops.world.INSTANCE_TYPES; check-config refuses a type it lacks)."""
    from tritonops.world import instance_type as facts

    return facts(instance_type).gpus


def reachable_gpus(pool: GpuNodePoolConfig) -> tuple[int, str]:
    """Physical GPUs the pool can grow to, and how: Karpenter's NodePool limit, or a managed group's
    maxSize x the fewest GPUs of its instance types."""
    if pool.karpenter is not None:
        return pool.karpenter.max_gpus, f"Karpenter NodePool limit nvidia.com/gpu: {pool.karpenter.max_gpus}"
    per = min(gpus_per_instance(t) for t in pool.instance_types)
    return pool.max_size * per, f"managed node group maxSize {pool.max_size} x {per} GPU per node"


def _gpu_demand(objs: list[Obj]) -> dict[str, list[tuple[str, int, Obj | None]]]:
    """Pool -> (Deployment name, GPUs it can ask for at its most, its ScaledObject or None)."""
    scalers = {(o["metadata"].get("namespace"), o["spec"]["scaleTargetRef"]["name"]): o
               for o in objs if o.get("kind") == "ScaledObject"}
    out: dict[str, list[tuple[str, int, Obj | None]]] = {}
    for o in objs:
        if o.get("kind") != "Deployment":
            continue
        pod = o["spec"]["template"]["spec"]
        pool = (pod.get("nodeSelector") or {}).get(NODE_POOL_LABEL)
        gpus = sum(int(((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE, 0))
                   for c in pod.get("containers") or [])
        if pool is None or not gpus:
            continue
        so = scalers.get((o["metadata"].get("namespace"), o["metadata"]["name"]))
        replicas = so["spec"]["maxReplicaCount"] if so else o["spec"].get("replicas", 1)
        out.setdefault(pool, []).append((o["metadata"]["name"], replicas * gpus, so))
    return out


def _capacity(cfg: TritonStackConfig, objs: list[Obj], path: Path, cluster: Cluster) -> Iterator[Problem]:
    if cluster.aws is None:
        return  # a cluster that is not a cluster-aws stack of this project: its capacity is not known here
    pools = {p.name: p for p in cluster.aws.gpu_node_pools}
    index = {name_of(s): i for i, s in enumerate(cfg.model_services)}
    pre = project_name("triton")
    for pool_name, users in _gpu_demand(objs).items():
        pool = pools.get(pool_name)
        if pool is None:
            i = next(i for i, s in enumerate(cfg.model_services) if s.node_pool == pool_name)
            yield _problem(path, f"{pre}:modelServices[{i}].nodePool",
                           f"node pool {pool_name!r} is not a gpuNodePools entry of {cluster.aws_file}")
            continue
        physical, how = reachable_gpus(pool)
        slices = cfg.node_pools[pool_name].gpu_slices if pool_name in cfg.node_pools else 1
        reachable = physical * slices
        demand = sum(n for _, n, _ in users)
        if demand <= reachable:
            continue
        detail = " + ".join(f"{name} {n}" for name, n, _ in users)
        for name, _, so in users:
            if so is None:
                continue
            svc = name.removesuffix("-canary")
            yield _problem(
                path, f"{pre}:modelServices[{index.get(svc, 0)}].autoscaling.maxReplicas",
                f"ScaledObject {so['metadata']['name']} spec.maxReplicaCount {so['spec']['maxReplicaCount']}: "
                f"pool {pool_name!r} reaches {reachable} nvidia.com/gpu ({how}"
                f"{f' x {slices} time-slices' if slices > 1 else ''}, {cluster.aws_file}) but its Deployments "
                f"can ask for {demand} at their most ({detail}); raise the pool's limit or lower maxReplicas",
            )


def _fit(cfg: TritonStackConfig, objs: list[Obj], path: Path, cluster: Cluster) -> Iterator[Problem]:
    """Each Deployment on a GPU pool fits a node of at least one of the pool's instance types
    (tritonops.k8s.fit)."""
    from tritonops.k8s.fit import misfit

    if cluster.aws is None:
        return
    pools = {p.name: p for p in cluster.aws.gpu_node_pools}
    index = {name_of(s): i for i, s in enumerate(cfg.model_services)}
    for o in objs:
        if o.get("kind") != "Deployment":
            continue
        pod = o["spec"]["template"]["spec"]
        pool = pools.get((pod.get("nodeSelector") or {}).get(NODE_POOL_LABEL, ""))
        why = None if pool is None else misfit(pod, pool.instance_types)
        if pool is not None and why:
            i = index.get(o["metadata"]["name"].removesuffix("-canary"), 0)
            yield _problem(path, f"{project_name('triton')}:modelServices[{i}].resources",
                           f"Deployment {o['metadata']['name']} on pool {pool.name!r} ({cluster.aws_file}) {why}")


def _ami(cfg: PlatformConfig, path: Path, cluster: Cluster) -> Iterator[Problem]:
    """The GPU Operator installs no driver or toolkit where the pools' AMIs already ship one
    (tritonops.world.AMI_FAMILIES): two drivers on one node fail to load."""
    from tritonops.world import AMI_FAMILIES

    if cluster.aws is None or not cfg.gpu_operator.enabled:
        return
    for part, on in (("driver", cfg.gpu_operator.driver_enabled), ("toolkit", cfg.gpu_operator.toolkit_enabled)):
        shipped = sorted({p.ami_type for p in cluster.aws.gpu_node_pools if getattr(AMI_FAMILIES[p.ami_type], part)})
        if on and shipped:
            yield _problem(path, f"{project_name('platform')}:gpuOperator.{part}Enabled",
                           f"is true, but the pools of {cluster.aws_file} run {', '.join(shipped)}, which ship the "
                           f"NVIDIA {part} ({AMI_FAMILIES[shipped[0]].source.url}): set it false")


# The platform's charts behind its providers: the config key that turns each on.
PLATFORM_SWITCHES: dict[Provider, str] = {KEDA: "keda", PROMETHEUS_OPERATOR: "monitoring", DEVICE_PLUGIN: "gpuOperator"}


def _platform_enabled(platform: PlatformConfig, switch: str) -> bool:
    return {"keda": platform.keda.enabled, "monitoring": platform.monitoring.enabled,
            "gpuOperator": platform.gpu_operator.enabled}[switch]


def _platform(stack: str, objs: list[Obj], cluster: Cluster) -> Iterator[Problem]:
    """A kind the platform stack serves, rendered while the cluster's platform stack turns that chart off."""
    if stack == "platform" or cluster.platform is None or cluster.platform_file is None:
        return
    named: set[str] = set()
    for o in objs:
        for need in needs_of(o) or ():
            switch = PLATFORM_SWITCHES.get(need.provider)
            if switch is None or switch in named or _platform_enabled(cluster.platform, switch):
                continue
            named.add(switch)
            yield _problem(cluster.platform_file, f"{project_name('platform')}:{switch}.enabled",
                           f"is false, but stack {stack} renders {o['kind']} ({o['apiVersion']}), which needs "
                           f"{need.provider.name}")


def check(stack: str, env: str, stacks_dir: Path | None = None) -> list[Problem]:
    """Every object the stack renders against the contract and the cluster's other stacks; [] when clean."""
    from tritonops.k8s.programs import render_set

    path = stack_file(stack, env, stacks_dir)
    cfg = load_stack_config(stack, env, stacks_dir)
    objs = render_set(stack, env, cfg, dashboards=False).objects
    cluster = cluster_of(stack, env, cfg, stacks_dir)
    ours = list(objs)  # what the cluster's other stacks render (StorageClass, IngressClass objects)
    for other, other_cfg in (("cluster-aws", cluster.aws), ("platform", cluster.platform)):
        if other != stack and other_cfg is not None:
            ours += render_set(other, env, other_cfg, dashboards=False).objects
    problems = list(_unknown_kinds(objs, path, stack))
    problems += _storage(stack, cfg, path, ours)
    problems += _ingress(stack, objs, path, ours)
    problems += _gateway(stack, objs, path, ours)
    problems += _platform(stack, objs, cluster)
    if isinstance(cfg, PlatformConfig):
        problems += _ami(cfg, path, cluster)
    if isinstance(cfg, TritonStackConfig):
        problems += _capacity(cfg, objs, path, cluster)
        problems += _fit(cfg, objs, path, cluster)
        problems += series.problems(cfg, objs, path, cluster, INGRESS_NGINX.command or "", GATEWAY.command or "")
    return problems
