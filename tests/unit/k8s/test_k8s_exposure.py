"""What the stacks expose: routes (Ingress, HTTPRoute, GRPCRoute), NetworkPolicies, Grafana's login.

Routes are judged by the matching rules of their own API (Ingress: Exact/Prefix; Gateway API: a rule
without matches matches every path, PathPrefix "/"): the paths and gRPC methods a request may take to
Triton, and those it may not. NetworkPolicies are judged by what they let through, with Kubernetes'
semantics (a pod selected by a policy of a direction is isolated in it; policies add up).
"""

from __future__ import annotations

import copy
import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_harness import Mocks, direct_prod_services, legacy_ingress, run_program
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s.config import ConfigError, PlatformConfig, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.render import build, render
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.platform import charts as platform
from tritonops.k8s.stacks.triton import exposure, release_agent, workload
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.k8s.stacks.triton.checks import GATEWAY_MAX_MODELS
from tritonops.triton.args import RESTRICTED_APIS

Obj = dict[str, Any]


def _triton(env: str, **overrides: Any) -> TritonStackConfig:
    raw = copy.deepcopy(read_stack_file("triton", env)[0]) | overrides
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _objects(cfg: TritonStackConfig) -> list[Obj]:
    return [*triton.namespace_objects(cfg), *(o for s in cfg.model_services for o in triton.service_objects(cfg, s))]


# --- routes --------------------------------------------------------------------------------------

def _routed_http(m1: str, m2: str) -> list[str]:
    return ["/v2", "/v2/health/live", "/v2/health/ready", f"/v2/models/{m1}", f"/v2/models/{m1}/ready",
            f"/v2/models/{m1}/infer", f"/v2/models/{m2}/infer"]


def _unrouted_http(m1: str) -> list[str]:
    return ["/v2/repository/index", f"/v2/repository/models/{m1}/load", "/v2/repository/models/x/unload",
            f"/v2/models/{m1}/config", f"/v2/models/{m1}/stats", "/v2/models/stats",
            "/v2/systemsharedmemory/status", "/v2/cudasharedmemory/region/r/register", "/v2/trace/setting",
            "/v2/logging", f"/v2/models/{m1}/trace/setting", "/v2/models/unknown/infer", "/metrics", "/"]


# dev serves examples/model_repository's models, prod its own.
ROUTED_HTTP = {"dev": _routed_http("mlp", "pipeline"), "prod": _routed_http("resnet50", "densenet_onnx")}
UNROUTED_HTTP = {"dev": _unrouted_http("mlp"), "prod": _unrouted_http("resnet50")}
ROUTED_GRPC = ["ServerLive", "ServerReady", "ServerMetadata", "ModelReady", "ModelMetadata", "ModelInfer",
               "ModelStreamInfer"]
UNROUTED_GRPC = ["RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload", "ModelConfig", "ModelStatistics",
                 "SystemSharedMemoryRegister", "CudaSharedMemoryStatus", "TraceSetting", "LogSettings"]


def _ingress_routes(ing: Obj, path: str) -> bool:
    for rule in ing["spec"]["rules"]:
        for p in rule["http"]["paths"]:
            if p["pathType"] == "Exact" and path == p["path"]:
                return True
            if p["pathType"] == "Prefix":
                prefix = p["path"].rstrip("/")
                if path == prefix or path.startswith(prefix + "/"):
                    return True
    return False


def _httproute_routes(route: Obj, path: str) -> bool:
    for rule in route["spec"]["rules"]:
        for m in rule.get("matches") or [{"path": {"type": "PathPrefix", "value": "/"}}]:
            kind, value = m["path"]["type"], m["path"]["value"]
            if (kind == "Exact" and path == value) or (
                kind == "PathPrefix" and (path == value or path.startswith(value.rstrip("/") + "/"))
            ):
                return True
    return False


def _grpcroute_routes(route: Obj, service: str, method: str) -> bool:
    for rule in route["spec"]["rules"]:
        for m in rule.get("matches") or [{}]:
            want = m.get("method") or {}
            if want.get("service", service) == service and want.get("method", method) == method:
                return True
    return False


