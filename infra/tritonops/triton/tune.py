"""Tuner: search dynamic batching and instance counts on a running Triton, measure, recommend.

The search is a coordinate ascent (:func:`climb`: batching, then instances, then queue delay and
preferred size, each kept only when it gains) or the full grid (:meth:`Space.grid`). Each setting
is applied to a model *without touching the repository*: Triton (in explicit model control mode)
reloads the model from a config override sent through the repository API
(``load_model(name, config=json)``). Each setting is measured with :mod:`tritonops.triton.bench`; the
recommendation is the highest throughput whose p95 stays within the latency budget and that had no
errors, where settings that paired comparisons cannot tell apart count as equal (the simplest, measured
first, wins). The
recommendation is written back into the model's ``config.pbtxt`` changing only the batching and
instance fields (:mod:`tritonops.model_repo.pbtxt_edit`), and a PNG plots throughput against p95 for
every setting, its spread drawn as an error bar.

A setting perf_analyzer could not measure stably (a busy machine: at concurrency 64 the load generator
alone keeps two cores busy) is measured again with windows twice as long and twice as many, and if
still unstable, or at once when a run overran its time limit, as the median of short rounds each
averaging perf_analyzer's last three windows with no stability demanded (:mod:`tritonops.triton.steady`).
The rounds' spread is the noise measured (``BenchReport.spread``): the climb keeps a step only when it
gains more than it (and than :data:`MIN_GAIN`). The search's single runs do not decide between close
settings: a host's load drifts from one run to the next. The runoff (:func:`runoff`) measures the
finalists (the settings within :data:`FINALIST_BAND` of the fastest) in turns and compares them in pairs
(:class:`Comparison`): the drift cancels within a pair, and a more complex setting wins over a simpler
one only when a distribution-free bound on its median throughput ratio clears 1 + :data:`MIN_GAIN` and
its p95 is not worse beyond its own bound; otherwise tune says the two are indistinguishable and keeps
the simpler. With a gRPC address the search also measures over gRPC (the clients'
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
from typing import Any

import tritonclient.http as httpclient
from google.protobuf import json_format

from tritonops.model_repo import pbtxt, pbtxt_edit
from tritonops.model_repo.spec import DynamicBatching, InstanceGroup, ModelSpec
from tritonops.triton import bench, perf_analyzer
from tritonops.triton.load_config import BenchConfig
from tritonops.triton.paired import MIN_GAIN, Comparison
from tritonops.triton.steady import STABLE, UNMEASURED, loose, measure_steadily, median_report
from tritonops.triton.tune_space import WARMUP_REQUESTS, Search, Setting, Space, TuneConfig

# The runoff (:func:`runoff`): the usable settings whose single run came within this fraction of the fastest
# (or within the spread both measured, when wider) are finalists; at most RUNOFF_FINALISTS of them (the
# fastest), each measured RUNOFF_ROUNDS more times, in turns: round r is one measurement of each.
FINALIST_BAND = 0.2
RUNOFF_FINALISTS = 3
RUNOFF_ROUNDS = 5


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
    best = trial(Setting(False, space.counts[0]))
    if best.unmeasured:
        return _stopped("batching", best)
    for dimension, changes in _steps(space).items():
        if dimension in BATCHING_STEPS and not best.setting.dynamic_batching:
            continue  # batching's own settings, where batching lost
        for change in changes:
            t = trial(dataclasses.replace(best.setting, **change))
            if t.unmeasured:
                return _stopped(dimension, t)
            if not _better(t, best, min_gain):
                break
            best = t
    return None


# The climb's dimensions that only a setting with dynamic batching has.
BATCHING_STEPS = ("queue delay", "preferred batch size")


def _steps(space: Space) -> dict[str, list[dict[str, Any]]]:
    """The climb's steps per dimension, as changes to the best setting so far, walked while each gains."""
    return {
        "batching": ([{"dynamic_batching": True, "max_queue_delay_us": space.delays[0]}]
                     if space.max_batch_size > 0 else []),
        "instances": [{"instances": n} for n in space.counts[1:]],
        "queue delay": [{"max_queue_delay_us": d} for d in space.delays[1:]],
        "preferred batch size": [{"preferred_batch_sizes": (space.max_batch_size,)}],
        "protocol": [{"protocol": p} for p in space.protocols[1:]],
    }


