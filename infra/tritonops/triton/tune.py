"""Tuner: search dynamic batching and instance counts on a running Triton, measure, recommend.

The search is a coordinate ascent (:func:`climb`: batching, then instances, then queue delay and
preferred size, each kept only when it gains) or the full grid (:meth:`Space.grid`). Each setting
is applied to a model *without touching the repository*: Triton (in explicit model control mode)
reloads the model from a config override sent through the repository API
(``load_model(name, config=json)``). Each setting is measured with :mod:`tritonops.triton.bench`; the
recommendation is the highest throughput whose p95 stays within the latency budget and that had no
errors (settings within 5% of it count as equal; the simplest, measured first, wins). The
recommendation is written back into the model's ``config.pbtxt`` changing only the batching and
instance fields (:mod:`tritonops.model_repo.pbtxt_edit`), and a PNG plots throughput against p95 for
every setting.

A setting perf_analyzer could not measure stably (a busy machine: at concurrency 64 the load generator
alone keeps two cores busy) is measured again with windows twice as long and twice as many, and if
still unstable, or at once when a run overran its time limit, as the median of short rounds each
averaging perf_analyzer's last three windows with no stability demanded (:mod:`tritonops.triton.steady`).
The rounds' spread is the noise measured (``BenchReport.spread``): two settings rank only when they
differ by more than it (and by :data:`MIN_GAIN`), so a busy machine still gets a
recommendation, the simpler setting when the ranking is not clear beyond the noise. A host whose load
drifts between runs gets a runoff (:func:`runoff`): the pick and its close rivals measured again in
turns, ranked by their medians. With a gRPC address the search also measures over gRPC (the clients'
protocol: reported, not written). Every trial says how it was
measured (:attr:`Trial.measured`); none is dropped, and the climb stops rather than step past a
dimension whose setting could not be measured at all (:attr:`TuneResult.incomplete`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tritonclient.http as httpclient
from google.protobuf import json_format

from tritonops.model_repo import pbtxt, pbtxt_edit
from tritonops.model_repo.spec import DynamicBatching, InstanceGroup, ModelSpec
from tritonops.triton import bench, perf_analyzer
from tritonops.triton.load_config import BenchConfig, Engine, Protocol
from tritonops.triton.steady import STABLE, UNMEASURED, measure_steadily, median_report

Search = Literal["climb", "grid"]
# A setting must beat another by more than this fraction of throughput to count as better: below it,
# two perf_analyzer runs of one setting differ on a busy machine.
MIN_GAIN = 0.05
# The runoff (:func:`runoff`): at most this many finalists, each measured this many more times, in turns.
RUNOFF_FINALISTS = 4
RUNOFF_ROUNDS = 2


@dataclass(frozen=True)
class Setting:
    """One point of the sweep."""

    dynamic_batching: bool
    instances: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    # How the clients send: not part of the model's configuration (write_recommendation leaves it out), but
    # the frontend can bound a setting (bounds.LIFT), and gRPC may lift it.
    protocol: Protocol = "http"

    @property
    def label(self) -> str:
        over = "" if self.protocol == "http" else f", {self.protocol}"
        if not self.dynamic_batching:
            return f"batching off, {self.instances} inst{over}"
        pref = ",".join(map(str, self.preferred_batch_sizes)) or "-"
        return f"batching pref={pref} delay={self.max_queue_delay_us}us, {self.instances} inst{over}"


# The instance counts and queue delays (microseconds) searched unless told otherwise.
INSTANCE_COUNTS = (1, 2)
QUEUE_DELAYS_US = (0, 500, 2000)
# Requests sent to each setting after its reload, before it is measured.
WARMUP_REQUESTS = 50


@dataclass(frozen=True)
class Space:
    """What the tuner may change: dynamic batching (a model with a batch dimension), instances, delays."""

    max_batch_size: int
    instance_counts: tuple[int, ...] = INSTANCE_COUNTS
    queue_delays_us: tuple[int, ...] = QUEUE_DELAYS_US
    protocols: tuple[Protocol, ...] = ("http",)  # with "grpc": the search also measures over gRPC

    def __post_init__(self) -> None:
        if not self.instance_counts or min(self.instance_counts) < 1:
            raise ValueError(f"instance counts: need at least one, each >= 1, got {list(self.instance_counts)}")
        if not self.queue_delays_us or min(self.queue_delays_us) < 0:
            raise ValueError(f"queue delays: need at least one, each >= 0, got {list(self.queue_delays_us)}")

    @property
    def counts(self) -> list[int]:
        return sorted(set(self.instance_counts))

    @property
    def delays(self) -> list[int]:
        return sorted(set(self.queue_delays_us))

    def grid(self) -> list[Setting]:
        """Every setting: batching off, and on with no preferred size / the max batch size, per delay and
        count; each over every protocol (HTTP first)."""
        grid = [Setting(False, n) for n in self.counts]
        if self.max_batch_size > 0:  # a model without a batch dimension cannot batch dynamically
            for n in self.counts:
                for pref in ((), (self.max_batch_size,)):
                    grid += [Setting(True, n, pref, delay) for delay in self.delays]
        return [dataclasses.replace(s, protocol=p) for p in self.protocols for s in grid]


@dataclass(frozen=True)
class TuneConfig:
    """What one tune run is (the settings of ``tritonops tune``, one default each), checked when made.

    :attr:`load` is the :class:`BenchConfig` each setting is measured with; :meth:`space` what is searched
    for a model of a given max batch size; :func:`run` tunes with it.
    """

    url: str  # host:port of Triton's HTTP endpoint (tune reloads models through its repository API)
    model: str
    budget_ms: float = 50.0  # the p95 latency a recommendation must keep
    # 16, not bench's 4: dynamic batching gains only when requests wait together, and with 4 in flight a
    # batch never holds more than 4; 16 lets the batcher fill batches that show what it is worth.
    concurrency: int = 16
    max_requests: int | None = None  # per setting; None: only max_seconds bounds each measurement
    max_seconds: float = 5.0  # measurement time budget per setting
    engine: Engine = "perf_analyzer"  # the reference
    stability_pct: float = BenchConfig.stability_pct
    instance_counts: tuple[int, ...] = INSTANCE_COUNTS
    queue_delays_us: tuple[int, ...] = QUEUE_DELAYS_US
    search: Search = "climb"
    grpc_url: str | None = None  # host:port of Triton's gRPC endpoint: the search also tries gRPC
    warmup_requests: int = WARMUP_REQUESTS
    # The admin header for the restricted APIs (BenchConfig.headers): a secret, never in repr().
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    allowed_hosts: tuple[str, ...] = ()  # non-loopback hosts that may receive load (BenchConfig's)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.budget_ms) and self.budget_ms > 0):  # --budget-ms, as the CLI names it
            raise ValueError(f"budget-ms: must be a finite number > 0, got {self.budget_ms}")
        _ = self.load  # BenchConfig checks the load's own bounds
        if self.search not in ("climb", "grid"):
            raise ValueError(f"search: must be climb or grid, got {self.search!r}")
        if self.grpc_url and self.headers and self.engine == "perf_analyzer":
            raise ValueError("grpc-url: perf_analyzer sends no headers over gRPC, and this Triton's restricted "
                             "APIs need the admin key: tune over HTTP only, or with --engine python")

    @property
    def load(self) -> BenchConfig:
        return BenchConfig(url=self.url, model=self.model, concurrency=self.concurrency,
                           max_requests=self.max_requests, max_seconds=self.max_seconds, engine=self.engine,
                           stability_pct=self.stability_pct, headers=self.headers,
                           allowed_hosts=self.allowed_hosts)

    def space(self, max_batch_size: int) -> Space:
        return Space(max_batch_size, self.instance_counts, self.queue_delays_us,
                     ("http", "grpc") if self.grpc_url else ("http",))


def _margin(min_gain: float, *trials: Trial) -> float:
    """How far apart two settings must be to rank: ``min_gain``, or further when the ranges their rounds
    measured (median +- spread) would overlap within it."""
    return max(min_gain, sum(t.report.spread for t in trials))


def _better(new: Trial, old: Trial, min_gain: float) -> bool:
    """``new`` beats ``old`` by more than noise: within budget and error-free first, then throughput
    higher by ``min_gain`` or by the noise both measured, whichever is larger (or, while neither meets
    the budget, p95 lower by as much)."""
    if new.usable != old.usable:
        return new.usable
    gain = _margin(min_gain, new, old)
    if new.usable:
        return new.report.inferences_per_s > old.report.inferences_per_s * (1 + gain)
    return not math.isnan(new.report.p95_ms) and (
        math.isnan(old.report.p95_ms) or new.report.p95_ms < old.report.p95_ms * (1 - gain))


def climb(space: Space, trial: Callable[[Setting], Trial], min_gain: float = MIN_GAIN) -> str | None:
    """Coordinate ascent through ``space``, one dimension at a time, in the order that matters most.

    1. batching off and on (no preferred size, the smallest delay) at the smallest instance count;
    2. the better of the two with more instances, while each step gains more than ``min_gain``;
    3. at that count, longer queue delays while each gains, then the max batch size as preferred size;
    4. the best so far over each further protocol (gRPC), kept when it gains.

    On a model where batching pays, this measures 5 settings where :meth:`Space.grid` measures 10
    (instances 1,2; delays 0,2000). ``trial`` measures one setting.

    Returns None, or why the climb stopped early: a setting could not be measured at all
    (:attr:`Trial.unmeasured`), so the dimension it belongs to is undecided and the climb does not go on
    as if the setting had lost (it went on with batching off, and recommended it, when batching on was
    unmeasured).
    """
    counts, delays = space.counts, space.delays
    best = trial(Setting(False, counts[0]))
    if best.unmeasured:
        return _stopped("batching", best)
    # Each dimension's steps, as changes to the best setting so far, walked while each gains.
    steps: dict[str, list[dict[str, Any]]] = {
        "batching": ([{"dynamic_batching": True, "max_queue_delay_us": delays[0]}]
                     if space.max_batch_size > 0 else []),
        "instances": [{"instances": n} for n in counts[1:]],
        "queue delay": [{"max_queue_delay_us": d} for d in delays[1:]],
        "preferred batch size": [{"preferred_batch_sizes": (space.max_batch_size,)}],
        "protocol": [{"protocol": p} for p in space.protocols[1:]],
    }
    for dimension, changes in steps.items():
        if dimension in ("queue delay", "preferred batch size") and not best.setting.dynamic_batching:
            continue  # batching's own settings, where batching lost
        for change in changes:
            t = trial(dataclasses.replace(best.setting, **change))
            if t.unmeasured:
                return _stopped(dimension, t)
            if not _better(t, best, min_gain):
                break
            best = t
    return None


def _stopped(dimension: str, t: Trial) -> str:
    return f"the climb stopped at {dimension}: {t.setting.label} could not be measured ({t.failure})"


def apply(spec: ModelSpec, setting: Setting) -> ModelSpec:
    """The spec with ``setting``'s batching and instance count; everything else unchanged."""
    if setting.dynamic_batching and not spec.max_batch_size:
        raise ValueError(f"{spec.name}: dynamic batching needs max_batch_size > 0")
    if setting.instances < 1:
        raise ValueError(f"instances: must be >= 1, got {setting.instances}")
    new = spec.model_copy(deep=True)
    if setting.dynamic_batching:
        base = spec.dynamic_batching or DynamicBatching()
        new.dynamic_batching = base.model_copy(
            update={
                "preferred_batch_size": list(setting.preferred_batch_sizes),
                "max_queue_delay_microseconds": setting.max_queue_delay_us,
            }
        )
    else:
        new.dynamic_batching = None
    groups = [g.model_copy(deep=True) for g in spec.instance_group] or [InstanceGroup()]
    groups[0].count = setting.instances
    new.instance_group = groups[:1]
    return new


