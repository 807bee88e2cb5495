"""The stacks' Helm releases in a standard GitOps form: Flux ``HelmRelease`` + ``HelmRepository``.

``tritonops render`` writes these (``helm/`` of its output) where the Pulumi stacks create a
``kubernetes:helm.sh/v3:Release``: the same chart, pinned version, repository, namespace and values.

Why Flux and not Argo CD: a Flux HelmRelease is a Helm release. helm-controller installs it with
Helm's own SDK, as Pulumi's ``helm.v3.Release`` does, so the two deploy paths produce the same
release: the chart's ``crds/`` installed first, hooks run, ``helm list``/``helm rollback`` work,
and a failed install or upgrade is remediated (Pulumi's ``atomic``). An Argo CD Application renders
the chart with ``helm template`` and applies the manifests itself: no Helm release exists, hooks
become Argo sync hooks, and the CRDs the Karpenter NodePools and ServiceMonitors need follow Argo's
own ordering. The Flux objects are also plain data (values inline, one object per release), which
the schema test checks against the real CRDs (tests/unit/k8s/data/flux/).

Every object lives in ``flux-system`` (where Flux runs, so it exists before any of ours) and
installs into the release's own namespace (``targetNamespace``), which the rendered objects create
with their Pod Security labels; ``install.createNamespace`` stays off, as in the stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonops.k8s.helm import HelmRelease

Obj = dict[str, Any]
HELM_RELEASE_API = "helm.toolkit.fluxcd.io/v2"
HELM_REPOSITORY_API = "source.toolkit.fluxcd.io/v1"
FLUX_NAMESPACE = "flux-system"
INTERVAL = "1h"  # how often Flux compares the cluster with these objects (and re-reads the index)
TIMEOUT = "15m"  # Pulumi's Release timeout: 900 s
RETRIES = 3


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "tritonops", "app.kubernetes.io/managed-by": "tritonops"}


def _chart_ref(rel: HelmRelease) -> tuple[str, str, str]:
    """(repository type, repository URL, chart name). An OCI chart reference carries its registry."""
    if rel.chart.startswith("oci://"):
        url, _, chart = rel.chart.rpartition("/")
        return "oci", url, chart
    if not rel.repo:
        raise ValueError(f"release {rel.name}: chart {rel.chart!r} names no repository")
    return "default", rel.repo, rel.chart


def helm_repository(rel: HelmRelease) -> Obj:
    typ, url, _ = _chart_ref(rel)
    spec: Obj = {"url": url, "interval": INTERVAL}
    if typ == "oci":
        spec = {"type": "oci", **spec}
    return {
        "apiVersion": HELM_REPOSITORY_API,
        "kind": "HelmRepository",
        "metadata": {"name": rel.name, "namespace": FLUX_NAMESPACE, "labels": _labels()},
        "spec": spec,
    }


def helm_release(rel: HelmRelease, depends_on: Sequence[str] = ()) -> Obj:
    """``depends_on``: names of releases that must be Ready first (the stack's ``depends_on``)."""
    _, _, chart = _chart_ref(rel)
    spec: Obj = {
        "interval": INTERVAL,
        "releaseName": rel.name,
        "targetNamespace": rel.namespace,
        "chart": {
            "spec": {
                "chart": chart,
                "version": rel.version,
                "sourceRef": {"kind": "HelmRepository", "name": rel.name, "namespace": FLUX_NAMESPACE},
                "interval": INTERVAL,
            }
        },
        "timeout": TIMEOUT,
        # Atomic install and upgrade (failed: rolled back or uninstalled), cleanup on a failed upgrade; the
        # chart's crds/ created on install and replaced on upgrade, so a chart bump brings its CRDs
        # (Helm alone never upgrades them: tritonops.k8s.helm); none where a chart of CRDs brings them.
        "install": {"crds": "Skip" if rel.skip_crds else "Create", "createNamespace": False,
                    "remediation": {"retries": RETRIES}},
        "upgrade": {
            "crds": "Skip" if rel.skip_crds else "CreateReplace",
            "cleanupOnFail": True,
            "remediation": {"retries": RETRIES, "remediateLastFailure": True},
        },
        "values": rel.values,
    }
    if depends_on:
        spec["dependsOn"] = [{"name": name} for name in depends_on]
    return {
        "apiVersion": HELM_RELEASE_API,
        "kind": "HelmRelease",
        "metadata": {"name": rel.name, "namespace": FLUX_NAMESPACE, "labels": _labels()},
        "spec": spec,
    }


def flux_objects(releases: Sequence[HelmRelease], depends_on: Mapping[str, Sequence[str]] | None = None) -> list[Obj]:
    """A HelmRepository and a HelmRelease per release, repositories first."""
    deps = depends_on or {}
    unknown = {d for ds in deps.values() for d in ds} - {r.name for r in releases}
    if unknown:
        raise ValueError(f"depends_on names releases not rendered: {sorted(unknown)}")
    return [*(helm_repository(r) for r in releases), *(helm_release(r, deps.get(r.name, ())) for r in releases)]
