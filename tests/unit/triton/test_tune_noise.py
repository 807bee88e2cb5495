"""``tune`` on a busy machine (issue 35): a perf_analyzer run that overran goes straight to short rounds, the
rounds' spread is the noise measured, and settings rank only beyond it (the simpler one wins a tie); the
finalists are measured again in turns and compared in pairs (issue 45), so a host's drift cancels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from tritonops.triton import bench, paired, perf_analyzer, steady, tune
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
    """A fresh measurement per call: ``figure(setting, k)`` is the k-th measurement's throughput (k counts every
    call, whatever the setting: the host's time), its p95 ``p95(setting, k)``; records the order asked."""

    def __init__(self, figure: Callable[[tune.Setting, int], float],
                 p95: Callable[[tune.Setting, int], float] = lambda s, k: 2.0) -> None:
        self.figure, self.p95 = figure, p95
        self.asked: list[tune.Setting] = []

    def __call__(self, setting: tune.Setting) -> tune.Trial:
        k = len(self.asked)
        self.asked.append(setting)
        return tune.Trial(setting, replace(report(self.figure(setting, k)), p95_ms=self.p95(setting, k)),
                          within_budget=True, measured="one-round")


def _climbed(*figures: float, spread: float = 0.0) -> dict[tune.Setting, tune.Trial]:
    trials = [_trial(i, f, spread) for i, f in enumerate(figures)]
    return {t.setting: t for t in trials}


def test_the_median_bound_is_the_sign_tests_order_statistics() -> None:
    assert paired.median_bound([5, 1, 4, 2, 3]) == (3, 1, 5, 1 - 2 / 32)  # 5 values: smallest and largest, 93.8%
    median, low, high, cover = paired.median_bound(range(1, 9))  # 8: the 2nd smallest and largest, 1 - 2 * 9/256
    assert (median, low, high, cover) == (4.5, 2, 7, pytest.approx(1 - 18 / 256))
    assert paired.median_bound([1.0, 2.0])[1:] == (1.0, 2.0, 0.5)  # too few to reach 90%: said, not hidden


def test_a_setting_far_below_the_fastest_is_no_finalist_and_gets_no_runoff() -> None:
    trials = _climbed(1000.0, 1300.0)  # 30% apart, quiet: beyond FINALIST_BAND (20%)
    again = Again(lambda s, k: 1000.0)
    assert tune.runoff(trials, again, budget_ms=50) == [] and again.asked == []
    assert tune.recommend(list(trials.values())).setting == tune.Setting(True, 2)


def test_on_a_drifting_host_the_pairs_find_the_better_setting_the_summed_spreads_did_not() -> None:
    # B is 20% faster than A, but the host's capacity falls 3% with every measurement (another job ramps
    # up), and each run measured +-3% around it. The search's medians (+-15% each) overlap: summed
    # spreads, the simpler A wins. Paired in turns, each pair's ratio keeps B's 20%, the drift cancels.
    trials = _climbed(1000.0, 1100.0, spread=0.15)
    a, b = list(trials)
    assert tune.recommend(list(trials.values())).setting == a  # the margin of summed spreads: a tie, A kept
    again = Again(lambda s, k: (1200.0 if s == b else 1000.0) * (1 - 0.03 * k) * (1.03 if k % 3 else 0.97))
    comparisons = tune.runoff(trials, again, budget_ms=50)
    assert again.asked == [a, b, b, a, a, b, b, a, a, b]  # in turns, every other round reversed
    (c,) = comparisons
    assert (c.simpler, c.other, c.pairs, c.verdict, c.kept) == (a, b, 5, "better", b)
    assert c.low > 1 + tune.MIN_GAIN and c.ratio == pytest.approx(1.2, abs=0.1)
    assert [trials[s].measured for s in (a, b)] == ["paired-median-of-5"] * 2
    assert tune.recommend(list(trials.values()), comparisons=comparisons).setting == b
    assert c.says.startswith(f"better: {b.label} over {a.label}: throughput x")


def test_equal_settings_are_indistinguishable_and_the_simpler_is_kept() -> None:
    trials = _climbed(1000.0, 1060.0)
    a, b = list(trials)
    noise = [1.08, 0.95, 1.0, 1.06, 0.93, 1.02, 0.97, 1.05, 0.94, 1.03]  # +-8% per run, the same setting
    again = Again(lambda s, k: 1000.0 * noise[k])
    (c,) = tune.runoff(trials, again, budget_ms=50)
    assert c.verdict == "indistinguishable" and c.kept == a and c.low < 1 < c.high
    assert tune.recommend(list(trials.values()), comparisons=[c]).setting == a
    assert c.says.startswith(f"indistinguishable: kept the simpler setting {a.label} over {b.label}: throughput x")
    assert f"[{c.low:.2f}, {c.high:.2f}]" in c.says and "5 pairs, 93.8% bound" in c.says
    got = c.to_dict()
    assert got["verdict"] == "indistinguishable" and got["kept"] == a.label and got["bound"][0] < 1 < got["bound"][1]


def test_a_faster_setting_whose_p95_is_worse_beyond_its_bound_is_not_picked() -> None:
    trials = _climbed(1000.0, 1200.0)
    a, b = list(trials)
    again = Again(lambda s, k: 1200.0 if s == b else 1000.0, p95=lambda s, k: 3.0 if s == b else 2.0)
    (c,) = tune.runoff(trials, again, budget_ms=50)
    assert (c.verdict, c.kept, c.p95_low) == ("p95 worse", a, 1.5)
    assert c.says.startswith("p95 worse: kept the simpler setting")


def test_three_finalists_each_against_the_one_kept_so_far() -> None:
    trials = _climbed(1000.0, 1150.0, 1160.0)  # the third no better than the second: the second stays
    a, b, c3 = list(trials)
    again = Again(lambda s, k: {a: 1000.0, b: 1150.0, c3: 1160.0}[s])
    first, second = tune.runoff(trials, again, budget_ms=50)
    assert (first.simpler, first.other, first.verdict) == (a, b, "better")
    assert (second.simpler, second.other, second.verdict) == (b, c3, "indistinguishable")
    assert again.asked[:6] == [a, b, c3, c3, b, a]
    assert tune.recommend(list(trials.values()), comparisons=[first, second]).setting == b