def config_json(spec: ModelSpec) -> str:
    """Triton's model configuration JSON for the repository API's ``config`` parameter."""
    return json_format.MessageToJson(pbtxt.spec_to_proto(spec), preserving_proto_field_name=True)


def setting_of(spec: ModelSpec) -> Setting:
    """The setting a spec currently has (the sweep's reference point)."""
    count = spec.instance_group[0].count if spec.instance_group and spec.instance_group[0].count else 1
    db = spec.dynamic_batching
    if db is None:
        return Setting(False, count)
    return Setting(True, count, tuple(db.preferred_batch_size), db.max_queue_delay_microseconds or 0)


@dataclass
class Trial:
    setting: Setting
    report: bench.BenchReport
    within_budget: bool
    failure: str = ""  # why the engine could not measure this setting (then report.errors says so)
    # How: "stable" (perf_analyzer's windows agreed), "stable-after-retry" (with longer windows),
    # "median-of-N" (N rounds, none stable), "unmeasured" (no figures), "one-run" (the python engine).
    measured: str = STABLE
    note: str = ""  # why it was measured again (perf_analyzer's instability), when it was

    @property
    def unmeasured(self) -> bool:
        return self.measured == UNMEASURED

    @property
    def error_free(self) -> bool:
        return not self.report.errors

    @property
    def usable(self) -> bool:
        """A candidate for the recommendation: within the p95 budget and without errors."""
        return self.within_budget and self.error_free

    def to_dict(self) -> dict[str, Any]:
        report = self.report.to_dict()
        return {
            "setting": dataclasses.asdict(self.setting),
            "label": self.setting.label,
            "within_budget": self.within_budget,
            **{k: report[k] for k in ("throughput_rps", "inferences_per_s", "p50_ms", "p95_ms", "p99_ms",
                                      "errors", "server", "engine", "spread", "bound")},
            "failure": self.failure,
            "measured": self.measured,
            "note": self.note,
        }


