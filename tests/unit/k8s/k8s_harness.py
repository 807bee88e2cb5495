"""Run a stack program under Pulumi mocks and capture what it registers (no CLI, no plugins).

``run_stack`` feeds the stack's committed ``Pulumi.<env>.yaml`` to the program through Pulumi's
own config machinery, runs the very ``__main__.py`` of the stack, waits on every resource's URN and
returns what the mocks captured. Integers come back from the engine as floats; ``as_ints`` turns
them back so captured objects compare equal to the builders' dicts.
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import os
import runpy
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime.mocks import MockMonitor
from tritonops.k8s.config import ConfigError, TritonStackConfig, project_name
from tritonops.k8s.contract import missing_user_values, path_parts
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.triton import required
from tritonops.k8s.stacks.triton.bootstrap import CHECK_ENV as CHANNEL_CHECK_ENV
from tritonops.release_format import signing

ROOT = Path(__file__).resolve().parents[3]
STACKS_DIR = ROOT / "stacks"
CLUSTER_SECURITY_GROUP = "sg-0c1a5e77e5ec0a9b1"  # the mocks' EKS cluster: the security group EKS creates
SECRETS = {
    "tritonops-triton:adminApiToken": "test-admin-token",
    "tritonops-platform:grafanaAdminPassword": "test-grafana-password",
    "tritonops-platform:alertmanagerSecrets": json.dumps(
        {
            "slackDev": "https://hooks.slack.example/dev",
            "slackOps": "https://hooks.slack.example/ops",
            "pagerdutyRoutingKey": "pd-routing-key-0123",
        }
    ),
}
# Every committed stack file, (stack, env): stacks are found, never listed (any stack name is one).
STACK_FILES = [
    (p.parent.name, p.name[len("Pulumi.") : -len(".yaml")])
    for p in sorted(STACKS_DIR.glob("*/Pulumi.*.yaml"))
    if (p.parent / "Pulumi.yaml").is_file()
]


def envs(stack: str = "triton") -> list[str]:
    """The committed stack files of a stack (sorted env names)."""
    return [e for s, e in STACK_FILES if s == stack]


FAKE_KUBECONFIG = json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []})


def cluster_outputs(stack_name: str) -> dict[str, Any]:
    """What a cluster-aws stack ``org/tritonops-cluster-aws/<env>`` exports, as far as its committed
    stack file decides it (modelReaders' ARNs take the mocks' account 111122223333)."""
    env = stack_name.rsplit("/", 1)[-1]
    path = STACKS_DIR / "cluster-aws" / f"Pulumi.{env}.yaml"
    readers = yaml.safe_load(path.read_text())["config"].get("tritonops-cluster-aws:modelReaders", []) if path.is_file() else []
    return {
        "kubeconfig": FAKE_KUBECONFIG,
        "modelReaders": {
            r["roleName"]: {
                "arn": f"arn:aws:iam::111122223333:role/{r['roleName']}",
                "namespace": r.get("namespace", "triton"),
                "serviceAccount": r["serviceAccount"],
                "bucket": r["bucket"],
                "prefix": r.get("prefix", ""),
            }
            for r in readers
        },
    }


@dataclass
class Captured:
    typ: str
    name: str
    inputs: dict[str, Any]
    urn: str = ""
    # Resource options the engine receives (the mocks' own args leave them out): RecordingMonitor.
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    delete_before_replace: bool = False


@dataclass
class Mocks(pulumi.runtime.Mocks):
    resources: list[Captured] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        self.resources.append(Captured(args.typ, args.name, inputs))
        state = dict(inputs)
        if args.typ == "pulumi:pulumi:StackReference":
            state = {"name": inputs.get("name"), "outputs": cluster_outputs(str(inputs.get("name")))}
        elif args.typ == "aws:eks/cluster:Cluster":
            state |= {
                "arn": f"arn:aws:eks:us-west-2:111122223333:cluster/{inputs.get('name')}",
                "endpoint": "https://ABCDEF.gr7.us-west-2.eks.amazonaws.com",
                "certificateAuthority": {"data": "LS0tLS1CRUdJTi1DRVJU"},
                "identities": [{"oidcs": [{"issuer": "https://oidc.eks.us-west-2.amazonaws.com/id/ABCDEF"}]}],
                "vpcConfig": {**inputs.get("vpcConfig", {}), "clusterSecurityGroupId": CLUSTER_SECURITY_GROUP},
            }
        elif args.typ in ("aws:iam/role:Role", "aws:iam/openIdConnectProvider:OpenIdConnectProvider"):
            state |= {"arn": f"arn:aws:iam::111122223333:role/{args.name}", "name": args.name}
        elif args.typ == "aws:sqs/queue:Queue":
            state |= {
                "arn": f"arn:aws:sqs:us-west-2:111122223333:{inputs.get('name')}",
                "url": f"https://sqs.us-west-2.amazonaws.com/111122223333/{inputs.get('name')}",
            }
        elif args.typ == "kubernetes:helm.sh/v3:Release":
            state |= {"status": {"status": "deployed"}}
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": "111122223333", "arn": "arn:aws:iam::111122223333:user/ci", "userId": "AIDA", "id": "1"}
        return {}

    def of_type(self, typ: str) -> list[Captured]:
        return [r for r in self.resources if r.typ == typ]


class RecordingMonitor(MockMonitor):
    """The mocks' monitor, also recording each registration's customTimeouts and deleteBeforeReplace."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.recording = mocks

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method's name
        response = super().RegisterResource(request)
        for r in reversed(self.recording.resources):
            if r.typ == request.type and r.name == request.name:
                t = request.customTimeouts
                r.custom_timeouts = {k: getattr(t, k) for k in ("create", "update", "delete") if getattr(t, k)}
                r.delete_before_replace = bool(request.deleteBeforeReplace)
                break
        return response