def _routes(env: str, kind: str) -> list[Obj]:
    return [o for o in _objects(load_stack_config("triton", env)) if o["kind"] == kind]  # type: ignore[arg-type]


def _legacy_ingresses() -> list[Obj]:
    """dev's Ingresses in the legacy ingress-nginx mode (dev ships in gateway mode, the default way in)."""
    cfg = legacy_ingress(load_stack_config("triton", "dev"))  # type: ignore[arg-type]
    return [o for o in _objects(cfg) if o["kind"] == "Ingress"]


def _http_ingresses() -> list[Obj]:
    return [i for i in _legacy_ingresses() if i["metadata"]["name"].endswith("-http")]


def _grpc_ingresses() -> list[Obj]:
    return [i for i in _legacy_ingresses() if i["metadata"]["name"].endswith("-grpc")]


@pytest.mark.parametrize("path", ROUTED_HTTP["dev"] + UNROUTED_HTTP["dev"])
def test_ingress_routes_only_inference_metadata_and_health(path: str) -> None:
    ingresses = _http_ingresses()
    assert len(ingresses) == 2  # stable and canary
    for ing in ingresses:
        assert _ingress_routes(ing, path) == (path in ROUTED_HTTP["dev"]), (ing["metadata"]["name"], path)


@pytest.mark.parametrize("path", ROUTED_HTTP["prod"] + UNROUTED_HTTP["prod"])
def test_httproute_routes_only_inference_metadata_and_health(path: str) -> None:
    vision = next(r for r in _routes("prod", "HTTPRoute") if r["metadata"]["name"] == "triton-vision-http")
    assert _httproute_routes(vision, path) == (path in ROUTED_HTTP["prod"])


@pytest.mark.parametrize("method", ROUTED_GRPC + UNROUTED_GRPC)
def test_grpc_routes_only_the_inference_methods(method: str) -> None:
    service = exposure.GRPC_SERVICE
    for route in _routes("prod", "GRPCRoute"):
        assert _grpcroute_routes(route, service, method) == (method in ROUTED_GRPC)
        assert not _grpcroute_routes(route, "grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo")
    grpc_ingresses = _grpc_ingresses()
    assert len(grpc_ingresses) == 2  # stable and canary
    for ing in grpc_ingresses:
        assert _ingress_routes(ing, f"/{service}/{method}") == (method in ROUTED_GRPC)


def test_grpc_methods_are_triton_s_own() -> None:
    """Routed and unrouted methods together are exactly the service of Triton's protobuf."""
    from tritonclient.grpc import service_pb2

    methods = {m.name for m in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
    assert exposure.GRPC_SERVICE == "inference.GRPCInferenceService"
    assert set(exposure.GRPC_METHODS) == set(ROUTED_GRPC)
    assert set(ROUTED_GRPC) <= methods
    assert methods - set(ROUTED_GRPC) == {
        "ModelConfig", "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
        "SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister", "TraceSetting",
        "LogSettings",
    }


def test_canary_weights_survive_the_exact_matches() -> None:
    """Prod with a canary in gateway mode: every rule of both routes splits by the canary's weight."""
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    svc = raw["modelServices"][0]
    svc["release"] = {"store": "s3://b/vision", "channel": "stable", "storeName": "vision-prod", "trustedKeys": {"configMap": "k"},
                      "canary": {"channel": "canary", "weight": 5}}
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    for route in exposure.gateway_routes(cfg, cfg.model_services[0]):
        for rule in route["spec"]["rules"]:
            assert rule["matches"]
            assert [(b["name"], b["weight"]) for b in rule["backendRefs"]] == [
                ("triton-vision", 95), ("triton-vision-canary", 5)
            ]


def test_many_models_split_into_rules_within_the_gateway_api_limits() -> None:
    models = [{"name": f"m{i}", "sizeMib": 1} for i in range(GATEWAY_MAX_MODELS)]
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["nodePools"]["gpu-l40s"]["gpuSlices"] = 1
    raw["modelServices"] = [raw["modelServices"][1] | {"models": models, "memory": {"cudaContextMib": 0}}]
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    http, grpc = exposure.gateway_routes(cfg, cfg.model_services[0])
    sizes = [len(r["matches"]) for r in http["spec"]["rules"]]
    assert sizes == [64, 62] and sum(sizes) < 128 and len(http["spec"]["rules"]) <= 16
    assert len(grpc["spec"]["rules"][0]["matches"]) <= 8  # GRPCRoute's limit before Gateway API 1.1
    raw["modelServices"][0]["models"] = [*models, {"name": "one-more", "sizeMib": 1}]
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].models"


