"""The triton stack's rules across fields (after pydantic's field rules): model services, their release
source or model repository, images, routing, network policy, the GPU memory budget.

:func:`check` runs them in a fixed order: the first error found is the one reported.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from pydantic.alias_generators import to_camel

from tritonops.core.errors import ReleaseError
from tritonops.core.keys import channel_key
from tritonops.core.names import check_name
from tritonops.k8s.catalog import gpu_family
from tritonops.k8s.config import PRODUCTION, ConfigError, ModelRepository, ReleaseSource, TrustedKeys
from tritonops.k8s.config_keys import check_dns_label, check_object_name, config_key
from tritonops.k8s.registry_source import check_store_url
from tritonops.k8s.stacks.triton.budget import check_budget
from tritonops.stores import kind_of, s3

_OBJECT_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap / Secret data key
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# repository:tag, optionally @sha256:<digest> (the digest is what runs; the tag names the version label)
_IMAGE = re.compile(r"^(?P<repo>[^@\s]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})(@sha256:[0-9a-f]{64})?$")
# A model name routed as /v2/models/<name>: characters ingress-nginx's strict paths and the Gateway API accept.
_ROUTED_MODEL = re.compile(r"^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$")
# An HTTPRoute holds fewer than 128 path matches in all (Gateway API validation): 3 server paths
# (/v2, /v2/health/live, /v2/health/ready) and 3 per model (metadata, ready, infer).
GATEWAY_MAX_MODELS = (127 - 3) // 3


def _check_repository(
    repo: ModelRepository, loc: tuple[int | str, ...], source: str | None, model_reader: str | None = None
) -> None:
    if repo.type == "s3" and not (repo.uri or "").startswith("s3://"):
        raise ConfigError(config_key("triton", (*loc, "uri")), "an s3 repository needs uri s3://...", source)
    if repo.type == "s3" and not repo.role_arn and model_reader is None:
        raise ConfigError(
            config_key("triton", (*loc, "roleArn")),
            "an s3 repository needs the IRSA role its ServiceAccount assumes: the service's modelReader "
            "(a cluster-aws modelReaders roleName) or an explicit roleArn",
            source,
        )
    if repo.role_arn and model_reader is not None:
        raise ConfigError(
            config_key("triton", (*loc, "roleArn")), "set the service's modelReader or roleArn, not both", source
        )
    if repo.type == "pvc" and not repo.claim_name:
        raise ConfigError(config_key("triton", (*loc, "claimName")), "a pvc repository needs claimName", source)


def _check_model_reader(cfg: Any, svc: Any, loc: tuple[int | str, ...], source: str | None) -> None:
    if not cfg.cluster.cluster_stack:
        raise ConfigError(
            config_key("triton", (*loc, "modelReader")),
            "the role ARN is read from the cluster-aws stack's modelReaders output: set cluster.clusterStack "
            "(or give modelRepository.roleArn instead)",
            source,
        )
    if svc.release is not None and svc.release.credentials_secret is not None:
        # The agent follows botocore's chain: static keys from the Secret would win over the IRSA role.
        raise ConfigError(
            config_key("triton", (*loc, "release", "credentialsSecret")),
            "give either modelReader (IRSA: the pod's role reads the store) or credentialsSecret (static keys, "
            "for non-AWS S3), not both: static keys would win over the role",
            source,
        )


def _check_release(cfg: Any, svc: Any, loc: tuple[int | str, ...], source: str | None) -> None:
    """A model service's release source: the store, channel and keys the agent will be started with."""
    rel: ReleaseSource = svc.release
    check_store_url(svc, loc, source)  # the scheme; an oci:// store's fields
    _check_store(cfg, rel, loc, source)
    _check_trusted_keys(rel.trusted_keys, loc, source)
    _check_s3_options(rel, loc, source)
    _check_agent_options(cfg, rel, loc, source)
    if rel.canary is not None:
        _check_canary(cfg, rel, (*loc, "canary"), source)
    if svc.model_control_mode != "explicit":
        raise ConfigError(
            config_key("triton", (*loc[:-1], "modelControlMode")),
            f"{svc.model_control_mode!r}: with release the agent loads models through Triton's repository API, "
            "which needs explicit",
            source,
        )


def _check_store(cfg: Any, rel: ReleaseSource, loc: tuple[int | str, ...], source: str | None) -> None:
    """The channel's name, and the store name tier production needs."""
    try:
        channel_key(rel.channel)
    except ReleaseError as exc:
        raise ConfigError(config_key("triton", (*loc, "channel")), str(exc), source) from exc
    _check_store_name(cfg, rel, loc, source)


