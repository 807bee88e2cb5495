"""The typed configuration of the three stacks: the pydantic models a ``Pulumi.<env>.yaml`` ``config:`` map
becomes, and :class:`ConfigError`, the one error every config problem raises.

A stack's configuration is the ``config:`` map of ``stacks/<stack>/Pulumi.<env>.yaml`` with keys
namespaced by the Pulumi project (``tritonops-triton:modelServices``). The field rules live on the
models; the rules across fields are ``tritonops.k8s.parse``; reading the file is
``tritonops.k8s.stack_file``. Every error names the full config key, e.g.
``tritonops-triton:modelServices[0].models``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tritonops import versions
from tritonops.core.triton_http import DEFAULT_HEADER
from tritonops.k8s import STACKS as STACKS  # the names live in the package (the CLI reads them cheaply)

# A stack's behaviour comes from its config (``tier``), never its name: any stack with a
# Pulumi.<env>.yaml is one (:func:`tritonops.k8s.stack_file.stack_envs`). ``production`` selects the
# strict policies.
Tier = Literal["production", "non-production"]
PRODUCTION: Tier = "production"
# oci://ACCOUNT.dkr.ecr.REGION.amazonaws.com[.cn]/REPO (tritonops.stores.oci_api.ECR_HOST and its repository names)
ECR_STORE = r"^oci://\d{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[a-z0-9]+([._/-][a-z0-9]+)*$"


def project_name(stack: str) -> str:
    """Pulumi project (and config namespace) of a stack directory: ``triton`` -> ``tritonops-triton``."""
    return f"tritonops-{stack}"


class ConfigError(ValueError):
    """Invalid stack configuration; ``key`` is the full config key (``project:path``)."""

    def __init__(self, key: str, message: str, source: str | None = None) -> None:
        self.key = key
        self.source = source
        self.message = message
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}")

    @property
    def errors(self) -> list[ConfigError]:
        """Every error found in one pass (ConfigErrors has several); the message is the first's."""
        return [self]


class ConfigErrors(ConfigError):
    """Several errors of one stack file found at once (every field the schema refuses)."""

    def __init__(self, errors: list[ConfigError]) -> None:
        super().__init__(errors[0].key, errors[0].message, errors[0].source)
        self._errors = list(errors)

    @property
    def errors(self) -> list[ConfigError]:
        return self._errors


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
    # Its release agents write rollout status reports (--report): s3:PutObject on <prefix>/reports/* only.
    reports: bool = False
    # oci:// stores on ECR its agents read (the triton stack's release.store, same text): the role may get
    # ECR tokens and pull those repositories only (tritonops.k8s.registry_source.ecr_read_policy).
    ecr_stores: list[Annotated[str, Field(pattern=ECR_STORE)]] = []


# The EKS access policies an access entry may associate (arn:<partition>:eks::aws:cluster-access-policy/<name>;
# https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html, read 2026-12-07).
AccessPolicy = Literal["AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy", "AmazonEKSEditPolicy",
                       "AmazonEKSViewPolicy"]


class AccessEntry(_Cfg):
    """A principal besides the cluster's creator that may reach the cluster (authentication mode API):
    an EKS access entry for ``principalArn`` (an IAM role or user) with ``policy`` associated, over the
    whole cluster, or with ``namespaces`` over those namespaces only. A principal may appear once per
    policy (one access entry, one association per policy)."""

    principal_arn: str
    policy: AccessPolicy
    namespaces: list[str] = []  # []: cluster scope


class ClusterAwsConfig(_Cfg):
    environment: str = ""  # labels and tags; "": the stack's name (parse_config's env)
    tier: Tier
    cluster_name: str
    kubernetes_version: str = versions.KUBERNETES_VERSION
    # Given by the user (Pulumi.yaml template.config; the engine refuses to start without them): empty /
    # None while a stack file lacks them, which `render` refuses (contract.missing_user_values).
    subnet_ids: list[str] = Field(default=[], min_length=2)
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] | None = None
    # Who reaches the API endpoint from inside the VPC (a CI runner, a bastion): ingress rules on 443 of
    # the cluster security group. Required, one or the other, when the endpoint is private.
    api_access_cidrs: list[str] = []
    api_access_security_group_ids: list[str] = []
    access_entries: list[AccessEntry] = []  # principals besides the creator (a CI role, an admin group's role)
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


