"""``tune`` on a busy machine (issue 35): a perf_analyzer run that overran goes straight to short rounds, the
rounds' spread is the noise measured, and settings rank only beyond it (the simpler one wins a tie)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tritonops.triton import bench, perf_analyzer, steady, tune
from tritonops.triton.load_config import BenchConfig

LOAD = BenchConfig(url="127.0.0.1:8000", model="m", concurrency=16, max_requests=None, max_seconds=5,
                   engine="perf_analyzer")


def report(tput: float, spread: float = 0.0) -> bench.BenchReport:
    return bench.BenchReport(config={}, sent=1, succeeded=1, elapsed_s=1.0, throughput_rps=tput,
                             inferences_per_s=tput, p50_ms=1.0, p95_ms=2.0, p99_ms=3.0, mean_ms=1.0, max_ms=None,
                             engine="perf_analyzer", spread=spread)


def test_an_overrun_goes_to_the_short_rounds_at_once() -> None:
    seen: list[BenchConfig] = []
    figures = iter([None, 90.0, 110.0, 100.0, 95.0, 120.0])

    def run(cfg: BenchConfig) -> bench.BenchReport:
        seen.append(cfg)
        tput = next(figures)
        if tput is None:
            raise perf_analyzer.Overran("perf_analyzer ran past 40 s and was stopped")
        return report(tput)

    got, how, note = steady.measure_steadily(LOAD, run)
    assert how == "median-of-5" and "ran past 40 s" in note
    assert [c.max_seconds for c in seen] == [5] * 6  # no longer windows tried: they would overrun too
    assert all(c.max_windows == 3 and c.stability_pct == steady.ROUND_STABILITY_PCT for c in seen[1:])
    assert got.inferences_per_s == 100.0
    assert got.spread == pytest.approx((120 - 90) / 200)  # +-15%: the noise the rounds measured


def test_a_stable_measurement_has_no_spread() -> None:
    got, how, _ = steady.measure_steadily(LOAD, lambda cfg: report(100.0))
    assert (how, got.spread) == ("stable", 0.0)


def _trial(label: int, tput: float, spread: float = 0.0) -> tune.Trial:
    return tune.Trial(tune.Setting(label > 0, 1 + label), report(tput, spread), within_budget=True,
                      measured="median-of-5" if spread else "stable")


@pytest.mark.parametrize(("spreads", "better"), [
    ((0.0, 0.0), True),     # 8% apart, quiet: beyond MIN_GAIN (5%)
    ((0.05, 0.05), False),  # 8% apart, each +-5%: the ranges overlap, not clear
    ((0.02, 0.02), True),   # +-2% each: 8% is clear beyond the noise
])
def test_a_gain_counts_only_beyond_the_noise_measured(spreads: tuple[float, float], better: bool) -> None:
    old, new = _trial(0, 100.0, spreads[0]), _trial(1, 108.0, spreads[1])
    assert tune._better(new, old, tune.MIN_GAIN) is better  # noqa: SLF001
    assert tune.recommend([old, new]) is (new if better else old)  # a tie goes to the simpler, measured first


def test_the_json_trial_carries_its_spread() -> None:
    assert _trial(1, 100.0, 0.12).to_dict()["spread"] == 0.12
    assert replace(report(1.0), spread=0.3).to_dict()["spread"] == 0.3


class Again:
    """A fresh measurement per call, from each setting's own list of figures; records the order asked."""

    def __init__(self, figures: dict[tune.Setting, list[float]]) -> None:
        self.left = {s: iter(f) for s, f in figures.items()}
        self.asked: list[tune.Setting] = []

    def __call__(self, setting: tune.Setting) -> tune.Trial:
        self.asked.append(setting)
        return tune.Trial(setting, report(next(self.left[setting])), within_budget=True)


def _climbed(*figures: float) -> dict[tune.Setting, tune.Trial]:
    trials = [_trial(i, f) for i, f in enumerate(figures)]
    return {t.setting: t for t in trials}


def test_a_pick_that_holds_on_a_second_run_stands() -> None:
    trials = _climbed(1000.0, 1200.0)
    pick = trials[tune.Setting(True, 2)]
    again = Again({pick.setting: [1180.0]})
    tune.runoff(trials, again, budget_ms=50)
    assert again.asked == [pick.setting]  # one more run: within MIN_GAIN of the first, nothing else measured
    assert tune.recommend(list(trials.values())) is pick and pick.measured == "stable"


def test_a_drifting_host_gets_a_runoff_in_turns_and_the_medians_decide() -> None:
    # Measured a minute apart on a busy host: the second setting looked 20% faster, but its second run is
    # 25% lower; run in turns, the simpler setting is as fast, and a tie goes to it.
    trials = _climbed(1000.0, 1200.0, 400.0)
    simple, pick, slow = list(trials)
    again = Again({pick: [900.0, 950.0], simple: [1000.0, 1010.0]})
    tune.runoff(trials, again, budget_ms=50)
    assert again.asked == [pick, simple, pick, simple]  # in turns; the slow one (below the drift band) not again
    assert [trials[s].measured for s in (simple, pick, slow)] == ["runoff-median-of-3", "runoff-median-of-3",
                                                                    "stable"]
    assert trials[pick].report.inferences_per_s == 950.0
    assert trials[pick].report.spread == pytest.approx((1200 - 900) / (2 * 950))
    assert "measured 25% apart" in trials[pick].note
    assert tune.recommend(list(trials.values())).setting == simple
