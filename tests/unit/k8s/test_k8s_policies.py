"""CrossGuard pack: zero violations on both environments; every policy fires when its rule is broken.

Validators are called directly with a collecting report_violation (a PolicyPack is never built here:
outside the Pulumi CLI it blocks waiting on a port).
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pytest
from k8s_harness import ROOT, as_ints, committed, direct_prod_services, envs, run_program
from pulumi_policy import PolicyResource, PolicyResourceOptions, ResourceValidationArgs, StackValidationArgs
from tritonops.k8s.config import STACKS
from tritonops.k8s.labels import TIER_LABEL
from tritonops.k8s.stack_file import load_stack_config, read_stack_file

PACK = ROOT / "policies" / "tritonops"
sys.path.insert(0, str(PACK))
import policy_common as pc  # noqa: E402
import policy_workloads as pw  # noqa: E402
import tritonops_policy as tp  # noqa: E402

OPTS = PolicyResourceOptions(
    protect=False,
    ignore_changes=[],
    delete_before_replace=None,
    aliases=[],
    additional_secret_outputs=[],
    custom_timeouts=None,
)  # type: ignore[arg-type]


# The pack's config a stack runs with, by the stack's tier (README: --policy-pack-config).
PACK_CONFIG = {"production": "prod", "non-production": "dev"}


def pack_config_for(env: str) -> str:
    """config.<name>.json of a committed stack: chosen by its tier, whatever its name."""
    return PACK_CONFIG[load_stack_config("triton", env).tier]


def _config(env: str) -> dict[str, Any]:
    return json.loads((PACK / f"config.{env}.json").read_text())


def _policy_config(env: str, policy: str) -> dict[str, Any]:
    value = _config(env).get(policy)
    return {k: v for k, v in value.items() if k != "enforcementLevel"} if isinstance(value, dict) else {}


def _resource(typ: str, props: dict[str, Any], name: str = "r") -> PolicyResource:
    return PolicyResource(typ, props, f"urn:pulumi:dev::p::{typ}::{name}", name, OPTS, None, None, [], {})


def _resources(env: str) -> list[PolicyResource]:
    out = []
    for stack in (s for s in STACKS if env in envs(s)):
        for r in committed(stack, env).resources:
            out.append(_resource(r.typ, as_ints(r.inputs), r.name))
    return out


def run_policies(resources: list[PolicyResource], env: str = "dev") -> dict[str, list[str]]:
    """Every validator over every resource; policy name -> violation messages."""
    found: dict[str, list[str]] = {}
    for name, validate in tp.RESOURCE_VALIDATORS.items():
        config = {"requireHighAvailability": False, "minReplicas": 2} | _policy_config(env, name)
        for r in resources:
            args = ResourceValidationArgs(r.resource_type, r.props, r.urn, r.name, OPTS, None, config)
            validate(args, lambda msg, urn=None, n=name: found.setdefault(n, []).append(msg))
    for name, validate in tp.STACK_VALIDATORS.items():
        args = StackValidationArgs(resources, _policy_config(env, name))
        validate(args, lambda msg, urn=None, n=name: found.setdefault(n, []).append(msg))
    return found


@pytest.mark.parametrize("env", envs("triton"))
def test_committed_stacks_have_zero_violations(env: str) -> None:
    """Every committed stack (found, not listed) passes the pack with the config of its tier."""
    resources = _resources(env)
    assert any(pc.is_triton_workload(r.resource_type, r.props) for r in resources)
    tier = load_stack_config("triton", env).tier
    assert all(r.props["metadata"]["labels"][TIER_LABEL] == tier
               for r in resources if pc.is_triton_workload(r.resource_type, r.props))
    assert run_policies(resources, pack_config_for(env)) == {}


def test_policy_configs_name_real_policies_and_levels() -> None:
    names = {p.name for p in tp.POLICIES}
    assert names == set(tp.RESOURCE_VALIDATORS) | set(tp.STACK_VALIDATORS)
    for env in sorted(p.name.split(".")[1] for p in PACK.glob("config.*.json")):
        for key, value in _config(env).items():
            assert key == "all" or key in names, key
            level = value if isinstance(value, str) else value["enforcementLevel"]
            assert level in ("advisory", "mandatory", "disabled")
    assert _config("prod")["triton-high-availability"]["requireHighAvailability"] is True
    assert _config("prod")["triton-high-availability"]["enforcementLevel"] == "mandatory"
    assert _config("dev")["triton-high-availability"]["enforcementLevel"] == "advisory"


def test_pack_entry_point_uses_the_policies() -> None:
    text = (PACK / "__main__.py").read_text()
    assert "PolicyPack(" in text and "policies=POLICIES" in text
    assert (PACK / "PulumiPolicy.yaml").is_file()


# --- each policy fires ---------------------------------------------------------------------------


def _triton_resources(env: str = "prod") -> list[PolicyResource]:
    return [r for r in _resources(env) if r.resource_type.startswith("kubernetes:")]


def _mutate(
    resources: list[PolicyResource], typ: str, fn: Any, index: int = 0, name: str | None = None
) -> list[PolicyResource]:
    """``fn`` applied to the ``index``-th resource of type ``typ`` (among those whose metadata.name is ``name``)."""
    out = []
    seen = 0
    for r in resources:
        if r.resource_type == typ and (name is None or r.props["metadata"]["name"] == name):
            if seen == index:
                props = copy.deepcopy(dict(r.props))
                fn(props)
                r = _resource(r.resource_type, props, r.name)
            seen += 1
        out.append(r)
    return out


def _container(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["template"]["spec"]["containers"][0]


DEP = pc.DEPLOYMENT


@pytest.mark.parametrize(
    ("policy", "typ", "mutation"),
    [
        ("triton-gpu-resources", DEP, lambda p: _container(p)["resources"]["limits"].pop("nvidia.com/gpu")),
        ("triton-gpu-resources", DEP, lambda p: _container(p)["resources"]["requests"].update({"nvidia.com/gpu": "2"})),
        ("triton-health-probes", DEP, lambda p: _container(p).pop("livenessProbe")),
        ("triton-health-probes", DEP, lambda p: _container(p)["readinessProbe"]["httpGet"].update({"path": "/"})),
        (
            "triton-non-root",
            DEP,
            lambda p: (
                _container(p)["securityContext"].pop("runAsNonRoot"),
                p["spec"]["template"]["spec"]["securityContext"].pop("runAsNonRoot"),
            ),
        ),
        ("triton-non-root", DEP, lambda p: _container(p)["securityContext"].update({"runAsUser": 0})),
        ("triton-container-hardening", DEP, lambda p: _container(p)["securityContext"].pop("readOnlyRootFilesystem")),
        (
            "triton-container-hardening",
            DEP,
            lambda p: _container(p)["securityContext"]["capabilities"].update({"add": ["NET_ADMIN"]}),
        ),
        ("triton-container-resources", DEP, lambda p: _container(p)["resources"]["requests"].pop("cpu")),
        ("triton-pinned-images", DEP, lambda p: _container(p).update({"image": "nvcr.io/nvidia/tritonserver:latest"})),
        ("triton-pinned-images", DEP, lambda p: _container(p).update({"image": "nvcr.io/nvidia/tritonserver"})),
        ("triton-high-availability", DEP, lambda p: p["spec"].update({"replicas": 1})),
        (
            "triton-high-availability",
            DEP,
            lambda p: (
                p["spec"]["template"]["spec"].pop("affinity"),
                p["spec"]["template"]["spec"].pop("topologySpreadConstraints"),
            ),
        ),
        ("triton-high-availability", pc.SCALED_OBJECT, lambda p: p["spec"].update({"minReplicaCount": 1})),
        ("scaledobject-fallback", pc.SCALED_OBJECT, lambda p: p["spec"].pop("fallback")),
        ("scaledobject-fallback", pc.SCALED_OBJECT, lambda p: p["spec"]["fallback"].pop("behavior")),
        ("scaledobject-fallback", pc.SCALED_OBJECT, lambda p: p["spec"]["triggers"][0].update({"metricType": "Value"})),
        ("helm-chart-pinned", pc.HELM_RELEASE, lambda p: p.update({"version": ""})),
        ("helm-chart-pinned", pc.HELM_RELEASE, lambda p: p.update({"version": "^75.0.0"})),
        (
            "triton-pdb-coverage",
            pc.PDB,
            lambda p: p["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/instance": "someone-else"}),
        ),
    ],
)
def test_policy_fires(policy: str, typ: str, mutation: Any) -> None:
    env = "prod"
    resources = _resources(env)
    broken = _mutate(resources, typ, mutation)
    found = run_policies(broken, env)
    assert set(found) == {policy}, found
    assert len(found[policy]) >= 1


@pytest.mark.parametrize(
    ("policy", "mutation"),
    [
        ("triton-network-policy-coverage", lambda p: p["spec"]["ingress"][0].pop("from")),
        ("triton-network-policy-coverage", lambda p: p["spec"]["ingress"][0].update({"from": [{"namespaceSelector": {}}]})),
        ("triton-network-policy-coverage", lambda p: p["spec"]["egress"][0].pop("ports")),
    ],
)
def test_network_policy_of_a_service_fires(policy: str, mutation: Any) -> None:
    env = "prod"
    broken = _mutate(_resources(env), pc.NETWORK_POLICY, mutation, name="triton-vision")
    found = run_policies(broken, env)
    assert set(found) == {policy}, found
    assert len(found[policy]) >= 1


def test_an_allow_all_policy_does_not_count() -> None:
    """An extra policy that opens everything to the Triton pods (it undoes every other) fires, in either
    direction, even beside the service's own policy and the default deny."""
    env = "prod"
    resources = _resources(env)
    for spec in ({"podSelector": {}, "ingress": [{}]}, {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}):
        extra = _resource(pc.NETWORK_POLICY, {"metadata": {"name": "allow-all", "namespace": "triton"}, "spec": spec})
        found = run_policies([*resources, extra], env)
        assert set(found) == {"triton-network-policy-coverage"}, found
        assert all("triton/allow-all allows all" in m for m in found["triton-network-policy-coverage"])


