"""Strict OpenAPI validation (kubernetes-validate) of every core object the stacks produce."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from k8s_harness import committed, envs, k8s_objects, legacy_ingress, user_stacks
from tritonops import versions
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import exposure, node_cache, release_agent, workload
from tritonops.k8s.stacks.triton import objects as triton

LATEST = kubernetes_validate.latest_version()
VERSIONS = [f"{versions.KUBERNETES_VERSION}.0", LATEST]  # the clusters the stacks create, and the newest
CRD_GROUPS = ("monitoring.coreos.com/", "keda.sh/", "gateway.networking.k8s.io/", "gateway.envoyproxy.io/")


def _core(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if not o["apiVersion"].startswith(CRD_GROUPS)]


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for stack in ("platform", "triton"):
        for env in envs(stack):
            # What Pulumi creates (Secrets included), captured from the mocks.
            for obj in _core(k8s_objects(committed(stack, env))):
                out.append((f"{stack}/{env}/{obj['kind']}/{obj['metadata']['name']}", obj))
    return out


# Sorted: the Pulumi mocks register resources in an order that varies between runs (pytest-xdist workers
# must collect the same list).
OBJECTS = sorted(_all_objects(), key=lambda case: case[0])


def test_every_core_kind_is_covered() -> None:
    """The committed stacks' objects and the canary set (whose dev is in the legacy ingress mode: its Ingresses)."""
    kinds = {o["kind"] for _, o in OBJECTS + CANARY_OBJECTS}
    assert kinds >= {
        "Namespace",
        "ServiceAccount",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ConfigMap",
        "Secret",
        "PriorityClass",
        "Ingress",
    }


def _jsonable(obj: Any) -> Any:
    """Secret values wrapped by Pulumi's secret marker back to plain strings."""
    if isinstance(obj, dict):
        if obj.get("4dabf18193072939515e22adb298388d"):
            return _jsonable(obj["value"])
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return obj


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("label", "obj"), OBJECTS, ids=[label for label, _ in OBJECTS])
def test_strict_schema(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(_jsonable(obj), version, strict=True)


def test_validation_is_strict() -> None:
    """An unknown field fails, so the passing tests above mean something."""
    _, dep = next((label, o) for label, o in OBJECTS if o["kind"] == "Deployment")
    bad = {**dep, "spec": {**dep["spec"], "replicaCount": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[0], strict=True)


def _release_variant(**release: Any) -> TritonStackConfig:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["release"].update(release)
    raw["podSecurity"] = "privileged"
    if release.get("nodeCache"):
        raw["nodeCache"] = {"maxRateBytes": 100 << 20}
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


RELEASE_VARIANTS = {
    "committed": {},
    "node-cache-secret-keys-s3-endpoint": {
        "nodeCache": True,
        "trustedKeys": {"secret": "release-keys", "keys": ["old.pem", "new.pem"]},
        "s3Endpoint": "http://minio.storage.svc:9000",
    },
    "https-mirror-anonymous": {"store": "https://mirror.example/releases", "region": None, "credentialsSecret": None},
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", RELEASE_VARIANTS)
def test_release_deployment_validates(variant: str, version: str) -> None:
    """The Deployment with the release agent (init container, sidecar, volumes) passes strict validation."""
    cfg = _release_variant(**RELEASE_VARIANTS[variant])
    svc = cfg.model_services[0]
    dep = workload.deployment(cfg, svc)
    assert dep["spec"]["template"]["spec"]["initContainers"]
    for obj in [dep, workload.service(cfg, svc), exposure.network_policy(cfg, svc), release_agent.agent_config_map(cfg),
                *node_cache.node_cache_objects(cfg)]:  # the node cache's DaemonSet, Service, policies
        kubernetes_validate.validate(obj, version, strict=True)
    kubernetes_validate.validate(triton.namespace(cfg), version, strict=True)


def test_release_validation_catches_a_bad_container() -> None:
    """A misspelt field in the sidecar fails, so the release Deployment's pass means something."""
    cfg = _release_variant()
    dep = workload.deployment(cfg, cfg.model_services[0])
    dep["spec"]["template"]["spec"]["containers"][1]["readinessProbe"]["httpGet"]["portName"] = "agent-metrics"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, VERSIONS[0], strict=True)


@pytest.mark.parametrize("env", envs("triton"))
def test_rendered_objects_validate(env: str) -> None:
    for obj in _core(build("triton", env, user_stacks()).objects):
        kubernetes_validate.validate(obj, LATEST, strict=True)


def _canary_objects() -> list[tuple[str, dict[str, Any]]]:
    """A canary in both routing modes: dev (ingress-nginx, committed) and prod turned to gateway + release."""
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    svc = raw["modelServices"][0]
    svc.pop("modelRepository", None)  # the committed prod is in release mode already
    svc["release"] = {
        "store": "s3://tritonops-releases-prod/vision",
        "channel": "stable",
        "storeName": "vision-prod",
        "trustedKeys": {"configMap": "tritonops-release-keys"},
        "canary": {"channel": "canary", "weight": 5, "replicas": 2},
    }
    out = []
    # dev in the legacy ingress-nginx mode (it ships in gateway mode): its canary Ingress twins validate too.
    for env, cfg in (("dev", legacy_ingress(parse_config("triton", read_stack_file("triton", "dev")[0]))),  # type: ignore[arg-type]
                     ("prod", parse_config("triton", raw))):
        assert isinstance(cfg, TritonStackConfig)
        for obj in _core(triton.service_objects(cfg, cfg.model_services[0])):
            out.append((f"{env}/{obj['kind']}/{obj['metadata']['name']}", obj))
    return out


CANARY_OBJECTS = sorted(_canary_objects(), key=lambda case: case[0])


def test_canary_objects_are_there() -> None:
    names = {label for label, _ in CANARY_OBJECTS}
    assert {"dev/Deployment/triton-vision-canary", "dev/Service/triton-vision-canary",
            "dev/Ingress/triton-vision-canary-http", "dev/Ingress/triton-vision-canary-grpc",
            "prod/Deployment/triton-vision-canary", "prod/Service/triton-vision-canary"} <= names


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("label", "obj"), CANARY_OBJECTS, ids=[label for label, _ in CANARY_OBJECTS])
def test_canary_objects_validate(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)
