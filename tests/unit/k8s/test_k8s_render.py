"""`tritonops render`: the stacks' objects as YAML, deterministic, no Pulumi engine involved."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from k8s_harness import STACK_FILES, STACKS_DIR, user_stacks
from tritonops.agent_bundle import build_bytes
from tritonops.cli.k8s import render as render_cmd
from tritonops.k8s.render import build, render
from typer.testing import CliRunner

runner = CliRunner()
# The command as `tritonops` registers it, on its own app so other commands' imports do not matter here.
app = typer.Typer()
app.command("render")(render_cmd)
app.command("noop")(lambda: None)  # two commands: typer then keeps the `render` subcommand name


def test_tritonops_registers_render() -> None:
    from tritonops.cli import app as tritonops_app

    assert [c.callback for c in tritonops_app.registered_commands if c.name == "render"] == [render_cmd]


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_render_cli_writes_yaml(stack: str, env: str, tmp_path: Path) -> None:
    out = tmp_path / f"{stack}-{env}"
    result = runner.invoke(app, ["render", "--stack", stack, "--env", env, "--out", str(out), "--json",
                                 "--project-dir", str(user_stacks().parent)])
    assert result.exit_code == 0, result.output
    written = json.loads(result.output)
    assert written
    for entry in written:
        path = Path(entry["path"])
        assert path.is_file()
        yaml.safe_load(path.read_text())


def test_render_triton_layout(tmp_path: Path) -> None:
    render("triton", "prod", tmp_path, user_stacks())  # the stacks with the user's release key set
    kust = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    docs = [yaml.safe_load((tmp_path / f).read_text()) for f in kust["resources"]]
    # The namespace and its NetworkPolicies (default deny, DNS) before anything that runs in it.
    assert [d["kind"] for d in docs][:5] == ["Namespace", *["NetworkPolicy"] * 3, "PriorityClass"]
    assert docs == build("triton", "prod", user_stacks()).objects
    secrets = yaml.safe_load((tmp_path / "secrets-required.yaml").read_text())["secrets"]
    assert secrets == [
        {
            "name": "triton-admin-api",
            "namespace": "triton",
            "keys": ["token"],
            "pulumiConfig": "tritonops-triton:adminApiToken",
        }
    ]
    assert not any(d["kind"] == "Secret" for d in docs)  # secret values never land in files


def test_render_platform_flux_helm_releases(tmp_path: Path) -> None:
    """helm/ holds Flux HelmReleases (schema and stack equality: test_k8s_gitops.py), values inline."""
    render("platform", "dev", tmp_path)
    kust = yaml.safe_load((tmp_path / "helm" / "kustomization.yaml").read_text())
    docs = [yaml.safe_load((tmp_path / "helm" / f).read_text()) for f in kust["resources"]]
    releases = {d["spec"]["releaseName"]: d["spec"] for d in docs if d["kind"] == "HelmRelease"}
    assert {r["chart"]["spec"]["chart"] for r in releases.values()} == {"gpu-operator", "kube-prometheus-stack", "keda"}
    for rel in build("platform", "dev").releases:
        assert releases[rel.name]["values"] == rel.values
        assert releases[rel.name]["chart"]["spec"]["version"] == rel.version
    assert not (tmp_path / "helm" / "releases.yaml").exists()


def test_render_triton_writes_the_stack_outputs(tmp_path: Path) -> None:
    render("triton", "dev", tmp_path, user_stacks())
    assert yaml.safe_load((tmp_path / "stack-outputs.yaml").read_text()) == build("triton", "dev", user_stacks()).outputs


def test_render_is_deterministic(tmp_path: Path) -> None:
    render("triton", "dev", tmp_path / "a", user_stacks())
    render("triton", "dev", tmp_path / "b", user_stacks())
    a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert a == b


def test_render_invalid_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    shutil.copytree(STACKS_DIR / "triton", stacks / "triton")
    path = stacks / "triton" / "Pulumi.dev.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["tritonops-triton:modelServices"][0]["models"] = []
    path.write_text(yaml.safe_dump(doc))
    from tritonops.k8s.config import ConfigError

    with pytest.raises(ConfigError) as exc:
        render("triton", "dev", tmp_path / "out", stacks_dir=stacks)
    assert exc.value.key == "tritonops-triton:modelServices[0].models"
    assert not (tmp_path / "out").exists()  # nothing written
    result = runner.invoke(app, ["render", "--stack", "gke", "--env", "dev", "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 2 and json.loads(result.output)["key"] == "--stack"


def test_render_needs_no_pulumi_engine(tmp_path: Path) -> None:
    """A fresh interpreter renders without importing pulumi at all."""
    code = (
        "import sys; from pathlib import Path; from tritonops.k8s.render import render; "
        f"render('triton', 'prod', Path({str(tmp_path)!r}), Path({str(user_stacks())!r})); "
        "assert not any(m == 'pulumi' or m.startswith('pulumi.') for m in sys.modules), 'pulumi imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_rerender_removes_only_files_it_no_longer_writes(tmp_path: Path) -> None:
    render("triton", "prod", tmp_path, user_stacks())
    (tmp_path / "notes.md").write_text("mine")
    stale = tmp_path / "99-deployment-triton-triton-retired.yaml"
    stale.write_text("kind: Deployment\n")
    manifest = tmp_path / ".tritonops-render"
    manifest.write_text(manifest.read_text() + stale.name + "\n")  # as if an earlier render wrote it
    render("triton", "prod", tmp_path, user_stacks())
    assert not stale.exists()
    assert (tmp_path / "notes.md").read_text() == "mine"
    assert len(list(tmp_path.glob("*-deployment-triton-triton-vision.yaml"))) == 1


def test_render_dev_includes_the_release_agent(tmp_path: Path) -> None:
    """GitOps users get the same agent ConfigMap (the zipapp's bytes) and pod as `pulumi up`."""
    render("triton", "dev", tmp_path, user_stacks())
    files = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())["resources"]
    docs = {(d["kind"], d["metadata"]["name"]): d for d in (yaml.safe_load((tmp_path / f).read_text()) for f in files)}
    cm = docs[("ConfigMap", "tritonops-agent")]
    assert base64.b64decode(cm["binaryData"]["tritonops-agent.pyz"]) == build_bytes()
    pod = docs[("Deployment", "triton-vision")]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["release-sync"]
    assert [c["name"] for c in pod["containers"]] == ["triton", "release-agent"]
    assert ("ConfigMap", "triton-vision-drift") not in docs  # the CronJob runs the shared zipapp
    deployment = next(f for f in files if "-deployment-" in f)
    assert "&id" not in (tmp_path / deployment).read_text()  # plain YAML, no anchors between containers
