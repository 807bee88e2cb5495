"""Stacks a user can take away: requirements files, exports, StackReferences, Karpenter's CRD ordering.

The stack programs run under Pulumi mocks (``k8s_harness``); their exports are read back from the
root stack resource, resolved inside the mocked program. The triton stack's IRSA annotation comes
from what the cluster-aws program itself exports, fed back through the StackReference mock.
"""

from __future__ import annotations

import copy
import re
import runpy
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from k8s_harness import CHANNEL_CHECK_ENV, ROOT, STACKS_DIR, Mocks, as_ints, cluster_outputs, stack_config, user_stacks
from packaging.requirements import Requirement
from packaging.version import Version
from pulumi.runtime.settings import get_root_resource
from pulumi.runtime.sync_await import _sync_await
from tritonops.k8s import labels
from tritonops.k8s.config import ConfigError, project_name
from tritonops.k8s.parse import parse_config
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import outputs

STACKS = ("cluster-aws", "platform", "triton")
ENVS = pytest.mark.parametrize("env", ["dev", "prod"])
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
IRSA = "eks.amazonaws.com/role-arn"  # the annotation EKS's pod identity webhook reads


@pytest.fixture(autouse=True)
def _no_channel_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores the committed stacks name are not reachable here (the check has its own tests)."""
    monkeypatch.setenv(CHANNEL_CHECK_ENV, "off")


class Run:
    """What one mocked run of a stack program registered and exported."""

    def __init__(self, mocks: Mocks) -> None:
        self.mocks = mocks
        self.exports: dict[str, Any] = {}
        self.secret: dict[str, bool] = {}


def run_stack(
    stack: str,
    env: str,
    overrides: dict[str, Any] | None = None,
    mocks: Mocks | None = None,
    main: Path | None = None,
) -> Run:
    """Run ``main`` (default stacks/<stack>/__main__.py) under mocks; collect its resolved exports."""
    run = Run(mocks if mocks is not None else Mocks())
    pulumi.runtime.set_mocks(run.mocks, project=project_name(stack), stack=env, preview=False)
    config, secret_keys = stack_config(stack, env, overrides)
    pulumi.runtime.set_all_config(config, secret_keys)

    @pulumi.runtime.test
    def program() -> Any:
        runpy.run_path(str(main or STACKS_DIR / stack / "__main__.py"), run_name="__main__")
        root = get_root_resource()
        assert root is not None
        for key, value in root.outputs.items():
            out = pulumi.Output.from_input(value)
            run.exports[key] = as_ints(_sync_await(out.future()))
            run.secret[key] = _sync_await(out.is_secret())

    program()
    return run


def _config(stack: str, env: str) -> Any:
    raw, _ = read_stack_file(stack, env)
    return parse_config(stack, raw, source=f"Pulumi.{env}.yaml")


# --- a stack folder installs its own dependencies ------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_stack_runtime_makes_its_own_venv(stack: str) -> None:
    doc = yaml.safe_load((STACKS_DIR / stack / "Pulumi.yaml").read_text())
    assert doc["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}}


def test_the_policy_pack_makes_its_own_venv_and_needs_pulumi_policy_and_the_builders_module() -> None:
    """The pack installs pulumi-policy and the package at the project's version, of which it imports only
    tritonops.core.triton_cli (standard library only: the restricted-API list every Triton is built with
    and the parser of its command line)."""
    pack = STACKS_DIR.parent / "policies" / "tritonops"
    doc = yaml.safe_load((pack / "PulumiPolicy.yaml").read_text())
    assert doc["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}}
    lines = (pack / "requirements.txt").read_text().splitlines()
    reqs = [Requirement(x) for x in lines if x.strip() and not x.startswith("#")]
    assert [(r.name, r.extras) for r in reqs] == [("pulumi-policy", set()), (PYPROJECT["project"]["name"], set())]
    assert str(reqs[1].specifier) == f"=={PYPROJECT['project']['version']}"
    imports = {line.split()[1] for f in pack.glob("*.py") for line in f.read_text().splitlines()
               if line.startswith(("import ", "from "))}
    assert {m for m in imports if m.split(".")[0] == "tritonops"} == {"tritonops.core.triton_cli"}
    builder = (STACKS_DIR.parent / "infra" / "tritonops" / "core" / "triton_cli.py").read_text()
    assert {line.split()[1].split(".")[0] for line in builder.splitlines()
            if line.startswith(("import ", "from "))} <= set(sys.stdlib_module_names) | {"__future__"}


@pytest.mark.parametrize("stack", STACKS)
def test_stack_requires_the_published_package_at_the_projects_version(stack: str) -> None:
    lines = (STACKS_DIR / stack / "requirements.txt").read_text().splitlines()
    reqs = [Requirement(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert [(r.name, r.extras, str(r.specifier)) for r in reqs] == [
        (PYPROJECT["project"]["name"], {"k8s"}, f"=={PYPROJECT['project']['version']}")
    ]


def test_pulumi_kubernetes_floor_resolves_release_installed_crds_at_preview() -> None:
    """4.32.0 fixed pulumi/pulumi-kubernetes#3176 (#4417): a Release's CRDs resolve on the first preview."""
    (req,) = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["k8s"]
              if Requirement(r).name == "pulumi-kubernetes"]
    floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
    assert floors and min(floors) >= Version("4.32")


