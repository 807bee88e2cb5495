"""Every series a rendered ScaledObject reads has a producer the cluster sets up (issue 43, failures 4 and 8).

``tritonops.observability.producers`` says which producer emits which metric; ``tritonops.k8s.series``
(part of ``render --check-config``) matches each metric name of each shipped ScaledObject query to a
producer and to what scrapes it here: Triton's metrics port through the triton stack's ServiceMonitor,
ingress-nginx's counter through the ServiceMonitor of the contract's install command, dcgm-exporter's
gauge through the GPU Operator's, on pools where the operator's components run (not Bottlerocket:
``tritonops.k8s.gpu_operator``).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from k8s_harness import ROOT, STACKS_DIR, envs, user_stacks
from tritonops.k8s import cluster_contract as cc
from tritonops.k8s import gpu_operator, series
from tritonops.k8s.config import STACKS, ClusterAwsConfig, PlatformConfig, TritonStackConfig
from tritonops.k8s.helm import HelmRelease
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.cluster_aws.eks import node_labels
from tritonops.k8s.stacks.platform.charts import gpu_operator_release
from tritonops.observability import keda_trigger as keda
from tritonops.observability import producers

OLD_INGRESS_NGINX_COMMAND = (  # the contract's command before issue 43: metrics on, no ServiceMonitor
    "helm upgrade --install ingress-nginx ingress-nginx --repo https://kubernetes.github.io/ingress-nginx "
    "--version 4.11.3 --namespace ingress-nginx --create-namespace --set controller.metrics.enabled=true"
)


def _queries(env: str) -> list[tuple[str, str, str]]:
    return [(so["metadata"]["name"], str(t.get("name")), t["metadata"]["query"])
            for so in build("triton", env, user_stacks()).objects if so["kind"] == "ScaledObject"
            for t in so["spec"]["triggers"] if t["type"] == "prometheus"]


def _series_problems(env: str, stacks_dir: Path | None = None) -> list[str]:
    return [str(p) for p in cc.check("triton", env, stacks_dir) if "ScaledObject" in p.message and " reads " in p.message]


def _copy_stacks(tmp_path: Path) -> Path:
    stacks = tmp_path / "stacks"
    for stack in STACKS:
        shutil.copytree(STACKS_DIR / stack, stacks / stack, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    return stacks


def _legacy_stacks(tmp_path: Path) -> Path:
    """A copy of the stacks whose dev triton file uses the legacy ingress-nginx mode (it ships in gateway mode)."""
    stacks = _copy_stacks(tmp_path)
    path = stacks / "triton" / "Pulumi.dev.yaml"
    gateway_mode = "    mode: gateway\n"
    text = path.read_text()
    assert gateway_mode in text
    text = text.replace(gateway_mode, "    mode: ingress\n    className: nginx\n"
                        "    tlsSecret: dev-tritonops-example-com-tls\n", 1)
    path.write_text(text.replace("    gatewayName: inference\n", "", 1).replace("    gatewayNamespace: gateway\n", "", 1))
    return stacks


@pytest.mark.parametrize("env", envs("triton"))
def test_every_metric_of_every_shipped_query_has_a_producer(env: str) -> None:
    queries = _queries(env)
    assert queries
    for so, trig, query in queries:
        found = producers.series_of(query)
        assert found, (so, trig, query)  # the extractor saw a metric name
        assert all(p is not None for p in found.values()), (so, trig, found)


@pytest.mark.parametrize("env", envs("triton"))
def test_every_shipped_producer_is_set_up_by_the_stacks_or_the_contract(env: str) -> None:
    assert _series_problems(env) == []


def test_the_shipped_queries_read_all_three_producers() -> None:
    """The parametrized tests above cover Triton's, Envoy Gateway's and DCGM's series (ingress-nginx's, the legacy
    mode's, the tests on _legacy_stacks)."""
    seen = {p.name for env in envs("triton") for *_, q in _queries(env) for p in producers.series_of(q).values() if p}
    assert seen == {producers.TRITON, producers.ENVOY_GATEWAY, producers.DCGM_EXPORTER}


