"""How ``tune`` measures a setting perf_analyzer finds unstable: again with longer windows, then a median
of rounds; never dropped, and the climb stops at a dimension it could not measure.

perf_analyzer is stubbed at its boundary: a fake executable (run through the real
:class:`~tritonops.triton.perf_analyzer.PerfAnalyzer`, so its command line and CSV are the real ones)
that reports no stable windows while its windows are shorter than a threshold and its stability
percentage is an ordinary one, and otherwise writes the next throughput of a list as its CSV.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tritonops.model_repo.spec import ModelInput, ModelOutput, ModelSpec
from tritonops.triton import bench, perf_analyzer, steady, tune
from tritonops.triton.load_config import BenchConfig

FAKE = f"""#!{sys.executable} -S
import json, sys
from dataclasses import replace
from pathlib import Path
here = Path(__file__).parent
rule = json.loads((here / "rule.json").read_text())
a = sys.argv[1:]
opt = lambda name: a[a.index(name) + 1]
window, pct, trials = int(opt("--measurement-interval")), float(opt("--stability-percentage")), int(opt("--max-trials"))
with (here / "calls.jsonl").open("a") as f:
    f.write(json.dumps([window, pct, trials]) + "\\n")
if rule.get("error"):
    print("error: failed to get model metadata: " + rule["error"]); sys.exit(1)
if pct < 1000 and window < rule["stable_from_ms"]:
    print(f"Failed to obtain stable measurement within {{trials}} measurement windows for concurrency 16.")
    sys.exit(99)
done = len([ln for ln in (here / "calls.jsonl").read_text().splitlines() if json.loads(ln)[1] >= 1000])
tput = rule["figures"][max(done - 1, 0) % len(rule["figures"])]
p95 = int(1e6 / tput)  # microseconds: a faster round has a lower p95
Path(opt("-f")).write_text(
    "Concurrency,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency\\n"
    f"16,{{tput}},{{p95 // 2}},{{p95}},{{p95}},{{p95 * 2}},{{p95 // 2}}\\n")
"""


class FakePA:
    """The fake perf_analyzer's folder: its rule, and the calls it received (window ms, stability %, windows)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.binary = folder / "perf_analyzer"
        self.binary.write_text(FAKE)
        self.binary.chmod(0o755)
        self.rule(stable_from_ms=0)

    def rule(self, **rule: object) -> None:
        (self.folder / "rule.json").write_text(json.dumps({"figures": [100.0], **rule}))

    def calls(self) -> list[list[float]]:
        log = self.folder / "calls.jsonl"
        return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []

    def run(self, cfg: BenchConfig) -> bench.BenchReport:
        """bench.run's perf_analyzer path without a server: the real PerfAnalyzer.measure, then a report."""
        m = perf_analyzer.PerfAnalyzer(self.binary, None).measure(cfg)
        return bench.BenchReport(config={}, sent=1, succeeded=1, elapsed_s=cfg.max_seconds,
                                 throughput_rps=m.inferences_per_s, inferences_per_s=m.inferences_per_s,
                                 p50_ms=m.p50_ms, p95_ms=m.p95_ms, p99_ms=m.p99_ms, mean_ms=m.mean_ms, max_ms=None,
                                 engine="perf_analyzer")


@pytest.fixture
def pa(tmp_path: Path) -> FakePA:
    return FakePA(tmp_path)


LOAD = BenchConfig(url="127.0.0.1:8000", model="m", concurrency=16, max_requests=None, max_seconds=5,
                   engine="perf_analyzer")  # 5 windows of 1000 ms, 10% stability: tune's defaults


@pytest.mark.parametrize(("stable_from_ms", "how", "calls"), [
    (0, "stable", [[1000, 10, 5]]),
    # unstable in 1 s windows: again with windows twice as long, twice as many
    (1500, "stable-after-retry", [[1000, 10, 5], [2000, 10, 10]]),
    # unstable in 2 s windows too: 5 rounds, each --duration over any three windows; their median
    (10**9, "median-of-5", [[1000, 10, 5], [2000, 10, 10]] + [[1666, 1e6, 3]] * 5),
])
def test_an_unstable_measurement_is_measured_again(pa: FakePA, stable_from_ms: int, how: str,
                                                   calls: list[list[float]]) -> None:
    pa.rule(stable_from_ms=stable_from_ms, figures=[100.0, 500.0, 300.0, 200.0, 400.0])
    report, measured, note = steady.measure_steadily(LOAD, pa.run)
    assert measured == how
    assert pa.calls() == calls
    assert ("no stable measurement" in note) == (how != "stable")


