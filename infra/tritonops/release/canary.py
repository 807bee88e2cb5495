"""The canary gate: may a channel move to the canary's release? Ask Prometheus, compare, decide.

A model service with ``release.canary`` runs two tracks: pods labelled ``track="stable"`` follow the
stable channel, ``track="canary"`` pods the canary channel, and the router sends the canary a share of
the requests. Prometheus records, per model and track, the same traffic figures the alerts read
(``model_track:*``, :mod:`tritonops.observability.rules`). :func:`evaluate` averages them over a window
through Prometheus' HTTP API (``/api/v1/query``, standard library only; moments without requests,
where a ratio is 0/0, are skipped) and :func:`verdict` compares each model's canary with its stable
pods:

- failure ratio: the canary's may exceed stable's by at most ``max_failure_increase`` (absolute);
- p95 request time: the canary's may be at most stable's x (1 + ``max_latency_increase``);
- data: each track must have served at least ``min_requests`` requests of the model in the window,
  and both p95s must be known (Triton started with ``--metrics-config summary_latencies=true``);
  anything less refuses with "not enough data": no traffic is no evidence.

``tritonops release promote CANARY STABLE --store STORE --prometheus URL`` runs the gate before it moves
the pointer (:func:`tritonops.release.publish.promote`) and refuses with the figures when it fails.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Any

from tritonops.core import netio
from tritonops.core.errors import ReleaseError
from tritonops.observability import rules as r
from tritonops.observability.metrics import CANARY, STABLE, TRACK

QUERY_ANSWER_MAX = 16 << 20  # bytes of one Prometheus answer

# A Prometheus duration: 30s, 10m, 1h30m (the window goes into the query, so nothing else passes).
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}

# Figure -> the recording rule it is read from.
FIGURES = {
    "requests_per_second": r.TRACK_REQUESTS_RATE,
    "failure_ratio": r.TRACK_FAILURE_RATIO,
    "mean_seconds": r.TRACK_REQUEST_SECONDS,
    "p95_seconds": r.TRACK_REQUEST_SECONDS_P95,
}


class GateError(ReleaseError):
    """Prometheus could not be asked (unreachable, an error answer, a malformed reply)."""


class PromotionRefused(ReleaseError):
    """The canary is worse than stable, or there is not enough data to tell; ``report`` has the figures."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report
        failed = [f"{m['model']}: {'; '.join(m['reasons'])}" for m in report["models"] if not m["ok"]]
        super().__init__("promotion refused: " + (" | ".join(failed) or "; ".join(report.get("reasons", []))))


def window_seconds(window: str) -> float:
    """Seconds of a Prometheus duration; ValueError naming ``window`` for anything else."""
    if not _DURATION.match(window):
        raise ValueError(f"window: {window!r} is not a Prometheus duration (e.g. 30s, 10m, 1h)")
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", window))


@dataclass(frozen=True)
class Gate:
    """What ``promote --prometheus`` checks: where, over which window, with which tolerances."""

    prometheus: str  # base URL, e.g. http://kube-prometheus-stack-prometheus.monitoring.svc:9090
    window: str = "10m"
    models: tuple[str, ...] = ()  # empty: every model either track reported in the window
    max_failure_increase: float = 0.01  # absolute: canary ratio <= stable ratio + this
    max_latency_increase: float = 0.2  # relative: canary p95 <= stable p95 x (1 + this)
    min_requests: int = 100  # per model and track within the window
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.prometheus)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"prometheus: {self.prometheus!r} is not an http(s) URL")
        window_seconds(self.window)
        if not 0 <= self.max_failure_increase <= 1:
            raise ValueError(f"max_failure_increase: must lie in 0..1, got {self.max_failure_increase}")
        if self.max_latency_increase < 0:
            raise ValueError(f"max_latency_increase: must be >= 0, got {self.max_latency_increase}")
        if self.min_requests < 1:
            raise ValueError(f"min_requests: must be >= 1, got {self.min_requests}")


@dataclass
class TrackFigures:
    """One model on one track, averaged over the window; None where Prometheus has no sample."""

    requests: float | None = None  # requests in the window (rate x window)
    requests_per_second: float | None = None
    failure_ratio: float | None = None
    mean_seconds: float | None = None
    p95_seconds: float | None = None


@dataclass
class ModelVerdict:
    model: str
    stable: TrackFigures
    canary: TrackFigures
    ok: bool = False
    reasons: list[str] = field(default_factory=list)


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or math.isinf(value) else value