def test_a_stack_folder_copied_under_another_name_runs(tmp_path: Path) -> None:
    """A user's copy (any folder name) runs the same program: the stack comes from the Pulumi project."""
    copy_dir = tmp_path / "my-inference"
    shutil.copytree(STACKS_DIR / "triton", copy_dir)
    run = run_stack("triton", "dev", main=copy_dir / "__main__.py")
    assert run.exports["services"] == build("triton", "dev", user_stacks()).outputs["services"]
    assert run.mocks.of_type("kubernetes:apps/v1:Deployment")


def test_no_stack_file_writes_an_account_id() -> None:
    files = sorted(STACKS_DIR.glob("*/Pulumi.*.yaml"))
    assert files
    for path in files:
        assert not re.search(r"arn:aws:iam::\d{12}:", path.read_text()), path


# --- the triton stack's exports ------------------------------------------------------------------


@ENVS
def test_triton_exports_what_render_writes(env: str) -> None:
    run = run_stack("triton", env)
    rendered = build("triton", env, user_stacks()).outputs
    assert set(run.exports) >= {"namespace", "services", "gpuBudget"}
    assert {k: run.exports[k] for k in rendered} == rendered


@ENVS
def test_triton_exported_endpoints_are_the_services_it_creates(env: str) -> None:
    objs = build("triton", env, user_stacks()).objects
    services = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs if o["kind"] == "Service"}
    exported = build("triton", env, user_stacks()).outputs["services"]
    cfg = _config("triton", env)
    assert set(exported) == {s.name for s in cfg.model_services}
    for entry in exported.values():
        tracks = [entry["endpoints"]]
        if "canary" in entry.get("release", {}):
            tracks.append(entry["release"]["canary"]["endpoints"])
        for eps in tracks:
            name, ns, svc_ = eps["http"]["host"].split(".")
            assert svc_ == "svc" and ns == entry["namespace"]
            ports = {p["name"]: p["port"] for p in services[(ns, name)]["spec"]["ports"]}
            assert {k: eps[k]["port"] for k in ("http", "grpc", "metrics")} == {
                k: ports[k] for k in ("http", "grpc", "metrics")
            }


def _route_hosts(objs: list[dict[str, Any]]) -> set[str]:
    hosts: set[str] = set()
    for o in objs:
        if o["kind"] == "Ingress":
            hosts |= {r["host"] for r in o["spec"]["rules"]}
        elif o["kind"] in ("HTTPRoute", "GRPCRoute"):
            hosts |= set(o["spec"]["hostnames"])
    return hosts


@ENVS
def test_triton_exported_ingress_hosts_are_the_routes_hosts(env: str) -> None:
    rs = build("triton", env, user_stacks())
    exported = {h for e in rs.outputs["services"].values() for k, h in e["ingressHosts"].items() if k != "mode"}
    assert exported and exported == _route_hosts(rs.objects)


def test_triton_exports_release_channels_and_canary() -> None:
    cfg = _config("triton", "dev")
    exported = run_stack("triton", "dev").exports["services"]
    pull = [s for s in cfg.model_services if s.release is not None]
    assert pull
    for svc in pull:
        rel = exported[svc.name]["release"]
        assert (rel["store"], rel["channel"]) == (svc.release.store, svc.release.channel)  # type: ignore[union-attr]
        # The channel the Deployment's agent follows is the exported one.
        (dep,) = [o for o in build("triton", "dev", user_stacks()).objects
                  if o["kind"] == "Deployment" and o["metadata"]["name"] == labels.name_of(svc)]
        (sync,) = dep["spec"]["template"]["spec"]["initContainers"]
        argv = [*sync.get("command", []), *sync.get("args", [])]
        assert argv[argv.index("--channel") + 1] == rel["channel"]
        assert argv[argv.index("--store") + 1] == rel["store"]
        if svc.release.canary is not None:  # type: ignore[union-attr]
            assert rel["canary"]["channel"] == svc.release.canary.channel  # type: ignore[union-attr]
            assert rel["canary"]["endpoints"]["http"]["host"] == f"triton-{svc.name}-canary.{cfg.namespace}.svc"


