"""The inference check every deployment ends with: is this Triton really serving what it should?

Checks, in order: server live and ready; each model (all of them, or the ones named) READY; each
model's golden inference answers within tolerance; the metrics endpoint serves the ``nv_inference_*``
families. Works over HTTP (``http://host:port``) and gRPC (``grpc://host:port``, ``grpcs://`` for TLS).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from tritonops.core.names import GOLDEN_FILE
from tritonops.core.triton_cli import GRPC_PORT, HTTP_PORT, METRICS_PORT
from tritonops.model_repo.golden import Golden, compare
from tritonops.observability import metrics as m
from tritonops.triton.admin import client_headers

# Families Triton exports once a model has been loaded (names from Triton's metrics documentation).
EXPECTED_FAMILIES = (
    m.REQUEST_SUCCESS, m.REQUEST_FAILURE, m.INFERENCE_COUNT, m.EXEC_COUNT, m.REQUEST_DURATION_US,
    m.QUEUE_DURATION_US, m.COMPUTE_INPUT_US, m.COMPUTE_INFER_US, m.COMPUTE_OUTPUT_US, m.PENDING,
)


class Check(BaseModel):
    check: str  # live, ready, model, golden, metrics
    target: str
    ok: bool
    detail: str = ""
    ms: float = 0.0


class SmokeReport(BaseModel):
    url: str
    server_version: str | None = None
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


@dataclass
class Endpoint:
    """A Triton address parsed from ``http://host:port`` or ``grpc[s]://host:port``."""

    protocol: Literal["http", "grpc"]
    address: str  # host:port
    tls: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @classmethod
    def parse(cls, url: str, **kw: Any) -> Endpoint:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https", "grpc", "grpcs") or not parts.hostname:
            raise ValueError(f"{url!r}: expected http://HOST:PORT or grpc://HOST:PORT")
        proto: Literal["http", "grpc"] = "grpc" if parts.scheme.startswith("grpc") else "http"
        port = parts.port or (GRPC_PORT if proto == "grpc" else HTTP_PORT)
        return cls(proto, f"{parts.hostname}:{port}", parts.scheme in ("https", "grpcs"), **kw)

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0]

    def client(self) -> Any:
        if self.protocol == "grpc":
            def read(p: Path | None) -> bytes | None:
                return p.read_bytes() if p else None
            return grpcclient.InferenceServerClient(
                self.address, ssl=self.tls, root_certificates=read(self.ca),
                private_key=read(self.key), certificate_chain=read(self.cert),
            )
        return httpclient.InferenceServerClient(self.address, ssl=self.tls)

    @property
    def module(self) -> Any:
        return grpcclient if self.protocol == "grpc" else httpclient


def _timed(name: str, target: str, fn: Callable[..., str | None], *args: Any) -> Check:
    """Run ``fn(*args)``; it returns None (pass) or a failure reason. Exceptions fail the check."""
    start = time.perf_counter()
    try:
        reason = fn(*args)
        ok = reason is None
        detail = reason or ""
    except Exception as e:  # noqa: BLE001 - every failure becomes a reported check
        ok, detail = False, _short(e)
    return Check(check=name, target=target, ok=ok, detail=detail, ms=round((time.perf_counter() - start) * 1e3, 1))


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def repository_models(client: Any, endpoint: Endpoint) -> list[str]:
    """Model names from the server's repository index (a restricted API on hardened servers)."""
    headers = client_headers(endpoint.protocol, endpoint.headers)
    if endpoint.protocol == "grpc":
        index = client.get_model_repository_index(headers=headers, as_json=True).get("models", [])
    else:
        index = client.get_model_repository_index(headers=headers)
    return sorted({m["name"] for m in index})


def model_ready(client: Any, model: str) -> str | None:
    return None if client.is_model_ready(model) else "model is not READY"