def planned(space: Space, search: Search) -> int:
    """The most settings ``search`` measures in ``space`` (the climb stops a dimension sooner when a step
    does not gain); the runoff's measurements come after (at most RUNOFF_FINALISTS x RUNOFF_ROUNDS)."""
    if search == "grid":
        return len(space.grid())
    batching = space.max_batch_size > 0
    return 1 + sum(len(changes) for dimension, changes in _steps(space).items()
                   if batching or dimension not in BATCHING_STEPS)


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
    comparisons: list[Comparison] = field(default_factory=list)  # the runoff's, in the order judged

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "p95_budget_ms": self.budget_ms,
            "incomplete": self.incomplete or None,
            "recommended": self.best.to_dict() if self.best else None,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "trials": [t.to_dict() for t in self.trials],
        }


def recommend(trials: Sequence[Trial], min_gain: float = MIN_GAIN,
              comparisons: Sequence[Comparison] = ()) -> Trial | None:
    """The runoff's pick (the setting its last paired comparison kept), when there was one; otherwise the
    highest throughput among error-free trials within the p95 budget.

    Without a runoff, trials within ``min_gain`` of the highest (or within the spread both measured) count
    as equal, and the one measured first wins: both searches measure the simpler settings first (batching
    off before on, fewer instances, no queue delay, no preferred size).
    """
    ok = [t for t in trials if t.usable]
    if comparisons:
        return next(t for t in ok if t.setting == comparisons[-1].kept)
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


def finalists(trials: Sequence[Trial]) -> list[Trial]:
    """The settings the runoff compares: usable, and within :data:`FINALIST_BAND` of the fastest (or within
    the spread both measured, when wider); at most :data:`RUNOFF_FINALISTS`, the fastest; in the order
    measured (the simpler first). Fewer than two: no runoff."""
    ok = [t for t in trials if t.usable]
    if len(ok) < 2:
        return []
    top = max(ok, key=lambda t: t.report.inferences_per_s)
    near = [t for t in ok if t.report.inferences_per_s * (1 + max(FINALIST_BAND, t.report.spread + top.report.spread))
            >= top.report.inferences_per_s]
    kept = sorted(near, key=lambda t: -t.report.inferences_per_s)[:RUNOFF_FINALISTS]
    return [t for t in ok if t in kept] if len(kept) > 1 else []


