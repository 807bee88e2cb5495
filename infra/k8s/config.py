"""Typed configuration of the three stacks, parsed the same way for ``pulumi up`` and ``tritonops render``.

A stack's configuration is the ``config:`` map of ``stacks/<stack>/Pulumi.<env>.yaml`` with keys
namespaced by the Pulumi project (``tritonops-triton:modelServices``). ``parse_config`` takes the
map without the namespace, whether it came from that file (:func:`load_stack_config`) or from the
Pulumi engine (:func:`infra.k8s.stacks.pulumi_config`), so both paths validate identically. Every
error is a :class:`ConfigError` that names the full config key, e.g.
``tritonops-triton:modelServices[0].models``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from infra import versions
from infra.k8s.catalog import GPU_AMI_TYPES, gpu_family

STACKS = ("cluster-aws", "platform", "triton")
ENVIRONMENTS = ("dev", "prod")
REPO_ROOT = Path(__file__).resolve().parents[2]
STACKS_DIR = REPO_ROOT / "stacks"

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


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


class GpuNodePoolConfig(_Cfg):
    name: str
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
    environment: Literal["dev", "prod"]
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
    enabled: bool = True
    namespace: str = "monitoring"
    release_name: str = "kube-prometheus-stack"
    prometheus_replicas: int = Field(default=1, ge=1)
    prometheus_retention: str = "15d"
    prometheus_storage: str = "50Gi"
    storage_class: str | None = None
    alertmanager_replicas: int = Field(default=1, ge=1)
    grafana_dashboard_label: str = "grafana_dashboard"
    alertmanager: AlertmanagerConfig = AlertmanagerConfig()


class KedaConfig(_Cfg):
    enabled: bool = True
    namespace: str = "keda"


class PlatformConfig(_Cfg):
    environment: Literal["dev", "prod"]
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


class MemoryConfig(_Cfg):
    cuda_context_mib: int = Field(default=600, ge=0)  # CUDA context + cuDNN/cuBLAS handles per GPU
    cuda_pool_mib: int = Field(default=256, ge=0)  # --cuda-memory-pool-byte-size (I/O buffers on the GPU)
    io_headroom_mib: int = Field(default=512, ge=0)  # activations/workspace spikes beyond the pool
    pinned_pool_mib: int = Field(default=256, ge=0)  # --pinned-memory-pool-byte-size (host)


class Autoscaling(_Cfg):
    enabled: bool = True
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int = Field(default=4, ge=1)
    pending_per_replica: float = Field(default=5.0, gt=0)  # target pending requests per replica
    polling_interval: int = Field(default=15, ge=5)
    fallback_failure_threshold: int = Field(default=3, ge=1)


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
    model_repository: ModelRepository
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


class AdminApiConfig(_Cfg):
    header: str = "triton-admin-key"
    secret_name: str = "triton-admin-api"  # Kubernetes Secret holding the header value
    secret_key: str = "token"


class TritonStackConfig(_Cfg):
    environment: Literal["dev", "prod"]
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


def parse_config(stack: str, raw: Mapping[str, Any], source: str | None = None) -> StackConfig:
    """Validate a stack's config map (keys without the project namespace); ConfigError names the key."""
    if stack not in MODELS:
        raise ConfigError("--stack", f"unknown stack {stack!r} (known: {', '.join(STACKS)})", source)
    model = MODELS[stack]
    try:
        cfg = model.model_validate(dict(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        raise ConfigError(_key(stack, loc), err["msg"], source) from exc
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


def _check_triton(cfg: Any, source: str | None) -> None:
    from infra.k8s.budget import check_budget  # local: budget imports this module's types

    for name, pool in cfg.node_pools.items():
        try:
            gpu_family(pool.instance_type)
        except ValueError as exc:
            raise ConfigError(_key("triton", ("nodePools", name, "instanceType")), str(exc), source) from exc
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
        repo = svc.model_repository
        if repo.type == "s3" and not (repo.uri or "").startswith("s3://"):
            raise ConfigError(
                _key("triton", (*k, "modelRepository", "uri")), "an s3 repository needs uri s3://...", source
            )
        if repo.type == "s3" and not repo.role_arn:
            raise ConfigError(
                _key("triton", (*k, "modelRepository", "roleArn")),
                "an s3 repository needs the IRSA role ARN its ServiceAccount assumes",
                source,
            )
        if repo.type == "pvc" and not repo.claim_name:
            raise ConfigError(
                _key("triton", (*k, "modelRepository", "claimName")),
                "a pvc repository needs claimName",
                source,
            )
        if ":" not in svc.image or svc.image.endswith(":latest"):
            raise ConfigError(_key("triton", (*k, "image")), f"pin an image tag (got {svc.image!r})", source)
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
    try:
        check_budget(cfg)
    except ValueError as exc:
        raise ConfigError(getattr(exc, "key", _key("triton", ("modelServices",))), str(exc), source) from exc


_CHECKS = {"cluster-aws": _check_cluster_aws, "platform": _check_platform, "triton": _check_triton}


# --- reading Pulumi.<env>.yaml -------------------------------------------------------------------


def stack_file(stack: str, env: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / stack / f"Pulumi.{env}.yaml"


def read_stack_file(stack: str, env: str, stacks_dir: Path = STACKS_DIR) -> tuple[dict[str, Any], dict[str, Any]]:
    """(own config without namespace, other namespaces' keys as written) from Pulumi.<env>.yaml."""
    if env not in ENVIRONMENTS:
        raise ConfigError("--env", f"unknown environment {env!r} (known: {', '.join(ENVIRONMENTS)})")
    if stack not in MODELS:
        raise ConfigError("--stack", f"unknown stack {stack!r} (known: {', '.join(STACKS)})")
    path = stack_file(stack, env, stacks_dir)
    if not path.is_file():
        raise ConfigError("--env", f"no stack config file {path}")
    doc = yaml.safe_load(path.read_text()) or {}
    prefix = project_name(stack) + ":"
    own: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for key, value in (doc.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            continue  # encrypted with the stack's secrets provider: only the Pulumi engine can read it
        if key.startswith(prefix):
            own[key[len(prefix) :]] = value
        else:
            other[key] = value
    return own, other


def load_stack_config(stack: str, env: str, stacks_dir: Path = STACKS_DIR) -> StackConfig:
    own, _ = read_stack_file(stack, env, stacks_dir)
    return parse_config(stack, own, source=str(stack_file(stack, env, stacks_dir)))


def config_keys(stack: str) -> dict[str, bool]:
    """Top-level config keys of a stack -> whether the value is a plain string (not JSON)."""
    out = {}
    for name, field in MODELS[stack].model_fields.items():
        alias = field.alias or name
        out[alias] = field.annotation in (str, str | None) or str(field.annotation).startswith("typing.Literal")
    return out
