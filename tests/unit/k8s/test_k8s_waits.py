"""Every wait of `pulumi up` bounded and chosen (tritonops.k8s.waits): the derivation, and that every
object the Kubernetes provider waits for carries a timeout or pulumi.com/skipAwait in the real stacks."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from k8s_harness import STACK_FILES, STACKS_DIR, as_ints, committed, k8s_objects, legacy_ingress, triton_config
from tritonops.cli.k8s import render as render_cmd
from tritonops.k8s import waits
from tritonops.k8s.stacks.triton import objects as triton
from typer.testing import CliRunner

AWAITED = {
    "kubernetes:apps/v1:Deployment",
    "kubernetes:core/v1:Service",
    "kubernetes:networking.k8s.io/v1:Ingress",
}


def _objs(env: str, legacy: bool = False) -> list[dict[str, Any]]:
    """``legacy``: in the legacy ingress-nginx mode (dev and staging ship in gateway mode)."""
    cfg = legacy_ingress(triton_config(env)) if legacy else triton_config(env)
    return [o for svc in cfg.model_services for o in triton.service_objects(cfg, svc)]


def _find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def test_pod_budget_adds_node_pull_sync_startup_gate() -> None:
    vision = _find(_objs("prod"), "Deployment", "triton-vision")
    parts = waits.pod_ready_budget(vision["spec"]["template"]["spec"])
    # prod vision: a GPU pod (new node), the 24.10 Triton image (8 GiB at 50 MiB/s), a 20Gi releases
    # emptyDir synced at 100 MiB/s, the 60 x 10 s startup probe, the agent's golden gate.
    assert parts == {"node": 420, "pull": 164, "sync": 205, "startup": 600, "gate": 120, "ready": 10, "slack": 60}
    assert vision["spec"]["progressDeadlineSeconds"] == sum(parts.values()) == 1579
    cpu_pod = copy.deepcopy(vision["spec"]["template"]["spec"])
    for c in cpu_pod["containers"]:
        c.get("resources", {}).get("requests", {}).pop("nvidia.com/gpu", None)
    assert waits.pod_ready_budget(cpu_pod)["node"] == 0  # no GPU: no node to wait for


def test_plan_create_one_pod_update_every_step_to_keda_max() -> None:
    objs = _objs("prod")
    plan = waits.plan(objs)
    vision = plan[("Deployment", "triton", "triton-vision")]
    # create: the pods start together; update: spread (maxSurge 0, maxUnavailable 1) up to KEDA's 10.
    assert (vision.create_s, vision.update_s, vision.skip) == (1579, 1579 * 10, False)
    assert vision.custom_timeouts() == {"create": "1579s", "update": "15790s"}
    # the Service waits for the same pods' endpoints
    assert plan[("Service", "triton", "triton-vision")].create_s == 1579
    assert {k for k in plan} >= {("Deployment", "triton", "triton-vision"), ("Service", "triton", "triton-vision")}


def test_canary_and_its_routes_skip_await_ingress_waits_for_load_balancer() -> None:
    objs = _objs("dev", legacy=True)  # dev in the legacy ingress mode, a canary track
    plan = waits.plan(objs)
    canary = [o for o in objs if o["metadata"]["name"].endswith("-canary") and o["kind"] in ("Deployment", "Service")]
    assert canary
    for o in canary:
        assert plan[waits.key(o)].skip
        assert o["metadata"]["annotations"][waits.SKIP_AWAIT] == "true"
    stable_ingresses = [
        o for o in objs if o["kind"] == "Ingress" and waits.SKIP_AWAIT not in o["metadata"].get("annotations", {})
    ]
    assert stable_ingresses
    for o in stable_ingresses:
        assert plan[waits.key(o)].create_s >= waits.LOAD_BALANCER_S + waits.SLACK_S
    stable = [o for o in objs if o["kind"] == "Deployment" and not o["metadata"]["name"].endswith("-canary")]
    assert all(waits.SKIP_AWAIT not in o["metadata"].get("annotations", {}) for o in stable)


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_every_awaited_resource_carries_a_timeout_or_skip_await(stack: str, env: str) -> None:
    """Under the engine's mocks: each Deployment, Service and Ingress the program registers has
    customTimeouts (the ones plan derives) or the skipAwait annotation; nothing waits 10 minutes
    by the provider's default."""
    mocks = committed(stack, env)
    plan = waits.plan(k8s_objects(mocks))  # as apply_objects plans them: from every object rendered
    awaited = [r for r in mocks.resources if r.typ in AWAITED]
    if stack == "triton":
        assert len(awaited) >= 4
    for r in awaited:
        obj = as_ints(r.inputs)
        skip = (obj["metadata"].get("annotations") or {}).get(waits.SKIP_AWAIT) == "true"
        assert skip or r.custom_timeouts, f"{r.typ} {r.name} waits with the provider's default"
        if not skip:
            w = plan[waits.key(obj)]
            assert r.custom_timeouts == {"create": f"{w.create_s}s", "update": f"{w.update_s}s"}, r.name


# --- the all-zero digest: a config error, unless the file says it is an example -----------------------

app = typer.Typer()
app.command("render")(render_cmd)
app.command("noop")(lambda: None)  # two commands: typer keeps the `render` subcommand name


def test_placeholder_digest_refused_naming_file_line_key(tmp_path: Path) -> None:
    """Before, prod's zero digest passed every check and `pulumi up` waited for pods that could never pull."""
    folder = tmp_path / "stacks" / "triton"
    shutil.copytree(STACKS_DIR / "triton", folder, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    path = folder / "Pulumi.prod.yaml"
    text = path.read_text()
    assert "      imagePlaceholder: true\n" in text  # the shipped example says so, and is accepted
    path.write_text(text.replace("      imagePlaceholder: true\n", "", 1))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("      image: ") and "0" * 64 in t)
    args = ["render", "--check-config", "--stack", "triton", "--env", "prod", "--project-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"{path}:{line}: tritonops-triton:modelServices[0].image: the digest is the all-zero placeholder" in out
    assert "Traceback" not in result.output
    # a real digest with the opt-in left on is refused too: the opt-in never outlives the placeholder
    path.write_text(text.replace("0" * 64, "a" * 64))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "imagePlaceholder: true, but" in " ".join(result.output.split())