def test_still_unstable_reports_the_median_of_the_rounds(pa: FakePA) -> None:
    pa.rule(stable_from_ms=10**9, figures=[100.0, 500.0, 300.0, 200.0, 400.0])
    report, measured, note = steady.measure_steadily(LOAD, pa.run)
    assert measured == "median-of-5"
    assert report.inferences_per_s == 300.0  # not the first round (100), nor the mean of rounds that drifted
    assert report.p95_ms == pytest.approx(1000 / 300, abs=0.01)
    assert "with longer windows" in note


def test_a_failure_that_is_not_instability_is_not_measured_again(pa: FakePA) -> None:
    pa.rule(stable_from_ms=0, error="boom")
    with pytest.raises(perf_analyzer.PerfAnalyzerError, match="boom") as e:
        steady.measure_steadily(LOAD, pa.run)
    assert not isinstance(e.value, perf_analyzer.Unstable)
    assert len(pa.calls()) == 1


def _spec() -> ModelSpec:
    return ModelSpec(name="m", backend="python", max_batch_size=8,
                     input=[ModelInput(name="x", data_type="TYPE_FP32", dims=[4])],
                     output=[ModelOutput(name="y", data_type="TYPE_FP32", dims=[4])])


def _tune(monkeypatch: pytest.MonkeyPatch, pa: FakePA, rule: Callable[[tune.Setting], dict[str, object]],
          space: tune.Space, search: tune.Search = "climb", **kw: object) -> tune.TuneResult:
    """tune() against the fake perf_analyzer; ``rule(setting)`` is its behaviour while ``setting`` is loaded."""

    def load_setting(url: str, spec: ModelSpec, setting: tune.Setting, load: BenchConfig, **kw: object) -> None:
        pa.rule(**rule(setting))  # "reloading the model" changes what the fake measures

    monkeypatch.setattr(tune, "load_setting", load_setting)
    return tune.tune("127.0.0.1:8000", _spec(), space, LOAD, 50, search=search, restore=False, run=pa.run,
                     **kw)  # type: ignore[arg-type]


def test_batching_that_never_settles_is_measured_by_median_and_still_wins(monkeypatch: pytest.MonkeyPatch,
                                                                          pa: FakePA) -> None:
    # Issue 22: batching off and on unstable at concurrency 64; the climb went on with batching off.
    def rule(s: tune.Setting) -> dict[str, object]:
        if s.dynamic_batching:  # never settles without a preferred size; as fast with one, and stable
            return {"stable_from_ms": 0 if s.preferred_batch_sizes else 10**9, "figures": [400.0]}
        return {"stable_from_ms": 1500, "figures": [100.0]}

    searched: list[tune.Trial] = []
    result = _tune(monkeypatch, pa, rule, tune.Space(8, (1,), (0,)), on_trial=searched.append)
    how = {t.setting: t.measured for t in searched[:3]}  # the search's trials; then the runoff's rounds, medians
    assert how == {tune.Setting(False, 1): "stable-after-retry", tune.Setting(True, 1, (), 0): "median-of-5",
                   tune.Setting(True, 1, (8,), 0): "stable"}  # the climb went on past batching, with it on
    # Batching with and without a preferred size, as fast: paired in the runoff, indistinguishable, the
    # simpler kept.
    assert result.best is not None and result.best.setting == tune.Setting(True, 1, (), 0)
    assert [c.verdict for c in result.comparisons] == ["indistinguishable"] and not result.incomplete
    assert [t["measured"] for t in result.to_dict()["trials"]] == [
        "stable-after-retry", "paired-median-of-5", "paired-median-of-5"]