def _check_trusted_keys(tk: TrustedKeys, loc: tuple[int | str, ...], source: str | None) -> None:
    """Where the trusted public keys come from (one ConfigMap or one Secret) and their key names."""
    if (tk.config_map is None) == (tk.secret is None):
        raise ConfigError(
            config_key("triton", (*loc, "trustedKeys")),
            "name the ConfigMap or the Secret holding the trusted public keys (one of configMap, secret)",
            source,
        )
    if tk.config_map is not None:
        check_object_name((*loc, "trustedKeys", "configMap"), tk.config_map, "ConfigMap", source)
    if tk.secret is not None:
        check_object_name((*loc, "trustedKeys", "secret"), tk.secret, "Secret", source)
    for j, key in enumerate(tk.keys):
        if key in (".", "..") or len(key) > 253 or not _OBJECT_KEY.match(key):
            raise ConfigError(
                config_key("triton", (*loc, "trustedKeys", "keys", j)),
                f"{key!r} is not a ConfigMap/Secret key (letters, digits, '-', '_', '.')",
                source,
            )
        if key in tk.keys[:j]:
            raise ConfigError(config_key("triton", (*loc, "trustedKeys", "keys", j)), f"duplicate key {key!r}", source)
    if tk.public_keys is not None:
        _check_public_keys(tk, (*loc, "trustedKeys"), source)


def _check_s3_options(rel: ReleaseSource, loc: tuple[int | str, ...], source: str | None) -> None:
    """The options only an s3:// store takes, and the S3 endpoint and credentials Secret given."""
    if kind_of(rel.store) is not s3.KIND:  # the scheme is checked already (check_store_url)
        for name in s3.KIND.settings:
            if getattr(rel, name) not in (None, False):
                raise ConfigError(
                    config_key("triton", (*loc, to_camel(name))), f"only for an s3:// store (store is {rel.store!r})",
                    source,
                )
    if rel.s3_endpoint is not None:
        ep = urlsplit(rel.s3_endpoint)
        if ep.scheme not in ("http", "https") or not ep.netloc:
            raise ConfigError(
                config_key("triton", (*loc, "s3Endpoint")), f"{rel.s3_endpoint!r}: expected http(s)://HOST[:PORT]",
                source,
            )
    if rel.credentials_secret is not None:
        check_object_name((*loc, "credentialsSecret"), rel.credentials_secret, "Secret", source)


def _check_agent_options(cfg: Any, rel: ReleaseSource, loc: tuple[int | str, ...], source: str | None) -> None:
    """The agent's group labels, report signing key, volume and resources, and the node cache."""
    for j, group in enumerate(rel.groups):
        try:
            check_name(group, "groups", "group label")
        except ReleaseError as exc:
            raise ConfigError(config_key("triton", (*loc, "groups", j)), str(exc).split(": ", 1)[1], source) from exc
    if rel.report_key_secret is not None:
        if not rel.reports:
            raise ConfigError(config_key("triton", (*loc, "reportKeySecret")), "signs reports: set reports: true",
                              source)
        check_object_name((*loc, "reportKeySecret"), rel.report_key_secret, "Secret", source)
    for field, value in (
        ("volumeSize", rel.volume_size),
        ("agentCpu", rel.agent_cpu),
        ("agentMemory", rel.agent_memory),
    ):
        if not _QUANTITY.match(value):
            raise ConfigError(config_key("triton", (*loc, field)), f"{value!r} is not a Kubernetes quantity", source)
    if rel.node_cache:
        stores = {(s.release.store, s.release.s3_endpoint) for s in cfg.model_services
                  if s.release is not None and s.release.node_cache}
        if len(stores) > 1:
            raise ConfigError(config_key("triton", (*loc, "nodeCache")), "the node cache reads one store: every "
                              "service with nodeCache must name the same release.store and s3Endpoint", source)


