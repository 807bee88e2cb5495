"""``tritonops preflight``: the cluster contract's prerequisites, looked for on the live cluster.

From the stack's rendered objects (as ``render --check-config`` builds them) and
:mod:`tritonops.k8s.cluster_contract`, :func:`probes` lists what the cluster must already have before
the stack's ``pulumi up``, each with who provides it:

- the CRDs (group/version and resource) of every custom kind the stack renders that another stack
  or a prerequisite installs, read from the API's discovery documents (``/apis/<group>/<version>``);
- the StorageClass each PVC names (or a default one) and its CSI driver, the IngressClass each
  Ingress names, the Gateway the routes attach to and its GatewayClass;
- the VPC CNI's network-policy option (the ``aws-node`` DaemonSet's ``aws-eks-nodeagent`` container
  started with ``--enable-network-policy=true``) when the stack renders NetworkPolicies;
- the Secrets, ConfigMaps and PVCs ``secrets-required.yaml`` lists for the user to create (read as
  metadata only: no value comes over the wire). One creator per name (the cluster contract): one that
  lives in a namespace the stack itself creates can only be made after the stack's first ``pulumi up``
  created it, so while that namespace does not exist it is reported ``later`` (with its command), not
  missing: preflight's order is the docs' order;
- the triton stack's release channels, read from their stores and judged by the node's own check
  against the keys the pods will trust (:func:`tritonops.k8s.stacks.triton.bootstrap.check_channel`),
  unless ``TRITONOPS_CHANNEL_CHECK=off``; a wrong key is found here, not by pods waiting out their deadline;
- and, without the cluster, every image pinned to an all-zero placeholder digest.

Pure but for :func:`run`, which takes a :class:`tritonops.k8s.kubeapi.Client`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tritonops.k8s import cluster_contract as cc
from tritonops.k8s.config import ConfigError, StackConfig, TritonStackConfig, project_name
from tritonops.k8s.contract import locate
from tritonops.k8s.kubeapi import METADATA_ONLY, Client
from tritonops.k8s.labels import name_of
from tritonops.k8s.programs import render_set
from tritonops.k8s.rendered import RenderSet
from tritonops.k8s.stack_file import load_stack_config, stack_file
from tritonops.k8s.stacks.triton import bootstrap

Obj = dict[str, Any]
ZERO_DIGEST = re.compile(r"@sha256:0{64}$")
NODE_AGENT = "aws-eks-nodeagent"
NETWORK_POLICY_ARG = "--enable-network-policy=true"


@dataclass(frozen=True)
class Probe:
    """One prerequisite: ``what`` it is, ``needed_by`` which objects, who provides it, and how to look."""

    what: str
    needed_by: str
    provider: cc.Provider
    look: Callable[[Client], bool] | None  # None: known without the cluster (``ok``)
    ok: bool = True
    later: str | None = None  # not looked for yet: the step after which it can exist

    @property
    def command(self) -> str:
        p = self.provider
        if not p.stack:
            return p.command or ""
        up = f"cd stacks/{p.stack} && pulumi up ({p.name})"
        return f"{up}; on a cluster not made by that stack: {p.command}" if p.command else up


def _gv_has(group: str, version: str, plural: str) -> Callable[[Client], bool]:
    def look(c: Client) -> bool:
        status, doc = c.get(f"/apis/{group}/{version}")
        return status == 200 and any(r.get("name") == plural for r in (doc or {}).get("resources") or [])
    return look


def _exists(path: str, accept: str = "application/json") -> Callable[[Client], bool]:
    return lambda c: c.get(path, accept)[0] == 200


class Later(Exception):
    """A look's answer: not there, and not to be there yet (the message says after which step)."""


class Refused(Exception):
    """A look's answer: not usable, for the reason in the message (it replaces the probe's command)."""


def _in_own_namespace(stack: str, ns: str, path: str, accept: str) -> Callable[[Client], bool]:
    """An object the user creates in namespace ``ns``, which the stack's own ``pulumi up`` creates: looked for
    once the namespace exists; before, it is :class:`Later`."""
    def look(c: Client) -> bool:
        if c.get(f"/api/v1/namespaces/{ns}")[0] != 200:
            raise Later(f"after the first `pulumi up` of stack {stack} has created namespace {ns}")
        return c.get(path, accept)[0] == 200
    return look


