"""docs/kubernetes.md's walkthrough, read in the order a user runs it: one creator per name, nothing used
before it is made (issue 43, failure 3).

Every command of the section "From an empty AWS account to a served model (dev)" (its console and text
blocks, continuation lines joined) is mapped to the named things it creates and needs:

- ``aws s3api create-bucket --bucket B``: creates bucket B;
- ``kubectl create namespace N``: creates Namespace N;
- ``kubectl create secret|configmap ... NAME --namespace N``: creates N/NAME, needs Namespace N;
- ``pulumi up`` in ``stacks/S``: creates what S renders (tritonops.k8s.programs.render_set of the dev stack
  file: its buckets, Namespaces, the Secrets it makes from Pulumi secret config) and needs the Secrets its
  pods mount or read that the user creates (its first up waits for them);
- ``tritonops preflight --stack S``: needs each Secret or ConfigMap it looks for now, i.e. those the user
  creates outside a namespace S creates itself (inside one, preflight says ``later``), and the values only
  the user gives that it reads (the release public key it verifies the channels with);
- ``tritonops release keygen PRIVATE PUBLIC``: creates the files PRIVATE and PUBLIC;
- ``pulumi config set [--secret] [--path] KEY ...`` in ``stacks/S``: sets config S:KEY (and with a path, the
  key it is in), and needs the file it reads (``< FILE``);
- ``pulumi up`` in ``stacks/S`` also needs each value and secret only the user gives
  (tritonops.k8s.contract: missing_user_values, user_secrets): set before the first up.

The walkthrough fails on a name with two creators, or on a step that needs a name no earlier step created.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tritonops.k8s import gateway
from tritonops.k8s.contract import missing_user_values, user_secrets
from tritonops.k8s.programs import render_set
from tritonops.k8s.stack_file import load_stack_config

ROOT = Path(__file__).resolve().parents[2]
K8S_DOC = ROOT / "docs" / "kubernetes.md"
WALKTHROUGH = "## From an empty AWS account to a served model (dev)"
ENV = "dev"


def commands(text: str) -> list[tuple[int, str]]:
    """(line, command) of every command in the section's fenced console/text blocks, in order."""
    start = text.index(WALKTHROUGH)
    end = text.index("\n## ", start + 1)
    first = text[:start].count("\n") + 1
    out: list[tuple[int, str]] = []
    fence: str | None = None
    pending: tuple[int, str] | None = None
    for n, line in enumerate(text[start:end].splitlines(), first):
        if line.startswith("```"):
            fence = None if fence is not None else (line[3:].strip() or "text")
            continue
        if fence not in ("console", "text"):
            continue
        if pending is not None:
            cmd = pending[1] + " " + line.strip()
        elif fence == "console" and line.startswith("$ "):
            pending, cmd = (n, ""), line[2:]
        elif fence == "text" and line.strip() and not line.startswith(" "):
            pending, cmd = (n, ""), line
        else:
            continue
        if cmd.endswith("\\"):
            pending = (pending[0], cmd[:-1].rstrip())
            continue
        out.append((pending[0], _strip_comment(cmd)))
        pending = None
    return out


def _strip_comment(cmd: str) -> str:
    return re.sub(r"\s+#\s.*$", "", cmd).strip()


@dataclass
class Walk:
    creators: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    stack: str | None = None

    def create(self, name: str, step: str) -> None:
        self.creators.setdefault(name, []).append(step)
        if len(self.creators[name]) == 2:
            self.problems.append(f"{name}: two creators: {self.creators[name][0]}; {step}")

    def set(self, name: str, step: str) -> None:
        """A config value: setting one again (another list item, a rotation) is no second creator."""
        self.creators.setdefault(name, [step])

    def need(self, name: str, step: str) -> None:
        if name not in self.creators:
            self.problems.append(f"{step} needs {name}, which no earlier step creates")


def _render(stack: str) -> Any:
    return render_set(stack, ENV, load_stack_config(stack, ENV), dashboards=False)


def created_by_up(stack: str) -> Iterator[str]:
    """The names the first ``pulumi up`` of the dev stack creates, from its render."""
    rs = _render(stack)
    for a in rs.aws:
        if a["type"] == "aws:s3/bucket:Bucket":
            yield f"bucket {a['spec']['name']}"
    for o in rs.objects:
        meta = o.get("metadata") or {}
        if o.get("kind") == "Namespace":
            yield f"Namespace {meta['name']}"
        elif o.get("kind") in ("Secret", "ConfigMap") and meta.get("namespace"):
            yield f"{o['kind']} {meta['namespace']}/{meta['name']}"
    for s in rs.secrets:
        if "command" not in s:  # made by the stack from Pulumi secret config
            yield f"{s.get('kind', 'Secret')} {s['namespace']}/{s['name']}"