# What a user sets before the first `pulumi up` (Pulumi.yaml template.config, no default: the engine refuses
# without them; no stack file ships them): `pulumi config set --path 'subnetIds[0]' ...` in each stack.
USER_VALUES: dict[str, dict[str, Any]] = {
    env: {"tritonops-cluster-aws:subnetIds": [f"subnet-0{env[:3]}{i:013x}" for i in range(1, 4 if env == "prod" else 3)],
          **({} if env == "prod" else {"tritonops-cluster-aws:publicAccessCidrs": ["10.20.0.0/16"]})}
    for env in ("dev", "staging", "prod")
}


@functools.cache
def release_keys() -> Path:
    """The folder where this test run's release keys are, as the user's shell has them after
    `tritonops release keygen release-signing.key release.pub` (the project's own keygen, once per run;
    removed at exit): no key pair is committed, and no stack file ships a public key."""
    keys = Path(tempfile.mkdtemp(prefix="tritonops-release-keys-"))
    atexit.register(shutil.rmtree, keys, True)
    signing.keygen(keys / "release-signing.key", keys / "release.pub")
    return keys


def set_path(config: dict[str, Any], key: str, value: Any) -> None:
    """`pulumi config set --path KEY VALUE` on a config map (full keys): the maps on the way are made."""
    first, *rest = path_parts(key)
    if not rest:
        config[str(first)] = value
        return
    node = config.setdefault(str(first), {} if isinstance(rest[0], str) else [])
    for part, following in zip(rest, [*rest[1:], None], strict=True):
        if following is None:
            node[part] = value
        elif isinstance(node, dict):
            node = node.setdefault(part, {} if isinstance(following, str) else [])
        else:
            node = node[part]


def run_config_set(config: dict[str, Any], command: str, cwd: Path) -> None:
    """Run a printed `pulumi config set --path 'PATH' < FILE` (contract.missing_user_values) on a config map of
    project ``tritonops-triton``, in folder ``cwd``: Pulumi reads the piped file whole, less its trailing
    newline (cmdutil.RemoveTrailingNewline)."""
    args = shlex.split(command)
    assert args[:4] == ["pulumi", "config", "set", "--path"] and args[5] == "<" and len(args) == 7, command
    value = (cwd / args[6]).read_text()
    set_path(config, f"{project_name('triton')}:{args[4]}", value[:-1] if value.endswith("\n") else value)


def configured_stacks(dest: Path) -> Path:
    """A copy of stacks/ whose cluster-aws files hold USER_VALUES and whose triton files the public key of
    release_keys(), as `pulumi config set` writes them."""
    shutil.copytree(STACKS_DIR, dest / "stacks", ignore=shutil.ignore_patterns("venv", "__pycache__"))
    for env, values in USER_VALUES.items():
        path = dest / "stacks" / "cluster-aws" / f"Pulumi.{env}.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["config"].update(values)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for path in sorted((dest / "stacks" / "triton").glob("Pulumi.*.yaml")):
        env = path.name[len("Pulumi.") : -len(".yaml")]
        doc = yaml.safe_load(path.read_text())
        for command in missing_user_values("triton", env, dest / "stacks").values():
            run_config_set(doc["config"], command, release_keys())
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest / "stacks"


