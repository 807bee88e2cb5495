"""`tritonops render`'s GitOps form of the Helm releases: Flux HelmRelease + HelmRepository.

The CRDs of helm-controller and source-controller are test data (``data/flux``); every rendered
object must match its ``openAPIV3Schema`` with unknown fields refused (the API server's strict
field validation on a structural schema), and each HelmRelease must install what the stack's
``helm.v3.Release`` installs (same chart, version, repository, namespace and values).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from k8s_harness import as_ints, committed, strict_schema, user_stacks
from tritonops.k8s import gitops
from tritonops.k8s.render import build, render

DATA = Path(__file__).parent / "data" / "flux"
CRDS = {
    gitops.HELM_RELEASE_API: ("helm.toolkit.fluxcd.io_helmreleases.yaml", "HelmRelease"),
    gitops.HELM_REPOSITORY_API: ("source.toolkit.fluxcd.io_helmrepositories.yaml", "HelmRepository"),
}
WITH_RELEASES = [("platform", "dev"), ("platform", "prod"), ("cluster-aws", "dev"), ("cluster-aws", "prod")]


@functools.cache
def _validator(api_version: str) -> jsonschema.protocols.Validator:
    fname, kind = CRDS[api_version]
    crd = yaml.safe_load((DATA / fname).read_text())
    group, version = api_version.split("/")
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (group, kind)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert served["served"] and served["storage"]
    schema = strict_schema(served["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: the API server's own schema
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())


def _errors(obj: dict[str, Any]) -> list[str]:
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(obj["apiVersion"]).iter_errors(obj)]
    if obj["kind"] == "HelmRelease" and ("chart" in obj["spec"]) == ("chartRef" in obj["spec"]):
        errors.append("spec: either chart or chartRef must be set")  # the CRD's x-kubernetes-validations rule
    return errors


def _written(stack: str, env: str, out: Path) -> list[dict[str, Any]]:
    render(stack, env, out, user_stacks())
    kust = yaml.safe_load((out / "helm" / "kustomization.yaml").read_text())
    return [yaml.safe_load((out / "helm" / f).read_text()) for f in kust["resources"]]


@pytest.mark.parametrize(("stack", "env"), WITH_RELEASES)
def test_rendered_flux_objects_match_the_crd_schemas(stack: str, env: str, tmp_path: Path) -> None:
    docs = _written(stack, env, tmp_path)
    assert sorted({d["kind"] for d in docs}) == ["HelmRelease", "HelmRepository"]
    assert len(docs) == 2 * len(build(stack, env, user_stacks()).releases)
    for doc in docs:
        assert _errors(doc) == [], doc["metadata"]["name"]


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("HelmRelease", ("spec", "interval"), "1 hour"),
        ("HelmRelease", ("spec", "install", "crds"), "Always"),
        ("HelmRelease", ("spec", "chart", "spec", "sourceRef", "kind"), "HelmRepo"),
        ("HelmRelease", ("spec", "atomic"), True),  # a helm.v3.Release field, not a HelmRelease one
        ("HelmRepository", ("spec", "type"), "git"),
        ("HelmRepository", ("spec", "repo"), "https://example.com"),
    ],
)
def test_the_schema_check_refuses_broken_objects(kind: str, path: tuple[str, ...], value: Any) -> None:
    rs = build("platform", "dev")
    (doc,) = [d for d in gitops.flux_objects(rs.releases, rs.release_deps)
              if d["kind"] == kind and d["metadata"]["name"] == "keda"]
    broken = copy.deepcopy(doc)
    node = broken
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    assert _errors(doc) == []
    assert _errors(broken)


def test_chart_xor_chart_ref_rule_is_checked() -> None:
    rel = build("platform", "dev").releases[0]
    doc = gitops.helm_release(rel)
    doc["spec"]["chartRef"] = {"kind": "OCIRepository", "name": "x"}
    assert "spec: either chart or chartRef must be set" in _errors(doc)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_helm_releases_install_what_the_platform_stack_installs(env: str, tmp_path: Path) -> None:
    docs = _written("platform", env, tmp_path)
    repos = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "HelmRepository"}
    flux = {d["spec"]["releaseName"]: d["spec"] for d in docs if d["kind"] == "HelmRelease"}
    pulumi = {r.inputs["name"]: r.inputs for r in committed("platform", env).of_type("kubernetes:helm.sh/v3:Release")}
    assert set(flux) == set(pulumi)
    for name, rel in pulumi.items():
        spec = flux[name]
        chart = spec["chart"]["spec"]
        assert (chart["chart"], chart["version"]) == (rel["chart"], rel["version"])
        assert repos[chart["sourceRef"]["name"]]["url"] == rel["repositoryOpts"]["repo"]
        assert spec["targetNamespace"] == rel["namespace"]
        assert spec["values"] == as_ints(rel["values"])


def test_platform_releases_wait_for_the_monitoring_chart_as_the_stack_does() -> None:
    rs = build("platform", "dev")
    flux = {d["metadata"]["name"]: d["spec"] for d in gitops.flux_objects(rs.releases, rs.release_deps)
            if d["kind"] == "HelmRelease"}
    assert "dependsOn" not in flux["kube-prometheus-stack"]
    assert flux["gpu-operator"]["dependsOn"] == flux["keda"]["dependsOn"] == [{"name": "kube-prometheus-stack"}]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_karpenter_oci_chart_becomes_an_oci_repository(env: str, tmp_path: Path) -> None:
    docs = _written("cluster-aws", env, tmp_path)
    # prod also installs cluster-autoscaler (its managed GPU group) from an https repository
    (repo,) = [d["spec"] for d in docs if d["kind"] == "HelmRepository" and d["spec"].get("type") == "oci"
               and d["metadata"]["name"] == "karpenter"]  # karpenter-crd has its own
    (rel,) = [d["spec"] for d in docs if d["kind"] == "HelmRelease" and d["metadata"]["name"] == "karpenter"]
    (karpenter,) = [r for r in build("cluster-aws", env, user_stacks()).releases if r.name == "karpenter"]
    assert repo["type"] == "oci" and f"{repo['url']}/{rel['chart']['spec']['chart']}" == karpenter.chart
    assert rel["chart"]["spec"]["version"] == karpenter.version and rel["values"] == karpenter.values


def test_no_custom_release_index_is_written(tmp_path: Path) -> None:
    render("platform", "dev", tmp_path)
    helm = sorted(p.name for p in (tmp_path / "helm").iterdir())
    assert "releases.yaml" not in helm and not [p for p in helm if p.endswith(".values.yaml")]
    kust = yaml.safe_load((tmp_path / "helm" / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == [p for p in helm if p != "kustomization.yaml"]


def test_depends_on_an_unrendered_release_is_refused() -> None:
    rs = build("platform", "dev")
    with pytest.raises(ValueError, match="not rendered"):
        gitops.flux_objects(rs.releases[1:], {"keda": ["kube-prometheus-stack"]})