@pytest.mark.parametrize("name", ["../x", "a b", ".hidden", "a?b", "a%2fb"])
def test_a_routed_model_name_must_be_a_path_segment(name: str) -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][0]["models"][0]["name"] = name
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].models[0].name"


# --- NetworkPolicies -----------------------------------------------------------------------------


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(
        labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions") or [] if e["operator"] == "In"
    )


def _peer_matches(peer: Obj, ns: str, pod: dict[str, str] | None, ip: str | None, here: str) -> bool:
    if "ipBlock" in peer:
        if ip is None:
            return False
        addr = ipaddress.ip_address(ip)
        block = peer["ipBlock"]
        return addr in ipaddress.ip_network(block["cidr"]) and not any(
            addr in ipaddress.ip_network(e) for e in block.get("except") or []
        )
    if pod is None:
        return False
    ns_labels = {"kubernetes.io/metadata.name": ns}
    if "namespaceSelector" in peer and not _selects(peer["namespaceSelector"], ns_labels):
        return False
    if "namespaceSelector" not in peer and ns != here:
        return False
    return "podSelector" not in peer or _selects(peer["podSelector"], pod)


def egress_allowed(policies: list[Obj], src: dict[str, str], dst: Obj, port: int, proto: str = "TCP") -> bool:
    """Kubernetes' rule: no egress policy selects the pod -> allowed; otherwise some rule must allow it.
    A source or destination pod carries the common labels of the stack's objects too."""
    here = policies[0]["metadata"]["namespace"]
    common = policies[0]["metadata"]["labels"] | {"app.kubernetes.io/version": "24.10-py3"}
    src = common | src
    dst = dst | ({"pod": common | dst["pod"]} if dst.get("ns") == here else {})
    selecting = [
        p for p in policies
        if _selects(p["spec"]["podSelector"], src) and "Egress" in p["spec"].get("policyTypes", [])
    ]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("egress") or []:
            ports = rule.get("ports")
            if ports and not any(x["port"] == port and x.get("protocol", "TCP") == proto for x in ports):
                continue
            peers = rule.get("to")
            if not peers or any(_peer_matches(x, dst.get("ns", ""), dst.get("pod"), dst.get("ip"), here) for x in peers):
                return True
    return False


def _policies(cfg: TritonStackConfig) -> list[Obj]:
    return [o for o in _objects(cfg) if o["kind"] == "NetworkPolicy"]


SERVER = {"app.kubernetes.io/name": "triton", "app.kubernetes.io/instance": "triton-vision",
          "app.kubernetes.io/component": "inference-server", "track": "stable"}
DRIFT = {"app.kubernetes.io/name": "triton", "app.kubernetes.io/instance": "triton-vision",
         "app.kubernetes.io/component": "drift-check"}
DNS = {"ns": "kube-system", "pod": {"k8s-app": "kube-dns"}}


@pytest.mark.parametrize("env", ["dev", "prod"])
@pytest.mark.parametrize(
    ("src", "dst", "port", "proto", "allowed"),
    [
        (SERVER, DNS, 53, "UDP", True),
        (SERVER, DNS, 53, "TCP", True),
        (SERVER, {"ip": "52.218.1.1"}, 443, "TCP", True),  # the model store (S3), default CIDR
        (SERVER, {"ip": "52.218.1.1"}, 22, "TCP", False),
        (SERVER, {"ip": "169.254.169.254"}, 443, "TCP", False),  # instance metadata
        (SERVER, {"ip": "169.254.169.254"}, 80, "TCP", False),
        (SERVER, {"ns": "apps", "pod": {"app": "web"}}, 8080, "TCP", False),
        (DRIFT, {"ns": "triton", "pod": SERVER}, 8000, "TCP", True),  # the drift check calls its server
        (DRIFT, {"ip": "52.218.1.1"}, 8080, "TCP", False),
        (DRIFT, DNS, 53, "UDP", True),
    ],
)
def test_egress_is_denied_but_dns_and_the_model_store(
    env: str, src: dict[str, str], dst: Obj, port: int, proto: str, allowed: bool
) -> None:
    assert egress_allowed(_policies(_triton(env)), src, dst, port, proto) == allowed


