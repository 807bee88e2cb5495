"""Gateway API is the default way in (issue 43, failure 8): Envoy Gateway named by the cluster contract with its
pinned chart and install command, every shipped triton stack in gateway mode, canary weights on the routes'
backendRefs, and the scale-from-zero wake trigger on the proxies' per-route counter, which the contract's command
makes Prometheus scrape."""

from __future__ import annotations

import dataclasses

import pytest
from k8s_harness import ROOT, envs
from tritonops import versions
from tritonops.k8s import cluster_contract as cc
from tritonops.k8s import gateway, series
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.programs import render_set
from tritonops.k8s.stack_file import load_stack_config, stack_file
from tritonops.observability import keda_trigger as keda
from tritonops.observability import producers


def _triton(env: str) -> TritonStackConfig:
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _objects(env: str) -> list[dict]:
    """What the stack renders (the user's publicKeys, if any still to set, do not matter here)."""
    return render_set("triton", env, _triton(env), dashboards=False).objects


def _series_problems(env: str) -> list[str]:
    cfg = _triton(env)
    cluster = cc.cluster_of("triton", env, cfg, None)
    objs = _objects(env)
    return [p.message for p in series.problems(cfg, objs, stack_file("triton", env), cluster,
                                               cc.INGRESS_NGINX.command or "", cc.GATEWAY.command or "")]


def test_the_contract_names_envoy_gateway_with_its_pinned_chart() -> None:
    command = cc.GATEWAY.command or ""
    assert f"helm upgrade --install eg {versions.ENVOY_GATEWAY_CHART} --version {versions.ENVOY_GATEWAY_CHART_VERSION}" \
        in command
    assert versions.ENVOY_GATEWAY_CHART.startswith("oci://") and versions.ENVOY_GATEWAY_CHART_VERSION == "v1.9.1"
    assert versions.GATEWAY_API_VERSION == "v1.6.1"  # the CRDs the v1.9 chart installs
    assert f"kubectl apply -f {gateway.MANIFEST}" in command
    assert cc.GATEWAY_API.command == command  # one creator: the chart brings the CRDs
    assert cc.GATEWAY.after == ("platform",)  # the PodMonitor needs the platform's CRD


def test_the_manifest_is_the_packages_objects() -> None:
    assert (ROOT / gateway.MANIFEST).read_text() == gateway.manifest()
    kinds = [o["kind"] for o in gateway.objects()]
    assert kinds == ["Namespace", "GatewayClass", "Gateway", "PodMonitor"]


@pytest.mark.parametrize("env", envs("triton"))
def test_every_shipped_stack_attaches_to_the_contracts_gateway(env: str) -> None:
    cfg = _triton(env)
    assert cfg.ingress.mode == "gateway"
    assert (cfg.ingress.gateway_namespace, cfg.ingress.gateway_name) == (gateway.GATEWAY_NAMESPACE, gateway.GATEWAY_NAME)
    objs = _objects(env)
    assert not [o for o in objs if o["kind"] == "Ingress"]
    routes = [o for o in objs if o["kind"] in ("HTTPRoute", "GRPCRoute")]
    assert routes
    assert all(r["spec"]["parentRefs"] == [{"name": "inference", "namespace": "gateway"}] for r in routes)
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"
                and o["metadata"]["name"] in {r["spec"]["rules"][0]["backendRefs"][0]["name"] for r in routes}]
    assert policies
    assert all(versions.ENVOY_GATEWAY_NAMESPACE in p["spec"]["ingress"][0]["from"][0]["namespaceSelector"]
               ["matchExpressions"][0]["values"] for p in policies)


def test_the_canary_weights_are_the_routes_backend_refs() -> None:
    cfg = _triton("dev")
    canary = cfg.model_services[0].release.canary if cfg.model_services[0].release else None
    assert canary is not None
    for route in (o for o in _objects("dev") if o["kind"] in ("HTTPRoute", "GRPCRoute")):
        for rule in route["spec"]["rules"]:
            assert {r["name"]: r["weight"] for r in rule["backendRefs"]} == {
                "triton-vision": 100 - canary.weight, "triton-vision-canary": canary.weight}


@pytest.mark.parametrize("env", ["dev", "staging"])
def test_the_wake_trigger_reads_the_gateways_per_route_counter(env: str) -> None:
    objs = _objects(env)
    so = next(o for o in objs if o["kind"] == "ScaledObject")
    assert so["spec"]["minReplicaCount"] == 0
    wake = next(t for t in so["spec"]["triggers"] if t["name"] == "wake")
    routes = sorted(o["metadata"]["name"] for o in objs if o["kind"] in ("HTTPRoute", "GRPCRoute"))
    expected = keda.gateway_requests_query("triton", [r for r in routes if not r.endswith("-grpc")] +
                                           [r for r in routes if r.endswith("-grpc")], "1m")
    assert wake["metadata"]["query"] == expected
    assert 'envoy_cluster_name=~"(httproute|grpcroute)/triton/(triton-vision-http|triton-vision-grpc)/rule/[0-9]+"' \
        in expected
    assert producers.series_of(expected) == {keda.GATEWAY_REQUESTS: producers.PRODUCERS[producers.ENVOY_GATEWAY]}


