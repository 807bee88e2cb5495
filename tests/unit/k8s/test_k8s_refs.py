"""Every reference resolves: for every stack and committed stack file, each object (as rendered and as
registered under Pulumi mocks) names only objects that exist on its cluster.

What exists: the objects of every stack file deployed to the same cluster (cluster-aws's stack file,
and the platform and triton files whose ``cluster.clusterStack`` names it), the entries of their
``secrets-required.yaml`` (as ``tritonops render`` writes it), the CRDs of the charts the stacks install
(k8s_refs.CHART_KINDS, checked against the charts' CRD test data) and what Kubernetes itself
provides (k8s_refs.KUBERNETES_PROVIDED: each namespace's ``default`` ServiceAccount, the
system PriorityClasses). A dangling reference fails with the object and the field.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import k8s_refs as refs
import pytest
import yaml
from k8s_harness import STACKS_DIR, committed, k8s_objects, legacy_ingress, user_stacks
from tritonops.k8s import render
from tritonops.k8s.config import project_name
from tritonops.k8s.parse import parse_config
from tritonops.k8s.programs import render_set
from tritonops.k8s.stack_file import load_stack_config, read_stack_file

Obj = dict[str, Any]
DATA = Path(__file__).parent / "data"

STACK_FILES = sorted(
    (p.parent.name, p.name[len("Pulumi.") : -len(".yaml")]) for p in STACKS_DIR.glob("*/Pulumi.*.yaml")
)
IDS = [f"{s}-{e}" for s, e in STACK_FILES]


def cluster_of(stack: str, env: str) -> str:
    """Which cluster a stack file deploys to: cluster-aws's stack, by project/stack name, or a kubeconfig."""
    if stack == "cluster-aws":
        return f"{project_name('cluster-aws')}/{env}"
    src = load_stack_config(stack, env).cluster  # type: ignore[union-attr]
    if src.cluster_stack:
        return "/".join(src.cluster_stack.split("/")[-2:])
    return f"kubeconfig:{src.kubeconfig}:{src.context}"


@functools.cache
def rendered(stack: str, env: str, out: Path) -> tuple[list[Obj], list[Obj], list[str]]:
    """What ``tritonops render`` writes, read back: objects, secrets-required.yaml entries; and the charts."""
    render.render(stack, env, out, user_stacks())
    kust = out / "kustomization.yaml"
    files = yaml.safe_load(kust.read_text())["resources"] if kust.is_file() else []
    objs = [yaml.safe_load((out / f).read_text()) for f in files]
    req_file = out / "secrets-required.yaml"
    req = yaml.safe_load(req_file.read_text()) if req_file.is_file() else {}
    entries = [*(req.get("secrets") or []), *(req.get("prerequisites") or [])]
    charts = [r.chart for r in render.build(stack, env, user_stacks()).releases]  # helm/ holds them in Flux's form
    return objs, entries, charts


@functools.cache
def registered(stack: str, env: str) -> tuple[list[Obj], list[str]]:
    """What the stack program registers under mocks: Kubernetes objects and Helm charts."""
    mocks = committed(stack, env)
    charts = [str(r.inputs["chart"]) for r in mocks.of_type("kubernetes:helm.sh/v3:Release")]
    return k8s_objects(mocks), charts


@pytest.fixture(scope="module")
def render_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("render")


