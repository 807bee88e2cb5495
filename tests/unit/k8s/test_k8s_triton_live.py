"""The Deployment's own Triton args and probes, run by a real (CPU-only) tritonserver 2.51.

The args come from ``triton.deployment`` for a model service serving the sample ``mlp`` model; only
what the pod environment supplies is swapped: the repository path and ports (loopback, free ports),
and ``$(TRITON_ADMIN_KEY)``, which the kubelet expands from the Secret. The S3 model source is checked
against ``moto_server`` (moto in server mode on loopback), the stand-in for AWS S3 here.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_harness import ROOT
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import exposure, workload
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.triton.server import TritonNotInstalled, TritonServer, find_install, start

# A real tritonserver and moto_server on loopback: the integration tier, kept next to the k8s tests.
pytestmark = pytest.mark.integration

TOKEN = "test-admin-token"
SUPPLIED_BY_POD = (
    "--model-repository=",
    "--http-port=",
    "--grpc-port=",
    "--metrics-port=",
    "--model-control-mode=",
    "--load-model=",
    "--exit-on-error=",
    "--exit-timeout-secs=",
)


def _cfg() -> TritonStackConfig:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["models"] = [{"name": "mlp", "sizeMib": 10}]
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    cfg = _cfg()
    return workload.deployment(cfg, cfg.model_services[0])


@pytest.fixture(scope="module")
def server(deployment: dict[str, Any]) -> Iterator[TritonServer]:
    try:
        find_install()
    except TritonNotInstalled as exc:
        pytest.skip(str(exc))
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "tritonserver"
    extra = [a.replace(f"$({workload.ADMIN_ENV})", TOKEN) for a in args[1:] if not a.startswith(SUPPLIED_BY_POD)]
    assert any(a.startswith("--http-restricted-api=") for a in extra)
    srv = start(
        ROOT / "examples" / "model_repository",
        model_control_mode="explicit",
        load_models=["mlp"],
        extra_args=[*extra, "--exit-timeout-secs=2"],
    )
    yield srv
    srv.stop()


def _status(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    req = urllib.request.Request(
        url, data=data, headers={"Connection": "close", **(headers or {})}, method="POST" if data is not None else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


@pytest.mark.parametrize("probe", ["startupProbe", "readinessProbe", "livenessProbe"])
def test_probe_paths_answer_200(server: TritonServer, deployment: dict[str, Any], probe: str) -> None:
    path = deployment["spec"]["template"]["spec"]["containers"][0][probe]["httpGet"]["path"]
    assert _status(f"http://{server.http_url}{path}") == 200


def test_admin_api_refused_without_header(server: TritonServer) -> None:
    assert _status(f"http://{server.http_url}/v2/repository/index", data=b"{}") == 403


def test_admin_api_allowed_with_header(server: TritonServer) -> None:
    headers = triton.admin_headers(_cfg(), TOKEN)["http"]
    assert _status(f"http://{server.http_url}/v2/repository/index", headers, b"{}") == 200


def test_grpc_admin_restricted(server: TritonServer) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException):
        client.get_model_repository_index()
    with pytest.raises(InferenceServerException):
        client.get_model_repository_index(headers={"triton-admin-key": TOKEN})  # the HTTP spelling
    grpc_headers = triton.admin_headers(_cfg(), TOKEN)["grpc"]
    assert grpc_headers == {"triton-grpc-protocol-triton-admin-key": TOKEN}
    assert client.get_model_repository_index(headers=grpc_headers) is not None
    assert client.is_model_ready("mlp")  # inference-side APIs stay open


def test_inference_metadata_open(server: TritonServer) -> None:
    assert _status(f"http://{server.http_url}/v2/models/mlp") == 200
    assert _status(server.metrics_url) == 200


INFER_MLP = json.dumps(
    {"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}
).encode()


def test_every_routed_path_is_open_and_served(server: TritonServer) -> None:
    """What the Ingress/HTTPRoute send to Triton answers 200 without the admin header (an inference too)."""
    cfg = _cfg()
    paths = exposure.http_paths(cfg.model_services[0])
    assert "/v2/models/mlp/infer" in paths
    got = {p: _status(f"http://{server.http_url}{p}", data=INFER_MLP if p.endswith("/infer") else None) for p in paths}
    assert got == dict.fromkeys(paths, 200)


@pytest.mark.parametrize(
    ("path", "post"),
    [
        ("/v2/repository/index", True),
        ("/v2/repository/models/mlp/unload", True),
        ("/v2/models/mlp/config", False),
        ("/v2/models/mlp/stats", False),
        ("/v2/systemsharedmemory/status", False),
        ("/v2/cudasharedmemory/status", False),
        ("/v2/trace/setting", False),
        ("/v2/logging", False),
    ],
)
def test_unrouted_admin_paths_are_restricted(server: TritonServer, path: str, post: bool) -> None:
    """Everything the routers leave out is one of the restricted API groups: 403 without the header."""
    cfg = _cfg()
    assert path not in exposure.http_paths(cfg.model_services[0])
    assert _status(f"http://{server.http_url}{path}", data=b"{}" if post else None) == 403


# --- the S3 model source, with moto_server standing in for AWS S3 --------------------------------


@pytest.fixture(scope="module")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto in server mode on loopback: the stand-in for AWS S3 (no AWS account is reachable here)."""
    import shutil
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    binary = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.skip("moto[server] (the `dev` extra) is not installed")
    from tritonops.triton.server import free_port

    port = free_port()
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_model_repository_from_s3(moto_s3: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The Deployment's --model-repository=s3://... and env, against S3 (moto): Triton loads the model."""
    import boto3

    try:
        find_install()
    except TritonNotInstalled as exc:
        pytest.skip(str(exc))
    # Static test credentials for moto; on EKS the IRSA web identity provides them.
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(k, v)
    s3 = boto3.client("s3", endpoint_url=moto_s3, region_name="us-west-2")
    s3.create_bucket(Bucket="tritonops-models-dev", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    repo = ROOT / "examples" / "model_repository"
    for f in (repo / "mlp").rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts:
            s3.upload_file(str(f), "tritonops-models-dev", f"vision/{f.relative_to(repo).as_posix()}")

    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["models"] = [{"name": "mlp", "sizeMib": 10}]
    # Triton's form for a custom S3 endpoint: s3://<scheme>://<host>:<port>/<bucket>/<prefix>.
    raw["modelServices"][0].pop("release")  # dev pulls releases; this checks Triton's own S3 source
    raw["modelServices"][0].pop("modelReader", None)  # the role is given as roleArn below instead
    raw["modelServices"][0]["modelRepository"] = {
        "type": "s3",
        "uri": f"s3://{moto_s3}/tritonops-models-dev/vision",
        "region": "us-west-2",
        "roleArn": "arn:aws:iam::111122223333:role/tritonops-dev-model-reader",
    }
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    container = workload.deployment(cfg, cfg.model_services[0])["spec"]["template"]["spec"]["containers"][0]
    for env in container["env"]:
        if "value" in env:
            monkeypatch.setenv(env["name"], env["value"])  # AWS_DEFAULT_REGION, HOME
    args = container["args"][1:]
    repo_args = [a for a in args if a.startswith("--model-repository=")]
    assert repo_args == [f"--model-repository=s3://{moto_s3}/tritonops-models-dev/vision"]
    extra = [
        a.replace(f"$({workload.ADMIN_ENV})", TOKEN)
        for a in args
        if not a.startswith(SUPPLIED_BY_POD) or a.startswith("--model-repository=")
    ]
    empty = tmp_path / "empty-local-repo"  # start() always adds a local repository; keep it empty
    empty.mkdir()
    srv = start(
        empty,
        model_control_mode="explicit",
        load_models=["mlp"],
        extra_args=[*extra, "--exit-timeout-secs=2"],
        ready_timeout=120,
    )
    try:
        assert _status(f"http://{srv.http_url}/v2/models/mlp/ready") == 200
        assert f"s3://{moto_s3}/tritonops-models-dev/vision" in srv.log()
    finally:
        srv.stop()