@functools.cache
def user_stacks() -> Path:
    """configured_stacks in a folder of this test run (removed at exit): the stacks as a user has set them."""
    tmp = Path(tempfile.mkdtemp(prefix="tritonops-stacks-"))
    atexit.register(shutil.rmtree, tmp, True)
    return configured_stacks(tmp)


def set_mocks(mocks: Mocks, project: str, stack: str) -> None:
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=RecordingMonitor(mocks))


def with_user_keys(raw: dict[str, Any], env: str) -> dict[str, Any]:
    """A triton config map (full keys) with each trusted key only the user gives (required.user_values) set
    by its printed command from release_keys(); as it was when it does not parse (the program says why)."""
    prefix = project_name("triton") + ":"
    try:
        cfg = parse_config("triton", {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}, env=env)
    except ConfigError:
        return raw
    assert isinstance(cfg, TritonStackConfig)
    out = copy.deepcopy(raw)
    for command in required.user_values(cfg).values():
        run_config_set(out, command, release_keys())
    return out


def stack_config(
    stack: str, env: str, overrides: dict[str, Any] | None = None, secrets: bool = True, omit: tuple[str, ...] = (),
    user_keys: bool = True,
) -> tuple[dict[str, str], list[str]]:
    """The stack file's config as the engine hands it to a program: every value a string. ``user_keys``: the
    triton file's trusted public keys only the user gives set (with_user_keys), as after the user's commands."""
    doc = yaml.safe_load((STACKS_DIR / stack / f"Pulumi.{env}.yaml").read_text())
    raw = dict(doc["config"])
    prefix = project_name(stack) + ":"
    raw.update({k: v for k, v in USER_VALUES.get(env, {}).items() if k.startswith(prefix)})
    for key, value in (overrides or {}).items():
        full = key if ":" in key else prefix + key
        if value is None:
            raw.pop(full, None)
        else:
            raw[full] = value
    if stack == "triton" and user_keys:
        raw = with_user_keys(raw, env)
    # As the engine does (pkg/workspace/config.go mergeConfig): Pulumi.yaml's defaults for the keys left unset.
    for key, spec in (yaml.safe_load((STACKS_DIR / stack / "Pulumi.yaml").read_text()).get("config") or {}).items():
        full = key if ":" in key else prefix + key
        if isinstance(spec, dict) and spec.get("default") is not None and full not in raw:
            raw[full] = spec["default"]
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    secret_keys = []
    if secrets:
        for k, v in SECRETS.items():
            if k.startswith(prefix) and k not in omit:
                config[k] = v
                secret_keys.append(k)
    return config, secret_keys


def _urns(value: Any) -> list[pulumi.Output[str]]:
    if isinstance(value, pulumi.Resource):
        return [value.urn]
    if isinstance(value, dict):
        return [u for v in value.values() for u in _urns(v)]
    if isinstance(value, list | tuple):
        return [u for v in value for u in _urns(v)]
    return []


def run_program(
    stack: str,
    env: str,
    overrides: dict[str, Any] | None = None,
    secrets: bool = True,
    mocks: Mocks | None = None,
    omit: tuple[str, ...] = (),
    check_channels: bool = False,
    user_keys: bool = True,
) -> Mocks:
    """Run stacks/<stack>/__main__.py under mocks; every registration finished before it returns.
    ``secrets``: set the SECRETS of the stack, less the keys in ``omit``. ``check_channels``: let the
    triton program read its release stores (tritonops.k8s.stacks.triton.bootstrap; off here: the stores of the
    committed files are not reachable from tests). ``user_keys``: see stack_config."""
    mocks = mocks if mocks is not None else Mocks()
    set_mocks(mocks, project_name(stack), env)
    config, secret_keys = stack_config(stack, env, overrides, secrets, omit, user_keys)
    pulumi.runtime.set_all_config(config, secret_keys)

    @pulumi.runtime.test
    def program() -> Any:
        import tritonops.k8s.programs as stacks

        created: dict[str, Any] = {}
        original = stacks.run

        def recording_run(name: str) -> dict[str, Any]:
            created.update(original(name))
            return created

        stacks.run = recording_run
        try:
            runpy.run_path(str(STACKS_DIR / stack / "__main__.py"), run_name="__main__")
        finally:
            stacks.run = original
        return pulumi.Output.all(*_urns(created))

    saved = os.environ.get(CHANNEL_CHECK_ENV)
    if not check_channels:
        os.environ[CHANNEL_CHECK_ENV] = "off"
    else:
        os.environ.pop(CHANNEL_CHECK_ENV, None)
    try:
        program()
    finally:
        if saved is None:
            os.environ.pop(CHANNEL_CHECK_ENV, None)
        else:
            os.environ[CHANNEL_CHECK_ENV] = saved
    return mocks


