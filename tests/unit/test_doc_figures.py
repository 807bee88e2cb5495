"""The docs' measured figures come from benchmark records (tests/benchmarks/records/), never typed by hand.

A figure the docs quote carries a marker, ``127 s<!-- fig: demo.total_s -->`` (tools/devkit/figures.py: the
marker and how a value is written); each must be its record's figure, so it changes only by running the
benchmark again (``python -m devkit figures --write`` then copies it in).

The rule for a timing without a marker: a timing is a number followed by ms, s, sec, seconds, min, minutes,
h or hours in README.md or docs/*.md. It needs a marker unless it is

- inside a fenced block: ``console`` blocks run under ``devkit docs --check`` (their durations masked),
  ``text`` blocks are transcripts of one dated run shown whole, other fences are code and config;
- inside an inline code span: a command, an option's value or a config key;
- inside a phrase of :data:`NOT_MEASURED`: a setting, limit, default or derived value (a deadline, an
  interval, an alert's ``for``, a computed wait budget), each phrase listed with its reason.

Anything else is a measurement: mark it with its record, or say it without a number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from devkit import docs, figures

DOCS = docs.files(docs.DEFAULT_FILES)
TIMING = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_OR_COMMENT = re.compile(r"`[^`]*`|<!--.*?-->")

# Timings that are not measurements: phrase (as it stands on one line of the docs) -> why it needs no record.
LIMIT = "a limit or budget the code sets"
SETTING = "a setting of the run or test described (an interval, a window, a duration per step)"
ALERT = "an alert rule's `for` duration"
WAIT = "a wait budget tritonops.k8s.waits derives from the table's steps (computed, not measured)"
SIM = "sim_capacity.py's parameters and its simulated SLO minutes (a model's output, not a timing of a machine)"
NOT_MEASURED: dict[str, str] = {
    'until the 600 s deadline': LIMIT,
    'a byte every 2 s': SETTING,
    'against a 45 min budget': LIMIT,
    '`slow` (over ~30 s)': "the `slow` marker's threshold",
    'every 15 minutes, randomised': SETTING,
    '1 s scrape and evaluation': SETTING,
    'nor having refused it, for 30 min': ALERT,
    'rising for 15 min': ALERT,
    '1 for 10 min': ALERT,
    'asked again 5 minutes before the token expires (12 hours on AWS)': "a credential refresh and AWS's token lifetime",
    'interval 5 s': SETTING,
    'polling every 60 s': "the extrapolation's assumed interval",
    '(poll interval 2 s)': SETTING,
    'with S3 cut off for 8 s': SETTING,
    'one poll interval (30 s)': SETTING,
    '(poll interval 5 s)': SETTING,
    'default 10 s': LIMIT,
    'default 600 s': LIMIT,
    'a 5 s health check, STS 10 s': LIMIT,
    'Identity 5 s': LIMIT,
    '1.2 s windows': SETTING,
    '6 s per setting': SETTING,
    '(12 s runs)': SETTING,
    '12 s per setting': SETTING,
    'at 6 s and 12 s agreed': SETTING,
    'the 50 ms p95': LIMIT,
    'the 50 ms budget': LIMIT,
    'by default for 10 minutes': "the Kubernetes provider's default wait",
    'one readiness period, 60 s': WAIT,
    'That is 1,579 s (26 min) for a create': WAIT,
    '15,790 s). The same 1,579 s': WAIT,
    'at least 360 s for the load': WAIT,
    "the check's calls at 10 s each": WAIT,
    'and 60 s of slack': WAIT,
    '251 s, dev vision 201 s': WAIT,
    'whose pull alone (164 s) outlasted the 120 s it once had': WAIT,
    'step past 1,579 s ends': WAIT,
    '1,579 s for dev and': WAIT,
    'in 15 s steps': SIM,
    '20 minutes: KEDA': SIM,
    '1 min average': SIM,
    "300 s scale-down stabilisation; KEDA's 300 s cooldown": SIM,
    'ready 120 s after launch': SIM,
    'a pod ready 60 s': SIM,
    '`minReplicas` 300 s later': SIM,
    '(239 minutes over the day)': SIM,
    '241 minutes lost': SIM,
    '(30 s: 238, 300 s: 241)': SIM,
}


def unmarked(path: Path) -> list[str]:
    """``file:line: token`` for every timing of the file that has no marker and is not exempt."""
    found: list[str] = []
    fence = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if fence:
            fence = None if line.strip() == fence else fence
            continue
        if m := FENCE.match(line):
            fence = m.group(1)
            continue
        text = CODE_OR_COMMENT.sub(lambda m: " " * len(m.group()), line)
        allowed = [(m.start(), m.end()) for phrase in NOT_MEASURED for m in re.finditer(re.escape(phrase), line)]
        for t in TIMING.finditer(text):
            if line.startswith("<!-- fig:", t.end()) or any(a <= t.start() and t.end() <= b for a, b in allowed):
                continue
            found.append(f"{path.relative_to(docs.ROOT)}:{n}: {t.group()}")
    return found


def test_every_marked_figure_is_its_records() -> None:
    assert figures.check(DOCS) == [], "python -m devkit figures --write copies the records' figures in"


def test_no_timing_in_the_docs_without_a_record() -> None:
    assert [u for p in DOCS for u in unmarked(p)] == [], __doc__


def test_every_not_measured_phrase_is_still_in_the_docs() -> None:
    text = "\n".join(p.read_text() for p in DOCS)
    assert [p for p in NOT_MEASURED if p not in text] == []


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("total_s", 126.6, "127 s"), ("drift_s", 10.34, "10 s"), ("drift_s", 7.43, "7.4 s"),
    ("render_s", 0.412, "0.41 s"), ("wall_s", 1856.2, "1,856 s"), ("poll_ms", 16.0, "16 ms"),
    ("tests", 1153, "1,153"), ("ratio", 0.932, "0.93"), ("idle_pct", 42.0, "42%"), ("speedup_x", 4.27, "4.3x"),
    ("verdict", "indistinguishable", "indistinguishable"),
])
def test_how_a_figure_is_written(key: str, value: float | int | str, shown: str) -> None:
    assert figures.fmt(key, value) == shown


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "demo.json").write_text(json.dumps({"figures": {"total_s": 205.3, "converge_s": 92.0}}))
    monkeypatch.setattr(figures, "RECORDS", folder)
    return folder


DOC = """# doc

