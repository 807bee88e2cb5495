"""Every stack program in both environments under Pulumi mocks (stacks/<name>/__main__.py itself)."""

from __future__ import annotations

import pytest
from k8s_harness import (
    SECRETS,
    Mocks,
    as_ints,
    cluster_outputs,
    committed,
    envs,
    is_secret,
    k8s_objects,
    run_program,
    unwrap,
    user_stacks,
)
from tritonops import versions
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import load_stack_config

ENVS = pytest.mark.parametrize("env", envs("triton"))  # every committed stack (all three stacks have the same)


def _key(obj: dict) -> tuple:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


@ENVS
def test_cluster_aws(env: str) -> None:
    mocks = committed("cluster-aws", env)
    (cluster,) = mocks.of_type("aws:eks/cluster:Cluster")
    assert cluster.inputs["name"] == f"tritonops-{env}" and cluster.inputs["version"] == versions.KUBERNETES_VERSION
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    pools = mocks.of_type("tritonops:aws:GpuNodePool")
    groups = {g.inputs["nodeGroupName"][:-7]: as_ints(g.inputs) for g in mocks.of_type("aws:eks/nodeGroup:NodeGroup")}
    assert f"tritonops-{env}-system" in groups and "taints" not in groups[f"tritonops-{env}-system"]
    gpu = {k: v for k, v in groups.items() if not k.endswith("-system")}
    assert len(gpu) == len(pools)  # managed GPU pools; Karpenter pools: test_k8s_karpenter.py
    assert all(g["taints"][0]["key"] == "nvidia.com/gpu" for g in gpu.values())
    (oidc,) = mocks.of_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider")
    assert oidc.inputs["url"].startswith("https://oidc.eks.")
    assert oidc.inputs["clientIdLists"] == ["sts.amazonaws.com"]


def test_prod_cluster_has_more_gpu_capacity() -> None:
    def gpu_min(env: str) -> int:
        return sum(
            int(g.inputs["scalingConfig"]["minSize"])
            for g in committed("cluster-aws", env).of_type("aws:eks/nodeGroup:NodeGroup")
            if not g.inputs["nodeGroupName"].endswith("-system")
        )

    assert gpu_min("prod") > gpu_min("dev")


@ENVS
def test_platform(env: str) -> None:
    mocks = committed("platform", env)
    charts = {r.inputs["chart"]: r for r in mocks.of_type("kubernetes:helm.sh/v3:Release")}
    assert set(charts) == {"gpu-operator", "kube-prometheus-stack", "keda"}
    (ref,) = mocks.of_type("pulumi:pulumi:StackReference")
    assert ref.inputs["name"] == f"organization/tritonops-cluster-aws/{env}"
    (provider,) = mocks.of_type("pulumi:providers:kubernetes")
    assert "kubeconfig" in provider.inputs
    secrets = {s.inputs["metadata"]["name"]: s for s in mocks.of_type("kubernetes:core/v1:Secret")}
    alertmanager, grafana = secrets["alertmanager-tritonops"], secrets["grafana-admin"]
    assert is_secret(alertmanager.inputs["stringData"]) and is_secret(grafana.inputs["stringData"])
    assert "receivers:" in unwrap(alertmanager.inputs["stringData"])["alertmanager.yaml"]
    assert unwrap(grafana.inputs["stringData"])["admin-password"] == SECRETS["tritonops-platform:grafanaAdminPassword"]
    values = charts["kube-prometheus-stack"].inputs["values"]
    assert values["grafana"]["admin"]["existingSecret"] == grafana.inputs["metadata"]["name"]
    assert "test-grafana-password" not in str(values)  # the password never reaches the Helm values