def test_default_deny_and_dns_are_namespace_wide() -> None:
    cfg = _triton("prod")
    deny = exposure.default_deny_policy(cfg)
    assert deny["metadata"] == {"name": "default-deny", "namespace": "triton", "labels": k8s_labels.labels(cfg)}
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    names = [o["metadata"]["name"] for o in triton.namespace_objects(cfg) if o["kind"] == "NetworkPolicy"]
    assert names == ["default-deny", "namespace-egress", "kube-api-egress"]


def test_a_pvc_service_opens_no_egress_of_its_own() -> None:
    cfg = _triton("prod", modelServices=direct_prod_services())
    embeddings = next(s for s in cfg.model_services if s.name == "embeddings")
    assert exposure.model_store_ports(embeddings) == []
    assert exposure.network_policy(cfg, embeddings)["spec"]["egress"] == []
    pod = SERVER | {"app.kubernetes.io/instance": "triton-embeddings"}
    assert not egress_allowed(_policies(cfg), pod, {"ip": "52.218.1.1"}, 443)


@pytest.mark.parametrize(
    ("release", "port"),
    [
        ({"store": "https://mirror.example/releases", "region": None, "credentialsSecret": None}, 443),
        ({"store": "http://mirror.example:8080/releases", "region": None, "credentialsSecret": None}, 8080),
        ({"s3Endpoint": "http://minio.storage.svc:9000"}, 9000),
        ({"s3Endpoint": "https://s3.example"}, 443),
    ],
)
def test_the_store_port_follows_the_store_url(release: Obj, port: int) -> None:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["release"].update(release)
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    svc = cfg.model_services[0]
    assert exposure.model_store_ports(svc) == [port]
    assert exposure.network_policy(cfg, svc)["spec"]["egress"][0]["ports"] == [{"port": port, "protocol": "TCP"}]


def test_model_store_cidrs_and_dns_are_configurable() -> None:
    cfg = _triton("dev", networkPolicy={"modelStoreCidrs": ["10.20.0.0/16", "2600:1f00::/40"],
                                        "dns": {"namespace": "dns", "podLabels": {"app": "coredns"}}})
    svc = cfg.model_services[0]
    (rule,) = exposure.network_policy(cfg, svc)["spec"]["egress"]
    assert rule["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "2600:1f00::/40"}}]
    pols = _policies(cfg)
    assert egress_allowed(pols, SERVER, {"ip": "10.20.3.4"}, 443)
    assert not egress_allowed(pols, SERVER, {"ip": "52.218.1.1"}, 443)
    assert egress_allowed(pols, SERVER, {"ns": "dns", "pod": {"app": "coredns"}}, 53, "UDP")
    assert not egress_allowed(pols, SERVER, DNS, 53, "UDP")


def test_a_bad_cidr_is_named() -> None:
    with pytest.raises(ConfigError) as exc:
        _triton("dev", networkPolicy={"modelStoreCidrs": ["0.0.0.0/0", "10.0.0.1/8"]})
    assert exc.value.key == "tritonops-triton:networkPolicy.modelStoreCidrs[1]"


# --- images --------------------------------------------------------------------------------------


def test_prod_images_are_pinned_by_digest_and_labelled_by_tag() -> None:
    cfg = _triton("prod")
    for svc in cfg.model_services:
        assert "@sha256:" in svc.image
        dep = workload.deployment(cfg, svc)
        assert dep["metadata"]["labels"]["app.kubernetes.io/version"] == "24.10-py3"
        images = {c["image"] for c in dep["spec"]["template"]["spec"]["containers"]}
        assert images == {svc.image}


@pytest.mark.parametrize(
    "image",
    ["nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64, "nvcr.io/nvidia/tritonserver:24.10-py3@sha256:abc",
     "nvcr.io/nvidia/tritonserver:latest@sha256:" + "a" * 64, "registry:5000/tritonserver"],
)
def test_an_image_needs_a_tag_and_at_most_a_full_digest(image: str) -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][0]["image"] = image
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].image"


