"""The node cache: one release-file cache per node, that the Triton pods use without any privilege.

Why a DaemonSet serving over the node-local network, and not the other two ways a pod could see a node
folder under Pod Security ``restricted`` (the Triton namespace's level):

* a CSI ephemeral volume (``csi`` is a restricted volume type) needs a CSI driver that is the cache: none
  exists for a content-addressed, signature-checked release cache, and writing one means a privileged
  node plugin anyway, plus the driver's registration, gRPC and its own release cycle;
* an image volume (KEP-4639) is beta and off by default up to Kubernetes 1.34 and needs containerd 2.1:
  EKS enables no off-by-default gate, and a release as an OCI image would be cached, evicted and
  garbage-collected by kubelet's image GC, with no quota or pins of its own;
* a DaemonSet in a namespace of its own (Pod Security ``privileged`` there, for its one hostPath
  folder) serving the node's pods over HTTP through a Service with ``internalTrafficPolicy: Local``
  (GA since 1.26: each pod reaches its own node's daemon, never another node's) runs on every EKS
  version with nothing to install, and its server is the release agent itself (``tritonops-agent cache
  serve``: standard library, the same cache code as an edge node's). The Triton pods mount nothing of the
  node: their ``release-sync`` reads each file from the daemon (``--cache-url``) and checks its sha256 and
  signed length as it would the store's; a daemon that does not answer costs the store read, nothing else.

The daemon also prefetches the channels of the services that use it (their current and staged
releases, at most ``nodeCache.maxRateBytes`` per second), so a node warms its cache when it joins and a
published release is on the nodes before a pod asks. Its namespace holds copies of the agent zipapp and
of the trusted-keys ConfigMaps the stack creates; a trusted-keys Secret or an s3 credentials Secret must
exist in it too (the stack lists them as prerequisites of the Triton namespace's).
"""

from __future__ import annotations

from tritonops.k8s.config import ModelService, NodeCacheConfig, TritonStackConfig
from tritonops.k8s.labels import (
    GPU_RESOURCE,
    NODE_POOL_LABEL,
    SERVER_POD_LABELS,
    TRITON_UID,
    Obj,
    container_security_context,
    labels,
    pod_security_context,
)
from tritonops.k8s.registry_source import registry_mounts
from tritonops.k8s.stacks.triton.release_agent import (
    AGENT_PATH,
    NODE_CACHE,
    TRUSTED_KEYS_DIR,
    _agent_env,
    agent_config_map,
    agent_mount,
    agent_volume,
    release_volumes,
    trusted_keys_config_maps,
)

NAME = NODE_CACHE
CACHE_DIR = "/var/cache/tritonops"  # the mount path of the node folder in the daemon
COMPONENT = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "node-cache"}


def users(cfg: TritonStackConfig) -> list[ModelService]:
    """The model services whose pods read through the node cache."""
    return [s for s in cfg.model_services if s.release is not None and s.release.node_cache]


def _meta(cfg: TritonStackConfig, nc: NodeCacheConfig, name: str = NAME) -> Obj:
    return {"name": name, "namespace": nc.namespace, "labels": {**labels(cfg), **COMPONENT}}


def _channels(svcs: list[ModelService]) -> list[str]:
    out = []
    for svc in svcs:
        assert svc.release is not None
        out += [svc.release.channel] + ([svc.release.canary.channel] if svc.release.canary else [])
    return sorted(set(out))


def _args(cfg: TritonStackConfig, nc: NodeCacheConfig, svcs: list[ModelService]) -> list[str]:
    rel = svcs[0].release
    assert rel is not None
    args = ["python3", AGENT_PATH, "cache", "serve", "--cache", CACHE_DIR, "--listen", f"0.0.0.0:{nc.port}",
            "--store", rel.store, "--quota", str(nc.quota_bytes)]
    if rel.s3_endpoint:
        args += ["--s3-endpoint", rel.s3_endpoint]
    if rel.store_name:
        args += ["--store-name", rel.store_name]
    if nc.max_rate_bytes:
        args += ["--max-rate", str(nc.max_rate_bytes)]
    for key in rel.trusted_keys.keys:
        args += ["--trusted-key", f"{TRUSTED_KEYS_DIR}/{key}"]
    for channel in _channels(svcs):
        args += ["--channel", channel]
    return args