def verdict(model: str, stable: TrackFigures, canary: TrackFigures, gate: Gate) -> ModelVerdict:
    """Compare one model's canary with its stable pods (pure: no Prometheus).

    Too few requests on either track refuses outright; otherwise each comparison that has both
    figures is made, and a missing figure is a reason of its own (a canary that fails every request
    has no fresh p95, but its failure ratio still says why it is refused).
    """
    out = ModelVerdict(model, stable, canary)
    for track, fig in ((CANARY, canary), (STABLE, stable)):
        n = _num(fig.requests)
        if n is None or n < gate.min_requests:
            out.reasons.append(f"not enough data: {track} served {0 if n is None else round(n)} requests in "
                               f"{gate.window} (need {gate.min_requests})")
    if out.reasons:
        return out
    s_fail, c_fail = _num(stable.failure_ratio), _num(canary.failure_ratio)
    if s_fail is not None and c_fail is not None:
        if c_fail > s_fail + gate.max_failure_increase:
            out.reasons.append(f"failure ratio {c_fail:.2%} > stable {s_fail:.2%} + {gate.max_failure_increase:.2%}")
    else:
        out.reasons += [f"not enough data: {t} has no failure ratio"
                        for t, v in ((CANARY, c_fail), (STABLE, s_fail)) if v is None]
    s_p95, c_p95 = _num(stable.p95_seconds), _num(canary.p95_seconds)
    if s_p95 is not None and c_p95 is not None:
        if c_p95 > s_p95 * (1 + gate.max_latency_increase):
            out.reasons.append(f"p95 {c_p95 * 1e3:.1f} ms > stable {s_p95 * 1e3:.1f} ms "
                               f"x {1 + gate.max_latency_increase:g}")
    else:
        out.reasons += [f"not enough data: {t} has no p95 (Triton needs --metrics-config summary_latencies=true)"
                        for t, v in ((CANARY, c_p95), (STABLE, s_p95)) if v is None]
    out.ok = not out.reasons
    return out


def query(prometheus: str, expr: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """An instant query (``/api/v1/query``): the vector's samples, or GateError naming what failed."""
    url = prometheus.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:  # one deadline for the whole answer, however slowly it trickles; the answer's size capped
        resp = netio.request(url, what=prometheus, deadline=timeout_s, limit=QUERY_ANSWER_MAX)
    except ReleaseError as e:
        raise GateError(f"cannot query Prometheus: {e}") from None
    if resp.status != 200:  # Prometheus answers 400/422/503 with a JSON error
        try:
            detail = json.loads(resp.body).get("error") or resp.status
        except ValueError:
            detail = resp.body[:200].decode(errors="replace")
        raise GateError(f"{prometheus}: query {expr!r} failed: HTTP {resp.status}: {detail}")
    try:
        body = json.loads(resp.body)
    except ValueError as e:
        raise GateError(f"{prometheus}: cannot query Prometheus: not JSON ({e})") from None
    if body.get("status") != "success" or body.get("data", {}).get("resultType") != "vector":
        raise GateError(f"{prometheus}: query {expr!r}: unexpected answer {str(body)[:200]}")
    return list(body["data"]["result"])


def average_expr(rule: str, window: str) -> str:
    """``rule``'s samples of both tracks averaged over ``window``, skipping NaN (a moment without
    requests makes a ratio 0/0): a subquery at Prometheus' evaluation interval."""
    window_seconds(window)
    return f'avg_over_time(({rule}{{{TRACK}=~"{STABLE}|{CANARY}"}} >= 0)[{window}:])'


def collect(gate: Gate) -> dict[str, dict[str, TrackFigures]]:
    """model -> track -> figures, each recording rule averaged over the window."""
    seconds = window_seconds(gate.window)
    out: dict[str, dict[str, TrackFigures]] = {}
    for name, rule in FIGURES.items():
        for sample in query(gate.prometheus, average_expr(rule, gate.window), gate.timeout_s):
            labels = sample.get("metric", {})
            model, track = labels.get("model"), labels.get(TRACK)
            if not model or track not in (STABLE, CANARY):
                continue
            value = float(sample["value"][1])
            figs = out.setdefault(model, {STABLE: TrackFigures(), CANARY: TrackFigures()})[track]
            setattr(figs, name, value)
            if name == "requests_per_second":
                figs.requests = value * seconds
    return out


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    """NaN/Inf -> None, so the report is valid JSON."""
    return {k: _clean(v) if isinstance(v, dict) else (_num(v) if isinstance(v, float) else v) for k, v in d.items()}


def evaluate(gate: Gate) -> dict[str, Any]:
    """Ask Prometheus and decide; the report (JSON-ready) says ``promote`` only if every model passes."""
    figures = collect(gate)
    results = []
    for model in list(gate.models) or sorted(figures):
        tracks = figures.get(model) or {STABLE: TrackFigures(), CANARY: TrackFigures()}
        results.append(verdict(model, tracks[STABLE], tracks[CANARY], gate))
    reasons = [] if results else ["not enough data: Prometheus has no model_track series for either track in "
                                  f"{gate.window} (is the ServiceMonitor's podTargetLabels track in place?)"]
    ok = bool(results) and all(v.ok for v in results)
    return {
        "verdict": "promote" if ok else "refuse",
        "prometheus": gate.prometheus,
        "window": gate.window,
        "tolerance": {"max_failure_increase": gate.max_failure_increase,
                      "max_latency_increase": gate.max_latency_increase, "min_requests": gate.min_requests},
        "reasons": reasons,
        "models": [_clean(asdict(v)) for v in results],
    }


def check(gate: Gate) -> dict[str, Any]:
    """:func:`evaluate`, raising :class:`PromotionRefused` (with the report) unless it says promote."""
    report = evaluate(gate)
    if report["verdict"] != "promote":
        raise PromotionRefused(report)
    return report
