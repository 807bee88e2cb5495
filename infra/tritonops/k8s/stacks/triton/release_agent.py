"""The release agent's containers, volumes and ConfigMaps in a pull-mode Triton pod.

A model service with a ``release`` source runs the release agent (``tritonops.agent``, shipped as one
zipapp in the ``tritonops-agent`` ConfigMap) in the Triton image, so no other image is pulled:

    init container ``release-sync``   agent ``sync``: the channel's release, verified, into an emptyDir
    container ``triton``              --model-repository=<the agent's models link>, explicit mode
    container ``release-agent``       agent ``pull``: new releases through the repository API, golden
                                      gate, rollback; /metrics (tritonops_release_*) and /ready

:func:`release_agent_args` is the agent's argv, once, for the pod and for tests that run it. A
canary's pods (``release.canary``) run the same containers on the canary's channel.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from collections.abc import Sequence

from tritonops.agent_bundle import build_bytes
from tritonops.core.triton_http import SECRET_ENV as AGENT_SECRET_ENV
from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import (
    HTTP_PORT,
    Obj,
    check_track,
    container_security_context,
    object_meta,
    require_canary,
)
from tritonops.k8s.registry_source import registry_env, registry_mounts, registry_volumes
from tritonops.observability.metrics import CANARY, STABLE

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
REPORT_KEY_DIR = "/etc/tritonops/report-key"
REPORT_KEY = "report.key"  # the key of release.reportKeySecret: the private key the status reports are signed with
REPORT_KEY_PATH = f"{REPORT_KEY_DIR}/{REPORT_KEY}"
NODE_CACHE = "tritonops-node-cache"  # the node cache's DaemonSet and node-local Service (node_cache.py)
AGENT_PORT, AGENT_PORT_NAME = 8003, "agent-metrics"
TRITON_LOCAL_URL = f"http://127.0.0.1:{HTTP_PORT}"  # the sidecar reaches Triton inside the pod
# The agent's own per-step limits (infra/tritonops/agent/cli.py --load-timeout, --golden-timeout): a switch
# to a new release may keep /ready at 503 that long before it is marked or rolled back.
AGENT_LOAD_TIMEOUT_S, AGENT_GOLDEN_TIMEOUT_S = 600, 120
AGENT_PROBE_PERIOD_S = 10


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
    cache_url: str | None = None,
    s3_endpoint: str | None = None,
    groups: Sequence[str] = (),
    report: bool = False,
    report_key: str | os.PathLike[str] | None = None,
    store_name: str | None = None,
) -> list[str]:
    """The release agent's argv after ``python3 tritonops-agent.pyz`` (or ``python -m tritonops.agent``).

    ``command`` is ``sync`` (the init container: put the channel's release in place) or ``pull``
    (the sidecar: keep on the channel; ``triton_url``, ``header``, ``listen``, ``interval`` and the
    rollout's ``groups``, ``report`` and ``report_key`` apply to it only); ``store_name``: the name the store's
    signed root carries (``--store-name``: any other store's metadata refused). Secrets never appear here:
    the agent reads the admin header's value and S3 credentials from its environment, and the report
    key from a file.
    """
    if command not in ("sync", "pull"):
        raise ValueError(f"command: {command!r} is not sync or pull")
    if not trusted_keys:
        raise ValueError("trusted_keys: at least one public key (an unsigned release never reaches Triton)")
    pull_only = {"triton_url": triton_url, "header": header, "listen": listen, "interval": interval,
                 "groups": list(groups) or None, "report": report or None, "report_key": report_key}
    if command == "sync" and any(v is not None for v in pull_only.values()):
        given = sorted(k for k, v in pull_only.items() if v is not None)
        raise ValueError(f"{', '.join(given)}: only for pull (sync runs before Triton starts)")
    args = [command, "--store", store, "--channel", channel, "--link", str(link), "--releases", str(releases_dir)]
    for key in trusted_keys:
        args += ["--trusted-key", str(key)]
    if store_name is not None:
        args += ["--store-name", store_name]
    if cache is not None:
        args += ["--cache", str(cache)]
    if cache_url is not None:
        args += ["--cache-url", cache_url]
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
    for group in groups:
        args += ["--group-label", group]
    if report:
        args.append("--report")
    if report_key is not None:
        if not report:
            raise ValueError("report_key: signs status reports, which report=False does not write")
        args += ["--report-key", str(report_key)]
    return args


@functools.cache
def agent_bundle() -> tuple[bytes, str]:
    """The agent zipapp (``tritonops.agent_bundle.build_bytes``) and its sha256."""
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
        "metadata": object_meta(AGENT_CONFIG_MAP, cfg, annotations={AGENT_SHA_ANNOTATION: sha}),
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
    check_track(svc, track)
    return require_canary(svc).channel if track == CANARY else rel.channel


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
            cache_url=node_cache_url(cfg) if rel.node_cache else None,
            s3_endpoint=rel.s3_endpoint,
            groups=rel.groups if pull else (),
            report=rel.reports and pull,
            report_key=REPORT_KEY_PATH if pull and rel.report_key_secret else None,
            store_name=rel.store_name,
        ),
    ]


def node_cache_url(cfg: TritonStackConfig) -> str:
    """What a pod's agent reads files from (``--cache-url``): its own node's cache daemon, by the Service
    whose ``internalTrafficPolicy: Local`` keeps the traffic on the node."""
    return f"http://{NODE_CACHE}.{cfg.node_cache.namespace}.svc:{cfg.node_cache.port}"


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
    return env + registry_env(rel)


def _agent_mounts(svc: ModelService, pull: bool) -> list[Obj]:
    assert svc.release is not None
    mounts: list[Obj] = [
        {"name": "releases", "mountPath": RELEASE_ROOT},
        agent_mount(),
        {"name": "trusted-keys", "mountPath": TRUSTED_KEYS_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},  # openssl's signature check writes temporary files
    ]
    if pull and svc.release.report_key_secret:
        mounts.append({"name": "report-key", "mountPath": REPORT_KEY_DIR, "readOnly": True})
    return mounts + registry_mounts(svc.release)


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
        "volumeMounts": _agent_mounts(svc, pull=command == "pull"),
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
    if rel.report_key_secret:  # the sidecar's only: 0440, group fsGroup (the pod's uid reads it, no one else)
        items = [{"key": REPORT_KEY, "path": REPORT_KEY}]
        volumes.append({"name": "report-key",
                        "secret": {"secretName": rel.report_key_secret, "items": items, "defaultMode": 0o440}})
    return volumes + registry_volumes(rel)


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
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(name, cfg), "data": data}
        for name, data in sorted(maps.items())
    ]