def test_progress_counts_every_measurement_against_an_estimate_that_becomes_exact(monkeypatch: pytest.MonkeyPatch,
                                                                                pa: FakePA) -> None:
    seen: list[tuple[tune.Setting, int, int]] = []
    space = tune.Space(8, (1, 2), (0, 2000))
    rule = {"stable_from_ms": 0, "figures": [100.0]}  # nothing gains: the climb stops each dimension early
    result = _tune(monkeypatch, pa, lambda s: rule, space, on_measure=lambda *a: seen.append(a))
    assert [k for _, k, _ in seen] == list(range(1, len(seen) + 1))
    at_most = tune.planned(space, "climb") + tune.RUNOFF_FINALISTS * tune.RUNOFF_ROUNDS
    searched = len(result.trials)
    assert {n for _, k, n in seen if k <= searched} == {at_most}  # the search: at most every step, then a runoff
    assert searched == 3  # batching off; on; off with 2 instances: all as fast, all three finalists
    assert {n for _, k, n in seen if k > searched} == {searched + 3 * tune.RUNOFF_ROUNDS}  # then exact
    assert seen[-1][1] == seen[-1][2] and seen[0][0] == tune.Setting(False, 1)


@pytest.mark.parametrize(("broken", "dimension", "seen"), [
    (tune.Setting(True, 1, (), 0), "batching", [tune.Setting(False, 1), tune.Setting(True, 1, (), 0)]),
    (tune.Setting(True, 2, (), 0), "instances",
     [tune.Setting(False, 1), tune.Setting(True, 1, (), 0), tune.Setting(True, 2, (), 0)]),
])
def test_the_climb_stops_at_a_dimension_it_could_not_measure(monkeypatch: pytest.MonkeyPatch, pa: FakePA,
                                                             broken: tune.Setting, dimension: str,
                                                             seen: list[tune.Setting]) -> None:
    def rule(s: tune.Setting) -> dict[str, object]:
        tput = (400.0 if s.dynamic_batching else 100.0) * s.instances
        return {"stable_from_ms": 0, "figures": [tput], **({"error": "connection reset"} if s == broken else {})}

    result = _tune(monkeypatch, pa, rule, tune.Space(8, (1, 2), (0, 2000)))
    assert [t.setting for t in result.trials] == seen  # kept among the trials, and nothing measured past it
    assert result.trials[-1].measured == "unmeasured" and "connection reset" in result.trials[-1].failure
    assert f"the climb stopped at {dimension}" in result.incomplete
    assert result.best is None  # an undecided dimension recommends nothing (batching off won that way)
    assert result.to_dict()["incomplete"] == result.incomplete


def test_the_grid_keeps_an_unmeasured_setting_and_recommends_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                     pa: FakePA) -> None:
    broken = tune.Setting(True, 1, (8,), 0)
    result = _tune(monkeypatch, pa, lambda s: {"stable_from_ms": 0, "figures": [100.0],
                                               **({"error": "boom"} if s == broken else {})},
                   tune.Space(8, (1,), (0,)), search="grid")
    assert [t.setting for t in result.trials] == tune.Space(8, (1,), (0,)).grid()
    assert "could not measure 1 setting" in result.incomplete and result.best is None


def test_the_cli_writes_nothing_and_exits_1_when_the_search_is_incomplete(monkeypatch: pytest.MonkeyPatch,
                                                                         pa: FakePA, tmp_path: Path) -> None:
    from tritonops.cli import app
    from tritonops.model_repo import pbtxt
    from typer.testing import CliRunner

    (tmp_path / "repo" / "m").mkdir(parents=True)
    config = tmp_path / "repo" / "m" / "config.pbtxt"
    config.write_text(pbtxt.render(_spec()))
    before = config.read_text()
    real_tune = tune.tune

    def tune_with_fake(url: str, spec: ModelSpec, space: tune.Space, load: BenchConfig, budget: float,
                       **kw: object) -> tune.TuneResult:
        # batching on cannot be measured (perf_analyzer fails); batching off measures fine
        kw.pop("restore", None)
        monkeypatch.setattr(tune, "load_setting", lambda *a, **k: pa.rule(
            stable_from_ms=0, figures=[100.0], **({"error": "boom"} if a[2].dynamic_batching else {})))
        return real_tune(url, spec, space, replace(load, engine="perf_analyzer"), budget, restore=False,
                         run=pa.run, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(bench, "preflight", lambda cfg: {})  # no server: the search itself is stubbed
    monkeypatch.setattr(tune, "tune", tune_with_fake)
    result = CliRunner().invoke(app, ["tune", "m", "--repository", str(tmp_path / "repo"), "--engine", "python",
                                      "--plot", str(tmp_path / "t.png")])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "no recommendation: the climb stopped at batching" in text and "median" not in text
    assert "unmeasured" in text and config.read_text() == before