@pytest.mark.parametrize("env", envs("triton"))
def test_every_env_has_its_gateway_series_produced(env: str) -> None:
    assert _series_problems(env) == []


def test_without_the_manifest_the_wake_trigger_has_no_series(monkeypatch: pytest.MonkeyPatch) -> None:
    helm_only = (cc.GATEWAY.command or "").split(" && ")[0]
    monkeypatch.setattr(cc, "GATEWAY", dataclasses.replace(cc.GATEWAY, command=helm_only))
    cfg = _triton("dev")
    problems = list(series.problems(cfg, _objects("dev"), stack_file("triton", "dev"),
                                    cc.cluster_of("triton", "dev", cfg, None), cc.INGRESS_NGINX.command or "",
                                    cc.GATEWAY.command or ""))
    (problem,) = [p for p in problems if keda.GATEWAY_REQUESTS in p.message]
    assert problem.key == "tritonops-triton:modelServices[0].autoscaling.minReplicas"
    assert gateway.MANIFEST in problem.message and problem.line is not None


def test_without_the_pod_monitor_the_wake_trigger_has_no_series(monkeypatch: pytest.MonkeyPatch) -> None:
    original = gateway.objects
    monkeypatch.setattr(gateway, "objects", lambda: [o for o in original() if o["kind"] != "PodMonitor"])
    (problem,) = _series_problems("staging")
    assert "no PodMonitor" in problem


def _wake_policies(objs: list[dict]) -> list[dict]:
    return [o for o in objs if (o["apiVersion"], o["kind"]) == ("gateway.envoyproxy.io/v1alpha1",
                                                                 "BackendTrafficPolicy")]


@pytest.mark.parametrize("env", ["dev", "staging"])
def test_a_service_that_may_scale_to_zero_is_routed_to_its_services_cluster_ip(env: str) -> None:
    """Envoy Gateway v1.9 answers a route whose Service has no ready endpoints with a direct 503 (no cluster, no
    counter): the wake routes must use routingType Service so the 503 is charged to the rule's cluster."""
    objs = _objects(env)
    routes = [(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in ("HTTPRoute", "GRPCRoute")]
    (policy,) = _wake_policies(objs)
    assert policy["spec"]["routingType"] == "Service"
    assert policy["metadata"]["namespace"] == "triton"
    assert sorted((r["kind"], r["name"]) for r in policy["spec"]["targetRefs"]) == sorted(routes)
    assert all(r["group"] == "gateway.networking.k8s.io" for r in policy["spec"]["targetRefs"])


def test_a_service_that_never_scales_to_zero_keeps_endpoint_routing() -> None:
    objs = _objects("prod")
    assert all(o["spec"]["minReplicaCount"] > 0 for o in objs if o["kind"] == "ScaledObject")
    assert _wake_policies(objs) == []


def test_without_service_routing_the_wake_counter_never_moves() -> None:
    cfg = _triton("dev")
    objs = [o for o in _objects("dev") if o not in _wake_policies(_objects("dev"))]
    problems = list(series.problems(cfg, objs, stack_file("triton", "dev"), cc.cluster_of("triton", "dev", cfg, None),
                                    cc.INGRESS_NGINX.command or "", cc.GATEWAY.command or ""))
    (problem,) = problems
    assert "direct 503" in problem.message and "triton-vision-http" in problem.message
    assert problem.key == "tritonops-triton:modelServices[0].autoscaling.minReplicas"


def test_the_contract_names_the_wake_policys_crd() -> None:
    (crd, controller) = cc.CONTRACT[("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy")]
    assert crd.provider is cc.GATEWAY and controller.provider is cc.GATEWAY


def test_the_docs_install_envoy_gateway_after_the_platform_up_then_the_tls_secret() -> None:
    """The walkthrough runs the contract's Envoy Gateway command after the platform's `pulumi up` (its PodMonitor
    needs the CRD), from the repository root (the manifest's path), then creates the Gateway's TLS Secret in the
    namespace that manifest created, before the triton stack."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    flat = " ".join(text.replace("\\\n", " ").split())
    command = cc.GATEWAY.command or ""
    walk = flat[flat.index("## From an empty AWS account"):]
    platform_up = walk.index("pulumi up", walk.index("cd ../platform"))
    at = walk.index(f"cd ../.. && {command}")
    assert at > platform_up
    secret = walk.index(f"kubectl create secret tls {gateway.TLS_SECRET} --namespace {gateway.GATEWAY_NAMESPACE} ")
    assert at < secret < walk.index("cd stacks/triton && pulumi stack init dev")
    assert "| grep -c '\"kind\": \"HTTPRoute\"'" in text
