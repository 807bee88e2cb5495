"""The sample repository on a real tritonserver (CPU, from the nvidia-pytriton wheel)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tritonops import versions
from tritonops.cli import app
from tritonops.model_repo.validate import Target, validate
from tritonops.triton import server
from tritonops.triton.smoke import EXPECTED_FAMILIES, metrics_families, smoke
from typer.testing import CliRunner

pytestmark = pytest.mark.integration
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
MODELS = ["mlp", "mlp_batched", "pipeline", "postprocess", "preprocess"]


def test_every_sample_model_is_ready(triton) -> None:  # type: ignore[no-untyped-def]
    client = httpclient.InferenceServerClient(triton.http_url)
    index = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
    assert index == dict.fromkeys(MODELS, "READY")


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_golden_inference_over_http_and_grpc(triton, scheme: str) -> None:  # type: ignore[no-untyped-def]
    url = f"{scheme}://{triton.http_url if scheme == 'http' else triton.grpc_url}"
    report = smoke(url, repository=SAMPLE, metrics_url=triton.metrics_url)
    assert report.ok, report
    assert report.server_version == versions.TRITON_SERVER_VERSION
    assert sorted(c.target for c in report.checks if c.check == "golden") == MODELS


def test_metrics_serve_the_inference_families(triton) -> None:  # type: ignore[no-untyped-def]
    smoke(f"http://{triton.http_url}", repository=SAMPLE, metrics_url=triton.metrics_url)
    families = metrics_families(triton.metrics_url)
    assert set(EXPECTED_FAMILIES) <= families


def test_smoke_fails_on_a_wrong_answer(triton, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "repo"
    shutil.copytree(SAMPLE, repo)
    golden = repo / "postprocess" / "golden.json"
    data = json.loads(golden.read_text())
    data["cases"][0]["outputs"]["label"]["data"] = [3 - data["cases"][0]["outputs"]["label"]["data"][0]]
    golden.write_text(json.dumps(data))
    report = smoke(f"http://{triton.http_url}", models=["postprocess"], repository=repo,
                   metrics_url=triton.metrics_url)
    failed = [c for c in report.checks if not c.ok]
    assert [(c.check, c.target) for c in failed] == [("golden", "postprocess")]
    assert "output 'label' values differ" in failed[0].detail


def test_smoke_cli_table_json_and_exit_codes(triton) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    args = ["smoke", f"grpc://{triton.grpc_url}", "--metrics-url", triton.metrics_url]
    ok = runner.invoke(app, [*args, "--repository", str(SAMPLE), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["ok"] is True
    table = runner.invoke(app, [*args, "--model", "pipeline"])
    assert table.exit_code == 0 and "pipeline" in table.stdout and "FAIL" not in table.stdout
    missing = runner.invoke(app, [*args, "--model", "no_such_model"])
    assert missing.exit_code == 1 and "FAIL" in missing.stdout
    assert runner.invoke(app, ["smoke", "ftp://x"]).exit_code == 2


def test_smoke_reports_an_unreachable_server() -> None:
    report = smoke(f"http://127.0.0.1:{server.free_port()}")
    assert not report.ok and report.checks[0].check == "live"


# --- validate agrees with Triton ---------------------------------------------------------------

PY = """name: "{name}"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
ECHO = """import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
"""

# name -> (config text, files); every one of these is rejected by `tritonops validate` and by Triton.
# (A Python model whose version folder lacks model.py is left out: Triton 2.51 does not reject it, its
# load request hangs. So is a warmup batch_size above max_batch_size: Triton 2.51 rejects it, but its
# warmup error path sometimes crashes the server (SIGSEGV). `validate` reports both before any server
# sees them: see tests/unit/test_validate.py.)
BROKEN: dict[str, tuple[str, dict[str, str]]] = {
    "malformed": ('name: "malformed"\nbackend: "python"\ninput [ { name: "x" ', {"1/model.py": ECHO}),
    "bad_dtype": (PY.format(name="bad_dtype", mbs=8).replace("TYPE_FP32", "TYPE_FLOAT", 1), {"1/model.py": ECHO}),
    "no_version": (PY.format(name="no_version", mbs=8), {}),
    "preferred_too_big": (PY.format(name="preferred_too_big", mbs=4)
                          + "dynamic_batching { preferred_batch_size: [ 8 ] }\n", {"1/model.py": ECHO}),
    "dangling": ("""name: "dangling"
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "echo" model_version: -1
  input_map { key: "x" value: "nowhere" } output_map { key: "y" value: "y" } } ] }
""", {"1/.keep": ""}),
    "dtype_mismatch": ("""name: "dtype_mismatch"
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "echo" model_version: -1
  input_map { key: "x" value: "x" } output_map { key: "y" value: "y" } } ] }
""", {"1/.keep": ""}),
    "gpu_on_cpu": (PY.format(name="gpu_on_cpu", mbs=8) + "instance_group [ { kind: KIND_GPU } ]\n",
                   {"1/model.py": ECHO}),
}


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """An empty repository in explicit mode: each test writes a model, then asks Triton to load it."""
    repo = tmp_path_factory.mktemp("parity") / "repo"
    for name, (cfg, files) in {"echo": (PY.format(name="echo", mbs=8), {"1/model.py": ECHO}), **BROKEN}.items():
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(cfg)
        for rel, text in files.items():
            (repo / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / name / rel).write_text(text)
    srv = server.start(repo, model_control_mode="explicit", load_models=["echo"])
    yield srv
    srv.stop()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_what_validate_rejects_triton_rejects(explicit_server, name: str) -> None:  # type: ignore[no-untyped-def]
    folder = explicit_server.repository / name
    assert not validate(folder, target=Target.cpu).ok
    client = httpclient.InferenceServerClient(explicit_server.http_url)
    with pytest.raises(InferenceServerException):
        client.load_model(name)
    assert not client.is_model_ready(name)


def test_what_validate_accepts_triton_loads_and_unloads(explicit_server) -> None:  # type: ignore[no-untyped-def]
    repo = explicit_server.repository
    for name in MODELS:
        shutil.copytree(SAMPLE / name, repo / name)
    assert validate(SAMPLE, target=Target.cpu).ok
    client = grpcclient.InferenceServerClient(explicit_server.grpc_url)
    for name in ["mlp", "preprocess", "postprocess", "pipeline", "mlp_batched"]:
        client.load_model(name)
        assert client.is_model_ready(name)
    client.unload_model("pipeline")
    assert not client.is_model_ready("pipeline")
    assert client.is_model_ready("mlp")  # the composing models stay
    client.load_model("pipeline")
    report = smoke(f"grpc://{explicit_server.grpc_url}", models=MODELS, repository=SAMPLE,
                   metrics_url=explicit_server.metrics_url)
    # The server itself reports not-ready: the broken models above failed to load (strict readiness).
    failed = [(c.check, c.target, c.detail) for c in report.checks if not c.ok]
    assert failed == [("ready", explicit_server.grpc_url, "server is not ready")]
    assert sorted(c.target for c in report.checks if c.check == "golden" and c.ok) == MODELS