def _check_store_name(cfg: Any, rel: ReleaseSource, loc: tuple[int | str, ...], source: str | None) -> None:
    """Tier production refuses the implicit --trusted-key root (the name's form is the model's rule)."""
    if rel.store_name is None and cfg.tier == PRODUCTION:
        raise ConfigError(config_key("triton", (*loc, "storeName")), "required in tier production: without it a "
                          "pointer "
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
            config_key("triton", (*loc, "publicKeys")),
            "the stack creates the ConfigMap named by configMap from publicKeys: set configMap, not secret",
            source,
        )
    if not set(tk.public_keys) <= set(tk.keys):  # a key of keys it lacks is the user's to set (required.user_values)
        raise ConfigError(
            config_key("triton", (*loc, "publicKeys")),
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
                config_key("triton", (*loc, "publicKeys", name)),
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
        raise ConfigError(config_key("triton", (*loc, "channel")), str(exc), source) from exc
    if canary.channel == rel.channel:
        raise ConfigError(
            config_key("triton", (*loc, "channel")),
            f"{canary.channel!r} is the stable channel too: a canary follows another channel "
            "(e.g. canary; `tritonops release promote` later moves stable to its release)",
            source,
        )
    if cfg.ingress.mode == "none":
        raise ConfigError(
            config_key("triton", (*loc, "weight")),
            "the router applies a canary's weight: set ingress.mode to ingress (ingress-nginx canary "
            "Ingress) or gateway (HTTPRoute/GRPCRoute backend weights)",
            source,
        )


def _check_scale_to_zero(cfg: Any, svc: Any, loc: tuple[int | str, ...], source: str | None) -> None:
    """minReplicas 0: a wake-up path, prod's explicit consent, and a cooldown longer than a cold start."""
    a = svc.autoscaling
    if cfg.ingress.mode not in ("gateway", "ingress"):
        raise ConfigError(
            config_key("triton", (*loc, "minReplicas")),
            "0 needs a wake-up signal that exists while no Triton pod runs: the router's request counter for "
            "the service's routes; set ingress.mode to gateway (Envoy Gateway) or ingress (legacy ingress-nginx) "
            f"(it is {cfg.ingress.mode!r})",
            source,
        )
    if cfg.tier == PRODUCTION and not a.allow_scale_to_zero:
        raise ConfigError(
            config_key("triton", (*loc, "minReplicas")),
            "0 in tier production: the first requests after idle wait for a node and a model load; "
            "set autoscaling.allowScaleToZero: true to accept that",
            source,
        )
    if a.model_load_seconds is None:
        raise ConfigError(
            config_key("triton", (*loc, "modelLoadSeconds")),
            "minReplicas 0 needs the measured cold start (tests/benchmarks/bench_cold_start.py) "
            "to check cooldownPeriod against",
            source,
        )
    if a.cooldown_period <= a.model_load_seconds:
        raise ConfigError(
            config_key("triton", (*loc, "cooldownPeriod")),
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
                config_key("triton", ("modelServices", i, "release", "trustedKeys", "publicKeys")),
                f"ConfigMap {tk.config_map!r} gets other publicKeys from modelServices[{first[0]}]: give both "
                "the same publicKeys, or another configMap",
                source,
            )


def check(cfg: Any, source: str | None) -> None:
    """The triton stack's rules, in order: node pools, shared public keys, each model service, the
    ingress, the network policy's CIDRs, then the GPU memory budget."""
    for name, pool in cfg.node_pools.items():
        try:
            gpu_family(pool.instance_type)
        except ValueError as exc:
            raise ConfigError(config_key("triton", ("nodePools", name, "instanceType")), str(exc), source) from exc
    _check_shared_public_keys(cfg, source)
    seen: set[str] = set()
    for i, svc in enumerate(cfg.model_services):
        k = ("modelServices", i)
        check_dns_label("triton", (*k, "name"), svc.name, source)
        if svc.name in seen:
            raise ConfigError(config_key("triton", (*k, "name")), f"duplicate model service {svc.name!r}", source)
        seen.add(svc.name)
        _check_service(cfg, svc, k, source)
    if cfg.ingress.mode != "none" and not cfg.ingress.host_suffix:
        raise ConfigError(config_key("triton", ("ingress", "hostSuffix")), "ingress needs hostSuffix", source)
    if cfg.ingress.mode == "ingress" and not cfg.ingress.tls_secret:
        raise ConfigError(
            config_key("triton", ("ingress", "tlsSecret")),
            "ingress-nginx serves gRPC only over HTTP/2, which needs TLS: name the certificate Secret",
            source,
        )
    if cfg.ingress.mode == "gateway" and not cfg.ingress.gateway_name:
        raise ConfigError(config_key("triton", ("ingress", "gatewayName")), "gateway mode needs gatewayName", source)
    for field, cidrs in (
        ("modelStoreCidrs", cfg.network_policy.model_store_cidrs),
        ("apiServerCidrs", cfg.network_policy.api_server_cidrs),
    ):
        for j, cidr in enumerate(cidrs):
            try:
                ipaddress.ip_network(cidr)
            except ValueError as exc:
                raise ConfigError(
                    config_key("triton", ("networkPolicy", field, j)), f"{cidr!r} is not a CIDR: {exc}", source
                ) from exc
    try:
        check_budget(cfg)
    except ValueError as exc:
        raise ConfigError(getattr(exc, "key", config_key("triton", ("modelServices",))), str(exc), source) from exc


def _check_service(cfg: Any, svc: Any, k: tuple[int | str, ...], source: str | None) -> None:
    """One model service: its models and node pool, replicas, model source, scale to zero, image, routes."""
    if not svc.models:
        raise ConfigError(
            config_key("triton", (*k, "models")),
            f"model service {svc.name!r} has no models; list at least one",
            source,
        )
    model_names = [m.name for m in svc.models]
    if len(set(model_names)) != len(model_names):
        raise ConfigError(config_key("triton", (*k, "models")), "duplicate model names", source)
    if svc.node_pool not in cfg.node_pools:
        raise ConfigError(
            config_key("triton", (*k, "nodePool")),
            f"unknown node pool {svc.node_pool!r} (nodePools: {', '.join(cfg.node_pools)})",
            source,
        )
    _check_replicas(svc, k, source)
    _check_model_source(cfg, svc, k, source)
    if svc.autoscaling.enabled and svc.autoscaling.min_replicas == 0:
        _check_scale_to_zero(cfg, svc, (*k, "autoscaling"), source)
    image = _IMAGE.match(svc.image)
    if image is None or image["tag"] == "latest":
        raise ConfigError(
            config_key("triton", (*k, "image")),
            f"pin an image tag, optionally with its digest: REPOSITORY:TAG[@sha256:DIGEST] (got {svc.image!r})",
            source,
        )
    _check_digest(svc, (*k, "image"), source)
    _check_routes(cfg, svc, k, source)


def _check_replicas(svc: Any, k: tuple[int | str, ...], source: str | None) -> None:
    """Replicas and autoscaling bounds against the PodDisruptionBudget's minAvailable."""
    floor = svc.autoscaling.min_replicas if svc.autoscaling.enabled else svc.replicas
    if svc.pdb_min_available is not None:
        for field, value in (("replicas", svc.replicas), ("autoscaling.minReplicas", floor)):
            if value <= svc.pdb_min_available:
                raise ConfigError(
                    config_key("triton", (*k, *field.split("."))),
                    f"{value} is not above pdbMinAvailable={svc.pdb_min_available}: a node drain could "
                    "never evict a pod; raise it or lower pdbMinAvailable",
                    source,
                )
    if svc.autoscaling.enabled and svc.autoscaling.max_replicas < max(svc.replicas, floor):
        raise ConfigError(
            config_key("triton", (*k, "autoscaling", "maxReplicas")),
            "must be >= replicas and autoscaling.minReplicas",
            source,
        )


def _check_model_source(cfg: Any, svc: Any, k: tuple[int | str, ...], source: str | None) -> None:
    """Exactly one of modelRepository and release, each checked, and the modelReader."""
    if svc.model_repository is None and svc.release is None:
        raise ConfigError(
            config_key("triton", (*k, "modelRepository")),
            "set modelRepository (Triton reads s3 or a PVC) or release (the release agent pulls a channel)",
            source,
        )
    if svc.model_repository is not None and svc.release is not None:
        raise ConfigError(
            config_key("triton", (*k, "release")),
            "set modelRepository or release, not both (with release the agent provides Triton's repository)",
            source,
        )
    if svc.release is not None:
        _check_release(cfg, svc, (*k, "release"), source)
    if svc.model_repository is not None:
        _check_repository(svc.model_repository, (*k, "modelRepository"), source, svc.model_reader)
    if svc.model_reader is not None:
        _check_model_reader(cfg, svc, k, source)


def _check_routes(cfg: Any, svc: Any, k: tuple[int | str, ...], source: str | None) -> None:
    """What a router can route: the models an HTTPRoute holds, and names that become paths."""
    if cfg.ingress.mode == "gateway" and len(svc.models) > GATEWAY_MAX_MODELS:
        raise ConfigError(
            config_key("triton", (*k, "models")),
            f"{len(svc.models)} models: an HTTPRoute holds fewer than 128 path matches, which routes at most "
            f"{GATEWAY_MAX_MODELS} models (3 paths each, 3 for the server); split the service",
            source,
        )
    if cfg.ingress.mode != "none":
        for j, model in enumerate(svc.models):
            if not _ROUTED_MODEL.match(model.name):
                raise ConfigError(
                    config_key("triton", (*k, "models", j, "name")),
                    f"{model.name!r}: a routed model's name becomes the path /v2/models/<name> "
                    "(letters, digits, '_', '-', '.', '~'; not starting with '.')",
                    source,
                )


def _check_digest(svc: Any, k: tuple[str | int, ...], source: str | None) -> None:
    """An all-zero digest is a placeholder: refused unless the service says so (``imagePlaceholder``)."""
    placeholder = svc.image.endswith("@sha256:" + "0" * 64)
    if placeholder and not svc.image_placeholder:
        raise ConfigError(
            config_key("triton", k),
            "the digest is the all-zero placeholder: no node can pull it and `pulumi up` would wait for pods "
            "that never start. Put the tag's digest (skopeo inspect --format '{{.Digest}}' docker://IMAGE), "
            "or set imagePlaceholder: true on the service if this file is only an example",
            source,
        )
    if svc.image_placeholder and not placeholder:
        raise ConfigError(
            config_key("triton", (*k[:-1], "imagePlaceholder")),
            "true, but the image's digest is no placeholder: remove imagePlaceholder",
            source,
        )