def runoff(trials: dict[Setting, Trial], again: Callable[[Setting], Trial], budget_ms: float,
           min_gain: float = MIN_GAIN, rounds: int = RUNOFF_ROUNDS) -> list[Comparison]:
    """Decide between the :func:`finalists` by paired comparisons; each becomes the median of its rounds in
    ``trials`` (in place, ``paired-median-of-N``, its spread their noise). Returns the comparisons.

    perf_analyzer's stability covers one run; a busy host also drifts from one run to the next (another
    job's load comes and goes), so settings measured a minute apart differ by that drift alone. So the
    finalists are measured ``rounds`` more times each (``again``: a fresh reload and measurement), in
    turns, each round one measurement of each, every other round in reverse order (A B, B A, A B ...: a
    drift that keeps rising favours neither). Starting from the simplest, each next finalist is compared
    with the setting kept so far, round by round (:class:`Comparison`), and replaces it only when it is
    better beyond the bound; a finalist whose median misses the budget is not compared.
    """
    order = [t.setting for t in finalists(list(trials.values()))]
    if not order:
        return []
    runs: dict[Setting, list[Trial]] = {s: [] for s in order}
    for r in range(rounds):
        for setting in order if r % 2 == 0 else order[::-1]:
            runs[setting].append(again(setting))
    why = f"runoff: {len(order)} finalists measured {rounds} more times each, in turns, compared in pairs"
    for setting, seen in runs.items():
        measured = [t for t in seen if not t.unmeasured]
        if not measured:
            trials[setting] = seen[0]  # never measured again: it leaves the runoff, unmeasured, and says why
            continue
        report = median_report([t.report for t in measured])
        trials[setting] = Trial(setting, report, within_budget=report.p95_ms <= budget_ms,
                                measured=f"paired-median-of-{len(measured)}", note=why)
    left = [s for s in order if trials[s].usable]
    comparisons: list[Comparison] = []
    if not left:
        return comparisons
    kept = left[0]
    for other in left[1:]:
        pairs = [(a, b) for a, b in zip(runs[kept], runs[other], strict=True)
                 if all(t.error_free and not t.unmeasured for t in (a, b))
                 and a.report.inferences_per_s > 0 and a.report.p95_ms > 0]
        if not pairs:
            continue
        comparisons.append(Comparison.of(kept, other, pairs, min_gain))
        kept = comparisons[-1].kept
    return comparisons


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
    on_measure: Callable[[Setting, int, int], None] | None = None,
    restore: bool = True,
    run: Callable[[BenchConfig], bench.BenchReport] = bench.run,
    grpc_url: str | None = None,
    rounds: int = RUNOFF_ROUNDS,
) -> TuneResult:
    """Search ``space`` (``climb``: :func:`climb`; ``grid``: every setting), judge the finalists in pairs
    (:func:`runoff`, ``rounds`` pairs; 0: no runoff, the single runs rank) and recommend a setting.

    Each setting is measured with :func:`measure_steadily` (``run`` is one bounded run); each runoff round
    with one short run that accepts any three windows (the pairs, not a run's stability, carry the
    noise). A setting that still could not be measured stays among the trials, unmeasured; then the
    search is incomplete and nothing is recommended. ``spec`` (the repository's config) is reloaded at
    the end. A setting over gRPC is measured at ``grpc_url`` (needed when ``space.protocols`` has gRPC).
    ``on_measure(setting, k, n)`` is told before the k-th measurement of at most n (n shrinks to the
    exact count once the search is over); ``on_trial`` after each measurement (a runoff round's reads
    ``one-round``) and each finalist's median (which has no run of its own).
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
    plan = [0, planned(space, search) + RUNOFF_FINALISTS * rounds]  # measurements: done, at most

    def measured(setting: Setting, once: bool = False) -> Trial:
        over = grpc_load if setting.protocol == "grpc" else load
        plan[0] += 1
        if on_measure:
            on_measure(setting, plan[0], plan[1])
        try:
            load_setting(http_url, spec, setting, over, warmup_requests=warmup_requests)
            if once and over.engine == "perf_analyzer":
                report, how, note = run(loose(over)), "one-round", ""
            else:
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
    comparisons: list[Comparison] = []
    try:
        if search == "grid":
            for setting in space.grid():
                trial(setting)
            missing = [t.setting.label for t in trials.values() if t.unmeasured]
            if missing:
                incomplete = f"the grid could not measure {len(missing)} setting(s): {'; '.join(missing)}"
        else:
            incomplete = climb(space, trial)
        if not incomplete and rounds:
            plan[1] = plan[0] + len(finalists(list(trials.values()))) * rounds
            comparisons = runoff(trials, lambda s: measured(s, once=True), budget_ms, rounds=rounds)
            for t in trials.values():
                if on_trial and t.measured.startswith("paired"):
                    on_trial(t)  # each finalist's median, after its rounds
    finally:
        if restore:
            # Back to the repository's configuration. A plain load_model(name) is not enough:
            # Triton skips reloading a model whose files did not change, keeping the override.
            _reload(http_url, load, spec)
    done = list(trials.values())
    return TuneResult(spec.name, budget_ms, done, None if incomplete else recommend(done, comparisons=comparisons),
                      incomplete or "", comparisons)


def run(cfg: TuneConfig, spec: ModelSpec, on_trial: Callable[[Trial], None] | None = None,
        on_measure: Callable[[Setting, int, int], None] | None = None) -> TuneResult:
    """:func:`tune` ``spec`` (the model's repository configuration) as ``cfg`` says."""
    return tune(cfg.url, spec, cfg.space(spec.max_batch_size or 0), cfg.load, cfg.budget_ms, search=cfg.search,
                warmup_requests=cfg.warmup_requests, on_trial=on_trial, on_measure=on_measure,
                grpc_url=cfg.grpc_url)


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
    """PNG: throughput (inferences/s) against p95 latency for every setting, each with its spread as an
    error bar (+-spread of its throughput: the noise its rounds measured; none for one stable run);
    budget and pick marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    for t in result.trials:
        if math.isnan(t.report.p95_ms):
            continue  # nothing measured, nothing to place
        colour = "tab:green" if t.within_budget and t.error_free else "tab:red"
        marker = "o" if t.setting.dynamic_batching else "s"
        ax.errorbar(t.report.p95_ms, t.report.inferences_per_s, yerr=t.report.spread * t.report.inferences_per_s,
                    fmt=marker, color=colour, markersize=7, capsize=4, elinewidth=1)
        spread = f" +-{t.report.spread:.0%}" if t.report.spread else ""
        ax.annotate(t.setting.label + spread, (t.report.p95_ms, t.report.inferences_per_s), fontsize=6,
                    xytext=(4, 3), textcoords="offset points")
    if result.best:
        ax.scatter(result.best.report.p95_ms, result.best.report.inferences_per_s, s=260,
                   facecolors="none", edgecolors="black", linewidths=1.5, label="recommended")
    ax.axvline(result.budget_ms, color="grey", linestyle="--", label=f"p95 budget {result.budget_ms:g} ms")
    ax.set_xlabel("p95 latency (ms)")
    ax.set_ylabel("throughput (inferences/s)")
    ax.set_title(f"tritonops tune {result.model}: squares = batching off, circles = dynamic batching; "
                 "bars = spread", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def result_json(result: TuneResult) -> str:
    return json.dumps(result.to_dict(), indent=2, default=str)