@dataclass
class TuneResult:
    model: str
    budget_ms: float
    trials: list[Trial]
    best: Trial | None
    incomplete: str = ""  # why the search is undecided (a setting could not be measured); then best is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "p95_budget_ms": self.budget_ms,
            "incomplete": self.incomplete or None,
            "recommended": self.best.to_dict() if self.best else None,
            "trials": [t.to_dict() for t in self.trials],
        }


def recommend(trials: Sequence[Trial], min_gain: float = MIN_GAIN) -> Trial | None:
    """Highest throughput among error-free trials within the p95 budget.

    Trials within ``min_gain`` of the highest count as equal (run-to-run noise), and the one measured
    first wins: both searches measure the simpler settings first (batching off before on, fewer
    instances, no queue delay, no preferred size).
    """
    ok = [t for t in trials if t.usable]
    if not ok:
        return None
    top = max(ok, key=lambda t: t.report.inferences_per_s)
    return next(t for t in ok if t.report.inferences_per_s * (1 + _margin(min_gain, t, top))
                >= top.report.inferences_per_s)


def _wait_ready(client: httpclient.InferenceServerClient, load: BenchConfig, model: str,
                timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bench.answer(load, f"{model} ready", lambda: client.is_model_ready(model)):
            return
        time.sleep(0.1)
    raise bench.ServerError(f"{model}: not ready {timeout}s after loading a new configuration")


def _reload(http_url: str, load: BenchConfig, spec: ModelSpec) -> None:
    """Load ``spec`` (its name, with its configuration) through the repository API; wait until it is ready."""
    cfg = dataclasses.replace(load, url=http_url, protocol="http")
    client = bench.answer(cfg, "connect", lambda: httpclient.InferenceServerClient(http_url))
    try:
        bench.answer(cfg, f"loading {spec.name}", lambda: client.load_model(
            spec.name, config=config_json(spec), headers=bench.headers(cfg)))
        _wait_ready(client, cfg, spec.name)
    finally:
        client.close()


def load_setting(http_url: str, spec: ModelSpec, setting: Setting, load: BenchConfig, *,
                 warmup_requests: int = 50) -> None:
    """Reload ``spec.name`` with ``setting`` through the repository API and warm it up.

    The warm-up is a few requests from the python engine.
    """
    bench.check_target(http_url, load.allowed_hosts)
    _reload(http_url, load, apply(spec, setting))
    if warmup_requests:
        bench.run(dataclasses.replace(load, engine="python", max_requests=warmup_requests,
                                      max_seconds=min(5.0, load.max_seconds)))


def measure(
    http_url: str,
    spec: ModelSpec,
    setting: Setting,
    load: BenchConfig,
    *,
    warmup_requests: int = 50,
) -> bench.BenchReport:
    """Reload ``spec.name`` with ``setting`` (:func:`load_setting`), then bench it once with ``load.engine``."""
    load_setting(http_url, spec, setting, load, warmup_requests=warmup_requests)
    return bench.run(load)


def runoff(trials: dict[Setting, Trial], again: Callable[[Setting], Trial], budget_ms: float,
           min_gain: float = MIN_GAIN) -> None:
    """Judge the pick again where the host's load drifts between runs, in place in ``trials``.

    perf_analyzer's stability covers one run; a busy host also drifts from one run to the next (another
    job's load comes and goes), so settings measured a minute apart may differ by that drift alone. The
    pick is measured once more (``again``: a fresh reload and measurement): when the two figures agree
    within ``min_gain`` the ranking stands. Otherwise the finalists (the usable settings within twice the
    drift of the pick, at most :data:`RUNOFF_FINALISTS`) are measured :data:`RUNOFF_ROUNDS` more times
    each, in turns so that each round sees the same load, and each becomes the median of its runs, its
    spread their noise ("runoff-median-of-N"): :func:`recommend` then ranks them only beyond it.
    """
    pick = recommend(list(trials.values()), min_gain)
    if pick is None:
        return
    second = again(pick.setting)
    if not second.usable:
        drift = 1.0  # the pick itself did not hold: every usable setting is a finalist
    else:
        drift = abs(second.report.inferences_per_s - pick.report.inferences_per_s) / pick.report.inferences_per_s
        if drift <= min_gain:
            return
    ranked = sorted((t for t in trials.values() if t.usable), key=lambda t: -t.report.inferences_per_s)
    floor = pick.report.inferences_per_s * (1 - 2 * drift - min_gain)
    finals = [t for t in ranked if t.report.inferences_per_s >= floor][:RUNOFF_FINALISTS]
    if pick not in finals:
        finals[-1:] = [pick]
    runs = {t.setting: [t] for t in finals}
    for r in range(RUNOFF_ROUNDS):  # the pick's second run is its part of the first round
        for t in finals:
            runs[t.setting].append(second if r == 0 and t is pick else again(t.setting))
    why = f"runoff: {pick.setting.label} measured {drift:.0%} apart on a second run (the host's load drifts)"
    for setting, seen in runs.items():
        measured = [t for t in seen if not t.unmeasured]
        report = median_report([t.report for t in measured])
        trials[setting] = Trial(setting, report, within_budget=report.p95_ms <= budget_ms,
                                measured=f"runoff-median-of-{len(measured)}", note=why)


def tune(
    http_url: str,
    spec: ModelSpec,
    space: Space,
    load: BenchConfig,
    budget_ms: float,
    *,
    search: Search = "climb",
    warmup_requests: int = WARMUP_REQUESTS,
    on_trial: Callable[[Trial], None] | None = None,
    restore: bool = True,
    run: Callable[[BenchConfig], bench.BenchReport] = bench.run,
    grpc_url: str | None = None,
) -> TuneResult:
    """Search ``space`` (``climb``: :func:`climb`; ``grid``: every setting) and recommend a setting.

    Each setting is measured with :func:`measure_steadily` (``run`` is one bounded run). A setting that
    still could not be measured stays among the trials, unmeasured; then the search is incomplete and
    nothing is recommended. ``spec`` (the repository's config) is reloaded at the end. A setting over gRPC
    is measured at ``grpc_url`` (needed when ``space.protocols`` has gRPC).
    """
    if not (math.isfinite(budget_ms) and budget_ms > 0):
        raise ValueError(f"budget_ms: must be a finite number > 0, got {budget_ms}")
    if load.model != spec.name:
        raise ValueError(f"load.model: {load.model!r} is not the tuned model {spec.name!r}")
    if search not in ("climb", "grid"):
        raise ValueError(f"search: must be climb or grid, got {search!r}")
    if "grpc" in space.protocols and not grpc_url:
        raise ValueError("grpc_url: needed to measure over gRPC")
    grpc_load = dataclasses.replace(load, url=grpc_url, protocol="grpc") if grpc_url else load
    trials: dict[Setting, Trial] = {}

    def measured(setting: Setting) -> Trial:
        over = grpc_load if setting.protocol == "grpc" else load
        try:
            load_setting(http_url, spec, setting, over, warmup_requests=warmup_requests)
            report, how, note = measure_steadily(over, run)
            t = Trial(setting, report, within_budget=report.p95_ms <= budget_ms, measured=how, note=note)
        except perf_analyzer.PerfAnalyzerError as e:  # it could not measure this setting at all
            t = Trial(setting, bench.BenchReport.unmeasured(load, {"unmeasured": 1}), within_budget=False,
                      failure=str(e), measured=UNMEASURED)
        if on_trial:
            on_trial(t)
        return t

    def trial(setting: Setting) -> Trial:
        if setting not in trials:
            trials[setting] = measured(setting)
        return trials[setting]

    incomplete: str | None = None
    try:
        if search == "grid":
            for setting in space.grid():
                trial(setting)
            missing = [t.setting.label for t in trials.values() if t.unmeasured]
            if missing:
                incomplete = f"the grid could not measure {len(missing)} setting(s): {'; '.join(missing)}"
        else:
            incomplete = climb(space, trial)
        if not incomplete:
            runoff(trials, measured, budget_ms)
            for t in trials.values():
                if on_trial and t.measured.startswith("runoff"):
                    on_trial(t)  # each finalist's median, after its runs
    finally:
        if restore:
            # Back to the repository's configuration. A plain load_model(name) is not enough:
            # Triton skips reloading a model whose files did not change, keeping the override.
            _reload(http_url, load, spec)
    done = list(trials.values())
    return TuneResult(spec.name, budget_ms, done, None if incomplete else recommend(done), incomplete or "")


def run(cfg: TuneConfig, spec: ModelSpec, on_trial: Callable[[Trial], None] | None = None) -> TuneResult:
    """:func:`tune` ``spec`` (the model's repository configuration) as ``cfg`` says."""
    return tune(cfg.url, spec, cfg.space(spec.max_batch_size or 0), cfg.load, cfg.budget_ms, search=cfg.search,
                warmup_requests=cfg.warmup_requests, on_trial=on_trial, grpc_url=cfg.grpc_url)


# The top-level fields a setting decides; write_recommendation changes these and nothing else.
SETTING_FIELDS = ("dynamic_batching", "instance_group")


def write_recommendation(config_path: Path, setting: Setting) -> ModelSpec:
    """Write ``setting`` into ``config_path`` (config.pbtxt); returns the new spec.

    Only the setting's fields change: the operator's comments, license header and field order stay
    (:mod:`tritonops.model_repo.pbtxt_edit`), and the file is replaced atomically.
    """
    text = pbtxt.read_text(config_path)
    new = apply(pbtxt.parse(text, config_path), setting)
    pbtxt_edit.write(config_path, pbtxt_edit.set_fields(text, pbtxt.spec_to_proto(new), SETTING_FIELDS,
                                                        config_path))
    return new


def plot(result: TuneResult, path: Path) -> Path:
    """PNG: throughput (inferences/s) against p95 latency for every setting; budget and pick marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    for t in result.trials:
        if math.isnan(t.report.p95_ms):
            continue  # nothing measured, nothing to place
        colour = "tab:green" if t.within_budget and t.error_free else "tab:red"
        marker = "o" if t.setting.dynamic_batching else "s"
        ax.scatter(t.report.p95_ms, t.report.inferences_per_s, c=colour, marker=marker, s=50)
        ax.annotate(t.setting.label, (t.report.p95_ms, t.report.inferences_per_s), fontsize=6,
                    xytext=(4, 3), textcoords="offset points")
    if result.best:
        ax.scatter(result.best.report.p95_ms, result.best.report.inferences_per_s, s=260,
                   facecolors="none", edgecolors="black", linewidths=1.5, label="recommended")
    ax.axvline(result.budget_ms, color="grey", linestyle="--", label=f"p95 budget {result.budget_ms:g} ms")
    ax.set_xlabel("p95 latency (ms)")
    ax.set_ylabel("throughput (inferences/s)")
    ax.set_title(f"tritonops tune {result.model}: squares = batching off, circles = dynamic batching")
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def result_json(result: TuneResult) -> str:
    return json.dumps(result.to_dict(), indent=2, default=str)
