"""`make demo`: a real Triton on the sample repository, the smoke check, and real inference results."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from rich.console import Console
from rich.table import Table

from infra.model_repo.golden import Golden
from infra.triton import server
from infra.triton.smoke import SmokeReport, report_table, smoke

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "model_repository"


def pipeline_table(url: str, repository: Path) -> Table:
    """Send the pipeline's golden raw inputs and show what the ensemble answers."""
    client = httpclient.InferenceServerClient(url)
    case = Golden.load(repository / "pipeline" / "golden.json").cases[-1]
    raw = case.inputs["raw"].array()
    inp = httpclient.InferInput("raw", list(raw.shape), "UINT8")
    inp.set_data_from_numpy(raw)
    result = client.infer("pipeline", [inp])
    probs, labels = result.as_numpy("probabilities"), result.as_numpy("label")
    table = Table(title="pipeline (preprocess -> mlp -> postprocess), one batch of 4")
    for col in ("row", "raw[:6]", "label", "p(label)", "expected label"):
        table.add_column(col)
    want = case.outputs["label"].array()
    for i in range(len(raw)):
        table.add_row(str(i), " ".join(map(str, raw[i, :6])), str(int(labels[i, 0])),
                      f"{float(np.max(probs[i])):.4f}", str(int(want[i, 0])))
    return table


def run(console: Console | None = None, repository: Path = SAMPLE) -> SmokeReport:
    console = console or Console()
    started = time.monotonic()
    with console.status("starting tritonserver (CPU, nvidia-pytriton wheel) on loopback..."):
        srv = server.start(repository, model_control_mode="explicit", load_models=["*"])
    try:
        console.print(f"tritonserver ready in {time.monotonic() - started:.1f}s: "
                      f"http://{srv.http_url} grpc://{srv.grpc_url} {srv.metrics_url}")
        report = smoke(f"grpc://{srv.grpc_url}", repository=repository, metrics_url=srv.metrics_url)
        console.print(report_table(report))
        console.print(pipeline_table(srv.http_url, repository))
        return report
    finally:
        srv.stop()
