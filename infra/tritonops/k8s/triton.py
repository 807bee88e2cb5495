"""Pure builders for a Triton model service on Kubernetes: every object as a plain dict.

``service_objects`` returns what one model service needs (ServiceAccount, Deployment, Service,
PodDisruptionBudget, NetworkPolicy, ServiceMonitor, ScaledObject, Ingress or Gateway API routes);
``namespace_objects`` what the stack needs once (Namespace, PriorityClass, PrometheusRule,
dashboards ConfigMap, the release agent's ConfigMap). Alert rules, dashboards and the KEDA query
come from ``tritonops.observability``: one source for Kubernetes and edge hosts.

A model service with a ``release`` source runs the release agent (``tritonops.agent``, shipped as one
zipapp in the ``tritonops-agent`` ConfigMap) in the Triton image, so no other image is pulled:

    init container ``release-sync``   agent ``sync``: the channel's release, verified, into an emptyDir
    container ``triton``              --model-repository=<the agent's models link>, explicit mode
    container ``release-agent``       agent ``pull``: new releases through the repository API, golden
                                      gate, rollback; /metrics (tritonops_release_*) and /ready

:func:`release_agent_args` is the agent's argv, once, for the pod and for tests that run it.

Canary (``release.canary``): a second Deployment ``triton-<svc>-canary`` runs the same pod on the
canary channel, with ``canary.replicas`` pods, behind its own Service. Every server pod carries
the label ``track`` (``stable`` or ``canary``, Kubernetes' own canary convention); each
Deployment, its Service and the PodDisruptionBudget select one track, so neither Deployment adopts
the other's pods and the stable Service never sends to a canary pod. The router splits the
requests: ingress-nginx canary Ingresses (``canary-weight``) or Gateway API backendRef weights. The
NetworkPolicy and the ServiceMonitor cover both tracks; the ServiceMonitor copies ``track`` onto
every series (podTargetLabels), which the ``model_track:*`` recording rules compare.

The stable Deployment's selector includes ``track: stable`` whether or not a canary is configured,
so adding or removing a canary never touches the stable Deployment's selector (immutable in
Kubernetes). A Deployment created before tracks existed is replaced once when it gains the label.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from tritonops.agent.bundle import build_bytes
from tritonops.agent.triton import SECRET_ENV as AGENT_SECRET_ENV
from tritonops.k8s.budget import ServiceBudget, service_budget, triton_memory_args
from tritonops.k8s.config import TIER_LABEL, CanaryConfig, ModelService, TritonStackConfig
from tritonops.observability import keda
from tritonops.observability.dashboards import dashboards
from tritonops.observability.keda import ScalingPolicy, prometheus_trigger
from tritonops.observability.metrics import CANARY, STABLE, TRACK
from tritonops.observability.rules import RuleSettings, rule_groups
from tritonops.triton.admin import RESTRICTED, client_headers

Obj = dict[str, Any]

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
SCRAPE_JOB = "triton"  # the `job` label tritonops.observability's rules and dashboards select on
JOB_LABEL = "tritonops.io/scrape-job"
GPU_RESOURCE = "nvidia.com/gpu"
NODE_POOL_LABEL = "tritonops.io/node-pool"
PRIORITY_CLASS = "triton-serving"
TRITON_UID = 1000  # triton-server user of the NGC image
MODEL_DIR = "/models"
ADMIN_ENV = "TRITON_ADMIN_KEY"
TRACK_LABEL = TRACK  # pod label: stable | canary (Prometheus gets it through podTargetLabels)
TRACKS = (STABLE, CANARY)
# Request-duration summaries (p95 per model and track, for the canary gate). Always on, canary or
# not: the cost is a summary update per request stage and ~35 series per model and pod (no throughput
# difference beyond run-to-run noise measured on the wheel's CPU tritonserver with a 0.5 ms model),
# and a flag that followed the canary would restart every stable pod when a canary comes or goes.
SUMMARY_LATENCIES_ARG = "--metrics-config=summary_latencies=true"

# --- the release agent ---------------------------------------------------------------------------
AGENT_CONFIG_MAP = "tritonops-agent"  # one per namespace: the pods' agent and the drift CronJobs
AGENT_KEY = "tritonops-agent.pyz"  # binaryData key and file name
AGENT_DIR = "/opt/tritonops"
AGENT_PATH = f"{AGENT_DIR}/{AGENT_KEY}"
AGENT_SHA_ANNOTATION = "tritonops.io/agent-sha256"
CONFIG_MAP_MAX = 1 << 20  # the API server refuses larger ConfigMaps
RELEASE_ROOT = "/var/lib/tritonops"  # emptyDir shared by the init container, Triton and the sidecar
RELEASE_LINK = f"{RELEASE_ROOT}/models"  # the symlink tritonserver --model-repository names
RELEASES_DIR = f"{RELEASE_ROOT}/releases"
TRUSTED_KEYS_DIR = "/etc/tritonops/trusted-keys"
NODE_CACHE_DIR = "/var/cache/tritonops"  # hostPath (and mount path) of the optional node cache
AGENT_PORT, AGENT_PORT_NAME = 8003, "agent-metrics"
TRITON_LOCAL_URL = f"http://127.0.0.1:{HTTP_PORT}"  # the sidecar reaches Triton inside the pod
# The agent's own per-step limits (infra/tritonops/agent/cli.py --load-timeout, --golden-timeout): a switch
# to a new release may keep /ready at 503 that long before it is marked or rolled back.
AGENT_LOAD_TIMEOUT_S, AGENT_GOLDEN_TIMEOUT_S = 600, 120
AGENT_PROBE_PERIOD_S = 10


def admin_headers(cfg: TritonStackConfig, token: str) -> dict[str, dict[str, str]]:
    """What a client sends to reach the restricted APIs, per protocol."""
    h = {cfg.admin_api.header: token}
    return {"http": client_headers("http", h), "grpc": client_headers("grpc", h)}


def name_of(svc: ModelService) -> str:
    return f"triton-{svc.name}"


def track_name(svc: ModelService, track: str = STABLE) -> str:
    """The Deployment and Service of one track: ``triton-<svc>`` (stable), ``triton-<svc>-canary``."""
    _check_track(svc, track)
    return name_of(svc) if track == STABLE else f"{name_of(svc)}-{track}"


def _check_track(svc: ModelService, track: str) -> None:
    if track not in TRACKS:
        raise ValueError(f"track: {track!r} is not one of {', '.join(TRACKS)}")
    if track == CANARY:
        _canary(svc)


def canary_of(svc: ModelService) -> CanaryConfig | None:
    """The service's ``release.canary``, or None."""
    return svc.release.canary if svc.release is not None else None