def _pod_refs(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(kind, name) of each Secret and ConfigMap a pod template mounts or reads."""
    if isinstance(obj, dict):
        for key, kind, name_key in (("secret", "Secret", "secretName"), ("secretKeyRef", "Secret", "name"),
                                    ("secretRef", "Secret", "name"), ("configMap", "ConfigMap", "name"),
                                    ("configMapKeyRef", "ConfigMap", "name"), ("configMapRef", "ConfigMap", "name")):
            ref = obj.get(key)
            if isinstance(ref, dict) and name_key in ref:
                yield kind, str(ref[name_key])
        for v in obj.values():
            yield from _pod_refs(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _pod_refs(v)


def needed_by_up(stack: str) -> Iterator[str]:
    """The user's Secrets and ConfigMaps the stack's pods mount or read: its first up waits for them."""
    rs = _render(stack)
    user = {(s.get("kind", "Secret"), s["name"]): s["namespace"] for s in rs.secrets if "command" in s}
    for o in rs.objects:
        if o.get("kind") in ("Deployment", "CronJob"):
            for kind, name in _pod_refs(o.get("spec") or {}):
                if (kind, name) in user:
                    yield f"{kind} {user[(kind, name)]}/{name}"


def needed_by_preflight(stack: str) -> Iterator[str]:
    """What ``tritonops preflight --stack S`` looks for now among the user's objects: those outside the
    namespaces the stack creates itself (inside one, it says later)."""
    rs = _render(stack)
    own = {o["metadata"]["name"] for o in rs.objects if o.get("kind") == "Namespace"}
    for s in rs.secrets:
        if "command" in s and s["namespace"] not in own:
            yield f"{s.get('kind', 'Secret')} {s['namespace']}/{s['name']}"


def user_config(stack: str) -> Iterator[str]:
    """The config only the user gives that the stack's dev file lacks: the first ``pulumi up`` refuses without it."""
    for key in [*missing_user_values(stack, ENV), *user_secrets(stack)]:
        yield f"config {stack}:{key}"


def _option(argv: list[str], *names: str) -> str | None:
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def walk(cmds: list[tuple[int, str]]) -> Walk:
    w = Walk()
    for line, cmd in cmds:
        step = f"docs/kubernetes.md:{line}: {cmd[:70]}"
        for part in re.split(r"\s*(?:&&|;)\s*", cmd):
            try:
                argv = shlex.split(part)
            except ValueError:
                continue
            if not argv:
                continue
            if argv[0] == "cd" and len(argv) > 1:
                w.stack = Path(argv[1]).name
            elif argv[:3] == ["aws", "s3api", "create-bucket"]:
                w.create(f"bucket {_option(argv, '--bucket')}", step)
            elif argv[:3] == ["kubectl", "create", "namespace"]:
                w.create(f"Namespace {argv[3]}", step)
            elif argv[:3] == ["kubectl", "apply", "-f"] and argv[3] == gateway.MANIFEST:
                for o in gateway.objects():  # the cluster contract's Envoy Gateway manifest (run from the root)
                    if o["kind"] == "Namespace":
                        w.create(f"Namespace {o['metadata']['name']}", step)
            elif argv[:2] == ["kubectl", "create"] and argv[2] in ("secret", "configmap"):
                ns = _option(argv, "--namespace", "-n") or "default"
                name = argv[4] if argv[2] == "secret" else argv[3]
                w.need(f"Namespace {ns}", step)
                w.create(f"{'Secret' if argv[2] == 'secret' else 'ConfigMap'} {ns}/{name}", step)
            elif argv[:3] == ["tritonops", "release", "keygen"] and len(argv) >= 5:
                w.create(f"file {argv[3]}", step)
                w.create(f"file {argv[4]}", step)
            elif argv[:3] == ["pulumi", "config", "set"]:
                args = [a for a in argv[3:] if a not in ("--secret", "--path", "--plaintext")]
                if "<" in args:
                    w.need(f"file {args[args.index('<') + 1]}", step)
                w.set(f"config {w.stack}:{args[0]}", step)  # the value at a path, and the key it is in
                w.set(f"config {w.stack}:{re.split(r'[.[]', args[0], maxsplit=1)[0]}", step)
            elif argv[:2] == ["pulumi", "up"]:
                assert w.stack in ("cluster-aws", "platform", "triton"), f"{step}: pulumi up outside a stack folder"
                for name in [*needed_by_up(w.stack), *user_config(w.stack)]:
                    w.need(name, step)
                for name in created_by_up(w.stack):
                    w.create(name, step)
            elif argv[:2] == ["tritonops", "preflight"]:
                stack = _option(argv, "--stack")
                assert stack is not None
                for name in needed_by_preflight(stack):
                    w.need(name, step)
                for key in missing_user_values(stack, ENV):
                    if "publicKeys" in key:  # it verifies each channel with the key the user sets
                        w.need(f"config {stack}:{key}", step)
    return w


def test_the_walkthrough_has_one_creator_per_name_and_makes_each_before_its_use() -> None:
    cmds = commands(K8S_DOC.read_text())
    assert sum(c.startswith("pulumi up") for _, c in cmds) == 3  # cluster-aws, platform, triton
    w = walk(cmds)
    assert w.problems == []
    assert {"bucket tritonops-releases-dev", "Namespace triton", "Secret triton/triton-admin-api"} <= set(w.creators)


# The walkthrough before issue 43: the bucket and the namespace by hand, the Secrets before the stack's up.
OLD = f"""{WALKTHROUGH}

```text
aws s3api create-bucket --bucket tritonops-releases-dev --region us-west-2 \\
  --create-bucket-configuration LocationConstraint=us-west-2
cd stacks/cluster-aws && pulumi stack init dev
pulumi up
tritonops preflight --stack platform --env dev        # exit 0 before the platform's pulumi up
cd ../platform && pulumi stack init dev
pulumi up --policy-pack ../../policies/tritonops
kubectl create namespace triton
kubectl create secret generic tritonops-release-reader --namespace triton \\
  --from-env-file=tritonops-release-reader.env
tritonops preflight --stack triton --env dev          # exit 0: nothing missing
cd ../triton && pulumi stack init dev
pulumi up
```

## next
"""


def test_it_finds_two_creators_and_a_use_before_creation() -> None:
    w = walk(commands(OLD))
    assert any(p.startswith("bucket tritonops-releases-dev: two creators") for p in w.problems), w.problems
    assert any(p.startswith("Namespace triton: two creators") for p in w.problems), w.problems
    without_namespace = OLD.replace("kubectl create namespace triton\n", "")
    problems = walk(commands(without_namespace)).problems
    assert any("kubectl create secret generic tritonops-release-reader" in p and "needs Namespace triton" in p
               for p in problems), problems


@pytest.mark.parametrize("cmd", ["kubectl create secret tls x --namespace triton --cert=a --key=b"])
def test_a_secret_in_the_stacks_namespace_before_its_up_is_a_use_before_creation(cmd: str) -> None:
    text = K8S_DOC.read_text()
    first_stack = text.index("\ncd stacks/cluster-aws", text.index(WALKTHROUGH)) + 1  # a line of a text block
    doctored = text[:first_stack] + cmd + "\n" + text[first_stack:]
    problems = walk(commands(doctored)).problems
    assert any(p.endswith("needs Namespace triton, which no earlier step creates") for p in problems), problems


def _without(text: str, prefix: str) -> str:
    """The doc without the walkthrough's first line starting with ``prefix``."""
    line = next(ln for ln in text[text.index(WALKTHROUGH):].splitlines() if ln.startswith(prefix))
    return text.replace(line + "\n", "", 1)


def test_the_release_key_is_generated_and_set_before_the_triton_stack_uses_it() -> None:
    """Issue 43, failure 5: no stack file ships a public key, so the walkthrough sets the one keygen wrote
    (before preflight verifies the channels with it, and before the first up)."""
    text = K8S_DOC.read_text()
    key = 'config triton:modelServices[0].release.trustedKeys.publicKeys["release.pub"]'
    problems = walk(commands(_without(text, "pulumi config set --path 'modelServices[0]"))).problems
    assert any(p.endswith(f"needs {key}, which no earlier step creates") and "preflight" in p for p in problems)
    assert any(p.endswith(f"needs {key}, which no earlier step creates") and "pulumi up" in p for p in problems)
    problems = walk(commands(_without(text, "tritonops release keygen ~/"))).problems
    assert any("needs file ~/tritonops-keys/release.pub" in p for p in problems), problems