def _provided(objs: list[Obj], entries: list[Obj], charts: list[str]) -> list[refs.Provided]:
    namespaces = {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"}
    namespaces |= {str(o["metadata"].get("namespace")) for o in objs if o["metadata"].get("namespace")}
    namespaces |= {str(e["namespace"]) for e in entries if e.get("namespace")}
    return [
        *refs.provided_by_objects(objs, "a stack"),
        *refs.provided_by_required(entries),
        *refs.provided_by_charts(charts),
        *refs.kubernetes_provided(namespaces),
    ]


def _same_cluster(stack: str, env: str) -> list[tuple[str, str]]:
    here = cluster_of(stack, env)
    return [(s, e) for s, e in STACK_FILES if cluster_of(s, e) == here]


@pytest.mark.parametrize(("stack", "env"), STACK_FILES, ids=IDS)
def test_rendered_references_resolve(stack: str, env: str, render_root: Path) -> None:
    """``tritonops render``'s objects name only objects created by a render of the same cluster's stacks
    or listed in their secrets-required.yaml (the Secrets Pulumi would hold included)."""
    objs: list[Obj] = []
    entries: list[Obj] = []
    charts: list[str] = []
    for s, e in _same_cluster(stack, env):
        o, en, c = rendered(s, e, render_root / f"{s}-{e}")
        objs, entries, charts = objs + o, entries + en, charts + c
    mine = rendered(stack, env, render_root / f"{stack}-{env}")[0]
    lines = refs.dangling(refs.references(mine), _provided(objs, entries, charts))
    assert not lines, "\n".join(lines)


@pytest.mark.parametrize(("stack", "env"), STACK_FILES, ids=IDS)
def test_registered_references_resolve(stack: str, env: str, render_root: Path) -> None:
    """What ``pulumi up`` registers names only what the same cluster's programs register, or what the
    user creates (secrets-required.yaml entries with a command, prerequisites), never the Secrets only
    render lists (Pulumi creates those)."""
    objs: list[Obj] = []
    entries: list[Obj] = []
    charts: list[str] = []
    for s, e in _same_cluster(stack, env):
        o, c = registered(s, e)
        user = [x for x in rendered(s, e, render_root / f"{s}-{e}")[1] if "pulumiConfig" not in x]
        objs, entries, charts = objs + o, entries + user, charts + c
    mine = registered(stack, env)[0]
    assert mine or stack == "cluster-aws"
    lines = refs.dangling(refs.references(mine), _provided(objs, entries, charts))
    assert not lines, "\n".join(lines)


# --- the stacks' fixes: each was a dangling reference before ---------------------------------------


def _triton(env: str, services: list[Obj] | None = None) -> Any:
    raw, _ = read_stack_file("triton", env, user_stacks())  # with the user's release public key set
    if services is not None:
        raw = {**raw, "modelServices": services}
    return parse_config("triton", raw)


def _dev_services() -> list[Obj]:
    return [dict(s) for s in read_stack_file("triton", "dev", user_stacks())[0]["modelServices"]]


def _with_reader_secret() -> Any:
    """dev with static read keys (credentialsSecret) instead of its IRSA modelReader."""
    services = _dev_services()
    services[0] = {k: v for k, v in services[0].items() if k != "modelReader"}
    services[0]["release"] = {**services[0]["release"], "credentialsSecret": "tritonops-release-reader"}
    return _triton("dev", services)


@pytest.mark.parametrize("mode", ["gateway", "ingress"])
def test_dev_pods_name_three_objects_only_the_user_or_the_stack_creates(mode: str) -> None:
    """Without secrets-required.yaml's entries and the stack's trusted-keys ConfigMap, the dev pods'
    references to the release keys, the release reader and the way in (the contract's Gateway; in the legacy
    ingress mode the TLS Secret and the IngressClass) dangle, named by field."""
    cfg = _with_reader_secret()
    rs = render_set("triton", "dev", cfg if mode == "gateway" else legacy_ingress(cfg))
    keys_cm = [o for o in rs.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tritonops-release-keys"]
    assert len(keys_cm) == 1 and "-----BEGIN PUBLIC KEY-----" in keys_cm[0]["data"]["release.pub"]
    without = [o for o in rs.objects if o not in keys_cm]
    lines = refs.dangling(refs.references(rs.objects), _provided(without, [], ["kube-prometheus-stack", "keda"]))
    text = "\n".join(lines)
    assert (
        "Deployment triton/triton-vision spec.template.spec.volumes[4].configMap.name -> "
        "ConfigMap triton/tritonops-release-keys key 'release.pub'" in text
    )
    assert (
        "Deployment triton/triton-vision spec.template.spec.initContainers[0].env[1].valueFrom.secretKeyRef -> "
        "Secret triton/tritonops-release-reader key 'AWS_ACCESS_KEY_ID'" in text
    )
    if mode == "gateway":
        assert "HTTPRoute triton/triton-vision-http spec.parentRefs[0] -> Gateway gateway/inference" in text
        assert "GRPCRoute triton/triton-vision-grpc spec.parentRefs[0] -> Gateway gateway/inference" in text
        assert "BackendTrafficPolicy triton/triton-vision-wake apiVersion/kind -> CustomResourceDefinition " \
            "gateway.envoyproxy.io/BackendTrafficPolicy" in text
    else:
        assert "Ingress triton/triton-vision-http spec.tls[0].secretName -> Secret triton/dev-tritonops-example-com-tls" \
            in text
        assert "IngressClass nginx" in text
    # With them, nothing dangles.
    entries = rs.secrets + rs.prerequisites
    assert not refs.dangling(refs.references(rs.objects), _provided(rs.objects, entries, ["kube-prometheus-stack", "keda"]))


def test_secrets_required_gives_the_command_and_no_value() -> None:
    """In the legacy ingress mode the Ingresses' TLS Secret is the user's (gateway mode: the Gateway's, outside
    the stack's namespace, made in the walkthrough)."""
    rs = render_set("triton", "dev", legacy_ingress(_with_reader_secret()))
    by_name = {s["name"]: s for s in rs.secrets}
    reader = by_name["tritonops-release-reader"]
    assert reader["keys"] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert reader["command"] == (
        "kubectl create secret generic tritonops-release-reader --namespace triton "
        "--from-env-file=tritonops-release-reader.env"
    )
    tls = by_name["dev-tritonops-example-com-tls"]
    assert tls["command"].startswith("kubectl create secret tls dev-tritonops-example-com-tls --namespace triton ")
    assert set(tls["keys"]) == {"tls.crt", "tls.key"}
    assert "tritonops-release-keys" not in by_name  # created by the stack from publicKeys
    assert "triton-admin-api" in by_name and "command" not in by_name["triton-admin-api"]  # Pulumi creates it


def test_trusted_keys_without_public_keys_are_listed_with_their_command() -> None:
    services = _dev_services()
    rel = dict(services[0]["release"])
    rel["trustedKeys"] = {"configMap": "tritonops-release-keys", "keys": ["release.pub", "next.pub"]}
    services[0] = {**services[0], "release": rel}
    rs = render_set("triton", "dev", _triton("dev", services))
    assert not any(o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tritonops-release-keys" for o in rs.objects)
    entry = next(s for s in rs.secrets if s["name"] == "tritonops-release-keys")
    assert entry["kind"] == "ConfigMap" and entry["keys"] == ["next.pub", "release.pub"]
    assert entry["command"] == (
        "kubectl create configmap tritonops-release-keys --namespace triton "
        "--from-file=release.pub=./release.pub --from-file=next.pub=./next.pub"
    )
    assert not refs.dangling(
        refs.references(rs.objects), _provided(rs.objects, rs.secrets + rs.prerequisites, ["kube-prometheus-stack", "keda"])
    )
    rel["trustedKeys"] = {"secret": "release-keys"}
    rs = render_set("triton", "dev", _triton("dev", services))
    entry = next(s for s in rs.secrets if s["name"] == "release-keys")
    assert entry["kind"] == "Secret" and entry["command"].startswith("kubectl create secret generic release-keys ")


@pytest.mark.parametrize(
    ("trusted", "key", "message"),
    [
        (
            {"configMap": "k", "publicKeys": {"release.pub": "-----BEGIN PRIVATE KEY-----\nMC4CAQ\n-----END PRIVATE KEY-----"}},
            "publicKeys.release.pub",
            "not an Ed25519 public key PEM",
        ),
        ({"configMap": "k", "keys": ["a.pub"], "publicKeys": {"b.pub": "x"}}, "publicKeys", "must name the same keys"),
        ({"secret": "k", "publicKeys": {"release.pub": "x"}}, "publicKeys", "set configMap, not secret"),
    ],
)
def test_public_keys_are_checked(trusted: Obj, key: str, message: str) -> None:
    from tritonops.k8s.config import ConfigError

    services = _dev_services()
    services[0] = {**services[0], "release": {**services[0]["release"], "trustedKeys": trusted}}
    with pytest.raises(ConfigError) as exc:
        _triton("dev", services)
    assert exc.value.key == f"tritonops-triton:modelServices[0].release.trustedKeys.{key}"
    assert message in str(exc.value)


# --- the walker itself ----------------------------------------------------------------------------


def _pod(ns: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": ns},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], **spec}}},
    }


def test_walker_lists_every_kind_of_reference() -> None:
    dep = _pod(
        "a",
        serviceAccountName="sa",
        priorityClassName="pc",
        imagePullSecrets=[{"name": "pull"}],
        volumes=[
            {"name": "v1", "secret": {"secretName": "s1"}},
            {"name": "v2", "configMap": {"name": "c1", "items": [{"key": "k", "path": "k"}]}},
            {"name": "v3", "persistentVolumeClaim": {"claimName": "pvc"}},
            {"name": "v4", "projected": {"sources": [{"secret": {"name": "s2"}}, {"configMap": {"name": "c2"}}]}},
        ],
        initContainers=[{"name": "i", "envFrom": [{"secretRef": {"name": "s3"}}, {"configMapRef": {"name": "c3"}}]}],
    )
    dep["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s4", "key": "x"}}},
        {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "c4", "key": "y", "optional": True}}},
    ]
    ing = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "i", "namespace": "a"},
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"secretName": "tls"}],
            "rules": [{"http": {"paths": [{"backend": {"service": {"name": "svc", "port": {"number": 80}}}}]}}],
        },
    }
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "r", "namespace": "a"},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "g"}], "rules": [{"backendRefs": [{"name": "svc2", "port": 1}]}]},
    }
    got = {(r.field, str(r.target), r.key, r.optional) for r in refs.references([dep, ing, route])}
    p = "spec.template.spec"
    assert {
        (f"{p}.serviceAccountName", "ServiceAccount a/sa", None, False),
        (f"{p}.priorityClassName", "PriorityClass pc", None, False),
        (f"{p}.imagePullSecrets[0].name", "Secret a/pull", None, False),
        (f"{p}.volumes[0].secret.secretName", "Secret a/s1", None, False),
        (f"{p}.volumes[1].configMap.name", "ConfigMap a/c1", "k", False),
        (f"{p}.volumes[2].persistentVolumeClaim.claimName", "PersistentVolumeClaim a/pvc", None, False),
        (f"{p}.volumes[3].projected.sources[0].secret.name", "Secret a/s2", None, False),
        (f"{p}.volumes[3].projected.sources[1].configMap.name", "ConfigMap a/c2", None, False),
        (f"{p}.initContainers[0].envFrom[0].secretRef", "Secret a/s3", None, False),
        (f"{p}.initContainers[0].envFrom[1].configMapRef", "ConfigMap a/c3", None, False),
        (f"{p}.containers[0].env[0].valueFrom.secretKeyRef", "Secret a/s4", "x", False),
        (f"{p}.containers[0].env[1].valueFrom.configMapKeyRef", "ConfigMap a/c4", "y", True),
        ("spec.ingressClassName", "IngressClass nginx", None, False),
        ("spec.tls[0].secretName", "Secret a/tls", None, False),
        ("spec.rules[0].http.paths[0].backend.service.name", "Service a/svc", None, False),
        ("spec.parentRefs[0]", "Gateway g/gw", None, False),
        ("spec.rules[0].backendRefs[0]", "Service a/svc2", None, False),
        ("apiVersion/kind", "CustomResourceDefinition gateway.networking.k8s.io/HTTPRoute", None, False),
    } <= got


