"""What reaches a Triton model service and what it reaches: the routers (ingress-nginx Ingresses, Gateway
API HTTPRoute and GRPCRoute, canary weights included) and the namespace's NetworkPolicies.

The routers expose the KServe v2 inference protocol and nothing else (:func:`http_paths`,
:func:`grpc_paths`); the NetworkPolicies deny everything in and out that they do not name.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import (
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    SERVER_POD_LABELS,
    Obj,
    canary_of,
    name_of,
    object_meta,
    require_canary,
    selector,
    track_name,
)
from tritonops.k8s.stacks.triton.release_agent import AGENT_PORT
from tritonops.observability.metrics import CANARY, STABLE
from tritonops.stores import KINDS
from tritonops.versions import ENVOY_GATEWAY_NAMESPACE


def hosts(cfg: TritonStackConfig, svc: ModelService) -> tuple[str, str]:
    """The HTTP and gRPC host names the routers serve a model service on."""
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
    http_host, grpc_host = hosts(cfg, svc)
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
                annotations |= {CANARY_ANNOTATION: "true", CANARY_WEIGHT_ANNOTATION: str(require_canary(svc).weight)}
            out.append(
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "Ingress",
                    "metadata": object_meta(f"{track_name(svc, track)}-{kind}", cfg, svc, annotations=annotations),
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
    http_host, grpc_host = hosts(cfg, svc)
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
            "metadata": object_meta(f"{name_of(svc)}-http", cfg, svc),
            "spec": {"parentRefs": [parent], "hostnames": [http_host], "rules": http_rules},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GRPCRoute",
            "metadata": object_meta(f"{name_of(svc)}-grpc", cfg, svc),
            "spec": {
                "parentRefs": [parent],
                "hostnames": [grpc_host],
                "rules": [{"matches": grpc_matches, "backendRefs": _backend_refs(svc, GRPC_PORT)}],
            },
        },
    ]


# Envoy Gateway's policy kind for how a route reaches its backends (CRD of the contract's Envoy Gateway chart).
BACKEND_TRAFFIC_POLICY = ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy")


def wake_routing_policy(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """A BackendTrafficPolicy that makes Envoy Gateway route the service's HTTPRoute and GRPCRoute to the Services'
    cluster IPs (``routingType: Service``) instead of to their pods' endpoints: rendered for a service that may
    scale to zero, so the request that must wake it is counted on the route rule's cluster.

    Why (Envoy Gateway v1.9.0 source, internal/gatewayapi/route.go, read 2026-12-07; the v1.9.1 release notes
    list no change to it): with endpoint routing, the default, a Service without ready endpoints makes the
    translator give the rule a 503 *direct response* ("setting 503 direct response in routes due to no ready
    endpoints"), and Envoy's router answers a direct response before it picks a cluster (envoyproxy/envoy
    source/common/router/router.cc, ``Filter::decodeHeaders``: only ``rq_direct_response`` grows), so no counter
    naming the route moves and KEDA never sees the request. With service routing the rule keeps its cluster
    ``<httproute|grpcroute>/<ns>/<route>/rule/<i>`` whose one endpoint is the cluster IP; with no pods kube-proxy
    rejects the connection (kubernetes pkg/proxy/iptables/proxier.go: REJECT for a Service port without
    endpoints), and the router charges the 503 it answers to that cluster (``chargeUpstreamAbort`` ->
    ``chargeUpstreamCode``): ``envoy_cluster_upstream_rq_xx`` grows
    (tritonops.observability.keda_trigger.GATEWAY_REQUESTS).
    The price: kube-proxy, not Envoy, spreads connections over the pods (per connection, not per request), so
    only services that may scale to zero get it. Not run against a live Envoy Gateway here."""
    routes = gateway_routes(cfg, svc)
    api_version, kind = BACKEND_TRAFFIC_POLICY
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": object_meta(f"{name_of(svc)}-wake", cfg, svc),
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": r["kind"], "name": r["metadata"]["name"]}
                for r in routes
            ],
            "routingType": "Service",
        },
    }


# --- NetworkPolicies ------------------------------------------------------------------------------


def _ns_selector(names: list[str]) -> Obj:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(names)}]}


def _metrics_ports(svc: ModelService) -> list[int]:
    return [METRICS_PORT, AGENT_PORT] if svc.release is not None else [METRICS_PORT]


_DEFAULT_PORTS = {scheme: port for kind in KINDS for scheme, port in kind.ports.items()}  # tritonops.stores
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
    if cfg.ingress.mode == "gateway":
        # Envoy Gateway runs the Gateway's Envoy proxies in its own namespace, not the Gateway's.
        callers.add(ENVOY_GATEWAY_NAMESPACE)
        if cfg.ingress.gateway_namespace:
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
        "metadata": object_meta(name_of(svc), cfg, svc),
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


DEFAULT_DENY = "default-deny"
NAMESPACE_EGRESS = "namespace-egress"


def default_deny_policy(cfg: TritonStackConfig) -> Obj:
    """Every pod of the namespace isolated both ways: what no other NetworkPolicy allows is refused."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(DEFAULT_DENY, cfg),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def namespace_egress_policy(cfg: TritonStackConfig) -> Obj:
    """What every pod of the namespace may reach: the cluster DNS, and the namespace's Triton servers'
    HTTP and gRPC ports (in-namespace callers, e.g. the drift check; the servers' policy admits them).
    The drift check's paths to the agents' port are its own (``tritonops.k8s.stacks.triton.drift_cronjob``)."""
    dns = cfg.network_policy.dns
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(NAMESPACE_EGRESS, cfg),
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
KUBE_API_CLIENTS = {"app.kubernetes.io/component": "drift-check"}  # drift.py's pods list pods


def kube_api_egress_policy(cfg: TritonStackConfig) -> Obj:
    """The drift check's pods may reach the Kubernetes API (443, 6443) on ``networkPolicy.apiServerCidrs``."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(KUBE_API_EGRESS, cfg),
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
