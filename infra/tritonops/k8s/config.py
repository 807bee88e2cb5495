"""Typed configuration of the three stacks, parsed the same way for ``pulumi up`` and ``tritonops render``.

A stack's configuration is the ``config:`` map of ``stacks/<stack>/Pulumi.<env>.yaml`` with keys
namespaced by the Pulumi project (``tritonops-triton:modelServices``). ``parse_config`` takes the
map without the namespace, whether it came from that file (:func:`load_stack_config`) or from the
Pulumi engine (:func:`tritonops.k8s.stacks.pulumi_config`), so both paths validate identically. Every
error is a :class:`ConfigError` that names the full config key, e.g.
``tritonops-triton:modelServices[0].models``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from tritonops import project, versions
from tritonops.agent.manifest import ReleaseError, UsageError, read_bounded
from tritonops.agent.store import channel_key
from tritonops.k8s.catalog import GPU_AMI_TYPES, gpu_family

STACKS = ("cluster-aws", "platform", "triton")
# A stack's behaviour comes from its config (``tier``), never its name: any stack with a
# Pulumi.<env>.yaml is one (:func:`stack_envs`). ``production`` selects the strict policies.
Tier = Literal["production", "non-production"]
PRODUCTION: Tier = "production"
TIER_LABEL = "tritonops.io/tier"  # on the objects the builders make: what the policy pack reads
# A Pulumi stack name as it names its file Pulumi.<env>.yaml: letters, digits, '-', '_', '.'.
_STACK_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OBJECT_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap / Secret data key
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# repository:tag, optionally @sha256:<digest> (the digest is what runs; the tag names the version label)
_IMAGE = re.compile(r"^(?P<repo>[^@\s]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})(@sha256:[0-9a-f]{64})?$")
# A model name that becomes a routed path (/v2/models/<name>): the characters ingress-nginx's strict
# path validation and the Gateway API's path rules both accept.
_ROUTED_MODEL = re.compile(r"^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$")
# An HTTPRoute holds fewer than 128 path matches in all (Gateway API validation): 3 server paths
# (/v2, /v2/health/live, /v2/health/ready) and 3 per model (metadata, ready, infer).
GATEWAY_MAX_MODELS = (127 - 3) // 3


def project_name(stack: str) -> str:
    """Pulumi project (and config namespace) of a stack directory: ``triton`` -> ``tritonops-triton``."""
    return f"tritonops-{stack}"


class ConfigError(ValueError):
    """Invalid stack configuration; ``key`` is the full config key (``project:path``)."""

    def __init__(self, key: str, message: str, source: str | None = None) -> None:
        self.key = key
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}")


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


# --- cluster-aws ---------------------------------------------------------------------------------


class SystemNodePool(_Cfg):
    instance_types: list[str] = ["m6i.large"]
    min_size: int = Field(default=2, ge=1)
    max_size: int = Field(default=4, ge=1)
    desired_size: int = Field(default=2, ge=1)


# A Karpenter duration (the CRDs' pattern for consolidateAfter and expireAfter).
_KARPENTER_DURATION = r"^(([0-9]+(s|m|h))+|Never)$"


class KarpenterPoolConfig(_Cfg):
    """How Karpenter provisions and consolidates a GPU pool (``provisioner: karpenter``)."""

    max_gpus: int = Field(ge=1)  # NodePool limits: GPUs across all of the pool's nodes
    consolidate_after: str = Field(default="10m", pattern=_KARPENTER_DURATION)
    expire_after: str = Field(default="720h", pattern=_KARPENTER_DURATION)
    # Triton pods the PodDisruptionBudgets of this pool's services let go at once (the triton stack's
    # default PDB is maxUnavailable: 1); the NodePool's disruption budget is derived from it.
    pdb_max_unavailable: int = Field(default=1, ge=1)


class GpuNodePoolConfig(_Cfg):
    name: str
    # managed: an EKS managed node group (min/max/desired sizes); karpenter: a NodePool + EC2NodeClass.
    provisioner: Literal["managed", "karpenter"] = "managed"
    karpenter: KarpenterPoolConfig | None = None
    instance_types: list[str] = Field(min_length=1)
    ami_type: Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"] = "AL2023_x86_64_NVIDIA"
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=2, ge=1)
    desired_size: int = Field(default=1, ge=0)
    disk_size_gib: int = Field(default=200, ge=50)
    labels: dict[str, str] = {}
    # Time-slicing config name the GPU Operator's device plugin applies on these nodes (platform stack).
    gpu_sharing: str | None = None


class ModelReader(_Cfg):
    """An IRSA role a Triton ServiceAccount assumes to read its S3 model repository."""

    role_name: str
    namespace: str = "triton"
    service_account: str  # triton-<model service>
    bucket: str
    prefix: str = ""


class ClusterAwsConfig(_Cfg):
    environment: str = ""  # labels and tags; "": the stack's name (parse_config's env)
    tier: Tier
    cluster_name: str
    kubernetes_version: str = versions.KUBERNETES_VERSION
    subnet_ids: list[str] = Field(min_length=2)
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = []
    system_node_pool: SystemNodePool = SystemNodePool()
    gpu_node_pools: list[GpuNodePoolConfig] = Field(min_length=1)
    model_readers: list[ModelReader] = []
    tags: dict[str, str] = {}


# --- platform ------------------------------------------------------------------------------------


class ClusterSource(_Cfg):
    """Where the Kubernetes provider gets its kubeconfig: cluster-aws stack, a file, or the ambient one."""

    cluster_stack: str | None = None  # "org/tritonops-cluster-aws/prod": its `kubeconfig` output
    kubeconfig: str | None = None  # path to a kubeconfig file of any (e.g. on-prem) cluster
    context: str | None = None


class GpuOperatorConfig(_Cfg):
    enabled: bool = True
    namespace: str = "gpu-operator"
    driver_enabled: bool = False  # the EKS NVIDIA AMIs ship the driver
    toolkit_enabled: bool = False  # ... and the NVIDIA Container Toolkit
    mig_strategy: Literal["none", "single", "mixed"] = "none"
    # Time-slicing configs by name -> replicas per GPU; nodes pick one with the label
    # nvidia.com/device-plugin.config=<name> (GpuNodePoolConfig.gpu_sharing).
    time_slicing: dict[str, int] = {}
    dcgm_service_monitor: bool = True


class Receiver(_Cfg):
    name: str
    type: Literal["slack", "pagerduty", "webhook"]
    # Key in the secret config object `alertmanagerSecrets` holding the webhook URL / routing key.
    secret_key: str
    channel: str | None = None  # slack only
    send_resolved: bool = True


class AlertmanagerConfig(_Cfg):
    receivers: list[Receiver] = []
    default_receiver: str | None = None
    critical_receiver: str | None = None  # severity=critical alerts route here
    group_by: list[str] = ["alertname", "namespace", "model"]


class MonitoringConfig(_Cfg):
    """kube-prometheus-stack. Grafana's admin login comes from the Secret ``grafanaAdminSecret``
    (keys admin-user, admin-password): ``pulumi up`` creates it from the secret config value
    ``grafanaAdminPassword``; with ``tritonops render`` you create it (secrets-required.yaml)."""

    enabled: bool = True
    namespace: str = "monitoring"
    release_name: str = "kube-prometheus-stack"
    prometheus_replicas: int = Field(default=1, ge=1)
    prometheus_retention: str = "15d"
    prometheus_storage: str = "50Gi"
    storage_class: str | None = None
    alertmanager_replicas: int = Field(default=1, ge=1)
    grafana_dashboard_label: str = "grafana_dashboard"
    grafana_admin_user: str = "admin"
    grafana_admin_secret: str = "grafana-admin"
    alertmanager: AlertmanagerConfig = AlertmanagerConfig()


class KedaConfig(_Cfg):
    enabled: bool = True
    namespace: str = "keda"


class PlatformConfig(_Cfg):
    environment: str = ""
    tier: Tier
    cluster: ClusterSource = ClusterSource()
    gpu_operator: GpuOperatorConfig = GpuOperatorConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    keda: KedaConfig = KedaConfig()


# --- triton --------------------------------------------------------------------------------------


class NodePoolRef(_Cfg):
    """What the Triton stack needs to know about a GPU node pool (mirrors cluster-aws's gpuNodePools)."""

    instance_type: str
    gpu_slices: int = Field(default=1, ge=1)  # time-slicing replicas per GPU (1 = a whole GPU per pod)


class ModelConfig(_Cfg):
    name: str
    size_mib: int = Field(gt=0)  # GPU memory one instance of the model takes (weights + workspace)
    instance_count: int = Field(default=1, ge=1)  # instance_group count on each GPU


class ModelRepository(_Cfg):
    type: Literal["s3", "pvc"]
    uri: str | None = None  # s3://bucket/prefix (type s3)
    region: str | None = None
    role_arn: str | None = None  # IRSA role the ServiceAccount assumes (type s3)
    claim_name: str | None = None  # PersistentVolumeClaim (type pvc)
    sub_path: str = ""


class TrustedKeys(_Cfg):
    """Public keys (PEM) a release's signature must verify with: keys of one ConfigMap or one Secret.

    Every listed key becomes one ``--trusted-key`` file of the release agent (list two while rotating).
    The object lives in the stack's namespace. With ``publicKeys`` (key -> PEM text, as
    ``tritonops release keygen`` writes it; public keys are not secret) the stack creates the
    ConfigMap ``configMap`` itself; otherwise the ConfigMap or Secret already exists (created by the
    user: ``tritonops render`` lists it in secrets-required.yaml with the command).
    """

    config_map: str | None = None
    secret: str | None = None
    keys: list[str] = Field(default=["release.pub"], min_length=1)
    public_keys: dict[str, str] | None = None  # key -> "-----BEGIN PUBLIC KEY-----..." (Ed25519)


class CanaryConfig(_Cfg):
    """A canary of a pull-mode model service: a second Deployment following another channel.

    ``weight`` percent of the routed requests (ingress-nginx canary Ingress or Gateway API
    backendRef weights) go to the canary's ``replicas`` pods, the rest to the stable Deployment.
    ``tritonops release promote CANARY STABLE --prometheus URL`` moves stable to the canary's
    release once the canary's failure ratio and p95 are no worse than stable's.
    """

    channel: str
    weight: int = Field(ge=1, le=99)  # percent of routed traffic
    replicas: int = Field(default=1, ge=1)  # fixed: the canary is not autoscaled


class ReleaseSource(_Cfg):
    """Pull mode: the release agent keeps the pods of a model service on a channel of a release store.

    An init container (agent ``sync``) puts the channel's release in place before Triton starts; a
    sidecar (agent ``pull``) applies new releases through Triton's repository API with the golden gate
    and rollback, and exports ``tritonops_release_*`` metrics. Triton then runs in explicit mode on
    the agent's models link instead of ``--model-repository=s3://...``.
    """

    store: str  # s3://BUCKET/PREFIX or http(s)://MIRROR/PATH (what `tritonops release publish` wrote)
    channel: str
    trusted_keys: TrustedKeys
    poll_seconds: int = Field(default=30, ge=5, le=3600)
    # A hostPath blob cache shared by the pods on a node (content-addressed, verified on every copy).
    # The namespace must admit hostPath volumes (podSecurity: privileged), and the node folder must be
    # writable by the pods' uid (1000): kubelet creates a missing one owned by root.
    node_cache: bool = False
    s3_endpoint: str | None = None  # an S3-compatible endpoint (MinIO, Ceph RGW); default AWS
    region: str | None = None  # AWS_REGION of an s3 store
    # Secret with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and optionally AWS_SESSION_TOKEN) for an
    # s3 store; none: anonymous reads (a public bucket or mirror).
    credentials_secret: str | None = None
    volume_size: str = "20Gi"  # emptyDir holding the releases the pod keeps (the active one and 2 more)
    agent_cpu: str = "100m"  # requests of the init container and the sidecar
    agent_memory: str = "256Mi"  # requests = limits
    canary: CanaryConfig | None = None


class MemoryConfig(_Cfg):
    cuda_context_mib: int = Field(default=600, ge=0)  # CUDA context + cuDNN/cuBLAS handles per GPU
    cuda_pool_mib: int = Field(default=256, ge=0)  # --cuda-memory-pool-byte-size (I/O buffers on the GPU)
    io_headroom_mib: int = Field(default=512, ge=0)  # activations/workspace spikes beyond the pool
    pinned_pool_mib: int = Field(default=256, ge=0)  # --pinned-memory-pool-byte-size (host)


class Autoscaling(_Cfg):
    """KEDA's ScaledObject of a model service (infra/tritonops/k8s/triton.py ``scaled_object``).

    ``minReplicas: 0`` (scale to zero) needs a wake-up signal that exists while no Triton pod runs:
    ingress-nginx's request counter for the service's Ingresses (``ingress.mode: ingress``). KEDA
    removes the last pod ``cooldownPeriod`` seconds after the triggers were last active, which must
    exceed ``modelLoadSeconds`` (the cold start measured by tests/benchmarks/bench_cold_start.py),
    so a service never sleeps for less than it takes to wake. In tier production it also needs
    ``allowScaleToZero: true``.
    """

    enabled: bool = True
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    pending_per_replica: float = Field(default=5.0, gt=0)  # target pending requests per replica
    # Optional triggers: target average queue time per request (ms) and GPU utilisation (%) per replica.
    queue_ms_per_replica: float | None = Field(default=None, gt=0)
    gpu_utilization_per_replica: float | None = Field(default=None, gt=0, le=100)
    # Served requests/s per replica of each model (e.g. 80 % of what `tritonops bench` measured): a signal
    # that grows with load, so over-provisioned replicas with empty queues are not scaled away and back
    # (tests/benchmarks/sim_capacity.py shows the pending-only trigger flapping).
    requests_per_replica: float | None = Field(default=None, gt=0)
    polling_interval: int = Field(default=15, ge=5)
    fallback_failure_threshold: int = Field(default=3, ge=1)
    # Scale to zero.
    allow_scale_to_zero: bool = False  # required in tier production for minReplicas 0
    cooldown_period: int = Field(default=300, ge=0)  # s after the last activity before 1 -> 0 replicas
    model_load_seconds: float | None = Field(default=None, gt=0)  # measured cold start: start to golden check
    activation_requests: float = Field(default=0, ge=0)  # requests per window above which a sleeping service wakes


class Resources(_Cfg):
    cpu: str = "4"
    memory: str = "16Gi"
    shm: str = "1Gi"  # /dev/shm (Python backend, shared-memory I/O)
    tmp: str = "20Gi"  # /tmp: Triton downloads an S3 repository here


class ModelService(_Cfg):
    name: str
    node_pool: str
    models: list[ModelConfig]
    gpus: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    pdb_min_available: int | None = Field(default=None, ge=1)  # None: maxUnavailable 1
    spread: bool = False  # required anti-affinity + DoNotSchedule spread across nodes
    image: str = versions.TRITON_IMAGE
    model_repository: ModelRepository | None = None  # Triton reads it itself (s3 or a PVC) ...
    release: ReleaseSource | None = None  # ... or the release agent puts signed releases in place
    # roleName of a cluster-aws modelReaders entry: the triton stack reads its ARN from that stack's
    # modelReaders output (cluster.clusterStack) and annotates the ServiceAccount (IRSA) with it.
    model_reader: str | None = None
    model_control_mode: Literal["explicit", "poll", "none"] = "explicit"
    repository_poll_secs: int = Field(default=30, ge=5)
    memory: MemoryConfig = MemoryConfig()
    resources: Resources = Resources()
    autoscaling: Autoscaling = Autoscaling()
    ingress_host: str | None = None


class IngressConfig(_Cfg):
    mode: Literal["none", "ingress", "gateway"] = "none"
    class_name: str = "nginx"
    host_suffix: str | None = None  # <service>.<suffix> and <service>-grpc.<suffix>
    tls_secret: str | None = None
    controller_namespace: str = "ingress-nginx"  # allowed through the NetworkPolicy
    gateway_name: str | None = None
    gateway_namespace: str | None = None


class DnsConfig(_Cfg):
    """The cluster DNS pods every pod of the namespace may query (UDP and TCP 53)."""

    namespace: str = "kube-system"
    pod_labels: dict[str, str] = Field(default={"k8s-app": "kube-dns"}, min_length=1)  # CoreDNS on EKS, kubeadm


class NetworkPolicyConfig(_Cfg):
    """What the namespace's NetworkPolicies let out (everything else is denied, in and out).

    ``modelStoreCidrs``: where a model service's pods may connect to fetch models: the release
    store (``release.store`` or its ``s3Endpoint``) or Triton's own ``modelRepository`` s3:// (S3,
    and STS for the IRSA role), and only on that store's port (443 for s3:// and https://, 80 for
    http://, or the port the URL names). The default, ``0.0.0.0/0``, is any IPv4 address on that
    port except link-local 169.254.0.0/16 (the node's instance metadata service); narrow it to the
    store's addresses (an S3 VPC endpoint, the mirror's subnet; for IRSA include STS's).
    """

    dns: DnsConfig = DnsConfig()
    model_store_cidrs: list[str] = Field(default=["0.0.0.0/0"], min_length=1)
    # Where the drift check reaches the Kubernetes API (443, 6443): narrow it to the API endpoint's
    # addresses (on EKS the control plane's ENIs in the cluster subnets).
    api_server_cidrs: list[str] = Field(default=["0.0.0.0/0"], min_length=1)


class AdminApiConfig(_Cfg):
    header: str = "triton-admin-key"
    secret_name: str = "triton-admin-api"  # Kubernetes Secret holding the header value
    secret_key: str = "token"


class TritonStackConfig(_Cfg):
    environment: str = ""
    tier: Tier
    cluster: ClusterSource = ClusterSource()
    namespace: str = "triton"
    node_pools: dict[str, NodePoolRef] = Field(min_length=1)
    model_services: list[ModelService] = Field(min_length=1)
    allowed_namespaces: list[str] = []  # namespaces that may call the inference ports
    monitoring_namespace: str = "monitoring"
    prometheus_url: str = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    grafana_dashboard_label: str = "grafana_dashboard"
    priority: int = Field(default=100000, ge=0, le=1000000000)
    ingress: IngressConfig = IngressConfig()
    admin_api: AdminApiConfig = AdminApiConfig()
    network_policy: NetworkPolicyConfig = NetworkPolicyConfig()
    # Pod Security Standard the namespace enforces (warn and audit stay restricted). Only a model
    # service with release.nodeCache (a hostPath volume) needs privileged.
    pod_security: Literal["restricted", "baseline", "privileged"] = "restricted"


MODELS: dict[str, type[_Cfg]] = {
    "cluster-aws": ClusterAwsConfig,
    "platform": PlatformConfig,
    "triton": TritonStackConfig,
}
StackConfig = ClusterAwsConfig | PlatformConfig | TritonStackConfig


# --- parsing -------------------------------------------------------------------------------------


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _key(stack: str, loc: tuple[int | str, ...]) -> str:
    return f"{project_name(stack)}:{_path(loc)}"


def parse_config(
    stack: str, raw: Mapping[str, Any], source: str | None = None, env: str | None = None
) -> StackConfig:
    """Validate a stack's config map (keys without the project namespace); ConfigError names the key.

    ``env``: the stack's name, the ``environment`` when the map leaves it unset or empty.
    """
    if stack not in MODELS:
        raise ConfigError("--stack", f"unknown stack {stack!r} (known: {', '.join(STACKS)})", source)
    model = MODELS[stack]
    data = dict(raw)
    named = bool(data.get("environment"))
    if not named and env is not None:
        data["environment"] = env
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        raise ConfigError(_key(stack, loc), err["msg"], source) from exc
    environment = getattr(cfg, "environment", "")
    if not _DNS_LABEL.match(environment):
        given = "" if named else f" (the stack's name {env!r}: set environment to a DNS label)" if env else ""
        raise ConfigError(
            _key(stack, ("environment",)),
            f"{environment!r}{given} must be a DNS label (lowercase, digits, '-'; at most 63): "
            "it is a label value and a tag",
            source,
        )
    _CHECKS[stack](cfg, source)
    return cfg  # type: ignore[return-value]


def _check_name(stack: str, loc: tuple[int | str, ...], name: str, source: str | None) -> None:
    if not _DNS_LABEL.match(name) or len(name) > 40:
        raise ConfigError(
            _key(stack, loc), f"{name!r} must be a DNS label (lowercase, digits, '-'; at most 40)", source
        )


def _check_cluster_aws(cfg: Any, source: str | None) -> None:
    seen: set[str] = set()
    for i, pool in enumerate(cfg.gpu_node_pools):
        _check_name("cluster-aws", ("gpuNodePools", i, "name"), pool.name, source)
        if pool.name in seen:
            raise ConfigError(_key("cluster-aws", ("gpuNodePools", i, "name")), "duplicate pool name", source)
        seen.add(pool.name)
        mem = set()
        for j, itype in enumerate(pool.instance_types):
            try:
                mem.add(gpu_family(itype).memory_mib)
            except ValueError as exc:
                raise ConfigError(
                    _key("cluster-aws", ("gpuNodePools", i, "instanceTypes", j)), str(exc), source
                ) from exc
        if len(mem) > 1:
            raise ConfigError(
                _key("cluster-aws", ("gpuNodePools", i, "instanceTypes")),
                "all instance types of a pool must have the same GPU memory (the memory budget relies on it)",
                source,
            )
        if (pool.provisioner == "karpenter") != (pool.karpenter is not None):
            raise ConfigError(
                _key("cluster-aws", ("gpuNodePools", i, "karpenter")),
                "set exactly when provisioner is karpenter (maxGpus, consolidateAfter, expireAfter, ...)",
                source,
            )
        if pool.ami_type not in GPU_AMI_TYPES:  # pragma: no cover - Literal already refuses it
            raise ConfigError(_key("cluster-aws", ("gpuNodePools", i, "amiType")), "not a GPU AMI", source)
        if not pool.min_size <= pool.desired_size <= pool.max_size:
            raise ConfigError(
                _key("cluster-aws", ("gpuNodePools", i, "desiredSize")),
                f"must lie within minSize..maxSize ({pool.min_size}..{pool.max_size}), got {pool.desired_size}",
                source,
            )
    sys_pool = cfg.system_node_pool
    if not sys_pool.min_size <= sys_pool.desired_size <= sys_pool.max_size:
        raise ConfigError(
            _key("cluster-aws", ("systemNodePool", "desiredSize")), "must lie within minSize..maxSize", source
        )


def _check_platform(cfg: Any, source: str | None) -> None:
    if cfg.cluster.cluster_stack and cfg.cluster.kubeconfig:
        raise ConfigError(_key("platform", ("cluster",)), "set clusterStack or kubeconfig, not both", source)
    for name, replicas in cfg.gpu_operator.time_slicing.items():
        if replicas < 2:
            raise ConfigError(
                _key("platform", ("gpuOperator", "timeSlicing", name)),
                f"time-slicing replicas must be >= 2, got {replicas}",
                source,
            )
    if cfg.gpu_operator.time_slicing and cfg.gpu_operator.mig_strategy != "none":
        raise ConfigError(_key("platform", ("gpuOperator", "migStrategy")), "use time-slicing or MIG, not both", source)
    _check_object_name(
        ("monitoring", "grafanaAdminSecret"), cfg.monitoring.grafana_admin_secret, "Secret", source, "platform"
    )
    am = cfg.monitoring.alertmanager
    names = [r.name for r in am.receivers]
    for field, value in (
        ("defaultReceiver", am.default_receiver),
        ("criticalReceiver", am.critical_receiver),
    ):
        if value is not None and value not in names:
            raise ConfigError(
                _key("platform", ("monitoring", "alertmanager", field)),
                f"no receiver named {value!r} (receivers: {', '.join(names) or 'none'})",
                source,
            )
    for i, r in enumerate(am.receivers):
        if r.type == "slack" and not r.channel:
            raise ConfigError(
                _key("platform", ("monitoring", "alertmanager", "receivers", i, "channel")),
                "a slack receiver needs a channel",
                source,
            )


def _check_repository(
    repo: ModelRepository, loc: tuple[int | str, ...], source: str | None, model_reader: str | None = None
) -> None:
    if repo.type == "s3" and not (repo.uri or "").startswith("s3://"):
        raise ConfigError(_key("triton", (*loc, "uri")), "an s3 repository needs uri s3://...", source)
    if repo.type == "s3" and not repo.role_arn and model_reader is None:
        raise ConfigError(
            _key("triton", (*loc, "roleArn")),
            "an s3 repository needs the IRSA role its ServiceAccount assumes: the service's modelReader "
            "(a cluster-aws modelReaders roleName) or an explicit roleArn",
            source,
        )
    if repo.role_arn and model_reader is not None:
        raise ConfigError(
            _key("triton", (*loc, "roleArn")), "set the service's modelReader or roleArn, not both", source
        )
    if repo.type == "pvc" and not repo.claim_name:
        raise ConfigError(_key("triton", (*loc, "claimName")), "a pvc repository needs claimName", source)


def _check_model_reader(cfg: Any, svc: Any, loc: tuple[int | str, ...], source: str | None) -> None:
    if not cfg.cluster.cluster_stack:
        raise ConfigError(
            _key("triton", (*loc, "modelReader")),
            "the role ARN is read from the cluster-aws stack's modelReaders output: set cluster.clusterStack "
            "(or give modelRepository.roleArn instead)",
            source,
        )
    if svc.release is not None and svc.release.credentials_secret is not None:
        # The agent follows botocore's chain: static keys from the Secret would win over the IRSA role.
        raise ConfigError(
            _key("triton", (*loc, "release", "credentialsSecret")),
            "give either modelReader (IRSA: the pod's role reads the store) or credentialsSecret (static keys, "
            "for non-AWS S3), not both: static keys would win over the role",
            source,
        )


def _check_object_name(
    loc: tuple[int | str, ...], name: str, what: str, source: str | None, stack: str = "triton"
) -> None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise ConfigError(
            _key(stack, loc), f"{name!r} is not a valid {what} name (lowercase, digits, '-', '.')", source
        )


def _check_release(cfg: Any, svc: Any, loc: tuple[int | str, ...], source: str | None) -> None:
    """A model service's release source: the store, channel and keys the agent will be started with."""
    rel: ReleaseSource = svc.release
    parts = urlsplit(rel.store)
    if parts.scheme not in ("s3", "http", "https") or not parts.netloc:
        raise ConfigError(
            _key("triton", (*loc, "store")),
            f"{rel.store!r}: a pod pulls from s3://BUCKET/PREFIX or http(s)://MIRROR/PATH",
            source,
        )
    try:
        channel_key(rel.channel)
    except ReleaseError as exc:
        raise ConfigError(_key("triton", (*loc, "channel")), str(exc), source) from exc
    tk = rel.trusted_keys
    if (tk.config_map is None) == (tk.secret is None):
        raise ConfigError(
            _key("triton", (*loc, "trustedKeys")),
            "name the ConfigMap or the Secret holding the trusted public keys (one of configMap, secret)",
            source,
        )
    if tk.config_map is not None:
        _check_object_name((*loc, "trustedKeys", "configMap"), tk.config_map, "ConfigMap", source)
    if tk.secret is not None:
        _check_object_name((*loc, "trustedKeys", "secret"), tk.secret, "Secret", source)
    for j, key in enumerate(tk.keys):
        if key in (".", "..") or len(key) > 253 or not _OBJECT_KEY.match(key):
            raise ConfigError(
                _key("triton", (*loc, "trustedKeys", "keys", j)),
                f"{key!r} is not a ConfigMap/Secret key (letters, digits, '-', '_', '.')",
                source,
            )
        if key in tk.keys[:j]:
            raise ConfigError(_key("triton", (*loc, "trustedKeys", "keys", j)), f"duplicate key {key!r}", source)
    if tk.public_keys is not None:
        _check_public_keys(tk, (*loc, "trustedKeys"), source)
    if parts.scheme != "s3":
        for field, value in (
            ("s3Endpoint", rel.s3_endpoint),
            ("region", rel.region),
            ("credentialsSecret", rel.credentials_secret),
        ):
            if value is not None:
                raise ConfigError(
                    _key("triton", (*loc, field)), f"only for an s3:// store (store is {rel.store!r})", source
                )
    if rel.s3_endpoint is not None:
        ep = urlsplit(rel.s3_endpoint)
        if ep.scheme not in ("http", "https") or not ep.netloc:
            raise ConfigError(
                _key("triton", (*loc, "s3Endpoint")), f"{rel.s3_endpoint!r}: expected http(s)://HOST[:PORT]", source
            )
    if rel.credentials_secret is not None:
        _check_object_name((*loc, "credentialsSecret"), rel.credentials_secret, "Secret", source)
    for field, value in (
        ("volumeSize", rel.volume_size),
        ("agentCpu", rel.agent_cpu),
        ("agentMemory", rel.agent_memory),
    ):
        if not _QUANTITY.match(value):
            raise ConfigError(_key("triton", (*loc, field)), f"{value!r} is not a Kubernetes quantity", source)
    if rel.node_cache and cfg.pod_security != "privileged":
        raise ConfigError(
            _key("triton", (*loc, "nodeCache")),
            f"the node cache is a hostPath volume, which Pod Security {cfg.pod_security!r} refuses: set "
            "podSecurity: privileged for the namespace (warn and audit stay restricted) or drop nodeCache",
            source,
        )
    if rel.canary is not None:
        _check_canary(cfg, rel, (*loc, "canary"), source)
    if svc.model_control_mode != "explicit":
        raise ConfigError(
            _key("triton", (*loc[:-1], "modelControlMode")),
            f"{svc.model_control_mode!r}: with release the agent loads models through Triton's repository API, "
            "which needs explicit",
            source,
        )


_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")  # DER SubjectPublicKeyInfo of an Ed25519 key


def _check_public_keys(tk: TrustedKeys, loc: tuple[int | str, ...], source: str | None) -> None:
    """``publicKeys``: the stack creates ConfigMap ``configMap`` from them; each is an Ed25519 public key PEM."""
    import base64
    import binascii

    assert tk.public_keys is not None
    if tk.secret is not None or tk.config_map is None:
        raise ConfigError(
            _key("triton", (*loc, "publicKeys")),
            "the stack creates the ConfigMap named by configMap from publicKeys: set configMap, not secret",
            source,
        )
    if set(tk.public_keys) != set(tk.keys):
        raise ConfigError(
            _key("triton", (*loc, "publicKeys")),
            f"keys {sorted(tk.keys)} and publicKeys {sorted(tk.public_keys)} must name the same keys",
            source,
        )
    for name, pem in tk.public_keys.items():
        lines = [line.strip() for line in pem.strip().splitlines()]
        ok = len(lines) >= 3 and lines[0] == "-----BEGIN PUBLIC KEY-----" and lines[-1] == "-----END PUBLIC KEY-----"
        der = b""
        if ok:
            try:
                der = base64.b64decode("".join(lines[1:-1]), validate=True)
            except (binascii.Error, ValueError):
                ok = False
        if not ok or len(der) != 44 or not der.startswith(_ED25519_SPKI_PREFIX):
            raise ConfigError(
                _key("triton", (*loc, "publicKeys", name)),
                "not an Ed25519 public key PEM (-----BEGIN PUBLIC KEY----- ..., the .pub file "
                "`tritonops release keygen` writes; never the private key)",
                source,
            )


def _check_canary(cfg: Any, rel: ReleaseSource, loc: tuple[int | str, ...], source: str | None) -> None:
    canary = rel.canary
    assert canary is not None
    try:
        channel_key(canary.channel)
    except ReleaseError as exc:
        raise ConfigError(_key("triton", (*loc, "channel")), str(exc), source) from exc
    if canary.channel == rel.channel:
        raise ConfigError(
            _key("triton", (*loc, "channel")),
            f"{canary.channel!r} is the stable channel too: a canary follows another channel "
            "(e.g. canary; `tritonops release promote` later moves stable to its release)",
            source,
        )
    if cfg.ingress.mode == "none":
        raise ConfigError(
            _key("triton", (*loc, "weight")),
            "the router applies a canary's weight: set ingress.mode to ingress (ingress-nginx canary "
            "Ingress) or gateway (HTTPRoute/GRPCRoute backend weights)",
            source,
        )


def _check_scale_to_zero(cfg: Any, svc: Any, loc: tuple[int | str, ...], source: str | None) -> None:
    """minReplicas 0: a wake-up path, prod's explicit consent, and a cooldown longer than a cold start."""
    a = svc.autoscaling
    if cfg.ingress.mode != "ingress":
        raise ConfigError(
            _key("triton", (*loc, "minReplicas")),
            "0 needs a wake-up signal that exists while no Triton pod runs: ingress-nginx's request "
            f"counter for the service's Ingresses; set ingress.mode to ingress (it is {cfg.ingress.mode!r})",
            source,
        )
    if cfg.tier == PRODUCTION and not a.allow_scale_to_zero:
        raise ConfigError(
            _key("triton", (*loc, "minReplicas")),
            "0 in tier production: the first requests after idle wait for a node and a model load; "
            "set autoscaling.allowScaleToZero: true to accept that",
            source,
        )
    if a.model_load_seconds is None:
        raise ConfigError(
            _key("triton", (*loc, "modelLoadSeconds")),
            "minReplicas 0 needs the measured cold start (tests/benchmarks/bench_cold_start.py) "
            "to check cooldownPeriod against",
            source,
        )
    if a.cooldown_period <= a.model_load_seconds:
        raise ConfigError(
            _key("triton", (*loc, "cooldownPeriod")),
            f"{a.cooldown_period} s is not longer than modelLoadSeconds={a.model_load_seconds:g}: "
            "the service would sleep for less than it takes to wake",
            source,
        )


def _check_shared_public_keys(cfg: Any, source: str | None) -> None:
    """Services that give one trusted-keys ConfigMap publicKeys give it the same ones (a service naming
    it without publicKeys mounts the one the stack creates)."""
    seen: dict[str, tuple[int, dict[str, str]]] = {}
    for i, svc in enumerate(cfg.model_services):
        tk = svc.release.trusted_keys if svc.release is not None else None
        if tk is None or tk.config_map is None or tk.public_keys is None:
            continue
        first = seen.setdefault(tk.config_map, (i, tk.public_keys))
        if first[1] != tk.public_keys:
            raise ConfigError(
                _key("triton", ("modelServices", i, "release", "trustedKeys", "publicKeys")),
                f"ConfigMap {tk.config_map!r} gets other publicKeys from modelServices[{first[0]}]: give both "
                "the same publicKeys, or another configMap",
                source,
            )


def _check_triton(cfg: Any, source: str | None) -> None:
    from tritonops.k8s.budget import check_budget  # local: budget imports this module's types

    for name, pool in cfg.node_pools.items():
        try:
            gpu_family(pool.instance_type)
        except ValueError as exc:
            raise ConfigError(_key("triton", ("nodePools", name, "instanceType")), str(exc), source) from exc
    _check_shared_public_keys(cfg, source)
    seen: set[str] = set()
    for i, svc in enumerate(cfg.model_services):
        k = ("modelServices", i)
        _check_name("triton", (*k, "name"), svc.name, source)
        if svc.name in seen:
            raise ConfigError(_key("triton", (*k, "name")), f"duplicate model service {svc.name!r}", source)
        seen.add(svc.name)
        if not svc.models:
            raise ConfigError(
                _key("triton", (*k, "models")),
                f"model service {svc.name!r} has no models; list at least one",
                source,
            )
        model_names = [m.name for m in svc.models]
        if len(set(model_names)) != len(model_names):
            raise ConfigError(_key("triton", (*k, "models")), "duplicate model names", source)
        if svc.node_pool not in cfg.node_pools:
            raise ConfigError(
                _key("triton", (*k, "nodePool")),
                f"unknown node pool {svc.node_pool!r} (nodePools: {', '.join(cfg.node_pools)})",
                source,
            )
        floor = svc.autoscaling.min_replicas if svc.autoscaling.enabled else svc.replicas
        if svc.pdb_min_available is not None:
            for field, value in (("replicas", svc.replicas), ("autoscaling.minReplicas", floor)):
                if value <= svc.pdb_min_available:
                    raise ConfigError(
                        _key("triton", (*k, *field.split("."))),
                        f"{value} is not above pdbMinAvailable={svc.pdb_min_available}: a node drain could "
                        "never evict a pod; raise it or lower pdbMinAvailable",
                        source,
                    )
        if svc.autoscaling.enabled and svc.autoscaling.max_replicas < max(svc.replicas, floor):
            raise ConfigError(
                _key("triton", (*k, "autoscaling", "maxReplicas")),
                "must be >= replicas and autoscaling.minReplicas",
                source,
            )
        if svc.model_repository is None and svc.release is None:
            raise ConfigError(
                _key("triton", (*k, "modelRepository")),
                "set modelRepository (Triton reads s3 or a PVC) or release (the release agent pulls a channel)",
                source,
            )
        if svc.model_repository is not None and svc.release is not None:
            raise ConfigError(
                _key("triton", (*k, "release")),
                "set modelRepository or release, not both (with release the agent provides Triton's repository)",
                source,
            )
        if svc.release is not None:
            _check_release(cfg, svc, (*k, "release"), source)
        if svc.model_repository is not None:
            _check_repository(svc.model_repository, (*k, "modelRepository"), source, svc.model_reader)
        if svc.model_reader is not None:
            _check_model_reader(cfg, svc, k, source)
        if svc.autoscaling.enabled and svc.autoscaling.min_replicas == 0:
            _check_scale_to_zero(cfg, svc, (*k, "autoscaling"), source)
        image = _IMAGE.match(svc.image)
        if image is None or image["tag"] == "latest":
            raise ConfigError(
                _key("triton", (*k, "image")),
                f"pin an image tag, optionally with its digest: REPOSITORY:TAG[@sha256:DIGEST] (got {svc.image!r})",
                source,
            )
        if cfg.ingress.mode == "gateway" and len(svc.models) > GATEWAY_MAX_MODELS:
            raise ConfigError(
                _key("triton", (*k, "models")),
                f"{len(svc.models)} models: an HTTPRoute holds fewer than 128 path matches, which routes at most "
                f"{GATEWAY_MAX_MODELS} models (3 paths each, 3 for the server); split the service",
                source,
            )
        if cfg.ingress.mode != "none":
            for j, model in enumerate(svc.models):
                if not _ROUTED_MODEL.match(model.name):
                    raise ConfigError(
                        _key("triton", (*k, "models", j, "name")),
                        f"{model.name!r}: a routed model's name becomes the path /v2/models/<name> "
                        "(letters, digits, '_', '-', '.', '~'; not starting with '.')",
                        source,
                    )
    if cfg.ingress.mode != "none" and not cfg.ingress.host_suffix:
        raise ConfigError(_key("triton", ("ingress", "hostSuffix")), "ingress needs hostSuffix", source)
    if cfg.ingress.mode == "ingress" and not cfg.ingress.tls_secret:
        raise ConfigError(
            _key("triton", ("ingress", "tlsSecret")),
            "ingress-nginx serves gRPC only over HTTP/2, which needs TLS: name the certificate Secret",
            source,
        )
    if cfg.ingress.mode == "gateway" and not cfg.ingress.gateway_name:
        raise ConfigError(_key("triton", ("ingress", "gatewayName")), "gateway mode needs gatewayName", source)
    for field, cidrs in (
        ("modelStoreCidrs", cfg.network_policy.model_store_cidrs),
        ("apiServerCidrs", cfg.network_policy.api_server_cidrs),
    ):
        for j, cidr in enumerate(cidrs):
            try:
                ipaddress.ip_network(cidr)
            except ValueError as exc:
                raise ConfigError(
                    _key("triton", ("networkPolicy", field, j)), f"{cidr!r} is not a CIDR: {exc}", source
                ) from exc
    try:
        check_budget(cfg)
    except ValueError as exc:
        raise ConfigError(getattr(exc, "key", _key("triton", ("modelServices",))), str(exc), source) from exc


_CHECKS = {"cluster-aws": _check_cluster_aws, "platform": _check_platform, "triton": _check_triton}


# --- reading Pulumi.<env>.yaml -------------------------------------------------------------------


STACK_FILE_MAX_BYTES = 1 << 20


def stack_file(stack: str, env: str, stacks_dir: Path | None = None) -> Path:
    """``stacks_dir`` (default: stacks/ of the project folder, tritonops.project) / stack / Pulumi.<env>.yaml."""
    return (stacks_dir or project.stacks_dir()) / stack / f"Pulumi.{env}.yaml"


def read_stack_file(stack: str, env: str, stacks_dir: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(own config without namespace, other namespaces' keys as written) from Pulumi.<env>.yaml."""
    check_env_name(env)
    if stack not in MODELS:
        raise ConfigError("--stack", f"unknown stack {stack!r} (known: {', '.join(STACKS)})")
    path = stack_file(stack, env, stacks_dir)
    if not path.is_file():
        known = ", ".join(stack_envs(stack, stacks_dir))
        also = f" (stacks with one: {known})" if known else ""
        raise ConfigError("--env", f"no stack config file {path}; {project.HINT}{also}")
    config = _read_config_map(path)
    prefix = project_name(stack) + ":"
    own: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            continue  # encrypted with the stack's secrets provider: only the Pulumi engine can read it
        if key.startswith(prefix):
            own[key[len(prefix) :]] = value
        else:
            other[key] = value
    return own, other


def _read_config_map(path: Path) -> dict[str, Any]:
    """The ``config:`` map of a stack file: bounded, and every way it can be broken is a ConfigError."""
    try:
        doc = yaml.safe_load(read_bounded(path, STACK_FILE_MAX_BYTES, UsageError).decode("utf-8")) or {}
    except UsageError as e:
        raise ConfigError("--env", str(e)) from None
    except UnicodeDecodeError as e:
        raise ConfigError("config", f"not UTF-8 text (byte {e.start})", source=str(path)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError("config", f"{where}not valid YAML ({getattr(e, 'problem', None) or e})",
                          source=str(path)) from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(config or {}, dict):
        raise ConfigError("config", "expected a mapping `config: {KEY: VALUE, ...}`", source=str(path))
    return config or {}


def load_stack_config(stack: str, env: str, stacks_dir: Path | None = None) -> StackConfig:
    own, _ = read_stack_file(stack, env, stacks_dir)
    return parse_config(stack, own, source=str(stack_file(stack, env, stacks_dir)), env=env)


def check_env_name(env: str) -> None:
    """A stack name that is a safe file-name component (it names Pulumi.<env>.yaml), else ConfigError."""
    if not _STACK_NAME.match(env):
        raise ConfigError(
            "--env",
            f"{env!r} is not a stack name: letters, digits, '-', '_', '.' (not first), at most 100; "
            "it names the file Pulumi.<env>.yaml",
        )


def stack_envs(stack: str, stacks_dir: Path | None = None) -> list[str]:
    """The stacks of a project that have a file: every ``Pulumi.<env>.yaml`` of stacks/<stack>/, sorted."""
    folder = (stacks_dir or project.stacks_dir()) / stack
    if not folder.is_dir():
        return []
    envs = (p.name[len("Pulumi.") : -len(".yaml")] for p in folder.glob("Pulumi.*.yaml") if p.is_file())
    return sorted(e for e in envs if _STACK_NAME.match(e))


def config_keys(stack: str) -> dict[str, bool]:
    """Top-level config keys of a stack -> whether the value is a plain string (not JSON)."""
    out = {}
    for name, field in MODELS[stack].model_fields.items():
        alias = field.alias or name
        out[alias] = field.annotation in (str, str | None) or str(field.annotation).startswith("typing.Literal")
    return out