def test_default_deny_isolates_a_service_without_its_own_policy() -> None:
    """A service policy that selects nothing leaves its pods isolated by the default deny (unreachable, not
    exposed); without the default deny too, its ingress is unlimited and both rules fire."""
    env = "prod"
    other = {"app.kubernetes.io/instance": "someone-else"}
    # Triton reading its own models: the service's policy is the only one selecting its pods (in pull
    # mode the drift check's policy to the agents selects them too).
    direct = run_program("triton", env, overrides={"modelServices": direct_prod_services()})
    resources = [_resource(r.typ, as_ints(r.inputs), r.name) for r in direct.resources]
    broken = _mutate(
        resources, pc.NETWORK_POLICY, lambda p: p["spec"]["podSelector"]["matchLabels"].update(other),
        name="triton-vision",
    )
    assert run_policies(broken, env) == {}
    no_deny = [r for r in broken if r.props.get("metadata", {}).get("name") != "default-deny"]
    found = run_policies(no_deny, env)
    assert set(found) == {"triton-network-policy-coverage", "namespace-default-deny"}, found
    assert found["triton-network-policy-coverage"] == [
        "triton/triton-vision: no NetworkPolicy limits this Triton Deployment's ingress"
    ]


def test_missing_pdb_and_network_policy_fire() -> None:
    resources = [r for r in _resources("prod") if r.resource_type not in (pc.PDB, pc.NETWORK_POLICY)]
    found = run_policies(resources, "prod")
    assert set(found) == {"triton-pdb-coverage", "triton-network-policy-coverage", "namespace-default-deny"}
    assert len(found["triton-pdb-coverage"]) == 2  # one per Triton Deployment


