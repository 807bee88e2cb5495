"""The CronJob's and timer's check (the release agent's `check`, shipped as one file) against a real tritonserver.

Explicit model control with the repository API restricted behind the admin header (HTTP and gRPC), as on
the nodes and in the triton stack: every model READY is clean; a model unloaded through the API is drift
(exit 1, that model named); a model loaded through the API with its own files (which Triton's repository
index does not list) is drift; the wrong header value cannot read the index, which is reported too.
Posture: a Triton whose admin APIs answer without the header is reported (HTTP index and load, gRPC
RepositoryIndex, over a standard-library HTTP/2 call), and gRPC TLS is checked as configured.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonops import agent_bundle as bundle
from tritonops.core.triton_http import SECRET_ENV
from tritonops.triton import server

pytestmark = pytest.mark.integration
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
HEADER, SECRET = "triton-admin-key", "drift-test-secret-5b1e"
MODELS = sorted(p.parent.name for p in SAMPLE.glob("*/config.pbtxt"))


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bundle.build(tmp_path_factory.mktemp("agent") / "tritonops-agent.pyz")


@pytest.fixture(scope="module")
def triton() -> Iterator[server.TritonServer]:
    srv = server.start(SAMPLE, model_control_mode="explicit", load_models=["*"],
                       extra_args=["--exit-timeout-secs=5",  # a kept-alive client connection holds the default 30 s
                                   f"--http-restricted-api=model-repository,statistics:{HEADER}={SECRET}",
                                   f"--grpc-restricted-protocol=model-repository,statistics:{HEADER}={SECRET}"])
    try:
        yield srv
    finally:
        srv.stop()


def check(srv: server.TritonServer, agent: Path, secret: str = SECRET, *extra: str,
          models: list[str] = MODELS) -> tuple[int, dict[str, object]]:
    cmd = [sys.executable, "-I", str(agent), "check", "--url", f"http://{srv.http_url}", "--header", HEADER,
           "--source", "triton", "--host", "loopback", "--restricted", "--grpc", srv.grpc_url, *extra]
    for m in models:
        cmd += ["--expect", m]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, **{SECRET_ENV: secret}))
    return res.returncode, json.loads(res.stdout)


def test_all_models_ready_is_clean(triton: server.TritonServer, agent: Path) -> None:
    rc, out = check(triton, agent)
    assert (rc, out["findings"]) == (0, []), out


def test_wrong_admin_header_is_reported(triton: server.TritonServer, agent: Path) -> None:
    rc, out = check(triton, agent, secret="not-the-secret")
    assert rc == 1
    assert [f["resource"] for f in out["findings"]] == ["triton"]  # type: ignore[index]
    assert "HTTP 403" in out["findings"][0]["detail"]  # type: ignore[index]


def test_unloaded_model_is_drift(triton: server.TritonServer, agent: Path) -> None:
    req = urllib.request.Request(f"http://{triton.http_url}/v2/repository/models/mlp_batched/unload", data=b"{}",
                                 headers={HEADER: SECRET}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
    rc, out = check(triton, agent)
    assert rc == 1
    findings = out["findings"]
    assert [f["resource"] for f in findings] == ["model:mlp_batched"], findings  # type: ignore[index]
    assert findings[0]["detail"].startswith("version any not READY (UN"), findings  # type: ignore[index]


def _post(srv: server.TritonServer, path: str, body: dict[str, object]) -> None:
    req = urllib.request.Request(f"http://{srv.http_url}{path}", data=json.dumps(body).encode(),
                                 headers={HEADER: SECRET, "Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200


def test_model_loaded_by_hand_with_its_own_files_is_drift(triton: server.TritonServer, agent: Path) -> None:
    """Loaded through the API with a config and files in the request: READY, yet absent from the index."""
    files = {f"file:1/{p.name}": base64.b64encode(p.read_bytes()).decode()
             for p in (SAMPLE / "mlp" / "1").iterdir() if p.is_file()}
    config = {"name": "by_hand", "backend": "python", "max_batch_size": 8,
              "input": [{"name": "features", "data_type": "TYPE_FP32", "dims": [16]}],
              "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [4]}]}
    _post(triton, "/v2/repository/models/by_hand/load", {"parameters": {"config": json.dumps(config), **files}})
    try:
        rc, out = check(triton, agent)
    finally:
        _post(triton, "/v2/repository/models/by_hand/unload", {})
    findings = out["findings"]
    assert "by_hand" not in json.dumps(out.get("index", ""))
    assert [f["resource"] for f in findings if f["resource"] != "model:mlp_batched"] == [  # type: ignore[index]
        "model:by_hand"], findings
    assert rc == 1


@pytest.fixture(scope="module")
def open_triton() -> Iterator[server.TritonServer]:
    """No restricted API at all: anyone who reaches the port can index and load models."""
    srv = server.start(SAMPLE, model_control_mode="explicit", load_models=["mlp"], extra_args=["--exit-timeout-secs=5"])
    try:
        yield srv
    finally:
        srv.stop()


def test_admin_apis_open_without_the_header_are_reported(open_triton: server.TritonServer, agent: Path) -> None:
    rc, out = check(open_triton, agent, models=["mlp"])
    posture = sorted(f["resource"] for f in out["findings"] if f["resource"].startswith("posture:"))  # type: ignore[index]
    assert posture == ["posture:grpc-index", "posture:http-index", "posture:http-load"], out
    assert rc == 1


@pytest.fixture(scope="module")
def tls_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.TritonServer]:
    """gRPC over TLS (a throwaway self-signed certificate), admin APIs restricted."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    tmp = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", tmp / "server.key", "-out", tmp / "server.crt"], check=True, capture_output=True)
    srv = server.start(SAMPLE, model_control_mode="explicit", load_models=["mlp"], extra_args=[
        "--exit-timeout-secs=5", "--grpc-use-ssl=true", f"--grpc-server-cert={tmp / 'server.crt'}", f"--grpc-server-key={tmp / 'server.key'}",
        f"--http-restricted-api=model-repository:{HEADER}={SECRET}",
        f"--grpc-restricted-protocol=model-repository:{HEADER}={SECRET}"])
    try:
        yield srv
    finally:
        srv.stop()


def test_grpc_tls_is_checked_as_configured(tls_triton: server.TritonServer, agent: Path) -> None:
    rc, out = check(tls_triton, agent, SECRET, "--grpc-tls", models=["mlp"])
    assert (rc, out["findings"]) == (0, []), out  # TLS as configured, RepositoryIndex refused over it
    rc, out = check(tls_triton, agent, models=["mlp"])  # the check expects plaintext gRPC
    assert [f["resource"] for f in out["findings"]] == ["posture:grpc-tls"], out  # type: ignore[index]
    assert rc == 1
