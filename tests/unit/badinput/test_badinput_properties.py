"""Generated and mutated golden.json files, release manifests and channel pointers (hypothesis).

Whatever the bytes, the readers answer with the project's clean errors only: ReleaseError (and its
UsageError / StoreError) from the node agent, ValueError from the pydantic golden model. A document
a reader accepts is one the next step can use without raising (the golden gate, verify).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tritonops.core.errors import ReleaseError, StoreError
from tritonops.core.names import MANIFEST_FILE, check_path
from tritonops.model_repo.golden import Golden
from tritonops.release_format import manifest
from tritonops.release_format.golden_gate import golden_gate, read_golden
from tritonops.release_format.metadata import unverified as parse_pointer

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)

# Any JSON value, a little deep.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


# --- golden.json ----------------------------------------------------------------------------------

def _tensor(data_value: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries({
        "datatype": st.sampled_from(["FP32", "INT64", "BYTES", "BOOL"]) | json_values,
        "shape": st.lists(st.integers(-2, 4), max_size=3) | json_values,
        "data": st.lists(data_value, max_size=6) | json_values,
    })


tensors = _tensor(st.floats(allow_nan=True) | st.integers(-5, 5) | st.text(max_size=3) | json_values)
golden_docs = st.fixed_dictionaries(
    {"cases": st.lists(st.fixed_dictionaries({
        "name": st.text(max_size=8) | json_values,
        "inputs": st.dictionaries(st.text(max_size=6), tensors, max_size=2) | json_values,
        "outputs": st.dictionaries(st.text(max_size=6), tensors, max_size=2) | json_values,
    }) | json_values, max_size=3) | json_values},
    optional={"rtol": json_values, "atol": json_values, "extra": json_values},
) | json_values


class _Triton:
    """A server that is READY and answers every inference with the outputs it is given."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def model_ready(self, model: str) -> bool:
        return True

    def infer(self, model: str, body: dict) -> dict:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer if isinstance(self.answer, dict) else {"outputs": self.answer}


@SETTINGS
@given(doc=golden_docs, answer=st.one_of(json_values, st.builds(lambda o: {"outputs": o}, json_values),
                                         st.just(ReleaseError("HTTP 400: bad input"))))
@example(doc={"cases": [{"inputs": {"x": {"datatype": "FP32", "shape": [1], "data": [1.0]}},
                         "outputs": {"y": {"datatype": "FP32", "shape": [1], "data": [{}]}}}]},
         answer={"outputs": [{"name": "y", "shape": [1], "data": ["x"]}]})
def test_agent_golden_gate_reads_any_document_cleanly(doc: Any, answer: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m" / "golden.json"
        path.parent.mkdir()
        path.write_bytes(_dumps(doc))
        with contextlib.suppress(ReleaseError):
            read_golden(path)
        # The gate never raises: a bad file or a bad answer is a failed gate, with the reason.
        gate = golden_gate(_Triton(answer), Path(tmp), ["m"], timeout=1)  # type: ignore[arg-type]
        assert isinstance(gate["ok"], bool) and all(isinstance(f, str) for f in gate["failed"])


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_agent_golden_reads_any_bytes_cleanly(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "golden.json"
        path.write_bytes(raw)
        with contextlib.suppress(ReleaseError):
            read_golden(path)


@SETTINGS
@given(doc=golden_docs)
def test_controller_golden_model_accepts_or_raises_value_error(doc: Any) -> None:
    """tritonops.model_repo.golden (validate and smoke read golden.json with it)."""
    try:
        golden = Golden.model_validate_json(_dumps(doc))
    except ValueError:
        return
    for case in golden.cases:
        for t in [*case.inputs.values(), *case.outputs.values()]:
            t.array()  # what smoke sends and compares


# --- release manifests ----------------------------------------------------------------------------

paths = st.text("abcXYZ019._+-/ \\$;~", max_size=20) | st.sampled_from(
    ["../etc/passwd", "/abs", "a//b", ".", "a/./b", "-rf", "m/config.pbtxt", "\x00", "é/1"])
manifest_docs = st.fixed_dictionaries(
    {"algorithm": st.just("sha256") | json_values,
     "files": st.dictionaries(paths, HEX | json_values, max_size=5) | json_values},
) | json_values


@SETTINGS
@given(doc=manifest_docs)
@example(doc={"algorithm": "sha256", "files": {"a/b": "a" * 64}})
def test_manifest_parse_accepts_only_safe_paths_and_digests(doc: Any) -> None:
    try:
        files = manifest.parse(_dumps(doc), "m.json")
    except ReleaseError:
        return
    for rel, sha in files.items():
        assert check_path(rel) == rel and len(sha) == 64


@SETTINGS
@given(raw=st.binary(max_size=300) | st.builds(lambda d: _dumps(d)[:-1], manifest_docs))
def test_manifest_parse_reads_any_bytes_cleanly(raw: bytes) -> None:
    with contextlib.suppress(ReleaseError):
        manifest.parse(raw, "m.json")


@SETTINGS
@given(doc=manifest_docs, content=st.binary(max_size=20))
def test_release_verify_answers_any_manifest_cleanly(doc: Any, content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "r1"
        (root / "m").mkdir(parents=True)
        (root / "m" / "config.pbtxt").write_bytes(content)
        (root / MANIFEST_FILE).write_bytes(_dumps(doc))
        try:
            files = manifest.verify(root)
        except ReleaseError:
            return
        assert files == manifest.tree_files(root)


# --- channel pointers ---------------------------------------------------------------------------

pointer_docs = st.fixed_dictionaries(
    {"release": st.text(max_size=12) | json_values, "digest": HEX | json_values},
    optional={"history": st.lists(json_values, max_size=3) | json_values, "channel": json_values},
) | json_values


@SETTINGS
@given(raw=st.builds(_dumps, pointer_docs) | st.binary(max_size=200))
def test_channel_pointer_is_a_pointer_or_a_store_error(raw: bytes) -> None:
    try:
        doc = parse_pointer(raw, "channels/c.json")
    except StoreError:
        return
    assert all(isinstance(h, dict) for h in doc.get("history", []))