@ENVS
def test_triton(env: str) -> None:
    mocks = committed("triton", env)
    services = mocks.of_type("tritonops:triton:TritonService")
    by_track: dict[str, list] = {}
    for d in mocks.of_type("kubernetes:apps/v1:Deployment"):
        by_track.setdefault(d.inputs["metadata"]["labels"]["track"], []).append(d)
    deployments = by_track.pop("stable")
    canaries = by_track.pop("canary", [])
    assert not by_track
    assert len(services) == len(deployments) == len(mocks.of_type("kubernetes:policy/v1:PodDisruptionBudget"))
    # One per service, plus the namespace's default deny, DNS/in-namespace egress and the drift check's API egress.
    policies = {p.inputs["metadata"]["name"] for p in mocks.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert {"default-deny", "namespace-egress", "kube-api-egress"} | {d.inputs["metadata"]["name"] for d in deployments} <= policies
    assert len(mocks.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")) == len(deployments)
    cfg = load_stack_config("triton", env)
    expected = [f"triton-{svc.name}-canary" for svc in cfg.model_services  # type: ignore[union-attr]
                if svc.release and svc.release.canary]
    assert [d.inputs["metadata"]["name"] for d in canaries] == expected
    assert (env != "prod") == bool(canaries)  # the committed dev and staging stacks show a canary; prod runs none
    assert len(mocks.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")) == 1
    (secret,) = mocks.of_type("kubernetes:core/v1:Secret")
    assert is_secret(secret.inputs["stringData"])


def test_prod_triton_more_replicas_pdb_and_spread() -> None:
    def deps(env: str) -> list[dict]:
        return [as_ints(d.inputs) for d in committed("triton", env).of_type("kubernetes:apps/v1:Deployment")]

    assert min(d["spec"]["replicas"] for d in deps("prod")) > max(d["spec"]["replicas"] for d in deps("dev"))
    pdbs = [p.inputs["spec"] for p in committed("triton", "prod").of_type("kubernetes:policy/v1:PodDisruptionBudget")]
    assert all("minAvailable" in p for p in pdbs)
    for d in deps("prod"):
        assert d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]


@pytest.mark.parametrize("stack", ["platform", "triton"])
@ENVS
def test_render_writes_the_same_objects_pulumi_creates(stack: str, env: str) -> None:
    captured = sorted((o for o in k8s_objects(committed(stack, env)) if o["kind"] != "Secret"), key=_key)
    # The mocks' cluster-aws outputs give the modelReader ARNs the stack reads; render takes them too.
    cluster = load_stack_config(stack, env).cluster.cluster_stack  # type: ignore[union-attr]
    arns = {k: v["arn"] for k, v in cluster_outputs(cluster)["modelReaders"].items()} if cluster else None
    rendered = sorted(build(stack, env, user_stacks(), reader_arns=arns).objects, key=_key)
    assert [_key(o) for o in captured] == [_key(o) for o in rendered]
    assert captured == rendered


@ENVS
def test_render_helm_values_equal_pulumi_release_values(env: str) -> None:
    releases = {r.inputs["name"]: r.inputs for r in committed("platform", env).of_type("kubernetes:helm.sh/v3:Release")}
    for rel in build("platform", env).releases:
        assert as_ints(releases[rel.name]["values"]) == rel.values
        assert releases[rel.name]["version"] == rel.version


# --- invalid config: fails before any resource is created ---------------------------------------


@pytest.mark.parametrize(
    ("stack", "overrides", "key"),
    [
        (
            "cluster-aws",
            {
                "gpuNodePools": [
                    {"name": "gpu-x", "instanceTypes": ["m5.xlarge"], "minSize": 0, "maxSize": 1, "desiredSize": 0}
                ]
            },
            "tritonops-cluster-aws:gpuNodePools[0].instanceTypes[0]",
        ),
        (
            "triton",
            {
                "modelServices": [
                    {
                        "name": "vision",
                        "nodePool": "gpu-l4",
                        "replicas": 2,
                        "pdbMinAvailable": 2,
                        "modelRepository": {"type": "pvc", "claimName": "m"},
                        "models": [{"name": "a", "sizeMib": 1}],
                        "autoscaling": {"enabled": False},
                    }
                ]
            },
            "tritonops-triton:modelServices[0].replicas",
        ),
        (
            "triton",
            {
                "modelServices": [
                    {
                        "name": "vision",
                        "nodePool": "gpu-l4",
                        "models": [],
                        "modelRepository": {"type": "pvc", "claimName": "m"},
                    }
                ]
            },
            "tritonops-triton:modelServices[0].models",
        ),
    ],
)
def test_invalid_config_creates_nothing_and_names_the_key(stack: str, overrides: dict, key: str) -> None:
    mocks = Mocks()
    with pytest.raises(ConfigError) as exc:
        run_program(stack, "dev", overrides, mocks=mocks)
    assert exc.value.key == key
    assert mocks.resources == []  # not even the provider or a StackReference
    assert "Pulumi.dev.yaml" in str(exc.value)


def test_invalid_config_registers_no_resource() -> None:
    mocks = Mocks()
    with pytest.raises(ConfigError):
        run_program(
            "triton",
            "dev",
            {
                "modelServices": [
                    {
                        "name": "vision",
                        "nodePool": "gpu-l4",
                        "models": [],
                        "modelRepository": {"type": "pvc", "claimName": "m"},
                    }
                ]
            },
            mocks=mocks,
        )
    assert mocks.resources == []
    valid = Mocks()
    run_program("triton", "dev", mocks=valid)
    assert valid.resources  # the same harness does see resources when the config is valid


def test_missing_admin_token_is_named() -> None:
    with pytest.raises(ConfigError, match="tritonops-triton:adminApiToken"):
        run_program("triton", "dev", secrets=False)


def test_missing_alertmanager_secret_is_named() -> None:
    with pytest.raises(ValueError, match=r"alertmanagerSecrets\.slackDev"):
        run_program("platform", "dev", secrets=False)


def test_on_prem_kubeconfig_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\n")
    mocks = run_program("platform", "dev", {"cluster": {"kubeconfig": str(kc), "context": "onprem"}})
    assert not mocks.of_type("pulumi:pulumi:StackReference")
    (provider,) = mocks.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == kc.read_text() and provider.inputs["context"] == "onprem"


def test_missing_kubeconfig_file_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="cluster.kubeconfig"):
        run_program("platform", "dev", {"cluster": {"kubeconfig": str(tmp_path / "nope")}})  # triton dev: IRSA


@pytest.mark.parametrize("stack", ["cluster-aws", "platform", "triton"])
def test_stack_outside_the_engine_fails_clearly(stack: str) -> None:
    """No Pulumi CLI here: running a stack program directly says what to do instead."""
    import subprocess
    import sys

    from k8s_harness import ROOT

    out = subprocess.run(
        [sys.executable, f"stacks/{stack}/__main__.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "infra")},
    )
    assert out.returncode != 0
    assert "PulumiEngineMissing" in out.stderr
    assert "needs the Pulumi engine" in out.stderr and f"tritonops render --stack {stack}" in out.stderr


@ENVS
def test_cluster_aws_irsa_model_reader_roles(env: str) -> None:
    import json

    mocks = committed("cluster-aws", env)
    roles = {r.inputs.get("name"): r for r in mocks.of_type("aws:iam/role:Role")}
    reader = roles[f"tritonops-{env}-model-reader"]
    trust = json.loads(reader.inputs["assumeRolePolicy"])
    cond = trust["Statement"][0]["Condition"]["StringEquals"]
    assert cond["oidc.eks.us-west-2.amazonaws.com/id/ABCDEF:sub"] == "system:serviceaccount:triton:triton-vision"
    (policy,) = [p for p in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if p.name == f"reader-tritonops-{env}-model-reader-s3"]
    # The bucket and prefix the triton stack of this env reads its releases from: one and the same.
    triton = load_stack_config("triton", env)
    assert isinstance(triton, TritonStackConfig) and triton.model_services[0].release is not None
    assert f"{triton.model_services[0].release.store.removeprefix('s3://')}/*" in policy.inputs["policy"]