def daemon_set(cfg: TritonStackConfig) -> Obj:
    nc = cfg.node_cache
    svcs = users(cfg)
    assert svcs
    rel = svcs[0].release
    assert rel is not None
    # The store's keys and a registry's credentials, as the pods have them (not their releases or report key).
    volumes = [v for v in release_volumes(svcs[0]) if v["name"] not in ("releases", "agent", "report-key")]
    pools = sorted({s.node_pool for s in svcs})
    owner = {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
             "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(cfg, nc),
        "spec": {
            "selector": {"matchLabels": dict(COMPONENT)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {**labels(cfg), **COMPONENT}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security_context(),
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": NODE_POOL_LABEL, "operator": "In", "values": pools}]}]}}},
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    # kubelet makes a missing node folder owned by root: hand it to the agent's uid, once.
                    "initContainers": [{
                        "name": "cache-owner",
                        "image": svcs[0].image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["chown", f"{TRITON_UID}:{TRITON_UID}", CACHE_DIR],
                        "resources": {"requests": {"cpu": nc.cpu, "memory": nc.memory},
                                      "limits": {"memory": nc.memory}},
                        "securityContext": owner,
                        "volumeMounts": [{"name": "cache", "mountPath": CACHE_DIR}],
                    }],
                    "containers": [{
                        "name": "node-cache",
                        "image": svcs[0].image,  # the Triton image the node pulls anyway: python3 and openssl
                        "imagePullPolicy": "IfNotPresent",
                        "command": _args(cfg, nc, svcs),
                        "env": _agent_env(cfg, svcs[0], admin=False),
                        "ports": [{"name": "node-cache", "containerPort": nc.port, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "node-cache"}, "periodSeconds": 10},
                        "livenessProbe": {"httpGet": {"path": "/ready", "port": "node-cache"}, "periodSeconds": 10,
                                          "failureThreshold": 6},
                        "resources": {"requests": {"cpu": nc.cpu, "memory": nc.memory},
                                      "limits": {"memory": nc.memory}},
                        "securityContext": container_security_context(),
                        "volumeMounts": [
                            {"name": "cache", "mountPath": CACHE_DIR},
                            agent_mount(),
                            {"name": "trusted-keys", "mountPath": TRUSTED_KEYS_DIR, "readOnly": True},
                            {"name": "tmp", "mountPath": "/tmp"},  # openssl's signature check
                            *registry_mounts(rel),
                        ],
                    }],
                    "volumes": [
                        {"name": "cache", "hostPath": {"path": nc.host_path, "type": "DirectoryOrCreate"}},
                        agent_volume(),
                        *volumes,
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }


def node_cache_objects(cfg: TritonStackConfig) -> list[Obj]:
    """The node cache's namespace, its copies of the agent and trusted keys, DaemonSet, node-local Service
    and network policies (both sides); none when no model service reads through it."""
    nc = cfg.node_cache
    if not users(cfg):
        return []
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": nc.namespace, "labels": {
            **labels(cfg),
            "pod-security.kubernetes.io/enforce": "privileged",  # the hostPath folder: this namespace only
            "pod-security.kubernetes.io/warn": "baseline",
            "pod-security.kubernetes.io/audit": "baseline",
        }},
    }
    copies = []
    for obj in [agent_config_map(cfg), *trusted_keys_config_maps(cfg)]:
        copies.append({**obj, "metadata": {**obj["metadata"], "namespace": nc.namespace}})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, nc),
        "spec": {
            "selector": dict(COMPONENT),
            "internalTrafficPolicy": "Local",  # a pod reaches its own node's cache, or nothing (then the store)
            "ports": [{"name": "node-cache", "port": nc.port, "targetPort": "node-cache", "protocol": "TCP"}],
        },
    }
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cfg, nc),
        "spec": {
            "podSelector": {"matchLabels": dict(COMPONENT)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg.namespace}},
                                   "podSelector": {"matchLabels": dict(SERVER_POD_LABELS)}}],
                         "ports": [{"port": nc.port, "protocol": "TCP"}]}],
        },
    }
    egress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "node-cache-egress", "namespace": cfg.namespace, "labels": labels(cfg)},
        "spec": {
            "podSelector": {"matchLabels": dict(SERVER_POD_LABELS)},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": nc.namespace}},
                                "podSelector": {"matchLabels": dict(COMPONENT)}}],
                        "ports": [{"port": nc.port, "protocol": "TCP"}]}],
        },
    }
    return [namespace, *copies, daemon_set(cfg), service, ingress, egress]