def test_cross_namespace_and_missing_keys_dangle() -> None:
    dep = _pod("apps", volumes=[{"name": "v", "configMap": {"name": "keys", "items": [{"key": "b.pub", "path": "b"}]}}])
    elsewhere = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keys", "namespace": "triton"}, "data": {}}
    lines = refs.dangling(refs.references([dep]), [*refs.provided_by_objects([elsewhere], "s"), *refs.kubernetes_provided(["apps"])])
    assert lines == [
        "Deployment apps/d spec.template.spec.volumes[0].configMap.name -> ConfigMap apps/keys key 'b.pub': "
        "not created by any stack nor listed in secrets-required.yaml",
        "Deployment apps/d metadata.namespace -> Namespace apps: not created by any stack nor listed in "
        "secrets-required.yaml",
    ] or sorted(lines) == sorted(
        [
            "Deployment apps/d metadata.namespace -> Namespace apps: not created by any stack nor listed in "
            "secrets-required.yaml",
            "Deployment apps/d spec.template.spec.volumes[0].configMap.name -> ConfigMap apps/keys key 'b.pub': "
            "not created by any stack nor listed in secrets-required.yaml",
        ]
    )
    here = {**elsewhere, "metadata": {"name": "keys", "namespace": "apps"}, "data": {"a.pub": "x"}}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}
    lines = refs.dangling(refs.references([dep]), [*refs.provided_by_objects([here, ns], "stack x"), *refs.kubernetes_provided(["apps"])])
    assert lines == [
        "Deployment apps/d spec.template.spec.volumes[0].configMap.name -> ConfigMap apps/keys key 'b.pub': "
        "stack x creates it without key 'b.pub' (keys: a.pub)"
    ]