def _canary(svc: ModelService) -> CanaryConfig:
    canary = canary_of(svc)
    if canary is None:
        raise ValueError(f"track: model service {svc.name!r} has no release.canary")
    return canary


def labels(cfg: TritonStackConfig, svc: ModelService | None = None, track: str | None = None) -> dict[str, str]:
    out = {
        "app.kubernetes.io/part-of": "tritonops",
        "app.kubernetes.io/managed-by": "tritonops",
        "tritonops.io/environment": cfg.environment,
        TIER_LABEL: cfg.tier,
    }
    if svc is not None:
        out |= selector(svc) | {"app.kubernetes.io/version": image_tag(svc.image)}
    if track is not None:
        out[TRACK_LABEL] = track
    return out


def image_tag(image: str) -> str:
    """TAG of ``REPOSITORY:TAG[@sha256:DIGEST]`` (the version label; with a digest, the digest is what runs)."""
    return image.split("@", 1)[0].rsplit(":", 1)[1]


SERVER_POD_LABELS = {"app.kubernetes.io/name": "triton", "app.kubernetes.io/component": "inference-server"}


def selector(svc: ModelService) -> dict[str, str]:
    """The server pods of one model service (other pods of the service, e.g. jobs, set another component)."""
    return {**SERVER_POD_LABELS, "app.kubernetes.io/instance": name_of(svc)}


def track_selector(svc: ModelService, track: str = STABLE) -> dict[str, str]:
    """The server pods of one track: what a Deployment, its Service and the PDB select."""
    return selector(svc) | {TRACK_LABEL: track}


def _meta(
    name: str, cfg: TritonStackConfig, svc: ModelService | None = None, track: str | None = None, **extra: Any
) -> Obj:
    return {"name": name, "namespace": cfg.namespace, "labels": labels(cfg, svc, track), **extra}


# --- the Triton container ------------------------------------------------------------------------


def _location(svc: ModelService) -> str:
    repo = svc.model_repository
    if repo is None:  # release: the agent's symlink to the active release
        return RELEASE_LINK
    return repo.uri if repo.type == "s3" and repo.uri else MODEL_DIR


def triton_args(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget) -> list[str]:
    header = f"{cfg.admin_api.header}=$({ADMIN_ENV})"  # kubelet expands $(VAR) from the container env
    args = [
        "tritonserver",
        f"--model-repository={_location(svc)}",
        f"--model-control-mode={svc.model_control_mode}",
    ]
    if svc.release is not None:
        args.append("--load-model=*")  # whatever the release holds; the sidecar gates and switches it
    elif svc.model_control_mode == "explicit":
        args += [f"--load-model={m.name}" for m in svc.models]
    if svc.model_control_mode == "poll":
        args.append(f"--repository-poll-secs={svc.repository_poll_secs}")
    args += [
        "--strict-model-config=true",  # every model ships a complete config.pbtxt; no auto-complete
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--allow-metrics=true",
        "--allow-gpu-metrics=true",
        "--allow-cpu-metrics=true",
        SUMMARY_LATENCIES_ARG,
        f"--http-restricted-api={RESTRICTED}:{header}",
        f"--grpc-restricted-protocol={RESTRICTED}:{header}",
        "--exit-timeout-secs=30",
        "--log-format=ISO8601",
        *triton_memory_args(svc, budget),
    ]
    return args


def _probe(path: str, period: int, failures: int, timeout: int = 3) -> Obj:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def container(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget) -> Obj:
    res = svc.resources
    env: list[Obj] = [
        {
            "name": ADMIN_ENV,
            "valueFrom": {"secretKeyRef": {"name": cfg.admin_api.secret_name, "key": cfg.admin_api.secret_key}},
        }
    ]
    env.append({"name": "HOME", "value": "/tmp"})  # the root filesystem is read-only
    repo = svc.model_repository
    if repo is not None and repo.type == "s3" and repo.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": repo.region})
    mounts: list[Obj] = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
    if repo is not None and repo.type == "pvc":
        mounts.append(
            {
                "name": "models",
                "mountPath": MODEL_DIR,
                "readOnly": True,
                **({"subPath": repo.sub_path} if repo.sub_path else {}),
            }
        )
    if svc.release is not None:  # Triton only reads the releases the agent puts in place
        mounts.append({"name": "releases", "mountPath": RELEASE_ROOT, "readOnly": True})
    gpus = str(svc.gpus)
    return {
        "name": "triton",
        "image": svc.image,
        "imagePullPolicy": "IfNotPresent",
        "args": triton_args(cfg, svc, budget),
        "env": env,
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": res.cpu, "memory": res.memory, GPU_RESOURCE: gpus},
            "limits": {"memory": res.memory, GPU_RESOURCE: gpus},
        },
        # Loading models (an S3 download, TensorRT engines) can take minutes: the startup probe
        # holds liveness off for up to 10 minutes; readiness is Triton's strict readiness.
        "startupProbe": _probe("/v2/health/ready", period=10, failures=60),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=3),
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }


def container_security_context() -> Obj:
    """Every container of a Triton pod (server, release agent, drift check): restricted."""
    return {
        "runAsNonRoot": True,
        "runAsUser": TRITON_UID,
        "runAsGroup": TRITON_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


# --- the release agent ---------------------------------------------------------------------------


def release_agent_args(
    command: str,
    store: str,
    channel: str,
    link: str | os.PathLike[str],
    releases_dir: str | os.PathLike[str],
    trusted_keys: Sequence[str | os.PathLike[str]],
    *,
    triton_url: str | None = None,
    header: str | None = None,
    listen: str | None = None,
    interval: float | None = None,
    cache: str | os.PathLike[str] | None = None,
    s3_endpoint: str | None = None,
) -> list[str]:
    """The release agent's argv after ``python3 tritonops-agent.pyz`` (or ``python -m tritonops.agent``).

    ``command`` is ``sync`` (the init container: put the channel's release in place) or ``pull``
    (the sidecar: keep on the channel; ``triton_url``, ``header``, ``listen``, ``interval`` apply
    to it only). Secrets never appear here: the agent reads the admin header's value and S3
    credentials from its environment.
    """
    if command not in ("sync", "pull"):
        raise ValueError(f"command: {command!r} is not sync or pull")
    if not trusted_keys:
        raise ValueError("trusted_keys: at least one public key (an unsigned release never reaches Triton)")
    pull_only = {"triton_url": triton_url, "header": header, "listen": listen, "interval": interval}
    if command == "sync" and any(v is not None for v in pull_only.values()):
        given = sorted(k for k, v in pull_only.items() if v is not None)
        raise ValueError(f"{', '.join(given)}: only for pull (sync runs before Triton starts)")
    args = [command, "--store", store, "--channel", channel, "--link", str(link), "--releases", str(releases_dir)]
    for key in trusted_keys:
        args += ["--trusted-key", str(key)]
    if cache is not None:
        args += ["--cache", str(cache)]
    if s3_endpoint is not None:
        args += ["--s3-endpoint", s3_endpoint]
    if triton_url is not None:
        args += ["--triton", triton_url]
    if header is not None:
        args += ["--header", header]
    if listen is not None:
        args += ["--listen", listen]
    if interval is not None:
        args += ["--interval", f"{interval:g}"]
    return args


@functools.cache
def agent_bundle() -> tuple[bytes, str]:
    """The agent zipapp (``tritonops.agent.bundle.build_bytes``) and its sha256."""
    data = build_bytes()
    return data, hashlib.sha256(data).hexdigest()


def agent_config_map(cfg: TritonStackConfig) -> Obj:
    """The agent zipapp for the pods' release containers and the drift CronJobs of the namespace."""
    data, sha = agent_bundle()
    encoded = base64.b64encode(data).decode("ascii")
    if len(encoded) > CONFIG_MAP_MAX:
        raise ValueError(f"{AGENT_KEY}: {len(encoded)} bytes base64, more than a ConfigMap holds ({CONFIG_MAP_MAX})")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(AGENT_CONFIG_MAP, cfg, annotations={AGENT_SHA_ANNOTATION: sha}),
        "binaryData": {AGENT_KEY: encoded},
    }


def agent_volume() -> Obj:
    return {"name": "agent", "configMap": {"name": AGENT_CONFIG_MAP, "items": [{"key": AGENT_KEY, "path": AGENT_KEY}]}}


def agent_mount() -> Obj:
    return {"name": "agent", "mountPath": AGENT_DIR, "readOnly": True}


def _trusted_key_paths(svc: ModelService) -> list[str]:
    assert svc.release is not None
    return [f"{TRUSTED_KEYS_DIR}/{k}" for k in svc.release.trusted_keys.keys]


def _channel(svc: ModelService, track: str) -> str:
    """The release channel the pods of ``track`` follow."""
    rel = svc.release
    assert rel is not None
    _check_track(svc, track)
    return _canary(svc).channel if track == CANARY else rel.channel


def _agent_args(cfg: TritonStackConfig, svc: ModelService, command: str, track: str = STABLE) -> list[str]:
    rel = svc.release
    assert rel is not None
    pull = command == "pull"
    return [
        "python3",
        AGENT_PATH,
        *release_agent_args(
            command,
            rel.store,
            _channel(svc, track),
            RELEASE_LINK,
            RELEASES_DIR,
            _trusted_key_paths(svc),
            triton_url=TRITON_LOCAL_URL if pull else None,
            header=cfg.admin_api.header if pull else None,
            listen=f"0.0.0.0:{AGENT_PORT}" if pull else None,
            interval=rel.poll_seconds if pull else None,
            cache=NODE_CACHE_DIR if rel.node_cache else None,
            s3_endpoint=rel.s3_endpoint,
        ),
    ]


def _agent_env(cfg: TritonStackConfig, svc: ModelService, admin: bool) -> list[Obj]:
    rel = svc.release
    assert rel is not None
    env: list[Obj] = []
    if admin:
        admin_ref = {"name": cfg.admin_api.secret_name, "key": cfg.admin_api.secret_key}
        env.append({"name": AGENT_SECRET_ENV, "valueFrom": {"secretKeyRef": admin_ref}})
    if rel.region:
        env.append({"name": "AWS_REGION", "value": rel.region})
    if rel.credentials_secret:
        for name, optional in (
            ("AWS_ACCESS_KEY_ID", False),
            ("AWS_SECRET_ACCESS_KEY", False),
            ("AWS_SESSION_TOKEN", True),
        ):
            ref: Obj = {"name": rel.credentials_secret, "key": name, **({"optional": True} if optional else {})}
            env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return env


