"""Run a stack program under Pulumi mocks and capture what it registers (no CLI, no plugins).

``run_stack`` feeds the stack's committed ``Pulumi.<env>.yaml`` to the program through Pulumi's
own config machinery, runs the very ``__main__.py`` of the stack, waits on every resource's URN and
returns what the mocks captured. Integers come back from the engine as floats; ``as_ints`` turns
them back so captured objects compare equal to the builders' dicts.
"""

from __future__ import annotations

import functools
import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from tritonops.k8s.config import project_name

ROOT = Path(__file__).resolve().parents[3]
STACKS_DIR = ROOT / "stacks"
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
FAKE_KUBECONFIG = json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []})


@dataclass
class Captured:
    typ: str
    name: str
    inputs: dict[str, Any]
    urn: str = ""


@dataclass
class Mocks(pulumi.runtime.Mocks):
    resources: list[Captured] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        self.resources.append(Captured(args.typ, args.name, inputs))
        state = dict(inputs)
        if args.typ == "pulumi:pulumi:StackReference":
            state = {"name": inputs.get("name"), "outputs": {"kubeconfig": FAKE_KUBECONFIG}}
        elif args.typ == "aws:eks/cluster:Cluster":
            state |= {
                "arn": f"arn:aws:eks:us-west-2:111122223333:cluster/{inputs.get('name')}",
                "endpoint": "https://ABCDEF.gr7.us-west-2.eks.amazonaws.com",
                "certificateAuthority": {"data": "LS0tLS1CRUdJTi1DRVJU"},
                "identities": [{"oidcs": [{"issuer": "https://oidc.eks.us-west-2.amazonaws.com/id/ABCDEF"}]}],
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
        return {}

    def of_type(self, typ: str) -> list[Captured]:
        return [r for r in self.resources if r.typ == typ]


def stack_config(
    stack: str, env: str, overrides: dict[str, Any] | None = None, secrets: bool = True, omit: tuple[str, ...] = ()
) -> tuple[dict[str, str], list[str]]:
    """The stack file's config as the engine hands it to a program: every value a string."""
    doc = yaml.safe_load((STACKS_DIR / stack / f"Pulumi.{env}.yaml").read_text())
    raw = dict(doc["config"])
    prefix = project_name(stack) + ":"
    for key, value in (overrides or {}).items():
        full = key if ":" in key else prefix + key
        if value is None:
            raw.pop(full, None)
        else:
            raw[full] = value
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
) -> Mocks:
    """Run stacks/<stack>/__main__.py under mocks; every registration finished before it returns.
    ``secrets``: set the SECRETS of the stack, less the keys in ``omit``."""
    mocks = mocks if mocks is not None else Mocks()
    pulumi.runtime.set_mocks(mocks, project=project_name(stack), stack=env, preview=False)
    config, secret_keys = stack_config(stack, env, overrides, secrets, omit)
    pulumi.runtime.set_all_config(config, secret_keys)

    @pulumi.runtime.test
    def program() -> Any:
        import tritonops.k8s.stacks as stacks

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

    program()
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
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False)
    pulumi.runtime.set_all_config({}, [])

    @pulumi.runtime.test
    def program() -> Any:
        return pulumi.Output.all(*_urns(fn()))

    program()
    return mocks