def test_high_availability_only_required_in_prod() -> None:
    """The dev stack (1 replica, soft spread) passes; the same objects of tier production do not, and
    the environment's name changes nothing."""
    dev = _resources("dev")
    assert "triton-high-availability" not in run_policies(dev, "dev")
    renamed = _mutate(dev, DEP, lambda p: p["metadata"]["labels"].update({"tritonops.io/environment": "prod"}))
    assert "triton-high-availability" not in run_policies(renamed, "dev")
    relabelled = _mutate(dev, DEP, lambda p: p["metadata"]["labels"].update({TIER_LABEL: "production"}))
    assert "triton-high-availability" in run_policies(relabelled, "dev")
    assert "triton-high-availability" in run_policies(dev, "prod")  # config requireHighAvailability: true


def test_non_triton_deployments_are_ignored() -> None:
    other = _resource(
        DEP,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        },
    )
    assert run_policies([other], "prod") == {}


def test_image_pinned() -> None:
    assert pw.image_pinned("nvcr.io/nvidia/tritonserver:24.10-py3")
    assert pw.image_pinned("registry:5000/triton@sha256:" + "0" * 64)
    assert not pw.image_pinned("registry:5000/triton")
    assert not pw.image_pinned("triton:latest")


def test_policies_are_kebab_case_with_explicit_levels() -> None:
    import re

    for p in tp.POLICIES:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", p.name), p.name
        assert p.enforcement_level is not None and p.description


