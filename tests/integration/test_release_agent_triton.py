"""The pull agent against a real tritonserver that goes away and comes back; push mode's gate against it.

A release published while Triton is down waits (counted, not refused) and is applied once Triton
answers; models a restarted Triton lost (explicit mode loads nothing by itself) are loaded again. The
push-mode gate (``tritonops.release.push golden``) is the agent's: it passes the applied release and
fails one whose golden output is off.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.core.triton_http import Triton
from tritonops.release import publish as pub
from tritonops.release import push
from tritonops.release_format import signing
from tritonops.stores import open_store
from tritonops.triton import server

# Triton goes away and comes back: about 90 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow]
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
SECRET = "agent-triton-test-secret"
ADMIN = [f"--http-restricted-api=model-repository:triton-admin-key={SECRET}"]


def _start(link: Path, workdir: Path) -> server.TritonServer:
    return server.start(link, model_control_mode="explicit", extra_args=ADMIN, workdir=workdir)


def test_a_release_waits_for_triton_and_lost_models_are_loaded_again(tmp_path: Path) -> None:
    key, pubkey = signing.keygen(tmp_path / "k" / "release.key", tmp_path / "k" / "release.pub")
    store = str(tmp_path / "store")
    pub.publish(SAMPLE, store, "stable", key, target="cpu", version="r1")
    (tmp_path / "node" / "releases").mkdir(parents=True)
    (tmp_path / "node" / "models").mkdir()
    link, rel = tmp_path / "node" / "models", tmp_path / "node" / "releases"
    srv = _start(link, tmp_path / "w1")
    try:
        agent = Agent(open_store(store), "stable", link, rel, [pubkey],
                      triton=Triton(f"http://{srv.http_url}", secret=SECRET), log=lambda m: None)
        assert agent.poll()["result"] == "applied"
        models = set(Triton(f"http://{srv.http_url}", secret=SECRET).ready_models())
        assert models == {"mlp", "mlp_batched", "pipeline", "postprocess", "preprocess"}
        for m in ("pipeline", "mlp"):
            agent.triton.unload(m)  # type: ignore[union-attr]  # what a restart in explicit mode leaves
        deadline = time.monotonic() + 30
        while {"UNAVAILABLE"} != {e["state"] for e in agent.triton.index()  # type: ignore[union-attr]
                                  if e["name"] in ("mlp", "pipeline")}:
            assert time.monotonic() < deadline, "Triton did not unload"
            time.sleep(0.2)
        out = agent.poll()
        assert out.get("reloaded") == ["mlp", "pipeline"], out
        assert set(agent.triton.ready_models()) == models  # type: ignore[union-attr]
    finally:
        srv.stop()
    src = tmp_path / "r2"
    shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
    with (src / "mlp" / "1" / "model.py").open("a") as f:
        f.write("\n# r2\n")
    pub.publish(src, store, "stable", key, target="cpu", version="r2")
    out = agent.poll()  # Triton is down
    assert (out["result"], out["step"]) == ("failed", "triton")
    assert 'tritonops_release_up_to_date{channel="stable"} 0' in agent.metrics.render()
    assert releases.active_release(link, rel) == "r1" and not agent.refused
    srv = _start(link, tmp_path / "w2")
    try:
        agent.triton = Triton(f"http://{srv.http_url}", secret=SECRET)
        agent.retry_at.clear()  # the backoff has passed
        out = agent.poll()
        assert (out["result"], out["release"]) == ("applied", "r2")
        assert releases.state(rel)["current"] == "r2"
        assert set(agent.triton.ready_models()) == models
        # Push mode gates with the same function, from the controller: the release passes, and a golden
        # file whose expected output is off fails it, naming the case.
        url = f"http://{srv.http_url}"
        gate = push.golden(url, rel / "r2", timeout=30)
        assert gate["ok"] and gate["cases"] >= 10 and gate["models"] == sorted(models), gate
        off = tmp_path / "off"
        shutil.copytree(rel / "r2", off)
        golden = json.loads((off / "mlp" / "golden.json").read_text())
        golden["cases"][0]["outputs"]["logits"]["data"][0] += 1.0
        (off / "mlp" / "golden.json").write_text(json.dumps(golden))
        bad = push.golden(url, off, models=["mlp"], timeout=30)
        assert not bad["ok"] and bad["failed"][0].startswith("mlp golden case 'batch1': output 'logits': values differ")
    finally:
        srv.stop()
