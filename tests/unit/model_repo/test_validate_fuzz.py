"""Property-based: whatever config.pbtxt holds, validate returns (quickly) a clean pass or findings that
name the file and the line or field, and never raises."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tritonops.model_repo.validate import validate
from validate_cases import CASES, ECHO

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
VALID = [p.read_text() for p in sorted(SAMPLE.glob("*/config.pbtxt"))] + [
    c.config.replace("{name}", "m") for c in CASES.values()]
TOKENS = ["{", "}", "[", "]", ":", ",", "-1", "0", "99999999999999999999", '"x"', "dims", "input", "name",
          "TYPE_FP32", "KIND_GPU", "reshape", "shape", "\u0661", "\x00", "\\", '"', "#", "\n", "1e400", "<", ">"]


def _check(text: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "m"
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.py").write_text(ECHO)
        config = folder / "config.pbtxt"
        config.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        report = validate(folder)
        for f in [*report.errors, *report.warnings]:
            assert f.path and f.code and f.message
            if f.path == str(config) and f.severity == "error":
                assert f.line or f.field, f


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 4))):
        spans = [m.span() for m in re.finditer(r'"[^"]*"|-?\d+|\w+|\S', text)]
        if not spans:
            break
        start, end = draw(st.sampled_from(spans))
        op = draw(st.sampled_from(["delete", "replace", "duplicate", "insert"]))
        piece = draw(st.sampled_from(TOKENS) | st.integers(-(2**70), 2**70).map(str))
        text = {"delete": text[:start] + text[end:],
                "replace": text[:start] + piece + text[end:],
                "duplicate": text[:end] + " " + text[start:end] + text[end:],
                "insert": text[:start] + piece + " " + text[start:]}[op]
    return text


SETTINGS = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.text(max_size=400))
def test_random_text_never_raises(text: str) -> None:
    _check(text)


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(data: bytes) -> None:
    _check(data)


@SETTINGS
@given(mutated())
@example('name: "m"\nbackend: "python"\nbatch_input [ { kind: -1 target_name: "n" "n" } ]\n')  # found by hypothesis
@example('name: "m"\ninput [ { name: "x" data_type: 99999999999999999999 dims: [ 4 ] } ]\n')
def test_mutated_valid_configs_never_raise(text: str) -> None:
    _check(text)
