"""A stack's config map -> its validated model: pydantic's field rules, then the rules across fields.

``parse_config`` takes the map without the project namespace, whether it came from the stack file
(``tritonops.k8s.stack_file.load_stack_config``) or from the Pulumi engine
(:func:`tritonops.k8s.stacks.pulumi_config`), so both paths validate identically. Every error is a
``ConfigError`` naming the full config key.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from tritonops.agent.errors import ReleaseError
from tritonops.agent.rollout import check_name
from tritonops.agent.store import channel_key
from tritonops.k8s.budget import check_budget
from tritonops.k8s.catalog import GPU_AMI_TYPES, gpu_family
from tritonops.k8s.config import (
    MODELS,
    PRODUCTION,
    STACKS,
    ConfigError,
    ConfigErrors,
    ModelRepository,
    ReleaseSource,
    StackConfig,
    TrustedKeys,
    project_name,
)
from tritonops.k8s.registry_source import check_store_url

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OBJECT_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap / Secret data key
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# repository:tag, optionally @sha256:<digest> (the digest is what runs; the tag names the version label)
_IMAGE = re.compile(r"^(?P<repo>[^@\s]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})(@sha256:[0-9a-f]{64})?$")
# A model name routed as /v2/models/<name>: characters ingress-nginx's strict paths and the Gateway API accept.
_ROUTED_MODEL = re.compile(r"^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$")
# An HTTPRoute holds fewer than 128 path matches in all (Gateway API validation): 3 server paths
# (/v2, /v2/health/live, /v2/health/ready) and 3 per model (metadata, ready, infer).
GATEWAY_MAX_MODELS = (127 - 3) // 3


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
    except ValidationError as exc:  # every field the schema refuses, not only the first
        raise ConfigErrors([ConfigError(_key(stack, tuple(p for p in err["loc"] if not (
            isinstance(p, str) and p.startswith("function-")))), err["msg"], source) for err in exc.errors()]) from exc
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
        if pool.gpu_sharing and pool.ami_type.startswith("BOTTLEROCKET"):
            raise ConfigError(
                _key("cluster-aws", ("gpuNodePools", i, "gpuSharing")),
                "Bottlerocket runs its own NVIDIA device plugin (the GPU Operator's is off on these nodes), "
                "which the operator's time-slicing config does not reach: use an AL2023 pool to share GPUs",
                source,
            )
        if not pool.min_size <= pool.desired_size <= pool.max_size:
            raise ConfigError(
                _key("cluster-aws", ("gpuNodePools", i, "desiredSize")),
                f"must lie within minSize..maxSize ({pool.min_size}..{pool.max_size}), got {pool.desired_size}",
                source,
            )
    _check_public_endpoint(cfg, source)
    sys_pool = cfg.system_node_pool
    if not sys_pool.min_size <= sys_pool.desired_size <= sys_pool.max_size:
        raise ConfigError(
            _key("cluster-aws", ("systemNodePool", "desiredSize")), "must lie within minSize..maxSize", source
        )


def _check_public_endpoint(cfg: Any, source: str | None) -> None:
    """A public API endpoint names who may reach it: EKS opens an empty list to 0.0.0.0/0."""
    key = _key("cluster-aws", ("publicAccessCidrs",))
    if cfg.public_access_cidrs is None:  # not set yet: the user gives it; render and the engine refuse until then
        return
    if cfg.endpoint_public_access and not cfg.public_access_cidrs:
        raise ConfigError(key, "endpointPublicAccess is true: list the CIDRs that may reach the API endpoint "
                               "(EKS would open it to 0.0.0.0/0), or set endpointPublicAccess: false", source)
    if cfg.public_access_cidrs and not cfg.endpoint_public_access:
        raise ConfigError(key, "set only with endpointPublicAccess: true (the endpoint is private)", source)
    for j, cidr in enumerate(cfg.public_access_cidrs):
        try:
            ipaddress.ip_network(cidr)
        except ValueError as exc:
            raise ConfigError(_key("cluster-aws", ("publicAccessCidrs", j)), f"{cidr!r} is not a CIDR: {exc}",
                              source) from exc


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
    check_store_url(svc, loc, source, _key, _check_object_name)  # the scheme; an oci:// store's fields
    try:
        channel_key(rel.channel)
    except ReleaseError as exc:
        raise ConfigError(_key("triton", (*loc, "channel")), str(exc), source) from exc
    _check_store_name(cfg, rel, loc, source)
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
            ("reports", rel.reports or None),
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
    for j, group in enumerate(rel.groups):
        try:
            check_name(group, "groups", "group label")
        except ReleaseError as exc:
            raise ConfigError(_key("triton", (*loc, "groups", j)), str(exc).split(": ", 1)[1], source) from exc
    if rel.report_key_secret is not None:
        if not rel.reports:
            raise ConfigError(_key("triton", (*loc, "reportKeySecret")), "signs reports: set reports: true", source)
        _check_object_name((*loc, "reportKeySecret"), rel.report_key_secret, "Secret", source)
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


def _check_store_name(cfg: Any, rel: ReleaseSource, loc: tuple[int | str, ...], source: str | None) -> None:
    """Tier production refuses the implicit --trusted-key root (the name's form is the model's rule)."""
    if rel.store_name is None and cfg.tier == PRODUCTION:
        raise ConfigError(_key("triton", (*loc, "storeName")), "required in tier production: without it a pointer "
                          "of any store signed with one of trustedKeys installs; sign a root that names the store "
                          "(tritonops release root init --name NAME) and set storeName: NAME", source)


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
        _check_digest(svc, (*k, "image"), source)
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


def _check_digest(svc: Any, k: tuple[str | int, ...], source: str | None) -> None:
    """An all-zero digest is a placeholder: refused unless the service says so (``imagePlaceholder``)."""
    placeholder = svc.image.endswith("@sha256:" + "0" * 64)
    if placeholder and not svc.image_placeholder:
        raise ConfigError(
            _key("triton", k),
            "the digest is the all-zero placeholder: no node can pull it and `pulumi up` would wait for pods "
            "that never start. Put the tag's digest (skopeo inspect --format '{{.Digest}}' docker://IMAGE), "
            "or set imagePlaceholder: true on the service if this file is only an example",
            source,
        )
    if svc.image_placeholder and not placeholder:
        raise ConfigError(
            _key("triton", (*k[:-1], "imagePlaceholder")),
            "true, but the image's digest is no placeholder: remove imagePlaceholder",
            source,
        )


_CHECKS = {"cluster-aws": _check_cluster_aws, "platform": _check_platform, "triton": _check_triton}
