"""One setting measured steadily on a busy host: perf_analyzer's retries, short rounds and their median.

perf_analyzer first with the given windows; when it finds no stable windows, again with longer windows
("stable-after-retry"); when still unstable, or at once when a run overran its time limit, the median
of :data:`MEDIAN_ROUNDS` short rounds that accept any three windows ("median-of-N"), whose spread is the
noise measured (``BenchReport.spread``). :mod:`tritonops.triton.tune` ranks settings only beyond it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tritonops.triton import bench, perf_analyzer
from tritonops.triton.load_config import BenchConfig

# An unstable measurement is measured again with windows this many times longer, and this many times more.
RETRY_SCALE = 2
# Still unstable: the median of this many rounds (odd: the median is one round's own figures).
MEDIAN_ROUNDS = 5
# The rounds' stability percentage: any three windows count as stable, so each round reports their average.
ROUND_STABILITY_PCT = 1e6
# How a trial was measured, the last for a setting that could not be measured at all.
STABLE, RETRIED, UNMEASURED = "stable", "stable-after-retry", "unmeasured"


def longer(load: BenchConfig, scale: int = RETRY_SCALE) -> BenchConfig:
    """``load`` with windows ``scale`` times longer and ``scale`` times as many of them."""
    return dataclasses.replace(load, max_seconds=load.max_seconds * scale * scale,
                               max_windows=load.max_windows * scale)


def loose(load: BenchConfig) -> BenchConfig:
    """``load`` as one short round: any three windows count as stable, and the round reports their average."""
    return dataclasses.replace(load, stability_pct=ROUND_STABILITY_PCT, max_windows=3)


def median_report(reports: Sequence[bench.BenchReport]) -> bench.BenchReport:
    """One report from several rounds: the median round by throughput, with each latency the rounds' median.

    A round with errors is the report (errors decide, and its figures may be missing)."""
    failed = [r for r in reports if r.errors]
    if failed:
        return failed[0]
    ranked = sorted(reports, key=lambda r: r.inferences_per_s)
    mid = ranked[(len(ranked) - 1) // 2]
    spread = ((ranked[-1].inferences_per_s - ranked[0].inferences_per_s) / (2 * mid.inferences_per_s)
              if mid.inferences_per_s > 0 else 0.0)
    return dataclasses.replace(
        mid, p50_ms=statistics.median(r.p50_ms for r in reports), p95_ms=statistics.median(r.p95_ms for r in reports),
        p99_ms=statistics.median(r.p99_ms for r in reports), mean_ms=statistics.median(r.mean_ms for r in reports),
        elapsed_s=sum(r.elapsed_s for r in reports), spread=spread,
    )


def measure_steadily(
    load: BenchConfig,
    run: Callable[[BenchConfig], bench.BenchReport] = bench.run,
    rounds: int = MEDIAN_ROUNDS,
) -> tuple[bench.BenchReport, str, str]:
    """Measure the loaded setting: (report, how it was measured, why it was measured again).

    perf_analyzer first with ``load``; when it finds no stable windows, again with :func:`longer`
    windows ("stable-after-retry"); when still unstable, ``rounds`` runs that accept any three
    windows (each averages them) and the median of those ("median-of-N"). The python engine has no
    windows: one run ("one-run"). Other failures (perf_analyzer missing, requests failing) raise.
    """
    if load.engine != "perf_analyzer":
        return run(load), "one-run", ""
    try:
        return run(load), STABLE, ""
    except perf_analyzer.Unstable as e:
        first = str(e)
    except perf_analyzer.Overran as e:  # longer windows would run longer still: the short rounds at once
        return _rounds(load, run, rounds, str(e))
    try:
        return run(longer(load)), RETRIED, first
    except (perf_analyzer.Unstable, perf_analyzer.Overran) as e:
        second = str(e)
    return _rounds(load, run, rounds, f"{first}; with longer windows: {second}")


def _rounds(load: BenchConfig, run: Callable[[BenchConfig], bench.BenchReport], rounds: int,
            why: str) -> tuple[bench.BenchReport, str, str]:
    """``rounds`` short runs that accept any three windows, and their median (its spread is the noise)."""
    reports = [run(loose(load)) for _ in range(rounds)]
    return median_report(reports), f"median-of-{rounds}", why


@dataclass(frozen=True)
class Try:
    """One run of a measurement: perf_analyzer's windows and stability for it, and why it failed ("": it measured)."""

    window_ms: int
    windows: int
    stability_pct: float
    failure: str = ""

    @classmethod
    def of(cls, cfg: BenchConfig, failure: str = "") -> Try:
        return cls(perf_analyzer.window_ms(cfg), cfg.max_windows, cfg.stability_pct, failure)

    @property
    def stability(self) -> str:
        # Above 100% no window can fall outside it: the rounds of measure_steadily, "any three windows".
        return f"{self.stability_pct:g}%" if self.stability_pct <= 100 else "none demanded"


class Tries:
    """:func:`bench.run` as :func:`measure_steadily` calls it (one config), keeping each run's
    windows, stability and failure: what its retries relaxed, for the report. ``on_try(k, cfg)`` before run k."""

    def __init__(self, on_done: Callable[[int], None] | None = None,
                 on_try: Callable[[int, BenchConfig], None] | None = None) -> None:
        self.tries: list[Try] = []
        self.on_done = on_done
        self.on_try = on_try

    def __call__(self, cfg: BenchConfig) -> bench.BenchReport:
        if self.on_try:
            self.on_try(len(self.tries) + 1, cfg)
        try:
            report = bench.run(cfg, on_done=self.on_done)
        except perf_analyzer.PerfAnalyzerError as e:
            self.tries.append(Try.of(cfg, str(e)))
            raise
        self.tries.append(Try.of(cfg))
        return report

    def relaxed(self) -> list[str]:
        """What the run that counted (the last) relaxed from the first, as asked: [] when nothing was."""
        if not self.tries:
            return []
        asked, used = self.tries[0], self.tries[-1]
        out = [f"windows {asked.window_ms} -> {used.window_ms} ms"] if used.window_ms != asked.window_ms else []
        out += [f"at most {asked.windows} -> {used.windows} windows"] if used.windows != asked.windows else []
        if used.stability_pct != asked.stability_pct:
            out.append(f"stability {asked.stability} -> {used.stability}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"relaxed": self.relaxed(), "tries": [asdict(t) for t in self.tries]}
