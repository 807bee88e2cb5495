"""The CronJob's and timer's check (the release agent's `check`, shipped as one file) against a real tritonserver.

Explicit model control with the repository API restricted behind the admin header, as on the nodes
and in the triton stack: every model READY is clean; a model unloaded through the API is drift
(exit 2, that model named); the wrong header value cannot read the index, which is reported too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.agent import bundle
from infra.agent.triton import SECRET_ENV
from infra.triton import server

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
                       extra_args=[f"--http-restricted-api=model-repository:{HEADER}={SECRET}"])
    try:
        yield srv
    finally:
        srv.stop()


def check(srv: server.TritonServer, agent: Path, secret: str = SECRET) -> tuple[int, dict[str, object]]:
    cmd = [sys.executable, "-I", str(agent), "check", "--url", f"http://{srv.http_url}", "--header", HEADER,
           "--source", "triton", "--host", "loopback"]
    for m in MODELS:
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