@functools.cache
def committed(stack: str, env: str) -> Mocks:
    """Cached run of a stack with its committed config (the program is deterministic)."""
    return run_program(stack, env)


def as_ints(value: Any) -> Any:
    """Floats that are whole numbers back to ints (the engine turns every number into a float)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_ints(v) for v in value]
    return value


def k8s_objects(mocks: Mocks) -> list[dict[str, Any]]:
    """Captured Kubernetes objects (not providers or Helm releases) as plain dicts."""
    out = []
    for r in mocks.resources:
        if r.typ.startswith("kubernetes:") and "apiVersion" in r.inputs and r.typ != "kubernetes:helm.sh/v3:Release":
            out.append(as_ints(r.inputs))
    return out


SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value on the wire


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270"


def unwrap(value: Any) -> Any:
    return value["value"] if is_secret(value) else value


def run_fn(fn: Any, project: str = "tritonops-test", stack: str = "dev") -> Mocks:
    """Run ``fn`` (which creates resources and returns them) under fresh mocks; wait on their URNs."""
    mocks = Mocks()
    set_mocks(mocks, project, stack)
    pulumi.runtime.set_all_config({}, [])

    @pulumi.runtime.test
    def program() -> Any:
        return pulumi.Output.all(*_urns(fn()))

    program()
    return mocks


def direct_prod_services() -> list[dict[str, Any]]:
    """The prod example's model services in the modes where Triton reads its models itself (no release
    agent): vision from s3:// with its IRSA modelReader, embeddings from a PVC in poll mode. The
    committed prod example uses the release flow; tests of the direct modes start from these."""
    from tritonops.k8s.stack_file import read_stack_file

    services = [dict(s) for s in read_stack_file("triton", "prod")[0]["modelServices"]]
    vision, embeddings = services[0], services[1]
    vision.pop("release", None)
    vision["modelRepository"] = {"type": "s3", "uri": "s3://tritonops-models-prod/vision", "region": "us-west-2"}
    vision["modelControlMode"] = "explicit"
    for key in ("release", "modelReader"):
        embeddings.pop(key, None)
    embeddings["modelRepository"] = {"type": "pvc", "claimName": "embeddings-models"}
    embeddings["modelControlMode"] = "poll"
    embeddings["repositoryPollSecs"] = 60
    return services


def strict_schema(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` on every object that lists its properties."""
    if isinstance(schema, dict):
        out = {k: strict_schema(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    return schema


def triton_config(env: str = "prod") -> TritonStackConfig:
    """The committed triton stack file of ``env``, parsed."""
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def direct_config() -> TritonStackConfig:
    """prod with Triton reading its models itself (s3:// and a PVC), as before the release flow."""
    raw = {**read_stack_file("triton", "prod")[0], "modelServices": direct_prod_services()}
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def container(dep: dict[str, Any]) -> dict[str, Any]:
    """A Deployment's first (Triton) container."""
    return dep["spec"]["template"]["spec"]["containers"][0]


def container_args(dep: dict[str, Any]) -> dict[str, list[str]]:
    """Triton's ``--key=value`` arguments, by key (a key may repeat)."""
    out: dict[str, list[str]] = {}
    for a in container(dep)["args"][1:]:
        k, _, v = a.partition("=")
        out.setdefault(k, []).append(v)
    return out


def legacy_ingress(cfg: TritonStackConfig) -> TritonStackConfig:
    """``cfg`` switched to the legacy ingress-nginx mode (``ingress.mode: ingress``, IngressClass nginx, the TLS
    Secret ``<hostSuffix with dashes>-tls``) as the dev and staging files were before Gateway API became the
    default way in: for the tests of that still supported mode."""
    suffix = cfg.ingress.host_suffix or "tritonops.example.com"
    ingress = cfg.ingress.model_copy(update={
        "mode": "ingress", "class_name": "nginx", "tls_secret": f"{suffix.replace('.', '-')}-tls",
        "gateway_name": None, "gateway_namespace": None,
    })
    return cfg.model_copy(update={"ingress": ingress})




def legacy_ingress_raw(ingress: dict[str, Any]) -> dict[str, Any]:
    """A stack file's ``ingress`` map switched to the legacy ingress-nginx mode, as :func:`legacy_ingress` does."""
    suffix = ingress.get("hostSuffix") or "tritonops.example.com"
    return {"mode": "ingress", "className": "nginx", "hostSuffix": suffix, "tlsSecret": f"{suffix.replace('.', '-')}-tls"}