def _agent_mounts(svc: ModelService) -> list[Obj]:
    assert svc.release is not None
    mounts: list[Obj] = [
        {"name": "releases", "mountPath": RELEASE_ROOT},
        agent_mount(),
        {"name": "trusted-keys", "mountPath": TRUSTED_KEYS_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},  # openssl's signature check writes temporary files
    ]
    if svc.release.node_cache:
        mounts.append({"name": "node-cache", "mountPath": NODE_CACHE_DIR})
    return mounts


def _agent_container(cfg: TritonStackConfig, svc: ModelService, command: str, track: str = STABLE) -> Obj:
    rel = svc.release
    assert rel is not None
    return {
        "name": "release-sync" if command == "sync" else "release-agent",
        "image": svc.image,  # the Triton image has python3 and openssl: nothing more to pull
        "imagePullPolicy": "IfNotPresent",
        "command": _agent_args(cfg, svc, command, track),
        "env": _agent_env(cfg, svc, admin=command == "pull"),
        "resources": {
            "requests": {"cpu": rel.agent_cpu, "memory": rel.agent_memory},
            "limits": {"memory": rel.agent_memory},
        },
        "securityContext": container_security_context(),
        "volumeMounts": _agent_mounts(svc),
    }


def release_sync_container(cfg: TritonStackConfig, svc: ModelService, track: str = STABLE) -> Obj:
    """Init container: the channel's current release, verified, in place before Triton starts."""
    return _agent_container(cfg, svc, "sync", track)


def release_agent_container(cfg: TritonStackConfig, svc: ModelService, track: str = STABLE) -> Obj:
    """Sidecar: keeps the pod on its channel; metrics and /ready on the agent-metrics port.

    /ready answers 200 once the pod serves a gated release, and keeps answering 200 while the next
    release is switched in (the gated models serve until the new ones pass): a rollout across the
    replicas never takes them out of their Service together, and a pod that never reaches a gated
    release never becomes ready.
    """
    c = _agent_container(cfg, svc, "pull", track)
    c["ports"] = [{"name": AGENT_PORT_NAME, "containerPort": AGENT_PORT, "protocol": "TCP"}]
    c["readinessProbe"] = {
        "httpGet": {"path": "/ready", "port": AGENT_PORT_NAME},
        "periodSeconds": AGENT_PROBE_PERIOD_S,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }
    # The agent serves /metrics from its own thread, a load or golden run in progress included: a
    # minute without an answer means a hung agent, which kubelet restarts (Triton keeps serving).
    c["livenessProbe"] = {
        "httpGet": {"path": "/metrics", "port": AGENT_PORT_NAME},
        "periodSeconds": AGENT_PROBE_PERIOD_S,
        "timeoutSeconds": 3,
        "failureThreshold": 6,
    }
    return c


def release_volumes(svc: ModelService) -> list[Obj]:
    rel = svc.release
    assert rel is not None
    items = [{"key": k, "path": k} for k in rel.trusted_keys.keys]
    keys: Obj = (
        {"configMap": {"name": rel.trusted_keys.config_map, "items": items}}
        if rel.trusted_keys.config_map
        else {"secret": {"secretName": rel.trusted_keys.secret, "items": items}}
    )
    volumes: list[Obj] = [
        {"name": "releases", "emptyDir": {"sizeLimit": rel.volume_size}},
        agent_volume(),
        {"name": "trusted-keys", **keys},
    ]
    if rel.node_cache:
        volumes.append({"name": "node-cache", "hostPath": {"path": NODE_CACHE_DIR, "type": "DirectoryOrCreate"}})
    return volumes


def trusted_keys_config_maps(cfg: TritonStackConfig) -> list[Obj]:
    """The ConfigMaps of trusted public keys the stack creates: those of ``release.trustedKeys.publicKeys``.

    Several services (and a canary) may name one ConfigMap; they must then give it the same keys.
    """
    maps: dict[str, dict[str, str]] = {}
    for i, svc in enumerate(cfg.model_services):
        tk = svc.release.trusted_keys if svc.release is not None else None
        if tk is None or tk.public_keys is None or tk.config_map is None:
            continue
        data = {k: v.strip() + "\n" for k, v in sorted(tk.public_keys.items())}
        if maps.setdefault(tk.config_map, data) != data:
            raise ValueError(
                f"modelServices[{i}].release.trustedKeys.publicKeys: ConfigMap {tk.config_map!r} gets other "
                "keys from another model service; give both the same publicKeys or another configMap"
            )
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, cfg), "data": data}
        for name, data in sorted(maps.items())
    ]


# --- per model service ---------------------------------------------------------------------------


IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"


def reader_arn_placeholder(role_name: str) -> str:
    """What ``render`` writes for a modelReader's ARN: only the cluster-aws stack's state knows the account."""
    return f"arn:aws:iam::<account-id>:role/{role_name}"


def service_account(cfg: TritonStackConfig, svc: ModelService, role_arn: Any = None) -> Obj:
    """The service's ServiceAccount, annotated for IRSA with ``svc.model_reader``'s role (``role_arn``:
    the cluster-aws stack's output, a Pulumi Output in the stack; None: the placeholder ``render``
    writes) or with an s3 ``modelRepository.roleArn``."""
    meta = _meta(name_of(svc), cfg, svc)
    repo = svc.model_repository
    arn: Any = None
    if svc.model_reader is not None:
        arn = role_arn if role_arn is not None else reader_arn_placeholder(svc.model_reader)
    elif repo is not None and repo.type == "s3":
        arn = repo.role_arn
    if arn is not None:
        meta["annotations"] = {IRSA_ROLE_ANNOTATION: arn}
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta,
        "automountServiceAccountToken": False,
    }


def _affinity(svc: ModelService, track: str = STABLE) -> Obj:
    term = {"labelSelector": {"matchLabels": track_selector(svc, track)}, "topologyKey": "kubernetes.io/hostname"}
    if svc.spread:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }


def _spread(svc: ModelService, track: str = STABLE) -> list[Obj]:
    hard = "DoNotSchedule" if svc.spread else "ScheduleAnyway"
    return [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": track_selector(svc, track)},
        },
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": hard,
            "labelSelector": {"matchLabels": track_selector(svc, track)},
        },
    ]


def rollout_strategy(svc: ModelService) -> Obj:
    """Surge a pod when there may be room for it; with one pod per node required, replace in place.

    With required anti-affinity every node already runs a replica, so a surge pod would wait for a new
    GPU node; instead one pod at a time is replaced (config guarantees replicas > pdbMinAvailable, so
    the remaining pods still satisfy the PDB).
    """
    if svc.spread:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def deployment(
    cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget | None = None, track: str = STABLE
) -> Obj:
    """The server pods of one track: stable (``svc.replicas``, autoscaled) or canary (fixed replicas,
    on ``release.canary.channel``); the same pod otherwise."""
    _check_track(svc, track)
    budget = budget or service_budget(svc, cfg)
    res = svc.resources
    volumes: list[Obj] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": res.shm}},
        {"name": "tmp", "emptyDir": {"sizeLimit": res.tmp}},
    ]
    repo = svc.model_repository
    if repo is not None and repo.type == "pvc":
        volumes.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": repo.claim_name, "readOnly": True},
            }
        )
    pod_annotations = {"tritonops.io/gpu-budget-mib": f"{budget.need_mib}/{budget.capacity_mib}"}
    containers = [container(cfg, svc, budget)]
    release: Obj = {}
    if svc.release is not None:
        volumes += release_volumes(svc)
        containers.append(release_agent_container(cfg, svc, track))
        release["initContainers"] = [release_sync_container(cfg, svc, track)]
        # A new agent rolls the pods: a running agent never sees its zipapp replaced under it.
        pod_annotations[AGENT_SHA_ANNOTATION] = agent_bundle()[1]
    pod_labels = labels(cfg, svc, track)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(track_name(svc, track), cfg, svc, track),
        "spec": {
            "replicas": _canary(svc).replicas if track == CANARY else svc.replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": track_selector(svc, track)},
            "strategy": rollout_strategy(svc),
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": {
                    "serviceAccountName": name_of(svc),
                    # IRSA's pod identity webhook projects its own web-identity token; no API token needed.
                    "automountServiceAccountToken": False,
                    "priorityClassName": PRIORITY_CLASS,
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": TRITON_UID,
                        "runAsGroup": TRITON_UID,
                        "fsGroup": TRITON_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "nodeSelector": {NODE_POOL_LABEL: svc.node_pool},
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": _affinity(svc, track),
                    "topologySpreadConstraints": _spread(svc, track),
                    **release,
                    "containers": containers,
                    "volumes": volumes,
                },
            },
        },
    }


def service(cfg: TritonStackConfig, svc: ModelService, track: str = STABLE) -> Obj:
    """The pods of one track. ``triton-<svc>`` (stable) is what in-cluster clients, the drift check
    and the routes call; ``triton-<svc>-canary`` receives the canary's weight from the router."""
    _check_track(svc, track)
    meta = _meta(track_name(svc, track), cfg, svc, track)
    meta["labels"] = {**meta["labels"], JOB_LABEL: SCRAPE_JOB}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": track_selector(svc, track),
            "ports": [
                {
                    "name": "http",
                    "port": HTTP_PORT,
                    "targetPort": "http",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
                {
                    "name": "metrics",
                    "port": METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
                *(
                    [
                        {
                            "name": AGENT_PORT_NAME,
                            "port": AGENT_PORT,
                            "targetPort": AGENT_PORT_NAME,
                            "protocol": "TCP",
                            "appProtocol": "http",
                        }
                    ]
                    if svc.release is not None
                    else []
                ),
            ],
        },
    }


def pod_disruption_budget(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """The stable pods only. A canary is a small, fixed, short-lived slice of a service: a budget on it
    would hold up node drains for pods whose loss costs at most its weight's share of the routed
    requests until the Deployment replaces them (the ScaledObject, likewise, scales stable only)."""
    spec: Obj = {"selector": {"matchLabels": track_selector(svc, STABLE)}}
    if svc.pdb_min_available is not None:
        spec["minAvailable"] = svc.pdb_min_available
    else:
        spec["maxUnavailable"] = 1
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": spec,
    }


def _ns_selector(names: list[str]) -> Obj:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(names)}]}


def _metrics_ports(svc: ModelService) -> list[int]:
    return [METRICS_PORT, AGENT_PORT] if svc.release is not None else [METRICS_PORT]


_DEFAULT_PORTS = {"https": 443, "s3": 443, "http": 80}
_LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")  # the node's instance metadata service


def model_store_ports(svc: ModelService) -> list[int]:
    """TCP ports a service's pods open to its model store: the release store (or its S3 endpoint), or
    Triton's own s3:// repository (S3 and, for the IRSA role, STS: both 443). None for a PVC."""
    rel, repo = svc.release, svc.model_repository
    if rel is not None:
        url = urlsplit(rel.s3_endpoint or rel.store)
        return [url.port or _DEFAULT_PORTS[url.scheme]]
    if repo is not None and repo.type == "s3":
        return [_DEFAULT_PORTS["s3"]]
    return []


def _ip_block(cidr: str) -> Obj:
    """An ipBlock peer; a CIDR that spans link-local leaves it out (no instance-metadata credentials)."""
    net = ipaddress.ip_network(cidr)
    if isinstance(net, ipaddress.IPv4Network) and net != _LINK_LOCAL and _LINK_LOCAL.subnet_of(net):
        return {"ipBlock": {"cidr": cidr, "except": [str(_LINK_LOCAL)]}}
    return {"ipBlock": {"cidr": cidr}}