class ServedModel(_Cfg):
    """A model a model service serves, and the GPU memory one instance of it takes."""

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

    store: str  # s3://BUCKET/PREFIX, http(s)://MIRROR/PATH or oci://REGISTRY/REPO (`tritonops release publish`)
    channel: str
    trusted_keys: TrustedKeys
    # The store's name its signed root carries (`tritonops release root init --name NAME`): the agents run
    # with --store-name and refuse metadata of any other store, or of no signed root, even under the same
    # keys. Required in tier production: without it the agents trust their trustedKeys alone (every key
    # holds every role, and a pointer of any store signed with one installs).
    store_name: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")
    poll_seconds: int = Field(default=30, ge=5, le=3600)
    # Read each file through the node cache (the stack's top-level nodeCache: a per-node daemon the pods
    # reach over the network, no hostPath in their namespace), the store when it does not answer.
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
    # Staged rollouts (`tritonops release rollout`): the sidecar's group labels (waves that name groups)
    # and its status reports, reports/<channel>/<pod>.json in an s3:// store (the pod's role or
    # credentials need s3:PutObject on <prefix>/reports/*: cluster-aws modelReaders[].reports).
    # reportKeySecret: a Secret whose key report.key is the private key (PEM) the reports are signed
    # with (the root's 'report' role); none: unsigned reports.
    groups: list[str] = []
    reports: bool = False
    report_key_secret: str | None = None
    # An oci:// store (tritonops.k8s.registry_source): a Secret of type kubernetes.io/dockerconfigjson
    # the agents read the registry's credentials from, and a ConfigMap whose key ca.crt is the CA bundle
    # the registry's certificate is checked with (default: the system's). An ECR registry without an auth
    # Secret is read with the service's modelReader role (IRSA: ecr:GetAuthorizationToken, ...).
    registry_auth_secret: str | None = None
    registry_ca_config_map: str | None = None


class MemoryConfig(_Cfg):
    cuda_context_mib: int = Field(default=600, ge=0)  # CUDA context + cuDNN/cuBLAS handles per GPU
    cuda_pool_mib: int = Field(default=256, ge=0)  # --cuda-memory-pool-byte-size (I/O buffers on the GPU)
    io_headroom_mib: int = Field(default=512, ge=0)  # activations/workspace spikes beyond the pool
    pinned_pool_mib: int = Field(default=256, ge=0)  # --pinned-memory-pool-byte-size (host)


class Autoscaling(_Cfg):
    """KEDA's ScaledObject of a model service (``tritonops.k8s.stacks.triton.scaling.scaled_object``).

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
    models: list[ServedModel]
    gpus: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    pdb_min_available: int | None = Field(default=None, ge=1)  # None: maxUnavailable 1
    spread: bool = False  # required anti-affinity + DoNotSchedule spread across nodes
    image: str = versions.TRITON_IMAGE
    # The image's @sha256 digest is a placeholder (all zeros) on purpose: an example file. Without it a
    # zero digest is refused (its pods could never pull, and `pulumi up` would wait for them in vain).
    image_placeholder: bool = False
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
    header: str = DEFAULT_HEADER
    secret_name: str = "triton-admin-api"  # Kubernetes Secret holding the header value
    secret_key: str = "token"


class NodeCacheConfig(_Cfg):
    """The node cache (k8s/stacks/triton/node_cache.py): a DaemonSet in its own namespace (Pod Security
    privileged there: a hostPath folder) that keeps release files by sha256 on each node of the pools that
    serve a ``release.nodeCache`` service, prefetches their channels, and serves the node's pods through a
    Service with ``internalTrafficPolicy: Local``; the Triton namespace stays restricted."""

    namespace: str = "tritonops-node-cache"
    host_path: str = Field(default="/var/cache/tritonops", pattern=r"^/[A-Za-z0-9._/-]+$")
    quota_bytes: int = Field(default=100 << 30, ge=1 << 20)  # blobs kept per node (LRU; pinned never evicted)
    max_rate_bytes: int | None = Field(default=None, ge=1 << 20)  # the prefetcher's bound per node (bytes/s)
    port: int = Field(default=8470, ge=1024, le=65535)
    cpu: str = "100m"
    memory: str = "256Mi"


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
    # Pod Security Standard the namespace enforces (warn and audit stay restricted).
    pod_security: Literal["restricted", "baseline", "privileged"] = "restricted"
    node_cache: NodeCacheConfig = NodeCacheConfig()  # deployed when a model service has release.nodeCache


MODELS: dict[str, type[_Cfg]] = {
    "cluster-aws": ClusterAwsConfig,
    "platform": PlatformConfig,
    "triton": TritonStackConfig,
}
StackConfig = ClusterAwsConfig | PlatformConfig | TritonStackConfig


def config_keys(stack: str) -> dict[str, bool]:
    """Top-level config keys of a stack -> whether the value is a plain string (not JSON)."""
    out = {}
    for name, field in MODELS[stack].model_fields.items():
        alias = field.alias or name
        out[alias] = field.annotation in (str, str | None) or str(field.annotation).startswith("typing.Literal")
    return out