`make demo` took (127 s<!-- fig: demo.total_s -->; converge 92 s<!-- fig: demo.converge_s -->).
The image: 52 s<!-- fig: demo.image_s -->, the venv 3 s<!-- fig: nothing.venv_s -->.
"""


def test_a_stale_figure_is_named_by_file_and_line_and_write_rewrites_it(records: Path, tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    assert figures.check([doc]) == [
        f"{doc}:3: demo.total_s: shows '127 s', the record says '205 s'",
        f"{doc}:4: demo.image_s: record demo has no figure image_s (it has: total_s, converge_s)",
        f"{doc}:4: nothing.venv_s: no record {records}/nothing.json (run its benchmark)",
    ]
    assert [(f.line, f.shown, f.expected) for f in figures.write([doc])] == [(3, "127 s", "205 s")]
    assert doc.read_text() == DOC.replace("127 s<", "205 s<")
    assert len(figures.check([doc])) == 2  # the dangling markers stay until a record has them


def test_the_devkit_command_checks_and_writes(records: Path, tmp_path: Path) -> None:
    from devkit.__main__ import app
    from typer.testing import CliRunner

    doc = tmp_path / "doc.md"
    doc.write_text("took 127 s<!-- fig: demo.total_s -->\n")
    runner = CliRunner()
    assert runner.invoke(app, ["figures", str(doc)]).exit_code == 2  # neither --check nor --write
    stale = runner.invoke(app, ["figures", "--check", str(doc)])
    assert stale.exit_code == 1 and f"{doc}:1: demo.total_s: shows '127 s'" in stale.output
    assert doc.read_text() == "took 127 s<!-- fig: demo.total_s -->\n"  # --check writes nothing
    assert runner.invoke(app, ["figures", "--write", str(doc)]).exit_code == 0
    assert doc.read_text() == "took 205 s<!-- fig: demo.total_s -->\n"
    assert runner.invoke(app, ["figures", "--check", str(doc)]).exit_code == 0


def test_a_timing_without_a_marker_is_found_and_exemptions_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    monkeypatch.setitem(NOT_MEASURED, "a 600 s deadline", "a limit")
    doc = tmp_path / "doc.md"
    doc.write_text("converge took 18 s, drift 12.5 s<!-- fig: d.x_s -->, within a 600 s deadline;\n"
                   "`--window 8s` <!-- took 3 s -->\n```text\ndone in 98s\n```\n1,856 s (31 min) and 16 ms\n")
    assert unmarked(doc) == ["doc.md:1: 18 s", "doc.md:6: 1,856 s", "doc.md:6: 31 min", "doc.md:6: 16 ms"]
