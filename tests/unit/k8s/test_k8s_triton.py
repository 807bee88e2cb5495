"""A model service's objects as the assembler (tritonops.k8s.stacks.triton.objects) puts them together: Service, PDB,
NetworkPolicy, ServiceAccount, ScaledObject, routes, the namespace's objects, and canary tracks."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from k8s_harness import container, direct_config, legacy_ingress, legacy_ingress_raw, triton_config
from tritonops.agent.cli import parser as agent_parser
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import drift_cronjob as drift
from tritonops.k8s.stacks.triton import exposure, monitoring, scaling, workload
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.observability.keda_trigger import prometheus_trigger
from tritonops.observability.rules import rule_groups


def _pod(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]


# --- canary: a second Deployment on another channel, weighted by the router ----------------------

PROD_RELEASE = {
    "store": "s3://tritonops-releases-prod/vision",
    "channel": "stable",
    "region": "us-west-2",
    "storeName": "vision-prod",
    "trustedKeys": {"configMap": "tritonops-release-keys"},
    "canary": {"channel": "canary", "weight": 5, "replicas": 2},
}


def _prod_canary_cfg() -> TritonStackConfig:
    """prod (gateway routes, spread, PDB minAvailable) with vision pulling `stable` and a canary."""
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    svc = raw["modelServices"][0]
    svc.pop("modelRepository", None)  # the committed prod is in release mode already
    svc["release"] = copy.deepcopy(PROD_RELEASE)
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _pod_labels(dep: dict[str, Any]) -> dict[str, str]:
    return dep["spec"]["template"]["metadata"]["labels"]


# --- the rest of a model service -----------------------------------------------------------------


def test_service_ports_and_scrape_job_label() -> None:
    cfg = direct_config()
    svc = workload.service(cfg, cfg.model_services[0])
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("http", 8000), ("grpc", 8001), ("metrics", 8002)]
    assert svc["metadata"]["labels"][k8s_labels.JOB_LABEL] == k8s_labels.SCRAPE_JOB
    sm = monitoring.service_monitor(cfg, cfg.model_services[0])
    assert sm["spec"]["jobLabel"] == k8s_labels.JOB_LABEL
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def test_pdb_min_available_in_prod_max_unavailable_in_dev() -> None:
    prod, dev = triton_config("prod"), triton_config("dev")
    assert workload.pod_disruption_budget(prod, prod.model_services[0])["spec"]["minAvailable"] == 2
    assert workload.pod_disruption_budget(dev, dev.model_services[0])["spec"]["maxUnavailable"] == 1


def test_network_policy_inference_from_allowed_namespaces_metrics_from_prometheus() -> None:
    cfg = direct_config()
    np_ = exposure.network_policy(cfg, cfg.model_services[0])
    inference, metrics = np_["spec"]["ingress"]
    assert {p["port"] for p in inference["ports"]} == {8000, 8001}
    allowed = inference["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert set(allowed) == {"triton", "apps", "search", "gateway", "envoy-gateway-system"}  # Envoy's proxies run there
    assert {p["port"] for p in metrics["ports"]} == {8002}
    peer = metrics["from"][0]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}


def test_service_account_irsa_annotation_for_s3() -> None:
    cfg = direct_config()
    sa = workload.service_account(cfg, cfg.model_services[0])
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith(":role/tritonops-prod-model-reader")
    assert "annotations" not in workload.service_account(cfg, cfg.model_services[1])["metadata"]


def test_scaled_object_uses_observability_trigger_and_safe_fallback() -> None:
    cfg = triton_config()
    svc = cfg.model_services[0]
    so = scaling.scaled_object(cfg, svc)
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == k8s_labels.name_of(svc)
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (3, 10)
    assert spec["fallback"]["behavior"] == "currentReplicasIfHigher"
    assert spec["fallback"]["replicas"] == spec["minReplicaCount"]
    expected = prometheus_trigger("resnet50", cfg.prometheus_url, policy=scaling.scaling_policy(svc))
    trig = {k: v for k, v in spec["triggers"][0].items() if k != "name"}
    assert trig == expected
    assert [t["metadata"]["query"] for t in spec["triggers"]][1].count("densenet_onnx") == 1


def test_ingress_grpc_backend_protocol() -> None:
    cfg = legacy_ingress(triton_config("dev"))
    http, grpc = exposure.ingresses(cfg, cfg.model_services[0])[:2]  # then the canary's twins
    assert http["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "HTTP"
    assert grpc["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    assert grpc["spec"]["rules"][0]["host"] == "grpc-vision.dev.tritonops.example.com"
    assert grpc["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] == {"name": "grpc"}
    assert (
        "ingress-nginx"
        in exposure.network_policy(cfg, cfg.model_services[0])["spec"]["ingress"][0]["from"][0]["namespaceSelector"][
            "matchExpressions"
        ][0]["values"]
    )


def test_gateway_routes() -> None:
    cfg = triton_config("prod")
    http, grpc = exposure.gateway_routes(cfg, cfg.model_services[0])
    assert (http["kind"], grpc["kind"]) == ("HTTPRoute", "GRPCRoute")
    assert grpc["spec"]["parentRefs"] == [{"name": "inference", "namespace": "gateway"}]
    assert grpc["spec"]["rules"][0]["backendRefs"] == [{"name": "triton-vision", "port": 8001}]


def test_service_objects_follow_ingress_mode() -> None:
    legacy = legacy_ingress(triton_config("dev"))
    kinds = {o["kind"] for o in triton.service_objects(legacy, legacy.model_services[0])}
    assert "Ingress" in kinds and "HTTPRoute" not in kinds and "BackendTrafficPolicy" not in kinds
    kinds = {o["kind"] for o in triton.service_objects(triton_config("dev"), triton_config("dev").model_services[0])}
    assert {"HTTPRoute", "GRPCRoute", "BackendTrafficPolicy"} <= kinds and "Ingress" not in kinds  # the default
    kinds = {o["kind"] for o in triton.service_objects(triton_config("prod"), triton_config("prod").model_services[0])}
    assert {"HTTPRoute", "GRPCRoute"} <= kinds and "Ingress" not in kinds


def test_namespace_objects_use_observability_rules_and_dashboards() -> None:
    cfg = triton_config()
    rule = monitoring.prometheus_rule(cfg)
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert names == [g["name"] for g in rule_groups()]
    cm = monitoring.dashboards_config_map(cfg)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] and all(k.endswith(".json") for k in cm["data"])
    pc = workload.priority_class(cfg)
    assert pc["value"] == cfg.priority and pc["globalDefault"] is False


def test_grpc_ingress_needs_tls() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["ingress"] = legacy_ingress_raw(raw["ingress"])
    del raw["ingress"]["tlsSecret"]
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:ingress.tlsSecret"
    legacy = legacy_ingress(triton_config("dev"))
    http, grpc = exposure.ingresses(legacy, legacy.model_services[0])[:2]
    assert grpc["spec"]["tls"] == [
        {"hosts": ["grpc-vision.dev.tritonops.example.com"], "secretName": "dev-tritonops-example-com-tls"}
    ]


@pytest.mark.parametrize("cfg", [legacy_ingress(triton_config("dev")), _prod_canary_cfg()],
                         ids=["dev-ingress", "prod-gateway"])
def test_canary_deployment_follows_the_canary_channel(cfg: TritonStackConfig) -> None:
    svc = cfg.model_services[0]
    canary = svc.release.canary  # type: ignore[union-attr]
    stable, dep = workload.deployment(cfg, svc), workload.deployment(cfg, svc, track="canary")
    assert (dep["metadata"]["name"], dep["spec"]["replicas"]) == (f"triton-{svc.name}-canary", canary.replicas)
    assert _pod_labels(dep)["track"] == dep["metadata"]["labels"]["track"] == "canary"
    assert _pod_labels(stable)["track"] == stable["metadata"]["labels"]["track"] == "stable"
    for c in (_pod(dep)["initContainers"][0], _pod(dep)["containers"][1]):
        a = agent_parser().parse_args(c["command"][2:])
        assert (a.channel, a.store) == (canary.channel, svc.release.store)  # type: ignore[union-attr]
    for c in (_pod(stable)["initContainers"][0], _pod(stable)["containers"][1]):
        assert agent_parser().parse_args(c["command"][2:]).channel == svc.release.channel  # type: ignore[union-attr]
    # The same server otherwise: image, args, resources, probes, volumes.
    assert container(dep) == container(stable)
    assert _pod(dep)["volumes"] == _pod(stable)["volumes"]


@pytest.mark.parametrize("cfg", [legacy_ingress(triton_config("dev")), _prod_canary_cfg()],
                         ids=["dev-ingress", "prod-gateway"])
def test_each_track_selects_only_its_own_pods(cfg: TritonStackConfig) -> None:
    """Deployment selectors, Services, spread and the PDB select one track; NetworkPolicy and
    ServiceMonitor cover both."""
    svc = cfg.model_services[0]
    stable, canary = workload.deployment(cfg, svc), workload.deployment(cfg, svc, track="canary")
    pods = {"stable": _pod_labels(stable), "canary": _pod_labels(canary)}
    for track, dep in (("stable", stable), ("canary", canary)):
        sel = dep["spec"]["selector"]["matchLabels"]
        service = workload.service(cfg, svc, track)
        selected = {t for t, labels in pods.items() if _matches(sel, labels)}
        assert selected == {t for t, labels in pods.items() if _matches(service["spec"]["selector"], labels)} == {track}
        term = _pod(dep)["affinity"]["podAntiAffinity"]
        term = (term.get("requiredDuringSchedulingIgnoredDuringExecution") or
                [t["podAffinityTerm"] for t in term["preferredDuringSchedulingIgnoredDuringExecution"]])[0]
        spread = [t["labelSelector"]["matchLabels"] for t in _pod(dep)["topologySpreadConstraints"]]
        assert term["labelSelector"]["matchLabels"] == sel and spread == [sel, sel]
    pdb = workload.pod_disruption_budget(cfg, svc)["spec"]["selector"]["matchLabels"]
    assert [t for t, labels in pods.items() if _matches(pdb, labels)] == ["stable"]
    np_ = exposure.network_policy(cfg, svc)["spec"]["podSelector"]["matchLabels"]
    assert [t for t, labels in pods.items() if _matches(np_, labels)] == ["stable", "canary"]
    sm = monitoring.service_monitor(cfg, svc)["spec"]
    services = [workload.service(cfg, svc), workload.service(cfg, svc, "canary")]
    assert [s["metadata"]["name"] for s in services if _matches(sm["selector"]["matchLabels"], s["metadata"]["labels"])
            ] == [f"triton-{svc.name}", f"triton-{svc.name}-canary"]
    assert all(s["metadata"]["labels"][k8s_labels.JOB_LABEL] == k8s_labels.SCRAPE_JOB for s in services)
    assert sm["podTargetLabels"] == ["track"]  # every scraped series carries track="stable"|"canary"


def test_scaled_object_and_drift_check_stay_on_stable() -> None:
    cfg = triton_config("dev")
    svc = cfg.model_services[0]
    objs = triton.service_objects(cfg, svc)
    (so,) = [o for o in objs if o["kind"] == "ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["name"] == "triton-vision"
    (pdb,) = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert pdb["metadata"]["name"] == "triton-vision"
    check = drift.check_args(cfg, svc)
    assert check[check.index("--url") + 1] == f"http://triton-vision.{cfg.namespace}.svc:{k8s_labels.HTTP_PORT}"
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert kinds[:5] == [
        ("ServiceAccount", "triton-vision"),
        ("Deployment", "triton-vision"),
        ("Deployment", "triton-vision-canary"),
        ("Service", "triton-vision"),
        ("Service", "triton-vision-canary"),
    ]


def test_ingress_nginx_canary_twins_carry_the_weight() -> None:
    cfg = legacy_ingress(triton_config("dev"))
    svc = cfg.model_services[0]
    http, grpc, c_http, c_grpc = exposure.ingresses(cfg, svc)
    for main, twin in ((http, c_http), (grpc, c_grpc)):
        ann = twin["metadata"]["annotations"]
        assert (ann[exposure.CANARY_ANNOTATION], ann[exposure.CANARY_WEIGHT_ANNOTATION]) == ("true", "10")
        assert exposure.CANARY_ANNOTATION not in main["metadata"]["annotations"]
        assert twin["metadata"]["name"] == main["metadata"]["name"].replace("triton-vision", "triton-vision-canary")
        # Same host and path as the main Ingress (ingress-nginx pairs them), backend the canary Service.
        main_rule, twin_rule = main["spec"]["rules"][0], twin["spec"]["rules"][0]
        assert twin_rule["host"] == main_rule["host"]
        main_path, twin_path = main_rule["http"]["paths"][0], twin_rule["http"]["paths"][0]
        assert (twin_path["path"], twin_path["pathType"]) == (main_path["path"], main_path["pathType"])
        assert main_path["backend"]["service"]["name"] == "triton-vision"
        assert twin_path["backend"]["service"] == {
            "name": "triton-vision-canary", "port": main_path["backend"]["service"]["port"]}
        assert twin["spec"]["tls"] == main["spec"]["tls"]


def test_gateway_routes_split_by_weight() -> None:
    cfg = _prod_canary_cfg()
    http, grpc = exposure.gateway_routes(cfg, cfg.model_services[0])
    assert http["spec"]["rules"][0]["backendRefs"] == [
        {"name": "triton-vision", "port": 8000, "weight": 95},
        {"name": "triton-vision-canary", "port": 8000, "weight": 5},
    ]
    assert grpc["spec"]["rules"][0]["backendRefs"] == [
        {"name": "triton-vision", "port": 8001, "weight": 95},
        {"name": "triton-vision-canary", "port": 8001, "weight": 5},
    ]
    other = cfg.model_services[1]  # no canary: one backend, no weights
    assert exposure.gateway_routes(cfg, other)[0]["spec"]["rules"][0]["backendRefs"] == [
        {"name": "triton-embeddings", "port": 8000}]
    assert not [o for o in triton.service_objects(cfg, other) if o["metadata"]["name"].endswith("-canary")]


def test_canary_track_needs_a_canary() -> None:
    cfg = triton_config("prod")
    with pytest.raises(ValueError, match="has no release.canary"):
        workload.deployment(cfg, cfg.model_services[0], track="canary")
    with pytest.raises(ValueError, match="is not one of stable, canary"):
        workload.service(cfg, cfg.model_services[0], "blue")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_latency_summaries_always_on(env: str) -> None:
    """p95 per track needs Triton's summaries on both tracks; on with or without a canary, so adding
    one never restarts the stable pods."""
    cfg = triton_config(env)
    for svc in cfg.model_services:
        assert workload.SUMMARY_LATENCIES_ARG in container(workload.deployment(cfg, svc))["args"]
    dev = triton_config("dev")
    no_canary = copy.deepcopy(read_stack_file("triton", "dev")[0])
    del no_canary["modelServices"][0]["release"]["canary"]
    plain = parse_config("triton", no_canary)
    assert isinstance(plain, TritonStackConfig)
    assert workload.deployment(plain, plain.model_services[0]) == workload.deployment(dev, dev.model_services[0])
