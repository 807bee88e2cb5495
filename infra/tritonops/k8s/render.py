"""Write a stack's objects as plain YAML (GitOps, kubectl, kustomize), with no Pulumi engine.

Layout of ``--out DIR``::

    NN-<kind>-<namespace>-<name>.yaml   one Kubernetes object per file, in apply order
    kustomization.yaml                  lists them
    helm/NN-<kind>-<name>.yaml          Flux HelmRepository + HelmRelease per chart the stack installs
                                        (pinned version, the values Pulumi passes, inline; see gitops.py)
    helm/kustomization.yaml             lists them (apply where Flux runs: they live in flux-system)
    stack-outputs.yaml                  what the stack exports that its config decides (triton: services'
                                        endpoints, ingress hosts, channels), as `pulumi stack output` shows
    aws/<NN>-<type>.yaml                AWS resources (cluster-aws): EKS cluster and node groups
    secrets-required.yaml               Secrets whose values live in Pulumi secret config, Secrets and
                                        ConfigMaps the user creates (each with its `command`), and the
                                        cluster's prerequisites (each with a `check`): create them
    .tritonops-render                   what this render wrote: the next render removes files it no longer writes
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tritonops.k8s.config import ConfigError, project_name
from tritonops.k8s.contract import missing_user_values
from tritonops.k8s.gitops import flux_objects
from tritonops.k8s.programs import render_set
from tritonops.k8s.rendered import RenderSet
from tritonops.k8s.stack_file import load_stack_config, stack_file


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-")


@dataclass(frozen=True)
class Written:
    path: Path
    kind: str
    name: str


def build(
    stack: str, env: str, stacks_dir: Path | None = None, reader_arns: Mapping[str, str] | None = None
) -> RenderSet:
    """Parse Pulumi.<env>.yaml (same parser as the stack) and build the objects.

    ``stacks_dir``: default the project folder's stacks/ (tritonops.project). ``reader_arns``: the
    cluster-aws stack's model-reader role ARNs by roleName (default: a placeholder with ``<account-id>``).
    """
    cfg = load_stack_config(stack, env, stacks_dir)
    for key, command in missing_user_values(stack, env, stacks_dir).items():  # the engine or the program refuses too
        raise ConfigError(f"{project_name(stack)}:{key}", f"not set: only you can give it (`pulumi up` refuses "
                          f"until it is set); {command}", str(stack_file(stack, env, stacks_dir)))
    return render_set(stack, env, cfg, reader_arns)


def write(rs: RenderSet, out: Path) -> list[Written]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Written] = []
    files = []
    for i, obj in enumerate(rs.objects):
        meta = obj["metadata"]
        ns = meta.get("namespace")
        fname = f"{i:02d}-{_slug(obj['kind'])}-{_slug(ns) + '-' if ns else ''}{_slug(meta['name'])}.yaml"
        (out / fname).write_text(_dump(obj))
        files.append(fname)
        written.append(Written(out / fname, obj["kind"], f"{ns + '/' if ns else ''}{meta['name']}"))
    if files:
        kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": files}
        (out / "kustomization.yaml").write_text(_dump(kust))
        written.append(Written(out / "kustomization.yaml", "Kustomization", "kustomization"))
    if rs.releases:
        helm = out / "helm"
        helm.mkdir(exist_ok=True)
        helm_files = []
        for i, obj in enumerate(flux_objects(rs.releases, rs.release_deps)):
            meta = obj["metadata"]
            fname = f"{i:02d}-{_slug(obj['kind'])}-{_slug(meta['name'])}.yaml"
            (helm / fname).write_text(_dump(obj))
            helm_files.append(fname)
            what = f"{meta['namespace']}/{meta['name']}"
            if obj["kind"] == "HelmRelease":
                what += f"@{obj['spec']['chart']['spec']['version']}"
            written.append(Written(helm / fname, obj["kind"], what))
        kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": helm_files}
        (helm / "kustomization.yaml").write_text(_dump(kust))
        written.append(Written(helm / "kustomization.yaml", "Kustomization", "helm/kustomization"))
    if rs.outputs:
        (out / "stack-outputs.yaml").write_text(_dump(rs.outputs))
        written.append(Written(out / "stack-outputs.yaml", "Stack outputs", rs.stack))
    if rs.aws:
        aws = out / "aws"
        aws.mkdir(exist_ok=True)
        for i, res in enumerate(rs.aws):
            name = res["spec"].get("node_group_name") or res["spec"].get("name")
            path = aws / f"{i:02d}-{_slug(res['type'].rsplit(':', 1)[1])}-{_slug(name)}.yaml"
            path.write_text(_dump(res))
            written.append(Written(path, res["type"], name))
    if rs.secrets or rs.prerequisites:
        doc: dict[str, Any] = {"secrets": rs.secrets}
        if rs.prerequisites:
            doc["prerequisites"] = rs.prerequisites
        (out / "secrets-required.yaml").write_text(_dump(doc))
        for s in rs.secrets:
            written.append(
                Written(
                    out / "secrets-required.yaml",
                    f"{s.get('kind', 'Secret')} (not rendered)",
                    f"{s['namespace']}/{s['name']}",
                )
            )
        for p in rs.prerequisites:
            ns = p.get("namespace")
            where = f"{ns + '/' if ns else ''}{p['name']}"
            written.append(Written(out / "secrets-required.yaml", f"{p['kind']} (prerequisite)", where))
    _prune(out, {w.path for w in written})
    return written


MANIFEST = ".tritonops-render"


def _prune(out: Path, current: set[Path]) -> None:
    """Remove files an earlier render wrote that this one did not (a deleted model service, say).

    Only files listed in the previous manifest are touched; anything else in ``out`` is left alone.
    """
    manifest = out / MANIFEST
    rel = sorted(p.relative_to(out).as_posix() for p in current)
    if manifest.is_file():
        for old in manifest.read_text().splitlines():
            path = out / old
            if old and old not in rel and path.is_file() and path.resolve().is_relative_to(out.resolve()):
                path.unlink()
    manifest.write_text("".join(f"{r}\n" for r in rel))


def render(stack: str, env: str, out: Path, stacks_dir: Path | None = None) -> list[Written]:
    return write(build(stack, env, stacks_dir), out)
