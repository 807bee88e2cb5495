"""``bench`` and ``tune`` take ``--url`` as ``smoke`` does (one parser, ``smoke.Endpoint.parse``): the scheme
picks the protocol, a contradicting ``--protocol`` or a scheme a command cannot measure over is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonops.cli import app
from tritonops.model_repo import pbtxt
from tritonops.model_repo.spec import ModelInput, ModelOutput, ModelSpec
from tritonops.triton import server
from typer.testing import CliRunner


def _repo(tmp_path: Path) -> Path:
    spec = ModelSpec(name="m", backend="python", max_batch_size=8,
                     input=[ModelInput(name="x", data_type="TYPE_FP32", dims=[4])],
                     output=[ModelOutput(name="y", data_type="TYPE_FP32", dims=[4])])
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text(pbtxt.render(spec))
    return tmp_path


def test_bench_takes_the_protocol_from_a_grpc_url() -> None:
    port = server.free_port()  # nothing listens: the error says which protocol was tried
    result = CliRunner().invoke(app, ["bench", "m", "--url", f"grpc://127.0.0.1:{port}", "--duration", "1"])
    assert result.exit_code == 3, result.output
    assert f"127.0.0.1:{port}: no Triton answers over grpc" in " ".join(result.output.split())


@pytest.mark.parametrize(("args", "message"), [
    (["bench", "m", "--url", "grpc://127.0.0.1:8001", "--protocol", "http"], "is grpc, --protocol says http"),
    (["tune", "m", "--url", "grpc://127.0.0.1:8001"], "tune reloads models through Triton's HTTP repository API"),
    (["tune", "m", "--url", "https://127.0.0.1:8000"], "plain HTTP or gRPC"),
])
def test_a_url_the_command_cannot_use_is_a_usage_error(tmp_path: Path, args: list[str], message: str) -> None:
    extra = ["--repository", str(_repo(tmp_path))] if args[0] == "tune" else []
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.replace("│", " ").split())  # typer's error box wraps long lines
    assert message in text and "Traceback" not in result.output
