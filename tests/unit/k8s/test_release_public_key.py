"""No key that signs nothing (issue 43, failure 5): the release public key is a value only the user gives.

No stack file ships a public key (the example key's private half existed nowhere, so every release was
refused after a 26-minute wait). A triton service's ``trustedKeys.publicKeys`` lists none of ``keys``
until the user sets it from the file ``tritonops release keygen`` wrote: ``render --check-config`` passes
and prints that command, render and the program refuse naming the key. The commands are run here as
the user runs them (k8s_harness.run_config_set on this run's key pair from the project's own keygen),
and what they set is what the pods trust: a channel signed with the private half passes the node's check.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import typer
from k8s_harness import STACK_FILES, STACKS_DIR, envs, release_keys, run_program, user_stacks
from tritonops.cli.k8s import render as render_cmd
from tritonops.k8s import contract
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.render import build
from tritonops.k8s.stack_file import load_stack_config, read_stack_file, stack_file
from tritonops.k8s.stacks.triton import bootstrap
from tritonops.release import publish as pub
from typer.testing import CliRunner

runner = CliRunner()
app = typer.Typer()
app.command("render")(render_cmd)
app.command("noop")(lambda: None)  # two commands: typer keeps the `render` subcommand name

KEY = 'modelServices[0].release.trustedKeys.publicKeys["release.pub"]'
COMMAND = f"pulumi config set --path '{KEY}' < release.pub"
SAMPLE = STACKS_DIR.parent / "examples" / "model_repository"


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_no_stack_file_ships_a_key(stack: str, env: str) -> None:
    assert "-----BEGIN" not in (STACKS_DIR / stack / f"Pulumi.{env}.yaml").read_text()


@pytest.mark.parametrize("env", envs("triton"))
def test_check_config_passes_and_prints_the_command_that_sets_the_key(env: str) -> None:
    """One command per trusted-keys ConfigMap: prod's embeddings mounts the one vision's publicKeys make."""
    result = runner.invoke(app, ["render", "--check-config", "--stack", "triton", "--env", env])
    assert result.exit_code == 0, result.output
    assert f"  before `pulumi up`: {COMMAND}\n" in result.output
    as_json = runner.invoke(app, ["render", "--check-config", "--stack", "triton", "--env", env, "--json"])
    assert json.loads(as_json.output)["valuesToSet"] == {KEY: COMMAND}


@pytest.mark.parametrize("env", envs("triton"))
def test_render_refuses_until_the_key_is_set_naming_file_line_and_key(env: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "--stack", "triton", "--env", env, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.output)
    path = stack_file("triton", env)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "publicKeys:" in text)
    assert error["key"] == f"tritonops-triton:{KEY}"
    assert error["error"].startswith(f"{path}:{line}: tritonops-triton:{KEY}: not set")
    assert error["error"].endswith(COMMAND)
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_program_refuses_until_the_key_is_set() -> None:
    with pytest.raises(ConfigError) as exc:
        run_program("triton", "dev", user_keys=False)
    assert exc.value.key == f"tritonops-triton:{KEY}" and COMMAND in str(exc.value)


def test_public_keys_may_lack_a_key_of_keys_but_name_no_other() -> None:
    raw, _ = read_stack_file("triton", "dev")
    services = copy.deepcopy(raw["modelServices"])
    services[0]["release"]["trustedKeys"]["publicKeys"] = {"other.pub": (release_keys() / "release.pub").read_text()}
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", {**raw, "modelServices": services}, env="dev")
    assert exc.value.key == "tritonops-triton:modelServices[0].release.trustedKeys.publicKeys"
    assert "must name the same keys" in str(exc.value)


@pytest.mark.parametrize("env", envs("triton"))
def test_the_printed_command_sets_the_key_the_pods_mount(env: str) -> None:
    """After the printed commands (user_stacks runs them): nothing left to set, and ConfigMap
    tritonops-release-keys holds the public key keygen wrote, byte for byte."""
    done = runner.invoke(app, ["render", "--check-config", "--stack", "triton", "--env", env, "--json",
                               "--project-dir", str(user_stacks().parent)])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["valuesToSet"] == {}
    (cm,) = [o for o in build("triton", env, user_stacks()).objects
             if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tritonops-release-keys"]
    assert cm["data"] == {"release.pub": (release_keys() / "release.pub").read_text()}


def test_a_channel_signed_with_the_private_half_passes_the_nodes_check(tmp_path: Path) -> None:
    """The value set is the shape publicKeys expects and the key the agent verifies with: dev's channels,
    published with release-signing.key to a folder store, pass the preview-time check (the agent's own)."""
    store = tmp_path / "vision"
    for channel in ("dev", "dev-canary"):
        pub.publish(SAMPLE, str(store), channel, release_keys() / "release-signing.key", target="cpu")
    cfg = load_stack_config("triton", "dev", user_stacks())
    assert isinstance(cfg, TritonStackConfig)
    svc = cfg.model_services[0]
    assert svc.release is not None
    moved = svc.model_copy(update={"release": svc.release.model_copy(update={"store": str(store)})})
    states = bootstrap.check_channels(cfg.model_copy(update={"model_services": [moved]}))
    assert [s.channel for s in states] == ["dev", "dev-canary"]


def test_locate_reads_a_quoted_property_path() -> None:
    """A key with dots is a quoted step of the path (`["release.pub"]`), as `pulumi config set --path` reads it."""
    assert contract.path_parts(f"tritonops-triton:{KEY}") == [
        "tritonops-triton:modelServices", 0, "release", "trustedKeys", "publicKeys", "release.pub"]


def test_the_channel_check_and_preflight_refuse_a_key_not_set() -> None:
    """The check the program runs at preview and `tritonops preflight` runs per channel: with no key to
    verify with it says which one to set (before reading any store), instead of passing unverified."""
    with pytest.raises(ConfigError) as exc:
        bootstrap.check_channels(load_stack_config("triton", "dev"), source="Pulumi.dev.yaml")
    assert exc.value.key == f"tritonops-triton:{KEY}" and COMMAND in str(exc.value)
