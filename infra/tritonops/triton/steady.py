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
    loose = dataclasses.replace(load, stability_pct=ROUND_STABILITY_PCT, max_windows=3)
    reports = [run(loose) for _ in range(rounds)]
    return median_report(reports), f"median-of-{rounds}", why