def test_the_old_ingress_nginx_command_leaves_the_wake_trigger_without_its_series(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stacks = _legacy_stacks(tmp_path)
    assert _series_problems("dev", stacks) == []
    monkeypatch.setattr(cc, "INGRESS_NGINX", dataclasses.replace(cc.INGRESS_NGINX, command=OLD_INGRESS_NGINX_COMMAND))
    (problem,) = _series_problems("dev", stacks)
    assert "tritonops-triton:modelServices[0].autoscaling.minReplicas" in problem
    assert keda.INGRESS_REQUESTS in problem and "controller.metrics.serviceMonitor.enabled=true" in problem


def test_the_ingress_nginx_command_creates_its_service_monitor_after_the_platform() -> None:
    command = cc.INGRESS_NGINX.command or ""
    for flag in series.INGRESS_NGINX_METRICS_FLAGS:
        assert f"--set {flag}" in command
    # The chart's ServiceMonitor needs the CRD kube-prometheus-stack brings: the platform stack's up comes first.
    assert cc.INGRESS_NGINX.after == ("platform",)


def test_the_docs_run_the_contract_command_after_the_platform_up() -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    command = cc.INGRESS_NGINX.command or ""
    flat = " ".join(text.replace("\\\n", " ").split())
    assert command in flat
    assert "4.11.3" not in text
    walk = flat[flat.index("## From an empty AWS account"):]
    platform_up = walk.index("cd ../platform")
    assert walk.index(command) > walk.index("pulumi up", platform_up)


def test_a_platform_prometheus_that_selects_only_its_release_loses_the_gateway_series(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    assert _series_problems("dev", stacks) == []
    from tritonops.k8s.stacks.platform import charts

    original = charts.monitoring_release

    def own_release_only(cfg: PlatformConfig) -> HelmRelease:
        rel = original(cfg)
        rel.values["prometheus"]["prometheusSpec"]["podMonitorSelectorNilUsesHelmValues"] = True
        return rel

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(charts, "monitoring_release", own_release_only)
        (problem,) = _series_problems("dev", stacks)
    assert "selects only its own release's PodMonitors" in problem and keda.GATEWAY_REQUESTS in problem


def test_a_platform_prometheus_that_selects_only_its_release_loses_the_ingress_series(tmp_path: Path) -> None:
    stacks = _legacy_stacks(tmp_path)
    assert _series_problems("dev", stacks) == []
    from tritonops.k8s.stacks.platform import charts

    original = charts.monitoring_release

    def own_release_only(cfg: PlatformConfig) -> HelmRelease:
        rel = original(cfg)
        rel.values["prometheus"]["prometheusSpec"]["serviceMonitorSelectorNilUsesHelmValues"] = True
        return rel

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(charts, "monitoring_release", own_release_only)
        (problem,) = _series_problems("dev", stacks)
    assert "selects only its own release's ServiceMonitors" in problem


def test_a_metric_nothing_produces_is_refused() -> None:
    cfg = load_stack_config("triton", "dev")
    assert isinstance(cfg, TritonStackConfig)
    objs = build("triton", "dev", user_stacks()).objects
    so = next(o for o in objs if o["kind"] == "ScaledObject")
    so["spec"]["triggers"][0]["metadata"]["query"] = "sum(rate(my_made_up_requests_total[1m]))"
    cluster = cc.cluster_of("triton", "dev", cfg, None)
    (problem,) = series.problems(cfg, objs, Path("Pulumi.dev.yaml"), cluster, cc.INGRESS_NGINX.command or "",
                                 cc.GATEWAY.command or "")
    assert problem.key == "tritonops-triton:modelServices[0].autoscaling.pendingPerReplica"
    assert "my_made_up_requests_total" in problem.message and "nothing" in problem.message


def test_a_dcgm_trigger_without_the_platforms_service_monitor_is_refused(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    path = stacks / "platform" / "Pulumi.prod.yaml"
    path.write_text(path.read_text().replace("    migStrategy: none\n", "    migStrategy: none\n"
                                             "    dcgmServiceMonitor: false\n", 1))
    (problem,) = _series_problems("prod", stacks)
    assert "gpuUtilizationPerReplica" in problem and keda.DCGM_GPU_UTIL in problem and "dcgmServiceMonitor" in problem


# --- DCGM exporter and the validator follow the GPU Operator's pools (not Bottlerocket) -----------


def _pools(env: str) -> dict[str, object]:
    aws = load_stack_config("cluster-aws", env)
    assert isinstance(aws, ClusterAwsConfig)
    return {p.name: p for p in aws.gpu_node_pools}


def _operator_values(env: str) -> dict[str, object]:
    platform = load_stack_config("platform", env)
    assert isinstance(platform, PlatformConfig)
    return gpu_operator_release(platform).values


def test_prod_bottlerocket_pool_runs_no_dcgm_exporter_nor_validator() -> None:
    pools = _pools("prod")
    values = _operator_values("prod")
    l40s = pools["gpu-l40s"]
    assert l40s.ami_type == "BOTTLEROCKET_x86_64_NVIDIA"  # type: ignore[attr-defined]
    on_l40s = gpu_operator.operands_on(node_labels(l40s), values)  # type: ignore[arg-type]
    assert on_l40s == set()  # Bottlerocket brings its own driver, toolkit and device plugin
    on_a10g = gpu_operator.operands_on(node_labels(pools["gpu-a10g"]), values)  # type: ignore[arg-type]
    assert {gpu_operator.DCGM_EXPORTER, gpu_operator.VALIDATOR, gpu_operator.DEVICE_PLUGIN} <= on_a10g
    assert not {"driver", "container-toolkit"} & on_a10g  # the AL2023 NVIDIA AMI ships them


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_dcgm_exporter_runs_exactly_on_pools_whose_ami_lacks_its_own_nvidia_stack(env: str) -> None:
    values = _operator_values(env) if env in envs("platform") else {}
    for name, pool in _pools(env).items():
        own = gpu_operator.brings_own_stack(pool.ami_type)  # type: ignore[attr-defined]
        on = gpu_operator.operands_on(node_labels(pool), values)  # type: ignore[arg-type]
        assert (gpu_operator.DCGM_EXPORTER in on) is not own, (env, name)
        assert (gpu_operator.VALIDATOR in on) is not own, (env, name)


def test_a_gpu_trigger_on_the_bottlerocket_pool_is_refused(tmp_path: Path) -> None:
    """prod's embeddings (gpu-l40s, Bottlerocket) has no DCGM series: a GPU-utilisation trigger there never fires."""
    stacks = _copy_stacks(tmp_path)
    path = stacks / "triton" / "Pulumi.prod.yaml"
    text = path.read_text()
    assert text.count("        minReplicas: 2\n") == 1
    path.write_text(text.replace("        minReplicas: 2\n", "        minReplicas: 2\n"
                                 "        gpuUtilizationPerReplica: 80\n"))
    (problem,) = _series_problems("prod", stacks)
    assert "tritonops-triton:modelServices[1].autoscaling.gpuUtilizationPerReplica" in problem
    assert "gpu-l40s" in problem and "BOTTLEROCKET" in problem and "nv_gpu_utilization" in problem
