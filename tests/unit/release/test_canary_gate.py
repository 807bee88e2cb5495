"""The canary gate without a real Prometheus: the verdict (pure), the queries it sends, and
``tritonops release promote --prometheus`` against a stand-in HTTP API on loopback.

The stand-in answers ``/api/v1/query`` with canned vectors chosen by the recording rule the query
names, the way Prometheus answers; the live comparison is tests/integration/test_canary_promote.py.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tritonops.cli import app
from tritonops.core.keys import manifest_key
from tritonops.observability import metrics as m
from tritonops.observability import rules as r
from tritonops.release import canary as c
from tritonops.release import publish as pub
from tritonops.release_format import manifest, signing
from typer.testing import CliRunner

GATE = c.Gate("http://127.0.0.1:9", window="10m", max_failure_increase=0.01, max_latency_increase=0.2,
              min_requests=100)


def _figs(requests: float | None = 1000, failure_ratio: float | None = 0.01,
          p95_ms: float | None = 20.0) -> c.TrackFigures:
    return c.TrackFigures(requests=requests, requests_per_second=None if requests is None else requests / 600,
                          failure_ratio=failure_ratio, mean_seconds=0.01,
                          p95_seconds=None if p95_ms is None else p95_ms / 1e3)


# --- the verdict ---------------------------------------------------------------------------------


def test_equal_tracks_promote() -> None:
    v = c.verdict("resnet", _figs(), _figs(), GATE)
    assert (v.ok, v.reasons) == (True, [])


@pytest.mark.parametrize(
    ("canary", "ok", "reason"),
    [
        (_figs(failure_ratio=0.02), True, ""),  # exactly stable + tolerance: allowed
        (_figs(failure_ratio=0.0201), False, "failure ratio 2.01% > stable 1.00% + 1.00%"),
        (_figs(p95_ms=24.0), True, ""),  # exactly stable x 1.2
        (_figs(p95_ms=24.1), False, "p95 24.1 ms > stable 20.0 ms x 1.2"),
        (_figs(failure_ratio=0.0), True, ""),  # better is fine
        (_figs(p95_ms=5.0), True, ""),
    ],
)
def test_tolerances_are_the_bounds(canary: c.TrackFigures, ok: bool, reason: str) -> None:
    v = c.verdict("resnet", _figs(), canary, GATE)
    assert v.ok is ok
    assert v.reasons == ([reason] if reason else [])


def test_worse_on_both_counts_names_both() -> None:
    v = c.verdict("resnet", _figs(), _figs(failure_ratio=0.5, p95_ms=100), GATE)
    assert not v.ok and len(v.reasons) == 2
    assert v.reasons[0].startswith("failure ratio 50.00%") and v.reasons[1].startswith("p95 100.0 ms")


def test_a_canary_failing_everything_is_refused_for_its_failures() -> None:
    """No successful request: no fresh p95, but the failure ratio alone says why."""
    v = c.verdict("resnet", _figs(), _figs(failure_ratio=1.0, p95_ms=None), GATE)
    assert not v.ok
    assert v.reasons == ["failure ratio 100.00% > stable 1.00% + 1.00%",
                         "not enough data: canary has no p95 (Triton needs --metrics-config summary_latencies=true)"]


@pytest.mark.parametrize(
    ("stable", "canary", "reason"),
    [
        (_figs(), _figs(requests=None), "not enough data: canary served 0 requests in 10m (need 100)"),
        (_figs(), _figs(requests=99.4), "not enough data: canary served 99 requests in 10m (need 100)"),
        (_figs(requests=12), _figs(), "not enough data: stable served 12 requests in 10m (need 100)"),
        (_figs(), _figs(failure_ratio=None), "not enough data: canary has no failure ratio"),
        (_figs(), _figs(failure_ratio=float("nan")), "not enough data: canary has no failure ratio"),
        (_figs(p95_ms=None), _figs(),
         "not enough data: stable has no p95 (Triton needs --metrics-config summary_latencies=true)"),
    ],
)
def test_no_traffic_is_no_evidence(stable: c.TrackFigures, canary: c.TrackFigures, reason: str) -> None:
    # A canary that served nothing must not pass, however good its (absent) figures look.
    v = c.verdict("resnet", stable, canary, GATE)
    assert (v.ok, v.reasons) == (False, [reason])


@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"prometheus": "prometheus:9090"}, "prometheus"),
        ({"window": "10 minutes"}, "window"),
        ({"window": "5m]) or vector(1"}, "window"),  # it goes into the query
        ({"max_failure_increase": -0.1}, "max_failure_increase"),
        ({"max_latency_increase": -1}, "max_latency_increase"),
        ({"min_requests": 0}, "min_requests"),
    ],
)
def test_gate_settings_are_checked(kwargs: dict[str, Any], field_name: str) -> None:
    args = {"prometheus": "http://prom:9090", **kwargs}
    with pytest.raises(ValueError, match=f"^{field_name}: "):
        c.Gate(**args)


def test_window_seconds() -> None:
    assert [c.window_seconds(w) for w in ("30s", "10m", "1h30m", "1d")] == [30, 600, 5400, 86400]


def test_queries_average_the_recording_rules_the_alerts_use() -> None:
    assert set(c.FIGURES.values()) <= set(r.RECORDING_RULES)
    assert c.FIGURES["failure_ratio"] == r.TRACK_FAILURE_RATIO
    assert c.average_expr(r.TRACK_FAILURE_RATIO, "5m") == (
        f'avg_over_time(({r.TRACK_FAILURE_RATIO}{{{m.TRACK}=~"stable|canary"}} >= 0)[5m:])')


# --- against a stand-in Prometheus HTTP API ------------------------------------------------------


@dataclass
class FakePrometheus:
    """``/api/v1/query``: rule name -> [(model, track, value)]; records the queries it got."""

    vectors: dict[str, list[tuple[str, str, float]]] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    error: tuple[int, str] | None = None
    url: str = ""

    def answer(self, expr: str) -> tuple[int, dict[str, Any]]:
        self.queries.append(expr)
        if self.error:
            return self.error[0], {"status": "error", "errorType": "bad_data", "error": self.error[1]}
        rule = next((name for name in self.vectors if name in expr), None)
        result = [{"metric": {"model": mo, "track": t}, "value": [1700000000.0, repr(v)]}
                  for mo, t, v in self.vectors.get(rule or "", [])]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            parts = urllib.parse.urlsplit(self.path)
            assert parts.path == "/api/v1/query"
            code, body = fake.answer(urllib.parse.parse_qs(parts.query)["query"][0])
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield fake
    httpd.shutdown()


def _tracks(prom: FakePrometheus, model: str, canary_failures: float = 0.01, canary_p95: float = 0.02,
            canary_rps: float = 5.0) -> None:
    for rule, stable, can in (
        (r.TRACK_REQUESTS_RATE, 50.0, canary_rps),
        (r.TRACK_FAILURE_RATIO, 0.01, canary_failures),
        (r.TRACK_REQUEST_SECONDS, 0.01, 0.01),
        (r.TRACK_REQUEST_SECONDS_P95, 0.02, canary_p95),
    ):
        prom.vectors.setdefault(rule, []).extend([(model, "stable", stable), (model, "canary", can)])


def test_evaluate_reads_every_figure_per_model(prom: FakePrometheus) -> None:
    _tracks(prom, "resnet")
    _tracks(prom, "bert", canary_failures=0.2)
    report = c.evaluate(c.Gate(prom.url, window="10m"))
    assert report["verdict"] == "refuse"
    by_model = {x["model"]: x for x in report["models"]}
    assert list(by_model) == ["bert", "resnet"]  # every model seen, sorted
    assert by_model["resnet"]["ok"] and not by_model["bert"]["ok"]
    assert by_model["resnet"]["canary"] == {"requests": 3000.0, "requests_per_second": 5.0, "failure_ratio": 0.01,
                                            "mean_seconds": 0.01, "p95_seconds": 0.02}
    assert len(prom.queries) == len(c.FIGURES)
    assert all("[10m:]" in q for q in prom.queries)
    json.dumps(report, allow_nan=False)  # valid JSON for --json


def test_evaluate_only_the_named_models(prom: FakePrometheus) -> None:
    _tracks(prom, "resnet")
    _tracks(prom, "bert", canary_failures=0.2)
    report = c.evaluate(c.Gate(prom.url, models=("resnet",)))
    assert report["verdict"] == "promote" and [x["model"] for x in report["models"]] == ["resnet"]
    missing = c.evaluate(c.Gate(prom.url, models=("resnet", "gpt")))
    assert missing["verdict"] == "refuse"
    assert missing["models"][1]["reasons"][0].startswith("not enough data: canary served 0 requests")


def test_nothing_in_prometheus_refuses(prom: FakePrometheus) -> None:
    report = c.evaluate(c.Gate(prom.url))
    assert (report["verdict"], report["models"]) == ("refuse", [])
    assert report["reasons"][0].startswith("not enough data")
    with pytest.raises(c.PromotionRefused, match="not enough data"):
        c.check(c.Gate(prom.url))


def test_nan_from_prometheus_is_no_figure(prom: FakePrometheus) -> None:
    _tracks(prom, "resnet")
    prom.vectors[r.TRACK_REQUEST_SECONDS_P95] = [("resnet", "stable", 0.02), ("resnet", "canary", float("nan"))]
    (model,) = c.evaluate(c.Gate(prom.url))["models"]
    assert model["canary"]["p95_seconds"] is None
    assert model["reasons"] == ["not enough data: canary has no p95 (Triton needs --metrics-config "
                                "summary_latencies=true)"]


def test_prometheus_errors_are_gate_errors(prom: FakePrometheus) -> None:
    prom.error = (400, "parse error at char 3")
    with pytest.raises(c.GateError, match="HTTP 400: parse error at char 3"):
        c.evaluate(c.Gate(prom.url))
    with pytest.raises(c.GateError, match="cannot query Prometheus"):
        c.evaluate(c.Gate("http://127.0.0.1:9", timeout_s=2))  # nothing listens on the discard port


# --- tritonops release promote --prometheus ------------------------------------------------------

RUNNER = CliRunner()
# Releases without files, signed for both channels: what a (signed) pointer move checks.
TEXTS = {rid: manifest.text({}, {}, rid, ["canary", "stable"]).encode() for rid in ("r1", "r2")}
DIGESTS = {rid: hashlib.sha256(t).hexdigest() for rid, t in TEXTS.items()}


def _store(tmp_path: Path) -> str:
    store = tmp_path / "store"
    w = pub.open_writer(str(store))
    key, _ = signing.keygen(tmp_path / "release-signing.key", tmp_path / "release.pub")
    for rid, text in TEXTS.items():
        w.put(manifest_key(DIGESTS[rid]), text, "application/json")
    pub.move_pointer(w, "stable", "r1", DIGESTS["r1"], "test", keys=[key])
    pub.move_pointer(w, "canary", "r2", DIGESTS["r2"], "test", keys=[key])
    return str(store)


def _stable(store: str) -> str:
    p = pub.read_pointer(pub.open_writer(store).reader, "stable")
    assert p is not None
    return str(p["release"])


def _promote(store: str, *extra: str) -> Any:
    key = str(Path(store).parent / "release-signing.key")
    return RUNNER.invoke(app, ["release", "promote", "canary", "stable", "--store", store, "--key", key, *extra])


def test_promote_refuses_with_figures_and_leaves_the_pointer(prom: FakePrometheus, tmp_path: Path) -> None:
    store = _store(tmp_path)
    _tracks(prom, "resnet", canary_failures=0.3, canary_p95=0.05)
    res = _promote(store, "--prometheus", prom.url, "--window", "15m")
    assert res.exit_code == 1, res.output
    assert _stable(store) == "r1"
    for text in ("resnet", "canary vs stable over 15m", "30.00%", "1.00%", "50.00 ms", "20.00 ms", "refused",
                 "failure ratio 30.00% > stable 1.00% + 1.00%"):
        assert text in " ".join(res.output.split()), (text, res.output)
    res = _promote(store, "--prometheus", prom.url, "--json")
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    assert report["verdict"] == "refuse" and report["channel"] == "stable"
    assert report["models"][0]["canary"]["failure_ratio"] == 0.3
    assert _stable(store) == "r1"


def test_promote_moves_the_pointer_when_the_canary_holds(prom: FakePrometheus, tmp_path: Path) -> None:
    store = _store(tmp_path)
    _tracks(prom, "resnet", canary_failures=0.015, canary_p95=0.022)
    res = _promote(store, "--prometheus", prom.url, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["release"], out["previous"], out["gate"]["verdict"]) == ("r2", "r1", "promote")
    assert _stable(store) == "r2"


def test_promote_without_prometheus_works_as_before(tmp_path: Path) -> None:
    store = _store(tmp_path)
    res = _promote(store)
    assert res.exit_code == 0, res.output
    assert "channel stable -> r2 (was r1)" in res.output and _stable(store) == "r2"
    (Path(store) / "channels" / "stable.json").unlink()  # stable not made yet: promote creates it
    res = _promote(store)
    assert res.exit_code == 0, res.output
    assert "channel stable -> r2 (new channel)" in res.output and "None" not in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "resnet"], "--model needs --prometheus"),
        (["--prometheus", "http://prom:9090", "--window", "ten"], "window: 'ten' is not a Prometheus duration"),
        (["--prometheus", "prom:9090"], "is not an http(s) URL"),
    ],
)
def test_promote_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    store = _store(tmp_path)
    res = _promote(store, *args)
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())
    assert _stable(store) == "r1"


def test_promote_with_prometheus_down_fails_and_leaves_the_pointer(tmp_path: Path) -> None:
    store = _store(tmp_path)
    res = _promote(store, "--prometheus", "http://127.0.0.1:9")
    assert res.exit_code == 3 and "cannot query Prometheus" in res.output  # could not run: ExitCode.FAILED
    assert _stable(store) == "r1"