# --- the release agent's containers (dev pulls a channel: init container + sidecar) --------------


def _init(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["template"]["spec"]["initContainers"][0]


def _sidecar(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["template"]["spec"]["containers"][1]


def test_agent_containers_are_not_triton_servers() -> None:
    """Same image, but no GPU and no /v2/health probes needed: only the server is a Triton container."""
    from tritonops.k8s.stacks.triton import release_agent

    assert pc.AGENT_FILE == release_agent.AGENT_KEY
    # stable and canary (sorted: the engine registers resources concurrently, in no fixed order)
    deps = sorted((r for r in _resources("dev") if r.resource_type == DEP), key=lambda r: r.props["metadata"]["name"])
    assert [d.props["metadata"]["name"] for d in deps] == ["triton-vision", "triton-vision-canary"]
    assert [[c["name"] for c in pc.triton_containers(d.props)] for d in deps] == [["triton"]] * 2
    assert [[c["name"] for c in pc.all_containers(d.props)] for d in deps] == [
        ["release-sync", "triton", "release-agent"]
    ] * 2


@pytest.mark.parametrize(
    ("policy", "mutation"),
    [
        ("triton-non-root", lambda p: _sidecar(p)["securityContext"].update({"runAsUser": 0})),
        ("triton-non-root", lambda p: _init(p)["securityContext"].update({"allowPrivilegeEscalation": True})),
        ("triton-non-root", lambda p: _init(p)["securityContext"].update({"privileged": True})),
        ("triton-container-hardening", lambda p: _sidecar(p)["securityContext"].pop("readOnlyRootFilesystem")),
        ("triton-container-hardening", lambda p: _init(p)["securityContext"].pop("capabilities")),
        ("triton-container-resources", lambda p: _sidecar(p).pop("resources")),
        ("triton-container-resources", lambda p: _init(p)["resources"].pop("limits")),
        ("triton-pinned-images", lambda p: _init(p).update({"image": "nvcr.io/nvidia/tritonserver:latest"})),
    ],
)
def test_policy_fires_on_release_agent_containers(policy: str, mutation: Any) -> None:
    resources = _resources("dev")
    assert run_policies(resources, "dev") == {}
    found = run_policies(_mutate(resources, DEP, mutation), "dev")
    assert set(found) == {policy}, found
    assert any("release-" in msg for msg in found[policy])


# --- canary Deployments (track: canary) ----------------------------------------------------------


def _is_canary(r: PolicyResource) -> bool:
    return r.resource_type == DEP and r.props["spec"]["template"]["metadata"]["labels"].get("track") == "canary"


def test_dev_canary_passes_without_a_pdb_of_its_own() -> None:
    resources = _resources("dev")
    (canary,) = [r for r in resources if _is_canary(r)]
    labels = canary.props["spec"]["template"]["metadata"]["labels"]
    pdbs = [r for r in resources if r.resource_type == pc.PDB]
    assert pdbs and not any(pc.selects(p.props["spec"]["selector"], labels) for p in pdbs)
    assert run_policies(resources, "dev") == {}


def test_canary_without_its_stable_deployment_fires() -> None:
    resources = [r for r in _resources("dev") if not (r.resource_type == DEP and not _is_canary(r))]
    found = run_policies(resources, "dev")
    assert set(found) == {"triton-pdb-coverage"}, found
    (msg,) = found["triton-pdb-coverage"]
    assert "triton-vision-canary" in msg and "without a stable Deployment" in msg


def _prod_with_canary(replicas: int) -> list[PolicyResource]:
    raw = read_stack_file("triton", "prod")[0]
    services = copy.deepcopy(raw["modelServices"])
    services[0].pop("modelRepository", None)  # the committed prod is in release mode already
    services[0]["release"] = {
        "store": "s3://tritonops-models-prod/vision",  # the bucket its IRSA role reads
        "channel": "stable",
        "storeName": "vision-prod",
        "trustedKeys": {"configMap": "tritonops-release-keys"},
        "canary": {"channel": "canary", "weight": 5, "replicas": replicas},
    }
    mocks = run_program("triton", "prod", overrides={"modelServices": services})
    return [_resource(r.typ, as_ints(r.inputs), r.name) for r in mocks.resources]


def test_prod_canary_is_held_to_high_availability() -> None:
    """A prod canary carries its weight's share of requests: one pod is a single point of failure."""
    assert run_policies(_prod_with_canary(2), "prod") == {}
    found = run_policies(_prod_with_canary(1), "prod")
    assert set(found) == {"triton-high-availability"}, found
    assert found["triton-high-availability"] == ["triton/triton-vision-canary: prod Triton needs replicas >= 2"]


# --- exposure: restricted APIs, digests, default deny, Pod Security -----------------------------


def _args(p: dict[str, Any]) -> list[str]:
    return _container(p)["args"]


@pytest.mark.parametrize(
    "mutation",
    [
        lambda p: _args(p).__setitem__(slice(None), [a for a in _args(p) if "restricted" not in a]),
        lambda p: _args(p).__setitem__(
            slice(None), [a.replace("shared-memory,", "") if a.startswith("--grpc-") else a for a in _args(p)]
        ),
        lambda p: _args(p).__setitem__(
            slice(None), [a.split(":", 1)[0] + ":=" if a.startswith("--http-restricted") else a for a in _args(p)]
        ),
    ],
    ids=["no-flags", "grpc-shared-memory-open", "empty-header"],
)
def test_restricted_apis_fire(mutation: Any) -> None:
    found = run_policies(_mutate(_resources("prod"), DEP, mutation), "prod")
    assert set(found) == {"triton-restricted-apis"}, found


def test_restricted_groups_parse_both_spellings() -> None:
    groups = "model-repository,model-config:k=v"
    assert pw.restricted_groups([f"--http-restricted-api={groups}"], "--http-restricted-api") == {
        "model-repository", "model-config"
    }
    assert pw.restricted_groups(["--grpc-restricted-protocol", groups], "--grpc-restricted-protocol") == {
        "model-repository", "model-config"
    }
    assert pw.restricted_groups(["--http-restricted-api=trace:=v"], "--http-restricted-api") == set()


def test_pack_restricts_what_the_builders_restrict_and_triton_knows() -> None:
    """The pack checks the builder's list (it imports it from tritonops.core.triton_cli), and every group Triton's
    own `tritonserver --help` can restrict is either on it or routed (health, metadata, inference)."""
    import os
    import re
    import subprocess

    from tritonops.core.triton_cli import RESTRICTED_APIS, RESTRICTED_FLAGS
    from tritonops.triton.server import TritonNotInstalled, find_install

    assert pw.RESTRICTED_APIS is RESTRICTED_APIS and pw.RESTRICTED_FLAGS is RESTRICTED_FLAGS
    try:
        install = find_install()
    except TritonNotInstalled as exc:
        pytest.skip(str(exc))
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": str(install.libs)}
    proc = subprocess.run([str(install.binary), "--help"], capture_output=True, text=True, timeout=60, env=env)
    out = proc.stdout + proc.stderr
    assert all(flag in out for flag in pw.RESTRICTED_FLAGS)
    allowed = re.findall(r"Allowed (?:APIs|protocols):\s*([a-z,\s-]+)", out)
    assert len(allowed) == 2
    for text in allowed:
        groups = {g.strip() for g in text.replace("\n", " ").split(",") if g.strip()}
        assert groups == set(RESTRICTED_APIS) | {"health", "metadata", "inference"}


def test_prod_images_need_a_digest() -> None:
    tag_only = "nvcr.io/nvidia/tritonserver:24.10-py3"
    found = run_policies(_mutate(_resources("prod"), DEP, lambda p: _container(p).update({"image": tag_only})), "prod")
    assert set(found) == {"triton-pinned-images"}, found
    assert "has no digest" in found["triton-pinned-images"][0]
    assert "triton-pinned-images" not in run_policies(_resources("dev"), "dev")  # dev follows tags


def test_default_deny_must_deny() -> None:
    def open_up(p: dict[str, Any]) -> None:
        p["spec"]["ingress"] = [{"from": [{"podSelector": {}}]}]

    found = run_policies(_mutate(_resources("prod"), pc.NETWORK_POLICY, open_up, name="default-deny"), "prod")
    assert set(found) == {"namespace-default-deny"}, found
    missing = [r for r in _resources("prod") if r.props.get("metadata", {}).get("name") != "default-deny"]
    assert set(run_policies(missing, "prod")) == {"namespace-default-deny"}


@pytest.mark.parametrize("level", ["baseline", "privileged", None])
def test_pod_security_restricted_is_enforced(level: str | None) -> None:
    def relabel(p: dict[str, Any]) -> None:
        if level is None:
            p["metadata"]["labels"].pop(pc.POD_SECURITY_ENFORCE)
        else:
            p["metadata"]["labels"][pc.POD_SECURITY_ENFORCE] = level

    found = run_policies(_mutate(_resources("prod"), pc.NAMESPACE, relabel, name="triton"), "prod")
    assert set(found) == {"namespace-pod-security-restricted"}, found
    no_ns = [r for r in _resources("prod") if r.resource_type != pc.NAMESPACE]
    assert run_policies(no_ns, "prod")["namespace-pod-security-restricted"] == [
        "namespace triton: Triton runs in a namespace the stack does not create"
    ]


def test_digest_requirement_follows_the_tier_not_the_name() -> None:
    """dev's tag-only images pass with dev's pack config, until the objects carry tier production."""
    dev = _resources("dev")
    assert "triton-pinned-images" not in run_policies(dev, "dev")
    relabelled = _mutate(dev, DEP, lambda p: p["metadata"]["labels"].update({TIER_LABEL: "production"}))
    found = run_policies(relabelled, "dev")
    assert any("has no digest" in m for m in found["triton-pinned-images"])