def network_policy(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """Every server pod of the service, both tracks: inference from the callers, metrics from Prometheus;
    out, only the model store's port on ``networkPolicy.modelStoreCidrs`` (DNS: :func:`namespace_egress_policy`)."""
    callers = {cfg.namespace, *cfg.allowed_namespaces}
    if cfg.ingress.mode == "ingress":
        callers.add(cfg.ingress.controller_namespace)
    if cfg.ingress.mode == "gateway" and cfg.ingress.gateway_namespace:
        callers.add(cfg.ingress.gateway_namespace)
    tcp = "TCP"
    store = model_store_ports(svc)
    egress: list[Obj] = (
        [
            {
                "to": [_ip_block(c) for c in cfg.network_policy.model_store_cidrs],
                "ports": [{"port": p, "protocol": tcp} for p in store],
            }
        ]
        if store
        else []
    )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": {
            "podSelector": {"matchLabels": selector(svc)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": _ns_selector(sorted(callers))}],
                    "ports": [{"port": HTTP_PORT, "protocol": tcp}, {"port": GRPC_PORT, "protocol": tcp}],
                },
                {
                    # Metrics from Prometheus only (namespace AND pod selector in one peer).
                    "from": [
                        {
                            "namespaceSelector": _ns_selector([cfg.monitoring_namespace]),
                            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                        }
                    ],
                    "ports": [{"port": p, "protocol": tcp} for p in _metrics_ports(svc)],
                },
            ],
            "egress": egress,
        },
    }


def service_monitor(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """Triton's metrics, and with a release source the agent's (tritonops_release_*), as job "triton".

    It selects both tracks' Services and copies the pods' ``track`` label onto their series
    (podTargetLabels): the canary gate compares ``track="canary"`` with ``track="stable"``.
    """
    endpoints: list[Obj] = [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}]
    if svc.release is not None:
        endpoints.append({"port": AGENT_PORT_NAME, "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": {
            "jobLabel": JOB_LABEL,
            "selector": {"matchLabels": selector(svc)},
            "namespaceSelector": {"matchNames": [cfg.namespace]},
            "podTargetLabels": [TRACK_LABEL],
            "endpoints": endpoints,
        },
    }


def scaling_policy(svc: ModelService) -> ScalingPolicy:
    a = svc.autoscaling
    return ScalingPolicy(threshold=a.pending_per_replica, min_replicas=a.min_replicas, max_replicas=a.max_replicas)


SCALE_TO_ZERO_ANNOTATION = "tritonops.io/allow-scale-to-zero"  # the policy pack's sign of prod's consent


def _trigger_name(kind: str, model: str | None = None) -> str:
    return f"{kind}-{model}".lower().replace("_", "-").replace(".", "-").replace("~", "-") if model else kind


def scaling_triggers(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """The ScaledObject's triggers: pending requests per model; optionally served requests/s and queue
    time per model and GPU utilisation of the service's pods; with minReplicas 0, the ingress wake-up
    trigger."""
    a = svc.autoscaling
    policy = scaling_policy(svc)
    url = cfg.prometheus_url
    triggers = []
    for m in svc.models:
        triggers.append({**prometheus_trigger(m.name, url, policy=policy), "name": _trigger_name("pending", m.name)})
    if a.requests_per_replica is not None:
        for m in svc.models:
            trig = keda.trigger(keda.request_rate_query(m.name, policy.window), url, threshold=a.requests_per_replica)
            triggers.append({**trig, "name": _trigger_name("rate", m.name)})
    if a.queue_ms_per_replica is not None:
        for m in svc.models:
            trig = keda.trigger(keda.queue_time_query(m.name, policy.window), url, threshold=a.queue_ms_per_replica)
            triggers.append({**trig, "name": _trigger_name("queue", m.name)})
    if a.gpu_utilization_per_replica is not None:
        expr = keda.gpu_utilization_query(cfg.namespace, name_of(svc), policy.window)
        # Activation at the target: a GPU idling at a few percent must not keep a service awake.
        # While pods run, DCGM always reports their GPUs: an empty result is an exporter outage, a scaler
        # error that counts towards the fallback (not "0 %"). At zero pods empty is normal.
        target = a.gpu_utilization_per_replica
        trig = keda.trigger(expr, url, threshold=target, activation_threshold=target,
                            ignore_null_values=a.min_replicas == 0)
        triggers.append({**trig, "name": "gpu"})
    if a.min_replicas == 0:
        # Triton's series vanish with its pods: ingress-nginx's counter is what wakes the service.
        ingress_names = [o["metadata"]["name"] for o in ingresses(cfg, svc)]
        expr = keda.ingress_requests_query(cfg.namespace, ingress_names, policy.window)
        trig = keda.trigger(expr, url, threshold=keda.WAKE_TARGET, activation_threshold=a.activation_requests)
        triggers.append({**trig, "name": "wake"})
    return triggers


def scaled_object(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """KEDA ScaledObject: pending requests per replica, summed over the service's models, and the
    optional triggers of :func:`scaling_triggers`; KEDA follows whichever asks for the most replicas.

    When Prometheus is unreachable for ``fallback_failure_threshold`` polls, KEDA falls back with
    ``currentReplicasIfHigher``: the larger of the current count and ``max(1, minReplicas)``, so an
    outage of the metrics pipeline never scales serving down, nor to zero (KEDA 2.17 scales a
    ScaledObject to zero on trigger errors unless fallback.replicas is not 0).
    """
    a = svc.autoscaling
    meta = _meta(name_of(svc), cfg, svc)
    scale_to_zero: Obj = {}
    if a.min_replicas == 0:
        scale_to_zero["cooldownPeriod"] = a.cooldown_period
        if a.allow_scale_to_zero:
            meta["annotations"] = {**meta.get("annotations", {}), SCALE_TO_ZERO_ANNOTATION: "true"}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name_of(svc)},
            "pollingInterval": a.polling_interval,
            **scale_to_zero,
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "fallback": {
                "failureThreshold": a.fallback_failure_threshold,
                "replicas": max(1, a.min_replicas),
                "behavior": "currentReplicasIfHigher",
            },
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleDown": {
                            "stabilizationWindowSeconds": 300,
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
                        },
                        "scaleUp": {
                            "stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                        },
                    }
                }
            },
            "triggers": scaling_triggers(cfg, svc),
        },
    }


