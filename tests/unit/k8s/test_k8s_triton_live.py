"""The Deployment's own Triton args and probes, run by a real (CPU-only) tritonserver 2.51.

The args come from ``triton.deployment`` for a model service serving the sample ``mlp`` model; only
what the pod environment supplies is swapped: the repository path and ports (loopback, free ports),
and ``$(TRITON_ADMIN_KEY)``, which the kubelet expands from the Secret.
"""

from __future__ import annotations

import copy
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_harness import ROOT

from infra.k8s import triton
from infra.k8s.config import TritonStackConfig, parse_config, read_stack_file
from infra.triton.server import TritonNotInstalled, TritonServer, find_install, start

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
    return triton.deployment(cfg, cfg.model_services[0])


@pytest.fixture(scope="module")
def server(deployment: dict[str, Any]) -> Iterator[TritonServer]:
    try:
        find_install()
    except TritonNotInstalled as exc:
        pytest.skip(str(exc))
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "tritonserver"
    extra = [a.replace(f"$({triton.ADMIN_ENV})", TOKEN) for a in args[1:] if not a.startswith(SUPPLIED_BY_POD)]
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
