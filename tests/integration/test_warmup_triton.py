"""Triton (the CPU wheel's tritonserver) accepts the generated model_warmup and runs it before the models are READY."""

from __future__ import annotations

import re
from pathlib import Path

from tritonops.model_repo import warmup
from tritonops.release.push import golden
from tritonops.triton import server


def test_triton_runs_the_generated_warmup_before_ready(sample_repo: Path) -> None:
    generated = [r.model for r in warmup.generate(sample_repo) if r.action == "generated"]
    triton = server.start(sample_repo, model_control_mode="explicit", load_models=["*"],
                          extra_args=["--log-verbose=1"])
    try:
        models = sorted(d.name for d in sample_repo.iterdir() if (d / "config.pbtxt").is_file())
        assert golden(triton.http_url, sample_repo, models)["ok"]
        log = triton.log()
    finally:
        triton.stop()
    for model in generated:
        ran = re.findall(rf"model '{model}' instance \S+ is running warmup sample '(golden:[^']+)'", log)
        assert {"golden:batch1", "golden:batch4"} <= set(ran), (model, ran)
        last_warmup = log.rfind(f"model '{model}' instance")
        assert 0 <= last_warmup < log.find(f"successfully loaded '{model}'")  # warmed before it is READY