# --- cluster-aws exports, read back through StackReferences ---------------------------------------


@ENVS
def test_cluster_aws_exports_what_the_others_read(env: str) -> None:
    run = run_stack("cluster-aws", env)
    cfg = _config("cluster-aws", env)
    assert run.secret["kubeconfig"] and not run.secret["clusterName"]
    assert yaml.safe_load(run.exports["kubeconfig"])["kind"] == "Config"
    assert run.exports["clusterName"] == cfg.cluster_name
    assert run.exports["oidcProviderArn"].startswith("arn:aws:iam::")
    roles = {r.inputs["name"]: r.name for r in run.mocks.of_type("aws:iam/role:Role") if r.name.startswith("reader-")}
    readers = run.exports[outputs.MODEL_READERS]
    assert set(readers) == {r.role_name for r in cfg.model_readers} == set(roles)
    for r in cfg.model_readers:
        assert readers[r.role_name] == {
            "arn": f"arn:aws:iam::111122223333:role/{roles[r.role_name]}",  # the mocks' Role ARN
            "namespace": r.namespace,
            "serviceAccount": r.service_account,
            "bucket": r.bucket,
            "prefix": r.prefix,
        }


class ClusterMocks(Mocks):
    """StackReferences answer with the given outputs (another program's real exports)."""

    def __init__(self, outputs_: dict[str, Any]) -> None:
        super().__init__()
        self.outputs_ = outputs_

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        id_, state = super().new_resource(args)
        if args.typ == "pulumi:pulumi:StackReference":
            state = {"name": args.inputs.get("name"), "outputs": self.outputs_}
        return id_, state


def _service_accounts(mocks: Mocks) -> dict[str, dict[str, Any]]:
    return {
        s.inputs["metadata"]["name"]: s.inputs["metadata"].get("annotations", {})
        for s in mocks.of_type("kubernetes:core/v1:ServiceAccount")
    }


def _s3_vision(**extra: Any) -> list[dict[str, Any]]:
    """The prod services, vision reading an s3:// modelRepository itself (Triton's loader)."""
    raw, _ = read_stack_file("triton", "prod")
    services = copy.deepcopy(raw["modelServices"])
    vision = services[0]
    for key in ("release", "modelReader", "modelRepository"):
        vision.pop(key, None)
    vision["modelRepository"] = {"type": "s3", "uri": "s3://tritonops-models-prod/vision", "region": "us-west-2"}
    vision.update(extra)
    return services


@pytest.mark.parametrize("overrides", [{}, {"modelServices": _s3_vision(modelReader="tritonops-prod-model-reader")}])
def test_triton_annotates_service_accounts_with_cluster_aws_s_exported_roles(overrides: dict[str, Any]) -> None:
    """Release mode (the agent signs with the role) and an s3 modelRepository (Triton does) alike."""
    cluster = run_stack("cluster-aws", "prod").exports
    for name, reader in cluster["modelReaders"].items():
        reader["arn"] = f"arn:aws:iam::999988887777:role/exported-{name}"
    run = run_stack("triton", "prod", overrides, mocks=ClusterMocks(cluster))
    (ref,) = run.mocks.of_type("pulumi:pulumi:StackReference")
    # one reference, both uses; the committed backend-neutral name with the organization Pulumi runs under
    assert ref.inputs["name"] == f"organization/{_config('triton', 'prod').cluster.cluster_stack}"
    (provider,) = run.mocks.of_type("pulumi:providers:kubernetes")
    assert "kubeconfig" in provider.inputs
    sas = _service_accounts(run.mocks)
    raw, _ = read_stack_file("triton", "prod")
    services = overrides.get("modelServices", raw["modelServices"])
    readers = {f"triton-{s['name']}": s["modelReader"] for s in services if s.get("modelReader")}  # triton.name_of
    assert readers
    for sa, notes in sas.items():
        if sa in readers:
            assert notes == {IRSA: f"arn:aws:iam::999988887777:role/exported-{readers[sa]}"}
        else:
            assert IRSA not in notes, sa


