"""Scale to zero and the optional scaling triggers: config checks, the ScaledObject, KEDA's CRD schema, policies.

The ScaledObject CRD of the pinned KEDA chart is test data (``data/keda``); every rendered ScaledObject
must match its ``openAPIV3Schema`` with unknown fields refused (what the API server's strict field
validation does with a structural schema).
"""

from __future__ import annotations

import copy
import functools
import math
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from k8s_harness import ROOT, envs, legacy_ingress, strict_schema, user_stacks
from pulumi_policy import PolicyResourceOptions, ResourceValidationArgs
from tritonops import versions
from tritonops.k8s import waits
from tritonops.k8s.config import PRODUCTION, ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import load_stack_config, read_stack_file, stack_file
from tritonops.k8s.stacks.triton import exposure, scaling
from tritonops.observability import keda_trigger as keda

DATA = Path(__file__).parent / "data" / "keda"
PACK = ROOT / "policies" / "tritonops"
sys.path.insert(0, str(PACK))
import policy_cluster as pcl  # noqa: E402
import policy_common as pc  # noqa: E402
import policy_workloads as pw  # noqa: E402

OPTS = PolicyResourceOptions(
    protect=False, ignore_changes=[], delete_before_replace=None, aliases=[], additional_secret_outputs=[],
    custom_timeouts=None,
)  # type: ignore[arg-type]


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load((DATA / "keda.sh_scaledobjects.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == "ScaledObject"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = strict_schema(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: the API server's own schema
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())


def _errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(obj)]


def _raw(env: str) -> dict[str, Any]:
    return copy.deepcopy(read_stack_file("triton", env)[0])


def _cfg(env: str, raw: dict[str, Any] | None = None) -> TritonStackConfig:
    cfg = parse_config("triton", raw if raw is not None else _raw(env), source=str(stack_file("triton", env)))
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _zero(env: str, **autoscaling: Any) -> dict[str, Any]:
    """The stack's first service set to scale to zero (a valid base unless ``autoscaling`` breaks it)."""
    raw = _raw(env)
    a = raw["modelServices"][0].setdefault("autoscaling", {})
    a.update({"minReplicas": 0, "cooldownPeriod": 600, "modelLoadSeconds": 90})
    if raw["tier"] == PRODUCTION:
        a["allowScaleToZero"] = True
        raw["modelServices"][0].pop("pdbMinAvailable", None)
        # prod routes through a Gateway; the wake-up signal is ingress-nginx's
        raw["ingress"] = {"mode": "ingress", "hostSuffix": "tritonops.example.com", "tlsSecret": "tritonops-tls"}
    a.update(autoscaling)
    return raw


def _scaled_objects(env: str) -> list[dict[str, Any]]:
    return [o for o in build("triton", env, user_stacks()).objects if o["kind"] == "ScaledObject"]


# --- KEDA's CRD schema ---------------------------------------------------------------------------


def test_crd_test_data_matches_the_pinned_chart() -> None:
    readme = (DATA / "README.md").read_text()
    assert f"chart {versions.KEDA_CHART_VERSION}" in readme and f"v{versions.KEDA_CHART_VERSION}" in readme


@pytest.mark.parametrize("env", envs("triton"))
def test_rendered_scaled_objects_match_the_crd_schema(env: str) -> None:
    objs = _scaled_objects(env)
    assert objs
    for obj in objs:
        assert _errors(obj) == [], obj["metadata"]["name"]


def test_prod_scale_to_zero_matches_the_crd_schema() -> None:
    cfg = _cfg("prod", _zero("prod"))
    so = scaling.scaled_object(cfg, cfg.model_services[0])
    assert _errors(so) == []
    assert so["metadata"]["annotations"] == {scaling.SCALE_TO_ZERO_ANNOTATION: "true"}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "cooldownPeriod"), "ten minutes"),
        (("spec", "minReplicaCount"), "0"),
        (("spec", "triggers", 0, "metadata", "threshold"), 5),  # trigger metadata are strings
        (("spec", "fallback", "idleReplicas"), 1),  # no such field
    ],
)
def test_the_schema_check_refuses_a_broken_scaled_object(path: tuple, value: Any) -> None:
    obj = copy.deepcopy(_scaled_objects("dev")[0])
    target = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert _errors(obj)