def test_default_service_account_and_system_priority_classes_are_provided() -> None:
    dep = _pod("apps", priorityClassName="system-node-critical")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}
    assert not refs.dangling(refs.references([dep]), [*refs.provided_by_objects([ns], "s"), *refs.kubernetes_provided(["apps"])])
    assert refs.dangling(refs.references([dep]), refs.provided_by_objects([ns], "s"))  # the default SA is named


# --- chart -> kinds table, against what the stacks install -----------------------------------------


def test_chart_kinds_cover_every_chart_the_stacks_install(render_root: Path) -> None:
    charts = {c for s, e in STACK_FILES for c in rendered(s, e, render_root / f"{s}-{e}")[2]}
    charts |= {c for s, e in STACK_FILES for c in registered(s, e)[1]}
    assert charts, "no Helm release rendered"
    assert charts <= set(refs.CHART_KINDS), f"charts without a kinds entry: {charts - set(refs.CHART_KINDS)}"
    with pytest.raises(KeyError, match="not in k8s_refs.CHART_KINDS"):
        refs.provided_by_charts(["some-other-chart"])


@pytest.mark.parametrize(
    ("folder", "chart"),
    [("keda", "keda"), ("karpenter", "oci://public.ecr.aws/karpenter/karpenter")],
)
def test_chart_kinds_match_the_charts_crds(folder: str, chart: str) -> None:
    """The table names the kinds the pinned charts' CRDs define (CRD copies kept as test data)."""
    for path in sorted((DATA / folder).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = (crd["spec"]["group"], crd["spec"]["names"]["kind"])
        assert kind in refs.CHART_KINDS[chart], f"{path.name}: {kind} missing from CHART_KINDS[{chart!r}]"


def test_services_sharing_a_keys_config_map_give_it_the_same_keys(tmp_path: Path) -> None:
    from tritonops.k8s.config import ConfigError
    from tritonops.release_format.signing import keygen

    raw, _ = read_stack_file("triton", "prod", user_stacks())
    services = [dict(s) for s in raw["modelServices"]]
    rel = dict(services[1]["release"])
    rel["trustedKeys"] = {"configMap": "tritonops-release-keys", "keys": ["release.pub"]}  # no publicKeys (prod's)
    services[1] = {**services[1], "release": rel}
    cfg = parse_config("triton", {**raw, "modelServices": services})  # mounts the ConfigMap vision's keys make
    rs = render_set("triton", "prod", cfg)
    assert not any(s["name"] == "tritonops-release-keys" for s in rs.secrets)
    assert [o["metadata"]["name"] for o in rs.objects if o["kind"] == "ConfigMap"].count("tritonops-release-keys") == 1
    other = keygen(tmp_path / "other.key", tmp_path / "other.pub")[1].read_text()
    rel["trustedKeys"] = {"configMap": "tritonops-release-keys", "publicKeys": {"release.pub": other}}
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", {**raw, "modelServices": services})
    assert exc.value.key == "tritonops-triton:modelServices[1].release.trustedKeys.publicKeys"
    assert "modelServices[0]" in str(exc.value)