# In-tree provisioners that Kubernetes hands to a CSI driver (CSI migration, on by default since 1.23).
MIGRATED_TO_CSI = {"kubernetes.io/aws-ebs": "ebs.csi.aws.com"}
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def _storage_class(c: Client, name: str | None) -> Obj | None:
    if name is not None:
        status, doc = c.get(f"/apis/storage.k8s.io/v1/storageclasses/{name}")
        return doc if status == 200 else None
    status, doc = c.get("/apis/storage.k8s.io/v1/storageclasses")
    items = (doc or {}).get("items") or [] if status == 200 else []
    return next((i for i in items if ((i.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS)
                 == "true"), None)


def _has_storage_class(name: str | None) -> Callable[[Client], bool]:
    return lambda c: _storage_class(c, name) is not None


def _csi_driver(name: str | None) -> Callable[[Client], bool]:
    """The CSI driver behind the StorageClass is registered (a StorageClass alone provisions nothing);
    a missing StorageClass is the other probe's finding."""
    def look(c: Client) -> bool:
        sc = _storage_class(c, name)
        if sc is None:
            return True
        driver = MIGRATED_TO_CSI.get(str(sc.get("provisioner")), str(sc.get("provisioner")))
        return c.get(f"/apis/storage.k8s.io/v1/csidrivers/{driver}")[0] == 200
    return look


def _network_policy_agent(c: Client) -> bool:
    status, doc = c.get("/apis/apps/v1/namespaces/kube-system/daemonsets/aws-node")
    if status != 200:
        return False
    containers = ((((doc or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return any(k.get("name") == NODE_AGENT and NETWORK_POLICY_ARG in (k.get("args") or []) for k in containers)


def _gateway_class(ns: str, name: str) -> Callable[[Client], bool]:
    def look(c: Client) -> bool:
        status, doc = c.get(f"/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/gateways/{name}")
        cls = ((doc or {}).get("spec") or {}).get("gatewayClassName") if status == 200 else None
        return bool(cls) and c.get(f"/apis/gateway.networking.k8s.io/v1/gatewayclasses/{cls}")[0] == 200
    return look


def _crd_probes(stack: str, objs: list[Obj]) -> list[Probe]:
    users: dict[tuple[str, cc.Provider], list[str]] = {}
    for o in objs:
        for need in cc.needs_of(o) or ():
            if need.what == "crd" and need.provider.stack != stack:  # a stack's own charts come with it
                users.setdefault((need.name, need.provider), [])
                if o["kind"] not in users[(need.name, need.provider)]:
                    users[(need.name, need.provider)].append(o["kind"])
    out = []
    for (name, provider), kinds in users.items():
        resource, version = name.rsplit("/", 1)
        plural, group = resource.split(".", 1)
        out.append(Probe(f"CRD {resource} {version}", ", ".join(kinds), provider, _gv_has(group, version, plural)))
    return out


def _class_probes(stack: str, cfg: StackConfig, objs: list[Obj]) -> list[Probe]:
    out = []
    for key, name in cc.implied_claims(stack, cfg):
        provider = cc.STORAGE_CLASSES.get(name or "", (cc.EBS_CSI, False))[0]
        what = f"StorageClass {name}" if name else "a default StorageClass"
        out.append(Probe(what, key, provider, _has_storage_class(name)))
        out.append(Probe(f"the CSI driver of {what}", key, provider, _csi_driver(name)))
    classes = sorted({str(o["spec"].get("ingressClassName")) for o in objs if o["kind"] == "Ingress"})
    for name in classes:
        provider = cc.INGRESS_CLASSES.get(name, (cc.INGRESS_NGINX, False))[0]
        out.append(Probe(f"IngressClass {name}", "Ingress", provider,
                         _exists(f"/apis/networking.k8s.io/v1/ingressclasses/{name}")))
    if any(o["kind"] == "NetworkPolicy" for o in objs):
        out.append(Probe(f"VPC CNI network policy ({NODE_AGENT} {NETWORK_POLICY_ARG})", "NetworkPolicy",
                         cc.VPC_CNI_POLICY, _network_policy_agent))
    return out


def _user_probes(rs: RenderSet) -> list[Probe]:
    out = []
    own = {o["metadata"]["name"] for o in rs.objects if o.get("kind") == "Namespace"}
    for s in rs.secrets:
        if "command" not in s:
            continue  # created by `pulumi up` from secret config
        kind = s.get("kind", "Secret")
        plural = {"Secret": "secrets", "ConfigMap": "configmaps"}[kind]
        where = f"/api/v1/namespaces/{s['namespace']}/{plural}/{s['name']}"
        look = (_in_own_namespace(rs.stack, s["namespace"], where, METADATA_ONLY) if s["namespace"] in own
                else _exists(where, METADATA_ONLY))
        out.append(Probe(f"{kind} {s['namespace']}/{s['name']}", s.get("note", "").split(":", 1)[0],
                         cc.Provider(f"{kind} the user creates", command=s["command"]), look))
    for p in rs.prerequisites:
        ns, name = p.get("namespace"), p["name"]
        if p["kind"] == "Gateway":
            out.append(Probe(f"Gateway {ns}/{name}", "HTTPRoute, GRPCRoute", cc.GATEWAY,
                             _exists(f"/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/gateways/{name}")))
            out.append(Probe(f"GatewayClass of Gateway {ns}/{name}", "HTTPRoute, GRPCRoute", cc.GATEWAY,
                             _gateway_class(str(ns), name)))
        elif p["kind"] == "PersistentVolumeClaim":
            out.append(Probe(f"PersistentVolumeClaim {ns}/{name}", p.get("note", ""),
                             cc.Provider("a PVC the user creates", command=p["check"]),
                             _exists(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}", METADATA_ONLY)))
    return out


def _digest_probes(cfg: StackConfig, objs: list[Obj], path: Path) -> list[Probe]:
    """One finding per model service whose image is pinned to the all-zero placeholder digest."""
    if not isinstance(cfg, TritonStackConfig):
        return []
    index = {name_of(s): i for i, s in enumerate(cfg.model_services)}
    seen: dict[tuple[str, str], list[str]] = {}
    for o in objs:
        if o["kind"] != "Deployment":
            continue
        pod = o["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            image = str(c.get("image", ""))
            if ZERO_DIGEST.search(image):
                svc = o["metadata"]["name"].removesuffix("-canary")
                seen.setdefault((svc, image.split("@", 1)[0]), []).append(f"{o['metadata']['name']}/{c['name']}")
    out = []
    for (svc, tag), containers in seen.items():
        key = f"{project_name('triton')}:modelServices[{index.get(svc, 0)}].image"
        line = locate(path, key)
        out.append(Probe(f"image digest of {svc}: all zeros, a placeholder ({', '.join(containers)})",
                         f"{path}{f':{line}' if line else ''}: {key}",
                         cc.Provider("the image's real digest",
                                     command=f"skopeo inspect --format '{{{{.Digest}}}}' docker://{tag}"),
                         None, ok=False))
    return out


def _channel_probes(cfg: StackConfig, path: Path) -> list[Probe]:
    """Each pull-mode channel of the triton stack: it exists and the node's own check trusts its pointer
    (looked at when the cluster answers: it needs the store, not the cluster)."""
    if not isinstance(cfg, TritonStackConfig) or not bootstrap.enabled():
        return []
    out = []
    for i, field, channel in bootstrap.channels(cfg):
        svc = cfg.model_services[i]
        assert svc.release is not None

        def look(_: Client, i: int = i, field: str = field, channel: str = channel) -> bool:
            try:
                bootstrap.check_channel(cfg, i, field, channel, str(path))
            except ConfigError as exc:
                raise Refused(str(exc)) from None
            return True

        out.append(Probe(f"channel {channel} of {svc.release.store}, signed with a key the pods trust",
                         f"{svc.name}'s release agent", cc.Provider(
                             "a release published to the channel, signed with a trusted key",
                             command=bootstrap.publish_command(svc, channel)), look))
    return out


def probes(stack: str, env: str, stacks_dir: Path | None = None) -> list[Probe]:
    """What the stack needs on the cluster; the commands name the cluster-aws stack's cluster where known."""
    cfg = load_stack_config(stack, env, stacks_dir)
    rs = render_set(stack, env, cfg, dashboards=False)
    objs = rs.objects
    found = [*_digest_probes(cfg, objs, stack_file(stack, env, stacks_dir)), *_crd_probes(stack, objs),
             *_class_probes(stack, cfg, objs), *_user_probes(rs),
             *_channel_probes(cfg, stack_file(stack, env, stacks_dir))]
    aws = cc.cluster_of(stack, env, cfg, stacks_dir).aws
    if aws is None:
        return found
    return [replace(p, provider=replace(p.provider, command=p.provider.command.replace(
        "--cluster-name CLUSTER", f"--cluster-name {aws.cluster_name}"))) if p.provider.command else p for p in found]


def offline(found: list[Probe]) -> list[Probe]:
    """What is known without the cluster (the placeholder digests)."""
    return [p for p in found if p.look is None]


def run(found: list[Probe], api: Client) -> list[Probe]:
    """Each probe with ``ok`` from the live cluster (:class:`~tritonops.k8s.kubeapi.Unreachable` propagates)."""
    return [_judge(p, api) for p in found]


def _judge(p: Probe, api: Client) -> Probe:
    if p.look is None:
        return p
    try:
        return replace(p, ok=p.look(api))
    except Later as exc:
        return replace(p, ok=True, later=str(exc))
    except Refused as exc:
        return replace(p, ok=False, provider=replace(p.provider, command=str(exc)))