# --- config checks -------------------------------------------------------------------------------


def test_dev_example_scales_to_zero_with_a_wake_trigger() -> None:
    cfg = load_stack_config("triton", "dev")
    assert isinstance(cfg, TritonStackConfig)
    svc = cfg.model_services[0]
    so = scaling.scaled_object(cfg, svc)["spec"]
    assert (so["minReplicaCount"], so["cooldownPeriod"]) == (0, svc.autoscaling.cooldown_period)
    load = svc.autoscaling.model_load_seconds
    assert load is not None and svc.autoscaling.cooldown_period > load
    # An outage of Prometheus never scales to zero: KEDA only keeps a failing target up with fallback.replicas > 0.
    assert so["fallback"] == {"failureThreshold": 3, "replicas": 1, "behavior": "currentReplicasIfHigher"}
    (wake,) = [t for t in so["triggers"] if t["name"] == "wake"]
    route_names = [o["metadata"]["name"] for o in exposure.gateway_routes(cfg, svc)]
    assert wake["metadata"]["query"] == keda.gateway_requests_query(cfg.namespace, route_names, "1m")
    assert wake["metadata"]["activationThreshold"] == "0"
    # The legacy ingress-nginx mode wakes on ingress-nginx's per-Ingress counter.
    legacy = legacy_ingress(cfg)
    (legacy_wake,) = [t for t in scaling.scaled_object(legacy, svc)["spec"]["triggers"] if t["name"] == "wake"]
    ingress_names = [o["metadata"]["name"] for o in exposure.ingresses(legacy, svc)]
    assert legacy_wake["metadata"]["query"] == keda.ingress_requests_query(cfg.namespace, ingress_names, "1m")
    # The wake trigger only activates: it never asks for a second replica.
    assert keda.desired_replicas(10_000, keda.ScalingPolicy(threshold=keda.WAKE_TARGET, max_replicas=10)) == 1