# --- Grafana's admin login -----------------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_grafana_login_comes_from_a_secret_never_the_chart_default(env: str) -> None:
    cfg = load_stack_config("platform", env)
    assert isinstance(cfg, PlatformConfig)
    grafana = platform.monitoring_release(cfg).values["grafana"]
    assert grafana["admin"] == {"existingSecret": "grafana-admin", "userKey": "admin-user",
                                "passwordKey": "admin-password"}
    assert "adminPassword" not in grafana
    secret = platform.grafana_admin_secret(cfg, "pw")
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("grafana-admin", "monitoring")
    assert secret["stringData"] == {"admin-user": "admin", "admin-password": "pw"}


def test_render_lists_the_grafana_secret_to_create(tmp_path: Path) -> None:
    render("platform", "prod", tmp_path)
    required = yaml.safe_load((tmp_path / "secrets-required.yaml").read_text())["secrets"]
    assert {"name": "grafana-admin", "namespace": "monitoring", "keys": ["admin-password", "admin-user"],
            "pulumiConfig": "tritonops-platform:grafanaAdminPassword"} in required
    (release,) = (tmp_path / "helm").glob("*-helmrelease-kube-prometheus-stack.yaml")  # Flux HelmRelease
    values = yaml.safe_load(release.read_text())["spec"]["values"]
    assert values["grafana"]["admin"]["existingSecret"] == "grafana-admin"
    text = "".join(p.read_text() for p in tmp_path.rglob("*.yaml"))
    assert "prom-operator" not in text and "adminPassword" not in text
    assert not any(o["kind"] == "Secret" for o in build("platform", "prod").objects)


def test_platform_without_a_grafana_password_creates_nothing() -> None:
    mocks = Mocks()
    with pytest.raises(ConfigError) as exc:
        run_program("platform", "prod", mocks=mocks, omit=("tritonops-platform:grafanaAdminPassword",))
    assert exc.value.key == "tritonops-platform:grafanaAdminPassword"
    assert "pulumi config set --secret grafanaAdminPassword" in str(exc.value)
    assert mocks.resources == []


def test_grafana_secret_name_is_checked() -> None:
    raw = copy.deepcopy(read_stack_file("platform", "dev")[0])
    raw.setdefault("monitoring", {})["grafanaAdminSecret"] = "Grafana_Admin"
    with pytest.raises(ConfigError) as exc:
        parse_config("platform", raw)
    assert exc.value.key == "tritonops-platform:monitoring.grafanaAdminSecret"


def test_restricted_groups_are_the_admin_apis() -> None:
    """Every API group Triton can restrict, except health, metadata and inference (what is routed)."""
    assert set(RESTRICTED_APIS) == {"model-repository", "model-config", "shared-memory", "statistics", "trace",
                                    "logging"}


@pytest.mark.parametrize(
    ("dst", "port", "allowed"),
    [
        ({"ip": "10.0.12.34"}, 443, True),  # the API server (EKS: control-plane ENIs in the subnets)
        ({"ip": "10.0.12.34"}, 6443, True),
        ({"ip": "10.0.12.34"}, 22, False),
        ({"ns": "triton", "pod": SERVER}, release_agent.AGENT_PORT, True),  # the agent's /status (tritonops.k8s.stacks.triton.drift_cronjob)
    ],
)
def test_the_drift_check_reaches_the_kube_api_and_the_agents(dst: Obj, port: int, allowed: bool) -> None:
    cfg = _triton("dev")
    assert egress_allowed(_policies(cfg), DRIFT, dst, port) == allowed
    assert not egress_allowed(_policies(cfg), SERVER, {"ip": "10.0.12.34"}, 6443)  # servers never do
