"""The triton stack refuses to create pull-mode pods whose channel nobody published to.

Against moto_server on 127.0.0.1 (the stand-in for AWS S3): the dev stack, its store pointed at the
local S3, is run as the Pulumi program (mocks) and through :func:`tritonops.k8s.stacks.triton.bootstrap.check_channels`
before and after ``tritonops release publish`` (the library call the CLI makes) moves its channels.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ROOT, Mocks, run_program, user_stacks
from tritonops.k8s import render
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.programs import render_set
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import bootstrap
from tritonops.release import publish as pub
from tritonops.release_format import signing

pytestmark = pytest.mark.integration  # moto_server, a real S3 stand-in process

SAMPLE = ROOT / "examples" / "model_repository"
BUCKET = "tritonops-releases-bootstrap"
_STORES = iter(range(1000))


@functools.cache
def _keys() -> tuple[Path, Path]:
    """The user's release key pair (`tritonops release keygen`), generated once for this run."""
    tmp = Path(tempfile.mkdtemp(prefix="tritonops-keys-"))
    atexit.register(shutil.rmtree, tmp, True)
    return signing.keygen(tmp / "release-signing.key", tmp / "release.pub")


def _services(endpoint: str, store: str) -> list[dict[str, Any]]:
    """dev's services, the first reading the test's store (with static keys: moto's) and trusting the key the
    test publishes with."""
    raw, _ = read_stack_file("triton", "dev")
    services = [dict(s) for s in raw["modelServices"]]
    trusted = {**services[0]["release"]["trustedKeys"], "publicKeys": {"release.pub": _keys()[1].read_text()}}
    reader = {k: v for k, v in services[0].items() if k != "modelReader"}  # dev's IRSA role reads dev's bucket only
    services[0] = {**reader, "release": {**services[0]["release"], "store": store, "s3Endpoint": endpoint,
                                         "credentialsSecret": "tritonops-release-reader", "trustedKeys": trusted}}
    return services


def _cfg(endpoint: str, store: str) -> TritonStackConfig:
    raw, _ = read_stack_file("triton", "dev")
    cfg = parse_config("triton", {**raw, "modelServices": _services(endpoint, store)})
    assert isinstance(cfg, TritonStackConfig)
    return cfg


@pytest.fixture
def s3(moto_s3: str, monkeypatch: pytest.MonkeyPatch) -> str:
    import boto3

    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_REGION", "us-west-2")):
        monkeypatch.setenv(k, v)
    for k in ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    client = boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    return moto_s3


@pytest.fixture
def store() -> str:
    """A store of this test's own (moto_server lives for the session)."""
    return f"s3://{BUCKET}/vision-{next(_STORES)}"


def _publish(tmp_path: Path, endpoint: str, store: str, channel: str) -> dict[str, Any]:
    return pub.publish(SAMPLE, store, channel, _keys()[0], target="cpu", s3_endpoint=endpoint)


def test_unpublished_channel_is_refused_with_the_publish_command(s3: str, store: str, tmp_path: Path) -> None:
    mocks = Mocks()
    with pytest.raises(ConfigError) as exc:
        run_program("triton", "dev", {"modelServices": _services(s3, store)}, mocks=mocks, check_channels=True)
    assert exc.value.key == "tritonops-triton:modelServices[0].release.channel"
    assert (
        f"Publish a release to it first: tritonops release publish REPOSITORY --store {store} --channel dev "
        f"--key release-signing.key --s3-endpoint {s3}" in str(exc.value)
    )
    assert "Pulumi.dev.yaml" in str(exc.value)
    assert mocks.resources == []  # refused before anything, even the StackReference, is registered

    out = _publish(tmp_path, s3, store, "dev")
    with pytest.raises(ConfigError) as exc:  # the canary's channel is checked too
        bootstrap.check_channels(_cfg(s3, store))
    assert exc.value.key == "tritonops-triton:modelServices[0].release.canary.channel"
    assert "--channel dev-canary" in str(exc.value)

    canary = _publish(tmp_path, s3, store, "dev-canary")  # the same content signed for another channel: its own id
    states = bootstrap.check_channels(_cfg(s3, store))
    assert [(s.channel, s.release) for s in states] == [("dev", out["release"]), ("dev-canary", canary["release"])]
    ok = run_program("triton", "dev", {"modelServices": _services(s3, store)}, check_channels=True)
    assert any(r.typ == "kubernetes:apps/v1:Deployment" for r in ok.resources)


def test_unreachable_store_is_refused_clearly(s3: str, store: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once the socket is closed
    with pytest.raises(ConfigError) as exc:
        bootstrap.check_channels(_cfg(closed, store), timeout=3)
    assert exc.value.key == "tritonops-triton:modelServices[0].release.channel"
    assert "cannot read channel 'dev'" in str(exc.value) and f"{bootstrap.CHECK_ENV}=off" in str(exc.value)
    assert "Traceback" not in str(exc.value)


def test_render_never_reads_the_store(s3: str, store: str, tmp_path: Path) -> None:
    """Render is offline: an unpublished channel (and an unreachable store) does not stop it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    rs = render_set("triton", "dev", _cfg(closed, store))
    assert any(o["kind"] == "Deployment" for o in rs.objects)
    assert render.render("triton", "dev", tmp_path / "out", user_stacks())


def test_render_check_channels_reads_the_store_only_when_asked(s3: str, store: str, tmp_path: Path) -> None:
    import typer
    import yaml
    from tritonops.cli.k8s import render as render_cmd
    from typer.testing import CliRunner

    app = typer.Typer()
    app.command("render")(render_cmd)
    app.command("noop")(lambda: None)  # a second command keeps `render` a subcommand
    project = tmp_path / "project"
    (project / "stacks" / "triton").mkdir(parents=True)
    (project / "stacks" / "triton" / "Pulumi.yaml").write_text((ROOT / "stacks/triton/Pulumi.yaml").read_text())
    doc = yaml.safe_load((ROOT / "stacks/triton/Pulumi.dev.yaml").read_text())
    doc["config"]["tritonops-triton:modelServices"] = _services(s3, store)
    (project / "stacks" / "triton" / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    base = ["render", "--stack", "triton", "--env", "dev", "--project-dir", str(project)]

    offline = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a")])
    assert offline.exit_code == 0, offline.output
    refused = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--check-channels", "--json"])
    assert refused.exit_code == 2, refused.output
    err = json_line(refused.output)
    assert err["key"].endswith("modelServices[0].release.channel")
    assert f"tritonops release publish REPOSITORY --store {store} --channel dev" in err["error"]
    assert not (tmp_path / "b" / "kustomization.yaml").exists()  # nothing written
    _publish(tmp_path, s3, store, "dev")
    _publish(tmp_path, s3, store, "dev-canary")
    ok = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "c"), "--check-channels"])
    assert ok.exit_code == 0, ok.output


def json_line(output: str) -> dict[str, Any]:
    import json

    return dict(json.loads(next(line for line in output.splitlines() if line.startswith("{"))))