def _deployment(env: str, name: str) -> dict[str, Any]:
    (d,) = [o for o in build("triton", env, user_stacks()).objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    return d


@pytest.mark.parametrize("env", envs("triton"))
def test_a_scaled_object_at_zero_holds_its_first_scale_in_until_the_first_up_has_seen_a_pod_serve(env: str) -> None:
    """KEDA scales to zero as soon as the ScaledObject exists and nothing is active (no traffic yet): without
    initialCooldownPeriod `pulumi up` would pass with no pod ever started (issue 43, failure 4)."""
    for so in _scaled_objects(env):
        spec = so["spec"]
        if spec["minReplicaCount"] != 0:
            assert "initialCooldownPeriod" not in spec  # a floor of 1+ keeps its pods anyway
            continue
        deploy = _deployment(env, spec["scaleTargetRef"]["name"])
        planned = waits.plan(build("triton", env, user_stacks()).objects)[waits.key(deploy)]
        # The same figure as the Deployment's wait and its progress deadline: KEDA may scale in only after
        # `pulumi up` has seen a pod Ready (release gate included) or given up on it.
        assert spec["initialCooldownPeriod"] == planned.create_s == deploy["spec"]["progressDeadlineSeconds"]
        pod = deploy["spec"]["template"]["spec"]
        assert waits.pod_ready_budget(pod)["gate"] == waits.RELEASE_GATE_S > 0
        assert spec["initialCooldownPeriod"] >= sum(waits.pod_ready_budget(pod).values())


def test_shipped_stacks_scale_to_zero_somewhere() -> None:
    """The test above must see a ScaledObject at zero (dev and staging ship one)."""
    assert [e for e in envs("triton") if any(o["spec"]["minReplicaCount"] == 0 for o in _scaled_objects(e))]


def test_initial_cooldown_follows_the_wait_budget() -> None:
    """Derived, not typed: a larger release volume (a longer release sync) moves it by the same seconds."""
    cfg = _cfg("dev")
    svc = cfg.model_services[0]
    before = scaling.scaled_object(cfg, svc)["spec"]["initialCooldownPeriod"]
    raw = _raw("dev")
    release = raw["modelServices"][0]["release"]
    old_mib = waits.quantity_mib(release.get("volumeSize", "20Gi"))
    release["volumeSize"] = "120Gi"
    larger = _cfg("dev", raw)
    after = scaling.scaled_object(larger, larger.model_services[0])["spec"]["initialCooldownPeriod"]
    sync = math.ceil(120 * 1024 / waits.S3_MIB_S) - math.ceil(old_mib / waits.S3_MIB_S)
    assert after - before == sync > 0


@pytest.mark.parametrize(
    ("env", "change", "key", "words"),
    [
        ("dev", {"cooldownPeriod": 90}, "autoscaling.cooldownPeriod", "not longer than modelLoadSeconds=90"),
        ("dev", {"cooldownPeriod": 60}, "autoscaling.cooldownPeriod", "sleep for less than it takes to wake"),
        ("dev", {"modelLoadSeconds": None}, "autoscaling.modelLoadSeconds", "bench_cold_start.py"),
        ("prod", {"allowScaleToZero": False}, "autoscaling.minReplicas", "allowScaleToZero: true"),
    ],
)
def test_scale_to_zero_is_refused_naming_file_and_field(env: str, change: dict[str, Any], key: str, words: str) -> None:
    raw = _zero(env, **change)
    if change.get("modelLoadSeconds", 0) is None:
        raw["modelServices"][0]["autoscaling"].pop("modelLoadSeconds")
    with pytest.raises(ConfigError) as exc:
        _cfg(env, raw)
    assert exc.value.key == f"tritonops-triton:modelServices[0].{key}"
    assert words in str(exc.value)
    assert str(stack_file("triton", env)) in str(exc.value)


def test_scale_to_zero_needs_a_router_to_wake() -> None:
    raw = _zero("dev")
    raw["ingress"] = {"mode": "none", "hostSuffix": "x.example.com", "gatewayName": "gw"}
    raw["modelServices"][0]["release"].pop("canary")  # a canary needs a router; not the point here
    with pytest.raises(ConfigError) as exc:
        _cfg("dev", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].autoscaling.minReplicas"
    assert "wake-up signal" in str(exc.value) and "ingress.mode" in str(exc.value)


def test_prod_allows_scale_to_zero_when_asked() -> None:
    cfg = _cfg("prod", _zero("prod"))
    assert cfg.model_services[0].autoscaling.min_replicas == 0


@pytest.mark.parametrize("field", ["requestsPerReplica", "queueMsPerReplica", "gpuUtilizationPerReplica"])
def test_optional_trigger_targets_must_be_positive(field: str) -> None:
    raw = _raw("prod")
    raw["modelServices"][0]["autoscaling"][field] = 0
    with pytest.raises(ConfigError) as exc:
        _cfg("prod", raw)
    assert exc.value.key == f"tritonops-triton:modelServices[0].autoscaling.{field}"


# --- the optional triggers -----------------------------------------------------------------------


def test_prod_example_has_queue_and_gpu_triggers_with_the_fallback() -> None:
    cfg = load_stack_config("triton", "prod")
    assert isinstance(cfg, TritonStackConfig)
    svc = cfg.model_services[0]
    spec = scaling.scaled_object(cfg, svc)["spec"]
    names = [t["name"] for t in spec["triggers"]]
    assert names == [*(f"pending-{m}" for m in ("resnet50", "densenet-onnx")),
                     *(f"rate-{m}" for m in ("resnet50", "densenet-onnx")),
                     *(f"queue-{m}" for m in ("resnet50", "densenet-onnx")), "gpu"]
    (rate,) = [t for t in spec["triggers"] if t["name"] == "rate-resnet50"]
    assert rate["metadata"]["query"] == keda.request_rate_query("resnet50", "1m")
    assert rate["metadata"]["threshold"] == "1300"
    # KEDA 2.17 applies the fallback to AverageValue metrics only: every trigger is one.
    assert {t["metricType"] for t in spec["triggers"]} == {"AverageValue"}
    (gpu,) = [t for t in spec["triggers"] if t["name"] == "gpu"]
    assert gpu["metadata"]["query"] == keda.gpu_utilization_query("triton", "triton-vision", "1m")
    assert gpu["metadata"]["threshold"] == gpu["metadata"]["activationThreshold"] == "80"
    # Pods always run (minReplicas 3): no DCGM series is an exporter outage, which must reach the fallback.
    assert gpu["metadata"]["ignoreNullValues"] == "false"
    assert {t["metadata"]["ignoreNullValues"] for t in spec["triggers"] if t["name"] != "gpu"} == {"true"}
    assert "cooldownPeriod" not in spec  # only a ScaledObject that scales to zero has one


def test_gpu_query_selects_the_deployments_pods_only() -> None:
    import re

    expr = keda.gpu_utilization_query("triton", "triton-vision")
    pattern = re.search(r'exported_pod=~"([^"]+)"', expr)
    assert pattern
    regex = re.compile(f"^(?:{pattern.group(1)})$")  # Prometheus anchors its regex matchers
    assert regex.match("triton-vision-7d9c8b6f5-x2k4q")
    for other in ("triton-vision-canary-7d9c8b6f5-x2k4q", "triton-vision-drift-29012345-abcde",
                  "triton-vision2-7d9c8b6f5-x2k4q"):
        assert not regex.match(other), other


# --- the policy pack -----------------------------------------------------------------------------


def _violations(validate: Any, obj: dict[str, Any], config: dict[str, Any]) -> list[str]:
    found: list[str] = []
    args = ResourceValidationArgs(pc.SCALED_OBJECT, obj, "urn:x", obj["metadata"]["name"], OPTS, None, config)
    validate(args, lambda msg, urn=None: found.append(msg))
    return found


PROD_HA = {"requireHighAvailability": True, "minReplicas": 2}


def test_policy_allows_prod_scale_to_zero_only_with_consent() -> None:
    cfg = _cfg("prod", _zero("prod"))
    so = scaling.scaled_object(cfg, cfg.model_services[0])
    assert _violations(pw.validate_high_availability, so, PROD_HA) == []
    so["metadata"].pop("annotations")
    (msg,) = _violations(pw.validate_high_availability, so, PROD_HA)
    assert pc.ALLOW_SCALE_TO_ZERO in msg
    assert pc.ALLOW_SCALE_TO_ZERO == scaling.SCALE_TO_ZERO_ANNOTATION


def test_policy_refuses_scale_to_zero_without_a_wake_trigger() -> None:
    cfg = _cfg("dev")
    so = scaling.scaled_object(cfg, cfg.model_services[0])
    assert _violations(pcl.validate_scaled_object_wake_up, so, {}) == []
    assert _violations(pcl.validate_scaled_object_fallback, so, {}) == []
    assert pc.WAKE_METRICS == (keda.GATEWAY_REQUESTS, keda.INGRESS_REQUESTS)
    so["spec"]["triggers"] = [t for t in so["spec"]["triggers"] if t["name"] != "wake"]
    (msg,) = _violations(pcl.validate_scaled_object_wake_up, so, {})
    assert "never wake" in msg


def test_policy_refuses_scale_to_zero_without_an_initial_cooldown() -> None:
    cfg = _cfg("dev")
    so = scaling.scaled_object(cfg, cfg.model_services[0])
    del so["spec"]["initialCooldownPeriod"]
    (msg,) = _violations(pcl.validate_scaled_object_wake_up, so, {})
    assert "initialCooldownPeriod" in msg