def test_render_writes_the_reader_placeholder_and_the_stack_the_real_arn() -> None:
    (sa,) = [o for o in build("triton", "prod", user_stacks()).objects
             if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "triton-vision"]
    assert sa["metadata"]["annotations"] == {
        IRSA: "arn:aws:iam::<account-id>:role/tritonops-prod-model-reader"
    }
    arns = {k: v["arn"] for k, v in cluster_outputs("organization/tritonops-cluster-aws/prod")["modelReaders"].items()}
    from tritonops.k8s.programs import render_set

    objs = render_set("triton", "prod", _config("triton", "prod"), arns).objects
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "triton-vision"]
    assert sa["metadata"]["annotations"][IRSA] == arns["tritonops-prod-model-reader"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("tritonops-prod-model-reader"), "has no model reader 'tritonops-prod-model-reader'"),
        (lambda r: r["tritonops-prod-model-reader"].update(serviceAccount="triton-other"),
         "trusts system:serviceaccount:triton:triton-other"),
        (lambda r: r["tritonops-prod-model-reader"].update(namespace="models"),
         "trusts system:serviceaccount:models:triton-vision"),
    ],
)
def test_a_reader_that_cluster_aws_did_not_make_for_the_service_is_refused(change: Any, message: str) -> None:
    cluster = copy.deepcopy(cluster_outputs("organization/tritonops-cluster-aws/prod"))
    change(cluster["modelReaders"])
    # Raised where the output is resolved: the engine reports it against the ServiceAccount, before
    # the resource is registered.
    key = "tritonops-triton:modelServices[0].modelReader"
    mocks = ClusterMocks(cluster)
    with pytest.raises(ValueError, match=re.escape(f"{key}: organization/tritonops-cluster-aws/prod") + ".*"
                       + re.escape(message)):
        run_stack("triton", "prod", mocks=mocks)
    assert "triton-vision" not in _service_accounts(mocks)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"cluster": {}}, "tritonops-triton:modelServices[0].modelReader"),
        (
            {"modelServices": _s3_vision(modelReader="tritonops-prod-model-reader", modelRepository={
                "type": "s3", "uri": "s3://b/p", "roleArn": "arn:aws:iam::123456789012:role/x"})},
            "tritonops-triton:modelServices[0].modelRepository.roleArn",
        ),
        ({"modelServices": _s3_vision()}, "tritonops-triton:modelServices[0].modelRepository.roleArn"),
    ],
)
def test_model_reader_config_errors_name_the_key(overrides: dict[str, Any], key: str) -> None:
    raw, _ = read_stack_file("triton", "prod")
    raw = copy.deepcopy(raw) | overrides
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw, source="Pulumi.prod.yaml")
    assert exc.value.key == key


def test_a_model_reader_and_static_keys_together_are_refused() -> None:
    # The agent takes static keys before the IRSA role (botocore's order): both set would bypass the role.
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][0]["release"]["credentialsSecret"] = "reader-keys"
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw, source="Pulumi.prod.yaml")
    assert exc.value.key == "tritonops-triton:modelServices[0].release.credentialsSecret"
    assert "not both" in str(exc.value)


# --- Karpenter's NodePool and EC2NodeClass wait for the chart that installs their CRDs --------------


def test_karpenter_resources_depend_on_the_chart_release(monkeypatch: pytest.MonkeyPatch) -> None:
    from pulumi.runtime.mocks import MockMonitor

    deps: dict[str, tuple[str, list[str]]] = {}
    original = MockMonitor.RegisterResource

    def register(self: MockMonitor, request: Any) -> Any:
        response = original(self, request)
        deps[response.urn] = (request.type, list(request.dependencies))
        return response

    monkeypatch.setattr(MockMonitor, "RegisterResource", register)
    run_stack("cluster-aws", "dev")
    releases = [u for u, (typ, _) in deps.items() if typ == "kubernetes:helm.sh/v3:Release" and "karpenter" in u
                and not u.endswith("-crd-release")]
    assert len(releases) == 1
    (crds,) = [u for u, (typ, _) in deps.items() if typ == "kubernetes:helm.sh/v3:Release" and u.endswith("-crd-release")]
    assert crds in deps[releases[0]][1]  # the chart of CRDs first, then the controller without its crds/
    crs = {u: d for u, (typ, d) in deps.items() if typ in (
        "kubernetes:karpenter.sh/v1:NodePool", "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")}
    assert crs and {u.rsplit("::", 1)[1].split("-")[0] for u in crs} == {"nodepool", "ec2nodeclass"}
    for urn, d in crs.items():
        assert releases[0] in d, urn


def test_triton_service_args_need_the_readers_arn_and_only_then() -> None:
    from tritonops.k8s.stacks.triton.components import TritonServiceArgs

    prod, dev = _config("triton", "prod"), _config("triton", "dev")
    reader = next(s for s in prod.model_services if s.model_reader)
    plain = dev.model_services[0].model_copy(update={"model_reader": None})  # static keys instead of dev's IRSA
    with pytest.raises(ValueError, match="role_arn"):
        TritonServiceArgs(prod, reader)
    with pytest.raises(ValueError, match="role_arn"):
        TritonServiceArgs(dev, plain, "arn:aws:iam::111122223333:role/x")
    TritonServiceArgs(prod, reader, "arn:aws:iam::111122223333:role/x")