def _hosts(cfg: TritonStackConfig, svc: ModelService) -> tuple[str, str]:
    http = svc.ingress_host or f"{svc.name}.{cfg.ingress.host_suffix}"
    return http, f"grpc-{http}"


# --- what the routers expose: the KServe v2 inference protocol, nothing else --------------------
# Health, server metadata and, per model, metadata, readiness and inference. Not routed: the model
# repository (/v2/repository/*, load/unload), model config and statistics, shared memory, trace and
# logging (Triton's restricted APIs, for in-cluster admins with the header), nor versioned paths
# (/v2/models/<m>/versions/<v>/...: the routers serve the version policy's choice).
HTTP_SERVER_PATHS = ("/v2", "/v2/health/live", "/v2/health/ready")
HTTP_MODEL_SUFFIXES = ("", "/ready", "/infer")
GRPC_SERVICE = "inference.GRPCInferenceService"
GRPC_METHODS = (
    "ServerLive",
    "ServerReady",
    "ServerMetadata",
    "ModelReady",
    "ModelMetadata",
    "ModelInfer",
    "ModelStreamInfer",
)
HTTPROUTE_MATCHES_PER_RULE = 64  # Gateway API: at most 64 matches in a rule (and < 128 in a route)


def http_paths(svc: ModelService) -> list[str]:
    """The exact HTTP paths a router sends to Triton."""
    return [*HTTP_SERVER_PATHS, *(f"/v2/models/{m.name}{s}" for m in svc.models for s in HTTP_MODEL_SUFFIXES)]


def grpc_paths() -> list[str]:
    """The gRPC methods a router sends to Triton, as HTTP/2 paths (/package.Service/Method)."""
    return [f"/{GRPC_SERVICE}/{m}" for m in GRPC_METHODS]


CANARY_ANNOTATION = "nginx.ingress.kubernetes.io/canary"
CANARY_WEIGHT_ANNOTATION = "nginx.ingress.kubernetes.io/canary-weight"


def ingresses(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """ingress-nginx Ingresses: HTTP/REST, and gRPC (backend-protocol GRPC, needs TLS for HTTP/2), each
    on the exact paths of :func:`http_paths` and :func:`grpc_paths` only.

    With a canary, each gets a twin on the same host and paths marked ``canary: "true"`` with
    ``canary-weight``: ingress-nginx sends that percentage of the host's requests to the canary's
    Service and the rest to the main Ingress's (stable) Service.
    """
    http_host, grpc_host = _hosts(cfg, svc)
    tracks = [STABLE, CANARY] if canary_of(svc) is not None else [STABLE]
    routes = (("http", http_host, "http", "HTTP", http_paths(svc)), ("grpc", grpc_host, "grpc", "GRPC", grpc_paths()))
    out = []
    for track in tracks:
        for kind, host, port, proto, paths in routes:
            backend = {"service": {"name": track_name(svc, track), "port": {"name": port}}}
            spec: Obj = {
                "ingressClassName": cfg.ingress.class_name,
                "rules": [
                    {
                        "host": host,
                        "http": {"paths": [{"path": p, "pathType": "Exact", "backend": backend} for p in paths]},
                    }
                ],
            }
            if cfg.ingress.tls_secret:
                spec["tls"] = [{"hosts": [host], "secretName": cfg.ingress.tls_secret}]
            annotations = {
                "nginx.ingress.kubernetes.io/backend-protocol": proto,
                "nginx.ingress.kubernetes.io/proxy-body-size": "64m",
            }
            if track == CANARY:
                annotations |= {CANARY_ANNOTATION: "true", CANARY_WEIGHT_ANNOTATION: str(_canary(svc).weight)}
            out.append(
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "Ingress",
                    "metadata": _meta(f"{track_name(svc, track)}-{kind}", cfg, svc, annotations=annotations),
                    "spec": spec,
                }
            )
    return out


def _backend_refs(svc: ModelService, port: int) -> list[Obj]:
    """One backendRef to the stable Service; with a canary, weights (percent) on both Services."""
    canary = canary_of(svc)
    if canary is None:
        return [{"name": name_of(svc), "port": port}]
    return [
        {"name": track_name(svc, STABLE), "port": port, "weight": 100 - canary.weight},
        {"name": track_name(svc, CANARY), "port": port, "weight": canary.weight},
    ]


def gateway_routes(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """An HTTPRoute (exact paths of :func:`http_paths`) and a GRPCRoute (exact methods of
    ``inference.GRPCInferenceService``); with a canary their backendRefs split the requests by weight.
    A request that matches no rule gets 404 from the gateway and never reaches Triton."""
    http_host, grpc_host = _hosts(cfg, svc)
    parent = {
        "name": cfg.ingress.gateway_name,
        **({"namespace": cfg.ingress.gateway_namespace} if cfg.ingress.gateway_namespace else {}),
    }
    paths = http_paths(svc)
    n = HTTPROUTE_MATCHES_PER_RULE
    http_rules = [
        {
            "matches": [{"path": {"type": "Exact", "value": p}} for p in paths[i : i + n]],
            "backendRefs": _backend_refs(svc, HTTP_PORT),
        }
        for i in range(0, len(paths), n)
    ]
    grpc_matches = [{"method": {"type": "Exact", "service": GRPC_SERVICE, "method": m}} for m in GRPC_METHODS]
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": _meta(f"{name_of(svc)}-http", cfg, svc),
            "spec": {"parentRefs": [parent], "hostnames": [http_host], "rules": http_rules},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GRPCRoute",
            "metadata": _meta(f"{name_of(svc)}-grpc", cfg, svc),
            "spec": {
                "parentRefs": [parent],
                "hostnames": [grpc_host],
                "rules": [{"matches": grpc_matches, "backendRefs": _backend_refs(svc, GRPC_PORT)}],
            },
        },
    ]


