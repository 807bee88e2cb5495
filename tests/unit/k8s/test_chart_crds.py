"""Chart CRDs follow a chart bump (issue 33 item 3): Helm installs a chart's crds/ once and never upgrades
them, so every chart whose CRDs the stacks use says how they follow it (tritonops.k8s.helm), and the
Pulumi releases and the Flux objects do what it says."""

from __future__ import annotations

import pytest
from k8s_harness import committed, user_stacks
from k8s_refs import CHART_KINDS
from tritonops import versions
from tritonops.k8s import gitops
from tritonops.k8s.render import build

ENVS = ["dev", "staging", "prod"]
# The value that turns on a chart's own CRD-upgrade hook (a pre-upgrade Job applying this version's CRDs).
HOOKS = {versions.GPU_OPERATOR_CHART: ("operator", "upgradeCRD"),
         versions.KUBE_PROMETHEUS_STACK_CHART: ("crds", "upgradeJob", "enabled")}
RELEASE = "kubernetes:helm.sh/v3:Release"


def _releases(env: str) -> list:
    return [r for stack in ("cluster-aws", "platform") for r in build(stack, env, user_stacks()).releases]


def _value(values: dict, path: tuple[str, ...]) -> object:
    for part in path:
        values = values.get(part, {})
    return values


@pytest.mark.parametrize("env", ENVS)
def test_every_chart_with_crds_says_how_they_follow_a_chart_bump(env: str) -> None:
    releases = _releases(env)
    with_crds = [r for r in releases if CHART_KINDS.get(r.chart)]
    assert {r.name for r in with_crds} >= {"gpu-operator", "kube-prometheus-stack", "keda"}
    for rel in with_crds:
        assert rel.crd_upgrade in ("templates", "hook", "crd-chart"), rel.name
        if rel.crd_upgrade == "hook":
            assert _value(rel.values, HOOKS[rel.chart]) is True, rel.name
        if rel.crd_upgrade == "crd-chart":  # a chart of CRDs at the same version, installed first
            crds = [r for r in releases if r.chart == f"{rel.chart}-crd" and r.version == rel.version]
            assert crds and rel.skip_crds, rel.name
            assert build("cluster-aws", env, user_stacks()).release_deps[rel.name] == [crds[0].name]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_flux_replaces_the_crds_on_upgrade_unless_a_chart_of_crds_brings_them(env: str) -> None:
    for stack in ("cluster-aws", "platform"):
        rs = build(stack, env, user_stacks())
        flux = {d["metadata"]["name"]: d["spec"] for d in gitops.flux_objects(rs.releases, rs.release_deps)
                if d["kind"] == "HelmRelease"}
        for rel in rs.releases:
            want = ("Skip", "Skip") if rel.skip_crds else ("Create", "CreateReplace")
            assert (flux[rel.name]["install"]["crds"], flux[rel.name]["upgrade"]["crds"]) == want, rel.name


def test_pulumi_releases_skip_the_crds_and_the_validation_as_their_mechanism_needs() -> None:
    platform = {r.inputs["name"]: r.inputs for r in committed("platform", "prod").of_type(RELEASE)}
    # The GPU Operator's hook brings the CRDs the new values need: Helm's client-side check runs before it.
    assert platform["gpu-operator"]["disableOpenapiValidation"] is True
    assert platform["gpu-operator"]["values"]["operator"]["upgradeCRD"] is True
    assert not platform["keda"].get("disableOpenapiValidation")
    cluster = {r.inputs["name"]: r for r in committed("cluster-aws", "dev").of_type(RELEASE)}
    assert cluster["karpenter"].inputs["skipCrds"] is True
    assert cluster["karpenter-crd"].inputs["version"] == cluster["karpenter"].inputs["version"]
    assert not cluster["karpenter-crd"].inputs.get("skipCrds")
