"""Pure builders: Triton objects, platform releases, EKS specs, GPU memory budget."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_harness import ROOT, direct_prod_services
from tritonops import versions
from tritonops.agent import manifest, releases, signing
from tritonops.agent.bundle import build_bytes
from tritonops.agent.cli import parser as agent_parser
from tritonops.k8s import drift, eks, platform, triton
from tritonops.k8s.budget import BudgetError, budgets, check_budget, service_budget
from tritonops.k8s.config import (
    ConfigError,
    PlatformConfig,
    TritonStackConfig,
    load_stack_config,
    parse_config,
    read_stack_file,
)
from tritonops.observability.keda import prometheus_trigger
from tritonops.observability.rules import rule_groups


def _triton(env: str = "prod") -> TritonStackConfig:
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _direct() -> TritonStackConfig:
    """prod with Triton reading its models itself (s3:// and a PVC), as before the release flow."""
    raw = {**read_stack_file("triton", "prod")[0], "modelServices": direct_prod_services()}
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _platform(env: str = "prod") -> PlatformConfig:
    cfg = load_stack_config("platform", env)
    assert isinstance(cfg, PlatformConfig)
    return cfg


def _container(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]["containers"][0]


def _args(dep: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for a in _container(dep)["args"][1:]:
        k, _, v = a.partition("=")
        out.setdefault(k, []).append(v)
    return out


# --- Triton Deployment ---------------------------------------------------------------------------


def test_deployment_gpu_limits_tolerations_and_node_pool() -> None:
    cfg = _triton()
    svc = cfg.model_services[0]
    dep = triton.deployment(cfg, svc)
    pod = dep["spec"]["template"]["spec"]
    res = _container(dep)["resources"]
    assert res["limits"]["nvidia.com/gpu"] == res["requests"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {triton.NODE_POOL_LABEL: "gpu-a10g"}
    assert pod["priorityClassName"] == triton.PRIORITY_CLASS


def test_deployment_probes_on_triton_health_endpoints() -> None:
    c = _container(triton.deployment(_triton(), _triton().model_services[0]))
    assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    # model loading may take startup failureThreshold x period seconds before liveness applies
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 300


def test_deployment_runs_non_root_hardened() -> None:
    dep = triton.deployment(_triton(), _triton().model_services[0])
    pod_sc = dep["spec"]["template"]["spec"]["securityContext"]
    sc = _container(dep)["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in _container(dep)["volumeMounts"]}
    assert {"/tmp", "/dev/shm"} <= mounts  # writable scratch despite the read-only root


def test_spread_is_hard_only_when_configured() -> None:
    prod, dev = _triton("prod"), _triton("dev")
    hard = triton.deployment(prod, prod.model_services[0])["spec"]["template"]["spec"]
    soft = triton.deployment(dev, dev.model_services[0])["spec"]["template"]["spec"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in hard["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in soft["affinity"]["podAntiAffinity"]
    host = [t for t in hard["topologySpreadConstraints"] if t["topologyKey"] == "kubernetes.io/hostname"]
    assert host[0]["whenUnsatisfiable"] == "DoNotSchedule"
    host = [t for t in soft["topologySpreadConstraints"] if t["topologyKey"] == "kubernetes.io/hostname"]
    assert host[0]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_triton_args_explicit_mode_loads_each_model() -> None:
    cfg = _direct()
    args = _args(triton.deployment(cfg, cfg.model_services[0]))
    assert args["--model-repository"] == ["s3://tritonops-models-prod/vision"]
    assert args["--model-control-mode"] == ["explicit"]
    assert args["--load-model"] == ["resnet50", "densenet_onnx"]
    assert args["--strict-model-config"] == ["true"]
    assert args["--metrics-port"] == ["8002"] and args["--allow-gpu-metrics"] == ["true"]
    assert "--repository-poll-secs" not in args


def test_triton_args_poll_mode_from_pvc() -> None:
    cfg = _direct()
    dep = triton.deployment(cfg, cfg.model_services[1])
    args = _args(dep)
    assert args["--model-control-mode"] == ["poll"] and args["--repository-poll-secs"] == ["60"]
    assert args["--model-repository"] == [triton.MODEL_DIR]
    assert "--load-model" not in args
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["models"]["persistentVolumeClaim"] == {"claimName": "embeddings-models", "readOnly": True}


def test_admin_apis_restricted_behind_header_from_secret() -> None:
    cfg = _triton()
    dep = triton.deployment(cfg, cfg.model_services[0])
    args = _args(dep)
    expected = f"{triton.RESTRICTED}:triton-admin-key=$({triton.ADMIN_ENV})"
    assert args["--http-restricted-api"] == [expected]
    assert args["--grpc-restricted-protocol"] == [expected]
    assert set(triton.RESTRICTED.split(",")) >= {"model-repository", "model-config", "shared-memory"}
    env = {e["name"]: e for e in _container(dep)["env"]}
    assert env[triton.ADMIN_ENV]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-api", "key": "token"}
    assert "inference" not in triton.RESTRICTED and "health" not in triton.RESTRICTED


def test_memory_pools_and_load_limit_from_the_budget() -> None:
    cfg = _triton()
    svc = cfg.model_services[0]
    args = _args(triton.deployment(cfg, svc))
    b = service_budget(svc, cfg)
    assert args["--cuda-memory-pool-byte-size"] == [f"0:{svc.memory.cuda_pool_mib * 1024 * 1024}"]
    assert args["--pinned-memory-pool-byte-size"] == [str(svc.memory.pinned_pool_mib * 1024 * 1024)]
    assert args["--model-load-gpu-limit"] == [f"0:{b.load_limit_fraction}"]
    assert 0 < b.load_limit_fraction < 1


def test_multi_gpu_pod_gets_per_device_args() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][0]["gpus"] = 2
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    dep = triton.deployment(cfg, cfg.model_services[0])
    args = _args(dep)
    assert [a.split(":")[0] for a in args["--model-load-gpu-limit"]] == ["0", "1"]
    assert len(args["--cuda-memory-pool-byte-size"]) == 2
    assert _container(dep)["resources"]["limits"]["nvidia.com/gpu"] == "2"


def _tritonserver() -> Path | None:
    for sp in site.getsitepackages():
        binary = Path(sp) / "pytriton" / "tritonserver" / "bin" / "tritonserver"
        if binary.is_file():
            return binary
    return None


def test_every_triton_flag_exists_in_tritonserver() -> None:
    """The flags we pass are tritonserver 2.51's own (checked against the real binary's --help)."""
    binary = _tritonserver()
    if binary is None:
        pytest.skip("nvidia-pytriton (the `triton` extra) is not installed")
    libs = binary.parents[3] / "nvidia_pytriton.libs"
    out = subprocess.run(
        [str(binary), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LD_LIBRARY_PATH": str(libs)},
    )
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", out.stdout + out.stderr, re.M))
    assert "--model-repository" in known
    for env in ("dev", "prod"):
        cfg = _triton(env)
        for svc in cfg.model_services:
            for flag in _args(triton.deployment(cfg, svc)):
                assert flag in known, f"tritonserver has no {flag}"


# --- the rest of a model service -----------------------------------------------------------------


def test_service_ports_and_scrape_job_label() -> None:
    cfg = _direct()
    svc = triton.service(cfg, cfg.model_services[0])
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("http", 8000), ("grpc", 8001), ("metrics", 8002)]
    assert svc["metadata"]["labels"][triton.JOB_LABEL] == triton.SCRAPE_JOB
    sm = triton.service_monitor(cfg, cfg.model_services[0])
    assert sm["spec"]["jobLabel"] == triton.JOB_LABEL
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def test_pdb_min_available_in_prod_max_unavailable_in_dev() -> None:
    prod, dev = _triton("prod"), _triton("dev")
    assert triton.pod_disruption_budget(prod, prod.model_services[0])["spec"]["minAvailable"] == 2
    assert triton.pod_disruption_budget(dev, dev.model_services[0])["spec"]["maxUnavailable"] == 1


def test_network_policy_inference_from_allowed_namespaces_metrics_from_prometheus() -> None:
    cfg = _direct()
    np_ = triton.network_policy(cfg, cfg.model_services[0])
    inference, metrics = np_["spec"]["ingress"]
    assert {p["port"] for p in inference["ports"]} == {8000, 8001}
    allowed = inference["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert set(allowed) == {"triton", "apps", "search", "gateway"}
    assert {p["port"] for p in metrics["ports"]} == {8002}
    peer = metrics["from"][0]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}


def test_service_account_irsa_annotation_for_s3() -> None:
    cfg = _direct()
    sa = triton.service_account(cfg, cfg.model_services[0])
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith(":role/tritonops-prod-model-reader")
    assert "annotations" not in triton.service_account(cfg, cfg.model_services[1])["metadata"]


def test_scaled_object_uses_observability_trigger_and_safe_fallback() -> None:
    cfg = _triton()
    svc = cfg.model_services[0]
    so = triton.scaled_object(cfg, svc)
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == triton.name_of(svc)
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (3, 10)
    assert spec["fallback"]["behavior"] == "currentReplicasIfHigher"
    assert spec["fallback"]["replicas"] == spec["minReplicaCount"]
    expected = prometheus_trigger("resnet50", cfg.prometheus_url, policy=triton.scaling_policy(svc))
    trig = {k: v for k, v in spec["triggers"][0].items() if k != "name"}
    assert trig == expected
    assert [t["metadata"]["query"] for t in spec["triggers"]][1].count("densenet_onnx") == 1


def test_ingress_grpc_backend_protocol() -> None:
    cfg = _triton("dev")
    http, grpc = triton.ingresses(cfg, cfg.model_services[0])[:2]  # then the canary's twins
    assert http["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "HTTP"
    assert grpc["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    assert grpc["spec"]["rules"][0]["host"] == "grpc-vision.dev.tritonops.example.com"
    assert grpc["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] == {"name": "grpc"}
    assert (
        "ingress-nginx"
        in triton.network_policy(cfg, cfg.model_services[0])["spec"]["ingress"][0]["from"][0]["namespaceSelector"][
            "matchExpressions"
        ][0]["values"]
    )


def test_gateway_routes() -> None:
    cfg = _triton("prod")
    http, grpc = triton.gateway_routes(cfg, cfg.model_services[0])
    assert (http["kind"], grpc["kind"]) == ("HTTPRoute", "GRPCRoute")
    assert grpc["spec"]["parentRefs"] == [{"name": "inference", "namespace": "gateway"}]
    assert grpc["spec"]["rules"][0]["backendRefs"] == [{"name": "triton-vision", "port": 8001}]


def test_service_objects_follow_ingress_mode() -> None:
    kinds = {o["kind"] for o in triton.service_objects(_triton("dev"), _triton("dev").model_services[0])}
    assert "Ingress" in kinds and "HTTPRoute" not in kinds
    kinds = {o["kind"] for o in triton.service_objects(_triton("prod"), _triton("prod").model_services[0])}
    assert {"HTTPRoute", "GRPCRoute"} <= kinds and "Ingress" not in kinds


def test_namespace_objects_use_observability_rules_and_dashboards() -> None:
    cfg = _triton()
    rule = triton.prometheus_rule(cfg)
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert names == [g["name"] for g in rule_groups()]
    cm = triton.dashboards_config_map(cfg)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] and all(k.endswith(".json") for k in cm["data"])
    pc = triton.priority_class(cfg)
    assert pc["value"] == cfg.priority and pc["globalDefault"] is False


# --- GPU memory budget ---------------------------------------------------------------------------


def test_budget_figures() -> None:
    cfg = _triton("prod")
    plan = check_budget(cfg)
    vision = plan["gpu-a10g"][0]
    assert vision.models_mib == 4 * 350 + 2 * 200
    assert vision.overhead_mib == 600 + 256 + 512
    assert vision.capacity_mib == 23028 and vision.fits
    dev = budgets(_triton("dev"))["gpu-l4"][0]
    assert dev.capacity_mib == 23034 // 2  # time-sliced in two


def test_budget_overflow_names_the_model_service() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][1]["models"][0]["instanceCount"] = 40  # 40 x 1400 MiB on one L40S
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[1].models"
    assert "'embeddings' does not fit node pool 'gpu-l40s'" in str(exc.value)


def test_time_slicing_shrinks_the_budget() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][1]["models"][0]["instanceCount"] = 4  # 4 x 1400 + 1368 MiB overhead = 6968 MiB
    parse_config("triton", raw)  # fits a whole 46068 MiB L40S
    raw["nodePools"]["gpu-l40s"]["gpuSlices"] = 8  # 46068 / 8 = 5758 MiB per pod
    with pytest.raises(ConfigError, match="embeddings.*needs 6968 MiB.*offers 5758 MiB"):
        parse_config("triton", raw)


def test_budget_error_type() -> None:
    err = BudgetError("k", "m")
    assert isinstance(err, ValueError) and err.key == "k"


# --- platform ------------------------------------------------------------------------------------


def test_gpu_operator_release_pinned_and_toggles() -> None:
    rel = platform.gpu_operator_release(_platform("dev"))
    assert (rel.chart, rel.version, rel.repo) == (
        versions.GPU_OPERATOR_CHART,
        versions.GPU_OPERATOR_CHART_VERSION,
        versions.GPU_OPERATOR_REPO,
    )
    assert rel.values["driver"]["enabled"] is False and rel.values["toolkit"]["enabled"] is False
    assert rel.values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert rel.values["devicePlugin"]["config"]["name"] == platform.TIME_SLICING_CONFIG_MAP
    assert "devicePlugin" not in platform.gpu_operator_release(_platform("prod")).values


def test_time_slicing_config_map() -> None:
    cm = platform.time_slicing_config_map(_platform("dev"))
    assert cm is not None
    doc = yaml.safe_load(cm["data"]["shared-2"])
    assert doc["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    assert platform.time_slicing_config_map(_platform("prod")) is None


def test_mig_strategy_passed_through() -> None:
    raw = copy.deepcopy(read_stack_file("platform", "prod")[0])
    raw["gpuOperator"]["migStrategy"] = "mixed"
    cfg = parse_config("platform", raw)
    assert isinstance(cfg, PlatformConfig)
    assert platform.gpu_operator_release(cfg).values["mig"] == {"strategy": "mixed"}
    raw["gpuOperator"]["timeSlicing"] = {"x": 2}
    with pytest.raises(ConfigError, match="gpuOperator.migStrategy"):
        parse_config("platform", raw)


def test_alertmanager_config_from_receivers_and_secrets() -> None:
    cfg = _platform("prod")
    doc = platform.alertmanager_config(cfg, {"slackOps": "https://hooks/ops", "pagerdutyRoutingKey": "rk"})
    by_name = {r["name"]: r for r in doc["receivers"]}
    assert by_name["ops-slack"]["slack_configs"][0]["api_url"] == "https://hooks/ops"
    assert by_name["oncall-pagerduty"]["pagerduty_configs"][0]["routing_key"] == "rk"
    assert doc["route"]["receiver"] == "ops-slack"
    assert {"receiver": "oncall-pagerduty", "matchers": ['severity="critical"']} in doc["route"]["routes"]
    with pytest.raises(ValueError, match=r"tritonops-platform:alertmanagerSecrets\.pagerdutyRoutingKey"):
        platform.alertmanager_config(cfg, {"slackOps": "x"})


def test_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool (Debian prometheus-alertmanager) is not installed")
    doc = platform.alertmanager_config(
        _platform("prod"), {"slackOps": "https://hooks.example/ops", "pagerdutyRoutingKey": "rk"}
    )
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_monitoring_release_values() -> None:
    rel = platform.monitoring_release(_platform("prod"))
    assert rel.version == versions.KUBE_PROMETHEUS_STACK_CHART_VERSION
    spec = rel.values["prometheus"]["prometheusSpec"]
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False and spec["ruleSelectorNilUsesHelmValues"] is False
    assert spec["replicas"] == 2
    assert rel.values["alertmanager"]["alertmanagerSpec"]["configSecret"] == platform.ALERTMANAGER_SECRET
    assert rel.values["grafana"]["sidecar"]["dashboards"]["label"] == "grafana_dashboard"
    assert "slack" not in yaml.safe_dump(rel.values)  # no receiver secrets in Helm values


def test_keda_release() -> None:
    assert platform.keda_release(_platform("prod")).values["operator"]["replicaCount"] == 2
    assert platform.keda_release(_platform("dev")).version == versions.KEDA_CHART_VERSION


# --- EKS -----------------------------------------------------------------------------------------


def test_node_group_spec() -> None:
    cfg = load_stack_config("cluster-aws", "prod")
    spec = eks.node_group_spec(cfg, cfg.gpu_node_pools[1])  # type: ignore[union-attr]
    assert spec["ami_type"] == "BOTTLEROCKET_x86_64_NVIDIA" and spec["capacity_type"] == "ON_DEMAND"
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert spec["labels"][triton.NODE_POOL_LABEL] == "gpu-l40s"
    assert spec["labels"]["tritonops.io/gpu"] == "L40S"
    assert spec["scaling_config"] == {"min_size": 2, "max_size": 6, "desired_size": 2}
    assert spec["disk_size"] == 300


def test_dev_node_group_is_spot_and_time_sliced() -> None:
    cfg = load_stack_config("cluster-aws", "dev")
    spec = eks.node_group_spec(cfg, cfg.gpu_node_pools[0])  # type: ignore[union-attr]
    assert spec["capacity_type"] == "SPOT"
    assert spec["labels"][eks.DEVICE_PLUGIN_CONFIG_LABEL] == "shared-2"


def test_kubeconfig_uses_aws_exec_auth() -> None:
    doc = yaml.safe_load(eks.kubeconfig("c", "https://x", "Q0E=", "us-west-2"))
    user = doc["users"][0]["user"]["exec"]
    assert user["command"] == "aws" and user["args"][:2] == ["eks", "get-token"]
    assert doc["clusters"][0]["cluster"]["server"] == "https://x"


def test_rollout_never_waits_for_a_new_gpu_node_when_spread() -> None:
    prod, dev = _triton("prod"), _triton("dev")
    hard = triton.deployment(prod, prod.model_services[0])["spec"]["strategy"]["rollingUpdate"]
    assert hard == {"maxSurge": 0, "maxUnavailable": 1}
    svc = prod.model_services[0]
    assert svc.replicas - hard["maxUnavailable"] >= (svc.pdb_min_available or 0)
    soft = triton.deployment(dev, dev.model_services[0])["spec"]["strategy"]["rollingUpdate"]
    assert soft == {"maxSurge": 1, "maxUnavailable": 0}


def test_grpc_ingress_needs_tls() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    del raw["ingress"]["tlsSecret"]
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:ingress.tlsSecret"
    http, grpc = triton.ingresses(_triton("dev"), _triton("dev").model_services[0])[:2]
    assert grpc["spec"]["tls"] == [
        {"hosts": ["grpc-vision.dev.tritonops.example.com"], "secretName": "dev-tritonops-example-com-tls"}
    ]


def test_cluster_spec() -> None:
    cfg = load_stack_config("cluster-aws", "prod")
    spec = eks.cluster_spec(cfg)  # type: ignore[arg-type]
    assert spec["name"] == "tritonops-prod" and spec["version"] == versions.KUBERNETES_VERSION
    assert spec["vpc_config"]["endpoint_public_access"] is False
    assert len(spec["vpc_config"]["subnet_ids"]) == 3
    assert "audit" in spec["enabled_cluster_log_types"]
    system = eks.system_node_group_spec(cfg)  # type: ignore[arg-type]
    assert "taints" not in system and system["labels"] == {triton.NODE_POOL_LABEL: "system"}
    assert system["scaling_config"]["min_size"] == 3


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_gpu_operator_skips_driver_where_the_ami_ships_it(env: str) -> None:
    from tritonops.k8s.catalog import GPU_AMI_TYPES

    cluster = load_stack_config("cluster-aws", env)
    ops = _platform(env).gpu_operator
    if all(p.ami_type in GPU_AMI_TYPES for p in cluster.gpu_node_pools):  # type: ignore[union-attr]
        assert not ops.driver_enabled and not ops.toolkit_enabled


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]]
    return [spec["template"]] if "template" in spec else []


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_selectors_match_only_the_server_pods(env: str) -> None:
    """PDB, Service, NetworkPolicy and spread select the Deployment's pods and no other pod of the service."""
    cfg = _triton(env)
    for svc in cfg.model_services:
        objs = triton.service_objects(cfg, svc)
        sel = triton.selector(svc)
        for obj in objs:
            for tpl in _pod_templates(obj):
                labels = tpl["metadata"]["labels"]
                matches = all(labels.get(k) == v for k, v in sel.items())
                assert matches == (obj["kind"] == "Deployment"), f"{obj['kind']} {obj['metadata']['name']}"


def test_irsa_trust_policy_scoped_to_one_service_account() -> None:
    doc = json.loads(
        eks.irsa_trust_policy(
            "arn:aws:iam::1:oidc-provider/oidc.eks.x/id/AB", "https://oidc.eks.x/id/AB", "triton", "triton-vision"
        )
    )
    (stmt,) = doc["Statement"]
    assert stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert stmt["Principal"] == {"Federated": "arn:aws:iam::1:oidc-provider/oidc.eks.x/id/AB"}
    assert stmt["Condition"]["StringEquals"] == {
        "oidc.eks.x/id/AB:sub": "system:serviceaccount:triton:triton-vision",
        "oidc.eks.x/id/AB:aud": "sts.amazonaws.com",
    }


def test_s3_read_policy_is_read_only_and_prefix_scoped() -> None:
    doc = json.loads(eks.s3_read_policy("models", "vision/"))
    actions = {a for s in doc["Statement"] for a in s["Action"]}
    assert actions == {"s3:GetObject", "s3:ListBucket"}
    get, lst = doc["Statement"]
    assert get["Resource"] == ["arn:aws:s3:::models/vision/*"]
    assert lst["Condition"]["StringLike"]["s3:prefix"] == ["vision", "vision/*"]
    assert json.loads(eks.s3_read_policy("models"))["Statement"][0]["Resource"] == ["arn:aws:s3:::models/*"]


# --- pull mode: the release agent in the pod -----------------------------------------------------


def _pod(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def _release_cfg(**release: Any) -> TritonStackConfig:
    """dev (vision pulls the `dev` channel), with release fields overridden; podSecurity for nodeCache."""
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["release"].update(release)
    if release.get("nodeCache"):
        raw["podSecurity"] = "privileged"
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def test_release_pod_runs_sync_then_triton_and_the_agent() -> None:
    cfg = _triton("dev")
    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    assert [c["name"] for c in pod["initContainers"]] == ["release-sync"]
    assert [c["name"] for c in pod["containers"]] == ["triton", "release-agent"]
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert c["image"] == cfg.model_services[0].image  # the Triton image: nothing more to pull
        assert c["securityContext"] == triton.container_security_context()
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert "nvidia.com/gpu" not in pod["containers"][1]["resources"]["requests"]


def test_release_triton_args_serve_the_agents_link_in_explicit_mode() -> None:
    cfg = _triton("dev")
    args = _args(triton.deployment(cfg, cfg.model_services[0]))
    assert args["--model-repository"] == [triton.RELEASE_LINK]
    assert args["--model-control-mode"] == ["explicit"]
    assert args["--load-model"] == ["*"]
    assert args["--http-restricted-api"] == [f"{triton.RESTRICTED}:triton-admin-key=$({triton.ADMIN_ENV})"]


def test_release_volume_shared_triton_reads_only() -> None:
    cfg = _triton("dev")
    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    vols = _by_name(pod["volumes"])
    assert vols["releases"] == {"name": "releases", "emptyDir": {"sizeLimit": "20Gi"}}
    assert vols["agent"]["configMap"] == {
        "name": triton.AGENT_CONFIG_MAP,
        "items": [{"key": triton.AGENT_KEY, "path": triton.AGENT_KEY}],
    }
    assert vols["trusted-keys"]["configMap"] == {
        "name": "tritonops-release-keys",
        "items": [{"key": "release.pub", "path": "release.pub"}],
    }
    sync, (server, agent) = pod["initContainers"][0], pod["containers"]
    for c in (sync, agent):
        mounts = _by_name(c["volumeMounts"])
        assert mounts["releases"] == {"name": "releases", "mountPath": triton.RELEASE_ROOT}  # writable
        assert mounts["agent"]["readOnly"] and mounts["trusted-keys"]["readOnly"]
        assert mounts["tmp"]["mountPath"] == "/tmp"  # openssl's temporary files; the root is read-only
    releases = _by_name(server["volumeMounts"])["releases"]
    assert releases == {"name": "releases", "mountPath": triton.RELEASE_ROOT, "readOnly": True}
    assert "hostPath" not in str(pod["volumes"])


def test_release_agent_argv_is_the_agents_own() -> None:
    """The pod's argv parses with the agent's own parser, into the pod's paths (no drift of flags)."""
    cfg = _triton("dev")
    rel = cfg.model_services[0].release
    assert rel is not None
    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    sync, agent = pod["initContainers"][0]["command"], pod["containers"][1]["command"]
    assert sync[:2] == agent[:2] == ["python3", triton.AGENT_PATH]
    keys = [f"{triton.TRUSTED_KEYS_DIR}/release.pub"]
    expected = triton.release_agent_args("sync", rel.store, rel.channel, triton.RELEASE_LINK, triton.RELEASES_DIR, keys)
    assert sync[2:] == expected
    a = agent_parser().parse_args(sync[2:])
    assert (a.cmd, a.store, a.channel, a.cache, a.s3_endpoint) == ("sync", rel.store, "dev", None, None)
    assert (str(a.link), str(a.releases), [str(k) for k in a.trusted_key]) == (
        triton.RELEASE_LINK,
        triton.RELEASES_DIR,
        keys,
    )
    a = agent_parser().parse_args(agent[2:])
    assert (a.cmd, a.triton, a.header, a.listen, a.interval) == (
        "pull",
        "http://127.0.0.1:8000",
        cfg.admin_api.header,
        f"0.0.0.0:{triton.AGENT_PORT}",
        30.0,
    )
    assert str(a.link) == triton.RELEASE_LINK and [str(k) for k in a.trusted_key] == keys
    # The sidecar's readiness threshold is sized from these: they are the agent's own defaults.
    assert (a.load_timeout, a.golden_timeout) == (triton.AGENT_LOAD_TIMEOUT_S, triton.AGENT_GOLDEN_TIMEOUT_S)


def test_release_agent_args_options_and_refusals() -> None:
    args = triton.release_agent_args(
        "pull",
        "s3://b/p",
        "prod",
        Path("/l"),
        Path("/r"),
        [Path("/k/a.pem"), "/k/b.pem"],
        triton_url="http://127.0.0.1:8000",
        header="h",
        listen="127.0.0.1:9",
        interval=2.5,
        cache=Path("/c"),
        s3_endpoint="http://127.0.0.1:5000",
    )
    assert args == [
        "pull", "--store", "s3://b/p", "--channel", "prod", "--link", "/l", "--releases", "/r",
        "--trusted-key", "/k/a.pem", "--trusted-key", "/k/b.pem", "--cache", "/c",
        "--s3-endpoint", "http://127.0.0.1:5000", "--triton", "http://127.0.0.1:8000", "--header", "h",
        "--listen", "127.0.0.1:9", "--interval", "2.5",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="interval, listen: only for pull"):
        triton.release_agent_args("sync", "s3://b", "c", "/l", "/r", ["/k"], listen=":1", interval=1)
    with pytest.raises(ValueError, match="trusted_keys"):
        triton.release_agent_args("sync", "s3://b", "c", "/l", "/r", [])
    with pytest.raises(ValueError, match="command"):
        triton.release_agent_args("install", "s3://b", "c", "/l", "/r", ["/k"])


def test_release_sidecar_metrics_port_readiness_and_admin_secret() -> None:
    cfg = _triton("dev")
    agent = _pod(triton.deployment(cfg, cfg.model_services[0]))["containers"][1]
    assert agent["ports"] == [{"name": "agent-metrics", "containerPort": triton.AGENT_PORT, "protocol": "TCP"}]
    probe = agent["readinessProbe"]
    assert probe["httpGet"] == {"path": "/ready", "port": "agent-metrics"}
    # The agent answers /ready during a switch (tests/unit/agent), so a short threshold is safe.
    assert (probe["failureThreshold"], probe["periodSeconds"]) == (3, triton.AGENT_PROBE_PERIOD_S)
    env = _by_name(agent["env"])
    assert env["TRITONOPS_ADMIN_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-api", "key": "token"}
    sync = _pod(triton.deployment(cfg, cfg.model_services[0]))["initContainers"][0]
    assert "TRITONOPS_ADMIN_SECRET" not in _by_name(sync["env"])  # sync never talks to Triton


def test_release_s3_credentials_only_from_the_secret() -> None:
    cfg = _triton("dev")
    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    for c in (pod["initContainers"][0], pod["containers"][1]):
        env = _by_name(c["env"])
        assert env["AWS_REGION"] == {"name": "AWS_REGION", "value": "us-west-2"}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("tritonops-release-reader", name)
            assert "value" not in env[name]
        assert env["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
        assert not any(a.startswith(("AKIA", "--secret", "--token")) or "token" in a for a in c["command"])
    anonymous = _release_cfg(store="https://mirror.example/releases", region=None, credentialsSecret=None)
    pod = _pod(triton.deployment(anonymous, anonymous.model_services[0]))
    assert not any(e["name"].startswith("AWS_") for e in pod["initContainers"][0]["env"])


def test_release_node_cache_is_a_host_path_at_the_agents_cache() -> None:
    cfg = _release_cfg(nodeCache=True, s3Endpoint="http://minio.storage.svc:9000")
    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    vol = _by_name(pod["volumes"])["node-cache"]
    assert vol["hostPath"] == {"path": triton.NODE_CACHE_DIR, "type": "DirectoryOrCreate"}
    for c in (pod["initContainers"][0], pod["containers"][1]):
        cmd = c["command"]
        assert cmd[cmd.index("--cache") + 1] == _by_name(c["volumeMounts"])["node-cache"]["mountPath"]
        assert cmd[cmd.index("--s3-endpoint") + 1] == "http://minio.storage.svc:9000"
    assert "node-cache" not in _by_name(pod["containers"][0]["volumeMounts"])  # Triton never sees it
    labels = triton.namespace(cfg)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_release_trusted_keys_from_a_secret_several_while_rotating() -> None:
    cfg = _release_cfg(trustedKeys={"secret": "release-keys", "keys": ["old.pem", "new.pem"]})
    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    assert _by_name(pod["volumes"])["trusted-keys"]["secret"] == {
        "secretName": "release-keys",
        "items": [{"key": "old.pem", "path": "old.pem"}, {"key": "new.pem", "path": "new.pem"}],
    }
    cmd = pod["initContainers"][0]["command"]
    keys = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--trusted-key"]
    assert keys == [f"{triton.TRUSTED_KEYS_DIR}/old.pem", f"{triton.TRUSTED_KEYS_DIR}/new.pem"]


def test_release_metrics_reach_prometheus() -> None:
    """Service port, ServiceMonitor endpoint and NetworkPolicy all carry the agent's metrics port."""
    cfg = _triton("dev")
    svc = cfg.model_services[0]
    ports = {p["name"]: p for p in triton.service(cfg, svc)["spec"]["ports"]}
    assert (
        ports["agent-metrics"]["port"] == triton.AGENT_PORT and ports["agent-metrics"]["targetPort"] == "agent-metrics"
    )
    endpoints = triton.service_monitor(cfg, svc)["spec"]["endpoints"]
    assert [(e["port"], e["path"]) for e in endpoints] == [("metrics", "/metrics"), ("agent-metrics", "/metrics")]
    inference, metrics = triton.network_policy(cfg, svc)["spec"]["ingress"]
    assert {p["port"] for p in metrics["ports"]} == {triton.METRICS_PORT, triton.AGENT_PORT}
    assert triton.AGENT_PORT not in {p["port"] for p in inference["ports"]}  # apps cannot read it
    prod = _direct()  # no release: nothing of the agent
    assert "agent-metrics" not in {p["name"] for p in triton.service(prod, prod.model_services[0])["spec"]["ports"]}
    assert len(triton.service_monitor(prod, prod.model_services[0])["spec"]["endpoints"]) == 1
    dep = triton.deployment(prod, prod.model_services[0])
    assert "initContainers" not in _pod(dep) and len(_pod(dep)["containers"]) == 1


def test_agent_config_map_holds_the_agent_zipapp() -> None:
    cfg = _triton("dev")
    cm = triton.agent_config_map(cfg)
    assert cm in triton.namespace_objects(cfg)
    data = base64.b64decode(cm["binaryData"][triton.AGENT_KEY], validate=True)
    assert data == build_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert cm["metadata"]["annotations"][triton.AGENT_SHA_ANNOTATION] == sha
    # A new agent changes the pod template, so the Deployment rolls its pods onto it.
    pod_meta = triton.deployment(cfg, cfg.model_services[0])["spec"]["template"]["metadata"]
    assert pod_meta["annotations"][triton.AGENT_SHA_ANNOTATION] == sha


@pytest.mark.parametrize("command", [[], ["sync"], ["pull"], ["check"]])
def test_agent_zipapp_from_the_config_map_runs(command: list[str], tmp_path: Path) -> None:
    cm = triton.agent_config_map(_triton("dev"))
    path = tmp_path / triton.AGENT_KEY
    path.write_bytes(base64.b64decode(cm["binaryData"][triton.AGENT_KEY]))
    out = subprocess.run(["python3", str(path), *command, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: tritonops-agent")


def test_init_container_syncs_a_signed_release_with_its_own_argv(tmp_path: Path) -> None:
    """The init container's command, run from the ConfigMap's zipapp with only the mounts swapped for
    local folders (the store for a folder `tritonops release publish` wrote): the release lands under
    the releases folder and the models link points at it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cfg = _triton("dev")
    rel = cfg.model_services[0].release
    assert rel is not None
    (tmp_path / "trusted").mkdir()  # keygen makes the private key's folder only
    private, public = signing.keygen(tmp_path / "keys" / "release.key", tmp_path / "trusted" / "release.pub")
    store = tmp_path / "store"
    from tritonops.model_repo.publish import publish  # the controller's half (boto3 for s3 stores)

    published = publish(ROOT / "examples" / "model_repository", str(store), rel.channel, private)
    agent = tmp_path / "agent" / triton.AGENT_KEY
    agent.parent.mkdir()
    agent.write_bytes(base64.b64decode(triton.agent_config_map(cfg)["binaryData"][triton.AGENT_KEY]))

    pod = _pod(triton.deployment(cfg, cfg.model_services[0]))
    swap = {
        triton.AGENT_PATH: str(agent),
        rel.store: str(store),
        triton.RELEASE_ROOT: str(tmp_path / "var"),
        triton.TRUSTED_KEYS_DIR: str(public.parent),
    }
    argv = []
    for a in pod["initContainers"][0]["command"]:
        for old, new in swap.items():
            a = a.replace(old, new) if a.startswith(old) else a
        argv.append(a)
    env = {"PATH": os.environ["PATH"]}  # no credentials: a folder store needs none
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["result"] == "synced"
    link, rels = tmp_path / "var" / "models", tmp_path / "var" / "releases"
    assert releases.active_release(link, rels) == published["release"]
    assert manifest.verify(rels / published["release"])  # every file's sha256 checked again

    # A release signed by another key never lands (the pod's trusted key is not that key).
    other, _ = signing.keygen(tmp_path / "other" / "k", tmp_path / "other" / "k.pub")
    store2 = tmp_path / "store2"
    publish(ROOT / "examples" / "model_repository", str(store2), rel.channel, other)
    argv2 = [a.replace(str(store), str(store2)) if a == str(store) else a for a in argv]
    argv2 = [a.replace(str(tmp_path / "var"), str(tmp_path / "var2")) for a in argv2]
    out = subprocess.run(argv2, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1 and "signature" in out.stdout + out.stderr
    assert not (tmp_path / "var2" / "models").exists()


# --- the drift CronJob runs the agent's `check` ------------------------------------------------------


def test_drift_cron_job_runs_the_agent_check_from_the_config_map() -> None:
    cfg = _triton("prod")
    svc = cfg.model_services[0]
    job = drift.cron_job(cfg, svc)
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][:2] == ["python3", triton.AGENT_PATH]
    a = agent_parser().parse_args(c["command"][2:])
    assert a.cmd == "check" and a.url == f"http://triton-{svc.name}.{cfg.namespace}.svc:8000"
    assert a.expect == sorted(m.name for m in svc.models) and a.header == cfg.admin_api.header
    assert (a.source, a.host) == ("triton", f"prod/{cfg.namespace}/triton-{svc.name}")
    # The posture (admin APIs refuse a caller without the header, HTTP and gRPC) and the pods.
    assert a.restricted and a.grpc == (f"triton-{svc.name}.{cfg.namespace}.svc", triton.GRPC_PORT)
    assert a.pods == f"{drift.EXPECTED_DIR}/{drift.PODS_KEY}"
    env = _by_name(c["env"])
    assert env["TRITONOPS_ADMIN_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-api", "key": "token"}
    expected_cm = f"triton-{svc.name}-drift-expected"
    assert pod["volumes"] == [triton.agent_volume(), {"name": "expected", "configMap": {"name": expected_cm}}]
    assert _by_name(c["volumeMounts"])["agent"]["mountPath"] == triton.AGENT_DIR
    assert _by_name(c["volumeMounts"])["expected"]["mountPath"] == drift.EXPECTED_DIR
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # Its own account, allowed to read pods and nothing else.
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (f"triton-{svc.name}-drift", True)
    objs = {(o["kind"], o["metadata"]["name"]): o for o in drift.drift_objects(cfg, svc)}
    role = objs[("Role", f"triton-{svc.name}-drift")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    binding = objs[("RoleBinding", f"triton-{svc.name}-drift")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": cfg.namespace}]
    assert objs[("ServiceAccount", pod["serviceAccountName"])]["automountServiceAccountToken"] is False
    # The pods' expected containers come from the Deployment builder itself.
    pods = json.loads(objs[("ConfigMap", expected_cm)]["data"][drift.PODS_KEY])
    dep = triton.deployment(cfg, svc)
    (stable,) = pods["deployments"]
    assert stable["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert [(x["name"], x["image"], x["args"]) for x in stable["containers"]] == [
        (x["name"], x["image"], x.get("args")) for x in dep["spec"]["template"]["spec"]["containers"]]
    assert objs[("CronJob", drift.drift_name(svc))] == job
    # The zipapp comes from the namespace's ConfigMap, not a per-service copy.
    assert triton.AGENT_CONFIG_MAP in {o["metadata"]["name"] for o in triton.namespace_objects(cfg)}


def test_drift_check_argv_runs_and_reports_an_unreachable_triton(tmp_path: Path) -> None:
    """The CronJob's command, with the Service URL swapped for a closed port: the agent runs the
    check (exit 1 with a finding, not an argparse usage error, 2) and keeps the secret off argv."""
    cfg = _triton("prod")
    svc = cfg.model_services[0]
    agent = tmp_path / triton.AGENT_KEY
    agent.write_bytes(base64.b64decode(triton.agent_config_map(cfg)["binaryData"][triton.AGENT_KEY]))
    cmd = drift.check_args(cfg, svc)
    url, grpc = cmd[cmd.index("--url") + 1], cmd[cmd.index("--grpc") + 1]
    i = cmd.index("--pods")
    cmd = cmd[:i] + cmd[i + 2:]  # no Kubernetes API here (tests/unit/drift/test_drift_kube.py has one)
    swap = {triton.AGENT_PATH: str(agent), url: "http://127.0.0.1:9", grpc: "127.0.0.1:9"}
    argv = [swap.get(a, a) for a in cmd]
    env = {"PATH": os.environ["PATH"], "TRITONOPS_ADMIN_SECRET": "s3cr3t-value"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["source"] == "triton" and [f["resource"] for f in doc["findings"]] == ["triton"]
    assert "s3cr3t-value" not in out.stdout + out.stderr


# --- canary: a second Deployment on another channel, weighted by the router ----------------------

PROD_RELEASE = {
    "store": "s3://tritonops-releases-prod/vision",
    "channel": "stable",
    "region": "us-west-2",
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


@pytest.mark.parametrize("cfg", [_triton("dev"), _prod_canary_cfg()], ids=["dev-ingress", "prod-gateway"])
def test_canary_deployment_follows_the_canary_channel(cfg: TritonStackConfig) -> None:
    svc = cfg.model_services[0]
    canary = svc.release.canary  # type: ignore[union-attr]
    stable, dep = triton.deployment(cfg, svc), triton.deployment(cfg, svc, track="canary")
    assert (dep["metadata"]["name"], dep["spec"]["replicas"]) == (f"triton-{svc.name}-canary", canary.replicas)
    assert _pod_labels(dep)["track"] == dep["metadata"]["labels"]["track"] == "canary"
    assert _pod_labels(stable)["track"] == stable["metadata"]["labels"]["track"] == "stable"
    for c in (_pod(dep)["initContainers"][0], _pod(dep)["containers"][1]):
        a = agent_parser().parse_args(c["command"][2:])
        assert (a.channel, a.store) == (canary.channel, svc.release.store)  # type: ignore[union-attr]
    for c in (_pod(stable)["initContainers"][0], _pod(stable)["containers"][1]):
        assert agent_parser().parse_args(c["command"][2:]).channel == svc.release.channel  # type: ignore[union-attr]
    # The same server otherwise: image, args, resources, probes, volumes.
    assert _container(dep) == _container(stable)
    assert _pod(dep)["volumes"] == _pod(stable)["volumes"]


@pytest.mark.parametrize("cfg", [_triton("dev"), _prod_canary_cfg()], ids=["dev-ingress", "prod-gateway"])
def test_each_track_selects_only_its_own_pods(cfg: TritonStackConfig) -> None:
    """Deployment selectors, Services, spread and the PDB select one track; NetworkPolicy and
    ServiceMonitor cover both."""
    svc = cfg.model_services[0]
    stable, canary = triton.deployment(cfg, svc), triton.deployment(cfg, svc, track="canary")
    pods = {"stable": _pod_labels(stable), "canary": _pod_labels(canary)}
    for track, dep in (("stable", stable), ("canary", canary)):
        sel = dep["spec"]["selector"]["matchLabels"]
        service = triton.service(cfg, svc, track)
        selected = {t for t, labels in pods.items() if _matches(sel, labels)}
        assert selected == {t for t, labels in pods.items() if _matches(service["spec"]["selector"], labels)} == {track}
        term = _pod(dep)["affinity"]["podAntiAffinity"]
        term = (term.get("requiredDuringSchedulingIgnoredDuringExecution") or
                [t["podAffinityTerm"] for t in term["preferredDuringSchedulingIgnoredDuringExecution"]])[0]
        spread = [t["labelSelector"]["matchLabels"] for t in _pod(dep)["topologySpreadConstraints"]]
        assert term["labelSelector"]["matchLabels"] == sel and spread == [sel, sel]
    pdb = triton.pod_disruption_budget(cfg, svc)["spec"]["selector"]["matchLabels"]
    assert [t for t, labels in pods.items() if _matches(pdb, labels)] == ["stable"]
    np_ = triton.network_policy(cfg, svc)["spec"]["podSelector"]["matchLabels"]
    assert [t for t, labels in pods.items() if _matches(np_, labels)] == ["stable", "canary"]
    sm = triton.service_monitor(cfg, svc)["spec"]
    services = [triton.service(cfg, svc), triton.service(cfg, svc, "canary")]
    assert [s["metadata"]["name"] for s in services if _matches(sm["selector"]["matchLabels"], s["metadata"]["labels"])
            ] == [f"triton-{svc.name}", f"triton-{svc.name}-canary"]
    assert all(s["metadata"]["labels"][triton.JOB_LABEL] == triton.SCRAPE_JOB for s in services)
    assert sm["podTargetLabels"] == ["track"]  # every scraped series carries track="stable"|"canary"


def test_scaled_object_and_drift_check_stay_on_stable() -> None:
    cfg = _triton("dev")
    svc = cfg.model_services[0]
    objs = triton.service_objects(cfg, svc)
    (so,) = [o for o in objs if o["kind"] == "ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["name"] == "triton-vision"
    (pdb,) = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert pdb["metadata"]["name"] == "triton-vision"
    check = drift.check_args(cfg, svc)
    assert check[check.index("--url") + 1] == f"http://triton-vision.{cfg.namespace}.svc:{triton.HTTP_PORT}"
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert kinds[:5] == [
        ("ServiceAccount", "triton-vision"),
        ("Deployment", "triton-vision"),
        ("Deployment", "triton-vision-canary"),
        ("Service", "triton-vision"),
        ("Service", "triton-vision-canary"),
    ]


def test_ingress_nginx_canary_twins_carry_the_weight() -> None:
    cfg = _triton("dev")
    svc = cfg.model_services[0]
    http, grpc, c_http, c_grpc = triton.ingresses(cfg, svc)
    for main, twin in ((http, c_http), (grpc, c_grpc)):
        ann = twin["metadata"]["annotations"]
        assert (ann[triton.CANARY_ANNOTATION], ann[triton.CANARY_WEIGHT_ANNOTATION]) == ("true", "10")
        assert triton.CANARY_ANNOTATION not in main["metadata"]["annotations"]
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
    http, grpc = triton.gateway_routes(cfg, cfg.model_services[0])
    assert http["spec"]["rules"][0]["backendRefs"] == [
        {"name": "triton-vision", "port": 8000, "weight": 95},
        {"name": "triton-vision-canary", "port": 8000, "weight": 5},
    ]
    assert grpc["spec"]["rules"][0]["backendRefs"] == [
        {"name": "triton-vision", "port": 8001, "weight": 95},
        {"name": "triton-vision-canary", "port": 8001, "weight": 5},
    ]
    other = cfg.model_services[1]  # no canary: one backend, no weights
    assert triton.gateway_routes(cfg, other)[0]["spec"]["rules"][0]["backendRefs"] == [
        {"name": "triton-embeddings", "port": 8000}]
    assert not [o for o in triton.service_objects(cfg, other) if o["metadata"]["name"].endswith("-canary")]


def test_canary_track_needs_a_canary() -> None:
    cfg = _triton("prod")
    with pytest.raises(ValueError, match="has no release.canary"):
        triton.deployment(cfg, cfg.model_services[0], track="canary")
    with pytest.raises(ValueError, match="is not one of stable, canary"):
        triton.service(cfg, cfg.model_services[0], "blue")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_latency_summaries_always_on(env: str) -> None:
    """p95 per track needs Triton's summaries on both tracks; on with or without a canary, so adding
    one never restarts the stable pods."""
    cfg = _triton(env)
    for svc in cfg.model_services:
        assert triton.SUMMARY_LATENCIES_ARG in _container(triton.deployment(cfg, svc))["args"]
    dev = _triton("dev")
    no_canary = copy.deepcopy(read_stack_file("triton", "dev")[0])
    del no_canary["modelServices"][0]["release"]["canary"]
    plain = parse_config("triton", no_canary)
    assert isinstance(plain, TritonStackConfig)
    assert triton.deployment(plain, plain.model_services[0]) == triton.deployment(dev, dev.model_services[0])
