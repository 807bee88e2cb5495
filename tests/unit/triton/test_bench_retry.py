"""``tritonops bench`` on a busy box: when perf_analyzer finds no stable windows it measures again as tune does
(:func:`tritonops.triton.steady.measure_steadily`: longer windows, then rounds that demand no stability), a
bounded number of times, and says what it relaxed; with ``--json`` a failure is a JSON document on stdout;
``--show-command`` prints perf_analyzer's own command line and sends nothing.

perf_analyzer's measurement is stubbed at :meth:`PerfAnalyzer.measure` (no server): the rest of ``bench``
(the report, the CLI) is the real one.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from tritonops.cli import app
from tritonops.triton import bench, perf_analyzer
from tritonops.triton.load_config import BenchConfig
from typer.testing import CliRunner

# bench's defaults: --duration 10 in 5 windows of 2000 ms, stability 10%
ASKED = {"window_ms": 2000, "windows": 5, "stability_pct": 10.0}


class FakeMeasure:
    """perf_analyzer that finds no stable windows for its first ``unstable`` runs, then measures 500 inf/s."""

    def __init__(self, unstable: int) -> None:
        self.unstable = unstable
        self.seen: list[BenchConfig] = []

    def __call__(self, pa: perf_analyzer.PerfAnalyzer, cfg: BenchConfig) -> perf_analyzer.Measurement:
        self.seen.append(cfg)
        if len(self.seen) <= self.unstable:
            raise perf_analyzer.Unstable(perf_analyzer.failure(perf_analyzer.UNSTABLE_MARK, cfg))
        return perf_analyzer.Measurement(inferences_per_s=500.0, p50_ms=7.0, p90_ms=8.0, p95_ms=9.0, p99_ms=12.0,
                                         mean_ms=7.5)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeMeasure]:
    """No server: preflight and statistics answer empty; ``FakeMeasure(n)`` installs itself as the measurement."""
    monkeypatch.setattr(bench, "preflight", lambda cfg: {})
    monkeypatch.setattr(bench, "_stats_once", lambda cfg: {})
    monkeypatch.setattr(perf_analyzer, "find", lambda: perf_analyzer.PerfAnalyzer(Path("perf_analyzer"), None))

    class Installed(FakeMeasure):
        def __init__(self, unstable: int) -> None:
            super().__init__(unstable)
            monkeypatch.setattr(perf_analyzer.PerfAnalyzer, "measure", lambda pa, cfg: self(pa, cfg))

    return Installed


def _bench(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["bench", "m", "--url", "127.0.0.1:8000", *args])
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def _windows(cfgs: list[BenchConfig]) -> list[tuple[int, int, float]]:
    return [(perf_analyzer.window_ms(c), c.max_windows, c.stability_pct) for c in cfgs]


def test_a_stable_first_run_relaxes_nothing(fake: type[FakeMeasure]) -> None:
    m = fake(0)
    code, out, _ = _bench("--json")
    assert code == 0
    report = json.loads(out)
    assert report["measured"] == "stable" and report["relaxed"] == []
    assert report["tries"] == [ASKED | {"failure": ""}]
    assert report["inferences_per_s"] == 500.0 and len(m.seen) == 1


def test_unstable_once_is_measured_again_with_longer_windows_and_says_so(fake: type[FakeMeasure]) -> None:
    m = fake(1)
    code, out, _ = _bench("--json")
    assert code == 0
    report = json.loads(out)
    assert _windows(m.seen) == [(2000, 5, 10), (4000, 10, 10)]
    assert report["measured"] == "stable-after-retry"
    assert report["relaxed"] == ["windows 2000 -> 4000 ms", "at most 5 -> 10 windows"]
    assert "no stable measurement" in report["tries"][0]["failure"] and report["tries"][1]["failure"] == ""


def test_unstable_twice_takes_the_median_of_rounds_that_demand_no_stability(fake: type[FakeMeasure]) -> None:
    m = fake(2)
    code, out, _ = _bench("--json")
    assert code == 0
    report = json.loads(out)
    assert _windows(m.seen)[:2] == [(2000, 5, 10), (4000, 10, 10)]
    assert [(w, n) for w, n, _ in _windows(m.seen)[2:]] == [(3333, 3)] * 5  # 5 rounds of any three windows
    assert report["measured"] == "median-of-5" and report["p95_ms"] == 9.0
    assert report["relaxed"] == ["windows 2000 -> 3333 ms", "at most 5 -> 3 windows",
                                 "stability 10% -> none demanded"]
    assert len(report["tries"]) == 7

    fake(2)
    code, out, _ = _bench()  # the table says the same
    text = " ".join(out.split())
    assert code == 0
    assert "median-of-5 (7 runs)" in text and "stability 10% -> none demanded" in text


def test_always_unstable_stops_after_bounded_tries_with_a_json_failure(fake: type[FakeMeasure]) -> None:
    m = fake(10**6)
    code, out, err = _bench("--json")
    assert code == 3
    failure = json.loads(out)  # the whole of stdout is one JSON document: no rich text on it
    assert failure["exit_code"] == 3
    assert failure["error"].startswith("perf_analyzer found no stable measurement")
    assert len(m.seen) == len(failure["tries"]) == 3  # as asked, longer windows, the first round: then it stops
    assert [t["stability_pct"] for t in failure["tries"]] == [10, 10, 1e6]
    assert all("no stable measurement" in t["failure"] for t in failure["tries"])
    assert err == ""

    m = fake(10**6)
    code, out, err = _bench()  # without --json: the reason and each earlier try on stderr, nothing on stdout
    assert code == 3 and out == ""
    text = " ".join(err.split())
    assert "error: perf_analyzer found no stable measurement" in text
    assert "try 1 (windows 2000 ms x5, stability 10%)" in text and "try 2 (windows 4000 ms x10" in text


def test_a_usage_error_with_json_is_a_json_document_too() -> None:
    code, out, _ = _bench("--url", "10.0.0.5:8000", "--json")
    assert code == 2
    failure = json.loads(out)
    assert failure["exit_code"] == 2 and "is not loopback" in failure["error"] and failure["tries"] == []


@pytest.mark.parametrize("as_json", [False, True])
def test_show_command_prints_perf_analyzers_command_and_sends_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, as_json: bool) -> None:
    cudart = tmp_path / "nvidia" / "cuda_runtime" / "lib"
    monkeypatch.setattr(perf_analyzer, "find", lambda: perf_analyzer.PerfAnalyzer(Path("/venv/bin/perf_analyzer"),
                                                                                  cudart))
    monkeypatch.setattr(bench, "preflight", lambda cfg: pytest.fail("--show-command sent a request"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    key = tmp_path / "admin key"
    key.write_text("s3cret\n")
    code, out, _ = _bench("--show-command", "--admin-key-file", str(key), "--concurrency", "8", "--duration", "6",
                          "--stability", "20", *(["--json"] if as_json else []))
    assert code == 0
    text = json.loads(out)["command"] if as_json else out.strip()
    assert "s3cret" not in text  # the key as the shell reads it from its file, never its value
    words = shlex.split(text.replace(f"$(cat {shlex.quote(str(key))})", "KEY"))
    assert words[:2] == [f"LD_LIBRARY_PATH={cudart}", "/venv/bin/perf_analyzer"]
    assert _opts(words).items() >= {"-m": "m", "-u": "127.0.0.1:8000", "-i": "http", "--concurrency-range": "8:8",
                            "--measurement-interval": "1200", "--max-trials": "5", "--stability-percentage": "20",
                            "-H": "triton-admin-key:KEY"}.items()


def test_show_command_takes_the_key_from_the_agents_variable_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf_analyzer, "find", lambda: perf_analyzer.PerfAnalyzer(Path("perf_analyzer"), None))
    monkeypatch.setenv("TRITONOPS_ADMIN_SECRET", "s3cret")
    code, out, _ = _bench("--show-command")
    assert code == 0 and "s3cret" not in out and "LD_LIBRARY_PATH" not in out  # no wheel: the loader's own path
    assert '-H "triton-admin-key:${TRITONOPS_ADMIN_SECRET}"' in out


def _opts(words: list[str]) -> dict[str, Any]:
    return {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("-")}