def service_objects(cfg: TritonStackConfig, svc: ModelService, role_arn: Any = None) -> list[Obj]:
    """Everything one model service needs, in apply order (``role_arn``: see :func:`service_account`)."""
    budget = service_budget(svc, cfg)
    canary = [CANARY] if canary_of(svc) is not None else []
    objs = [
        service_account(cfg, svc, role_arn),
        deployment(cfg, svc, budget),
        *[deployment(cfg, svc, budget, track) for track in canary],
        service(cfg, svc),
        *[service(cfg, svc, track) for track in canary],
        pod_disruption_budget(cfg, svc),
        network_policy(cfg, svc),
        service_monitor(cfg, svc),
    ]
    if svc.autoscaling.enabled:
        objs.append(scaled_object(cfg, svc))
    if cfg.ingress.mode == "ingress":
        objs += ingresses(cfg, svc)
    elif cfg.ingress.mode == "gateway":
        objs += gateway_routes(cfg, svc)
    from tritonops.k8s.drift import drift_objects  # builds on this module: imported here, not at the top

    return objs + drift_objects(cfg, svc)  # CronJob: the live Triton vs svc.models (infra/tritonops/k8s/drift.py)


# --- once per stack ------------------------------------------------------------------------------


def namespace(cfg: TritonStackConfig) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": cfg.namespace,
            "labels": {
                **labels(cfg),
                "pod-security.kubernetes.io/enforce": cfg.pod_security,
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
        },
    }


def priority_class(cfg: TritonStackConfig) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS, "labels": labels(cfg)},
        "value": cfg.priority,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "Triton Inference Server pods: scheduled ahead of batch work on GPU nodes.",
    }


def _widest_policy(cfg: TritonStackConfig) -> ScalingPolicy:
    """The scaling bounds the shared alert rules use: the largest maxReplicas of any service."""
    widest = max(cfg.model_services, key=lambda s: s.autoscaling.max_replicas)
    return scaling_policy(widest)


def prometheus_rule(cfg: TritonStackConfig) -> Obj:
    groups = rule_groups(RuleSettings(job=SCRAPE_JOB, scaling=_widest_policy(cfg)))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("tritonops", cfg),
        "spec": {"groups": groups},
    }


def dashboards_config_map(cfg: TritonStackConfig) -> Obj:
    """Grafana's dashboard sidecar loads every ConfigMap carrying the dashboard label."""
    meta = _meta("tritonops-dashboards", cfg)
    meta["labels"] = {**meta["labels"], cfg.grafana_dashboard_label: "1"}
    data = {
        fname: json.dumps(d, sort_keys=True)
        for fname, d in sorted(dashboards(_widest_policy(cfg), job=SCRAPE_JOB).items())
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def admin_secret(cfg: TritonStackConfig, token: Any) -> Obj:
    """The header value guarding Triton's admin APIs (``token`` is a Pulumi secret under ``pulumi up``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(cfg.admin_api.secret_name, cfg),
        "type": "Opaque",
        "stringData": {cfg.admin_api.secret_key: token},
    }


DEFAULT_DENY = "default-deny"
NAMESPACE_EGRESS = "namespace-egress"


def default_deny_policy(cfg: TritonStackConfig) -> Obj:
    """Every pod of the namespace isolated both ways: what no other NetworkPolicy allows is refused."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(DEFAULT_DENY, cfg),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def namespace_egress_policy(cfg: TritonStackConfig) -> Obj:
    """What every pod of the namespace may reach: the cluster DNS, and the namespace's Triton servers'
    HTTP and gRPC ports (in-namespace callers, e.g. the drift check; the servers' policy admits them).
    The drift check's paths to the agents' port are its own (``tritonops.k8s.drift``)."""
    dns = cfg.network_policy.dns
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(NAMESPACE_EGRESS, cfg),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": _ns_selector([dns.namespace]),
                            "podSelector": {"matchLabels": dict(dns.pod_labels)},
                        }
                    ],
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
                },
                {
                    "to": [{"podSelector": {"matchLabels": dict(SERVER_POD_LABELS)}}],
                    "ports": [{"port": p, "protocol": "TCP"} for p in (HTTP_PORT, GRPC_PORT)],
                },
            ],
        },
    }


KUBE_API_EGRESS = "kube-api-egress"
KUBE_API_CLIENTS = {"app.kubernetes.io/component": "drift-check"}  # infra/tritonops/k8s/drift.py's pods list pods


def kube_api_egress_policy(cfg: TritonStackConfig) -> Obj:
    """The drift check's pods may reach the Kubernetes API (443, 6443) on ``networkPolicy.apiServerCidrs``."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(KUBE_API_EGRESS, cfg),
        "spec": {
            "podSelector": {"matchLabels": dict(KUBE_API_CLIENTS)},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [_ip_block(c) for c in cfg.network_policy.api_server_cidrs],
                    "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
                }
            ],
        },
    }


def namespace_objects(cfg: TritonStackConfig) -> list[Obj]:
    return [
        namespace(cfg),
        default_deny_policy(cfg),
        namespace_egress_policy(cfg),
        kube_api_egress_policy(cfg),
        priority_class(cfg),
        prometheus_rule(cfg),
        dashboards_config_map(cfg),
        agent_config_map(cfg),
        *trusted_keys_config_maps(cfg),
    ]