def golden_inference(client: Any, endpoint: Endpoint, model: str, golden: Golden) -> str | None:
    """Run every golden case; None when all match, else the first mismatch."""
    mod = endpoint.module
    for case in golden.cases:
        inputs = []
        for name, tensor in case.inputs.items():
            arr = tensor.array()
            inp = mod.InferInput(name, list(arr.shape), tensor.datatype)
            inp.set_data_from_numpy(arr)
            inputs.append(inp)
        outputs = [mod.InferRequestedOutput(n) for n in case.outputs]
        result = client.infer(model, inputs, outputs=outputs)
        for name, want in case.outputs.items():
            got = result.as_numpy(name)
            if got is None:
                return f"case {case.name}: output {name!r} missing from the response"
            reason = compare(want, got, golden.rtol, golden.atol)
            if reason:
                return f"case {case.name}: output {name!r} {reason}"
    return None


def metrics_families(metrics_url: str, timeout: float = 5) -> set[str]:
    with urllib.request.urlopen(metrics_url, timeout=timeout) as r:  # noqa: S310 - operator-given URL
        text = r.read().decode()
    return {f.name for f in text_string_to_metric_families(text)}


def smoke(
    url: str,
    *,
    models: Iterable[str] = (),
    repository: Path | None = None,
    metrics_url: str | None = None,
    headers: dict[str, str] | None = None,
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
) -> SmokeReport:
    """Run the smoke check against one Triton.

    ``repository`` is a local copy of the model repository (the release deployed there): it supplies
    each model's golden.json and, when ``models`` is empty, the list of models to expect. Without it
    the list comes from the server's repository index (pass the admin ``headers`` on a hardened server).
    ``metrics_url`` defaults to Triton's metrics port on the same host.
    """
    endpoint = Endpoint.parse(url, headers=dict(headers or {}), ca=ca, cert=cert, key=key)
    client = endpoint.client()
    checks: list[Check] = []
    report = SmokeReport(url=url, checks=[])

    live = _timed("live", endpoint.address, lambda: None if client.is_server_live() else "server is not live")
    checks.append(live)
    if not live.ok:
        report.checks = checks
        return report
    checks.append(_timed("ready", endpoint.address,
                         lambda: None if client.is_server_ready() else "server is not ready"))
    try:
        meta = client.get_server_metadata(**({"as_json": True} if endpoint.protocol == "grpc" else {}))
        report.server_version = meta.get("version")
    except Exception:  # noqa: BLE001, S110 - the version is informational
        pass

    names = sorted(set(models))
    if not names and repository is not None:
        names = sorted(p.parent.name for p in Path(repository).glob("*/config.pbtxt"))
    if not names:
        try:
            names = repository_models(client, endpoint)
            problem = "" if names else "the server lists no models"
        except Exception as e:  # noqa: BLE001
            problem = f"{_short(e)} (name the models, give --repository, or pass the admin header)"
        if problem:
            checks.append(Check(check="index", target=endpoint.address, ok=False, detail=problem))

    for name in names:
        ready = _timed("model", name, model_ready, client, name)
        checks.append(ready)
        golden_path = Path(repository) / name / GOLDEN_FILE if repository else None
        if ready.ok and golden_path is not None and golden_path.exists():
            golden = Golden.load(golden_path)
            checks.append(_timed("golden", name, golden_inference, client, endpoint, name, golden))

    murl = metrics_url or f"http://{endpoint.host}:{METRICS_PORT}/metrics"

    def metrics() -> str | None:
        missing = [f for f in EXPECTED_FAMILIES if f not in metrics_families(murl)]
        return f"missing families: {', '.join(missing)}" if missing else None

    checks.append(_timed("metrics", murl, metrics))
    report.checks = checks
    return report


def report_table(report: SmokeReport) -> Table:
    table = Table(title=f"tritonops smoke {report.url} (Triton {report.server_version or '?'})")
    for col in ("check", "target", "result", "ms", "detail"):
        table.add_column(col, justify="right" if col == "ms" else "left", overflow="fold")
    for c in report.checks:
        table.add_row(c.check, c.target, "[green]ok[/]" if c.ok else "[red]FAIL[/]", f"{c.ms:.1f}", escape(c.detail))
    return table
