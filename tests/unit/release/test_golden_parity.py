"""One golden gate: both readers of golden.json accept and refuse the same files, and both modes gate alike.

The agent's reader (``tritonops.release_format.golden_gate.read_golden``, standard library, the gate of pull mode and,
through ``tritonops.release.push golden``, of push mode) and the pydantic model
(``tritonops.model_repo.golden.Golden``, what ``validate`` reports with and what writes golden files)
are two schemas of one format. A table of good files and of every kind of bad one, then hypothesis
mutating good files, show that they agree; the push-mode entry point is checked against a fake Triton
to decide exactly as the agent's gate does.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tritonops.core.errors import ReleaseError
from tritonops.core.names import GOLDEN_FILE
from tritonops.core.triton_http import Triton
from tritonops.model_repo.golden import Golden, numpy_dtypes
from tritonops.release import push
from tritonops.release_format.golden_gate import WIRE_DATATYPES, golden_gate, read_golden

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "model_repository"


def _t(datatype: str, shape: list[Any], data: Any) -> dict[str, Any]:
    return {"datatype": datatype, "shape": shape, "data": data}


X = _t("FP32", [1, 2], [0.5, 1])
Y = _t("INT64", [1], [2])


def _doc(**top: Any) -> dict[str, Any]:
    return {"cases": [{"name": "a", "inputs": {"x": X}, "outputs": {"y": Y}}], **top}


def _case(**case: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "a", "inputs": {"x": X}, "outputs": {"y": Y}}
    base.update(case)
    return {"cases": [{k: v for k, v in base.items() if v is not _DROP}]}


def _out(tensor: Any) -> dict[str, Any]:
    return _case(outputs={"y": tensor})


_DROP = object()

GOOD: dict[str, Any] = {
    "minimal": _doc(),
    "tolerances as integers": _doc(rtol=0, atol=1),
    "tolerances as floats": _doc(rtol=1e-3, atol=0.0),
    "scalar (shape [])": _out(_t("FP32", [], [1.5])),
    "empty tensor (shape [0])": _out(_t("FP32", [0], [])),
    "every datatype": _case(outputs={
        "b": _t("BOOL", [2], [True, False]),
        "u8": _t("UINT8", [2], [0, 255]), "u64": _t("UINT64", [1], [2**64 - 1]),
        "i8": _t("INT8", [2], [-128, 127]), "i64": _t("INT64", [1], [-(2**63)]),
        "h": _t("FP16", [2], [65504, -0.5]), "f": _t("FP32", [1], [3.0e38]), "d": _t("FP64", [1], [1e308]),
        "s": _t("BYTES", [2], ["", "text"]),
    }),
    "two cases": {"cases": [_doc()["cases"][0], {"name": "b", "inputs": {"x": X}, "outputs": {"y": Y}}]},
}

BAD: dict[str, Any] = {
    # not a golden document at all
    "empty file": b"",
    "whitespace": b"  \n",
    "not JSON": b"{cases: []}",
    "not UTF-8": b'{"cases": "\xff"}',
    "a list": [],
    "empty object": {},
    # top level
    "cases missing": {"rtol": 1e-4},
    "cases empty": {"cases": []},
    "cases not a list": {"cases": {"name": "a"}},
    "extra top-level key (a typo of rtol)": _doc(rtoll=1e-3),
    "rtol negative": _doc(rtol=-1e-6),
    "atol negative": _doc(atol=-1),
    "rtol NaN": _doc(rtol=math.nan),
    "atol Infinity": _doc(atol=math.inf),
    "rtol beyond any float": json.dumps(_doc()).replace('{"cases"', '{"rtol": 1e400, "cases"', 1).encode(),
    "rtol a string": _doc(rtol="1e-4"),
    "rtol true": _doc(rtol=True),
    "atol null": _doc(atol=None),
    "atol a list": _doc(atol=[0.1]),
    # cases
    "case not an object": {"cases": ["a"]},
    "case name missing": _case(name=_DROP),
    "case name not a string": _case(name=1),
    "case name null": _case(name=None),
    "case inputs missing": _case(inputs=_DROP),
    "case outputs missing": _case(outputs=_DROP),
    "case inputs empty": _case(inputs={}),
    "case outputs empty (checks nothing)": _case(outputs={}),
    "case inputs a list": _case(inputs=[X]),
    "case extra key": _case(expected={"y": Y}),
    # tensors
    "tensor not an object": _out([2]),
    "tensor datatype missing": _out({"shape": [1], "data": [2]}),
    "tensor shape missing": _out({"datatype": "INT64", "data": [2]}),
    "tensor data missing": _out({"datatype": "INT64", "shape": [1]}),
    "tensor extra key": _out({**Y, "name": "y"}),
    "datatype unknown": _out(_t("FP33", [1], [2])),
    "datatype lower case": _out(_t("int64", [1], [2])),
    "datatype config spelling": _out(_t("TYPE_INT64", [1], [2])),
    "datatype not a string": _out(_t(5, [1], [2])),
    "shape negative": _out(_t("INT64", [-1], [2])),
    "shape a float": _out(_t("INT64", [1.0], [2])),
    "shape a bool": _out(_t("INT64", [True], [2])),
    "shape a string": _out(_t("INT64", ["1"], [2])),
    "shape not a list": _out(_t("INT64", 1, [2])),
    "data too long for the shape": _out(_t("INT64", [1], [2, 3])),
    "data too short for the shape": _out(_t("FP32", [2, 2], [1, 2, 3])),
    "data not a list": _out(_t("INT64", [1], 2)),
    "data nested": _out(_t("INT64", [1, 2], [[2, 3]])),
    "FP32 data a string": _out(_t("FP32", [1], ["1.5"])),
    "FP32 data a bool": _out(_t("FP32", [1], [True])),
    "FP32 data null": _out(_t("FP32", [1], [None])),
    "FP32 data NaN": _out(_t("FP32", [1], [math.nan])),
    "FP32 data Infinity": _out(_t("FP32", [1], [-math.inf])),
    "FP32 data beyond FP32": _out(_t("FP32", [1], [1e39])),
    "FP16 data beyond FP16": _out(_t("FP16", [1], [70000])),
    "FP64 data an integer beyond any float": b'{"cases": [{"name": "a", "inputs": {"x": {"datatype": "FP32", '
                                             b'"shape": [1], "data": [1]}}, "outputs": {"y": {"datatype": "FP64", '
                                             b'"shape": [1], "data": [' + b"9" * 400 + b"]}}}]}",
    "INT64 data a float": _out(_t("INT64", [1], [1.5])),
    "INT64 data a whole float": _out(_t("INT64", [1], [2.0])),
    "INT64 data a bool": _out(_t("INT64", [1], [False])),
    "INT64 data beyond INT64": _out(_t("INT64", [1], [2**63])),
    "UINT8 data 256": _out(_t("UINT8", [1], [256])),
    "UINT8 data negative": _out(_t("UINT8", [1], [-1])),
    "INT8 data 128": _out(_t("INT8", [1], [128])),
    "BOOL data 1": _out(_t("BOOL", [1], [1])),
    "BOOL data a string": _out(_t("BOOL", [1], ["true"])),
    "BYTES data a number": _out(_t("BYTES", [1], [1])),
    "input tensor wrong too": _case(inputs={"x": _t("FP32", [1, 2], [0.5])}),
}


def _raw(doc: Any) -> bytes:
    return doc if isinstance(doc, bytes) else json.dumps(doc, allow_nan=True).encode()


def agent_accepts(path: Path) -> bool:
    try:
        read_golden(path)
    except ReleaseError as e:
        assert str(e).startswith(str(path)), f"the agent's refusal does not name the file: {e}"
        return False
    return True


def pydantic_accepts(path: Path) -> bool:
    try:
        Golden.load(path)
    except (ValidationError, ReleaseError):
        return False
    return True


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / GOLDEN_FILE
    path.write_bytes(_raw(doc))
    return path


@pytest.mark.parametrize("name", sorted(GOOD))
def test_both_readers_accept_a_good_file(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, GOOD[name])
    assert agent_accepts(path), "the agent refuses it"
    assert pydantic_accepts(path), "the pydantic model refuses it"


@pytest.mark.parametrize("model", sorted(p.parent.name for p in SAMPLE.glob(f"*/{GOLDEN_FILE}")))
def test_both_readers_accept_the_examples(model: str) -> None:
    path = SAMPLE / model / GOLDEN_FILE
    assert agent_accepts(path) and pydantic_accepts(path)


@pytest.mark.parametrize("name", sorted(BAD))
def test_both_readers_refuse_a_bad_file(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, BAD[name])
    assert not agent_accepts(path), "the agent accepts it"
    assert not pydantic_accepts(path), "the pydantic model accepts it"


def test_the_agents_refusal_names_the_field(tmp_path: Path) -> None:
    path = _write(tmp_path, BAD["UINT8 data 256"])
    with pytest.raises(ReleaseError, match=re.escape("cases[0].outputs['y'].data[0]: 256 is not an integer from 0")):
        read_golden(path)
    with pytest.raises(ReleaseError, match=re.escape("unknown key(s) ['rtoll']")):
        read_golden(_write(tmp_path, BAD["extra top-level key (a typo of rtol)"]))


def test_both_readers_know_the_same_datatypes() -> None:
    assert set(numpy_dtypes()) == set(WIRE_DATATYPES)


def test_golden_file_is_named_once() -> None:
    defs = [str(p.relative_to(ROOT)) for p in (ROOT / "infra").rglob("*.py")
            if re.search(r"^GOLDEN_FILE\s*=", p.read_text(), re.M)]
    assert defs == ["infra/tritonops/core/names.py"]


# --- hypothesis: mutate good files, the readers must still agree ----------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=6,
)


def _values(datatype: str) -> st.SearchStrategy[Any]:
    kind, low, high = WIRE_DATATYPES[datatype]
    if kind == "bool":
        return st.booleans()
    if kind == "int":
        return st.integers(int(low), int(high))
    if kind == "float":
        return st.floats(low, high) | st.integers(-1000, 1000)
    return st.text(max_size=4)


@st.composite
def tensors(draw: st.DrawFn) -> dict[str, Any]:
    datatype = draw(st.sampled_from(sorted(WIRE_DATATYPES)))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    n = math.prod(shape)
    return _t(datatype, shape, draw(st.lists(_values(datatype), min_size=n, max_size=n)))


names = st.text(min_size=1, max_size=5)
good_docs = st.fixed_dictionaries(
    {"cases": st.lists(st.fixed_dictionaries({
        "name": st.text(max_size=5),
        "inputs": st.dictionaries(names, tensors(), min_size=1, max_size=2),
        "outputs": st.dictionaries(names, tensors(), min_size=1, max_size=2),
    }), min_size=1, max_size=2)},
    optional={"rtol": st.floats(0, 1) | st.integers(0, 3), "atol": st.floats(0, 1) | st.integers(0, 3)},
)


def _slots(node: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) in a document, the document itself first."""
    yield None, None
    stack = [node]
    while stack:
        cur = stack.pop()
        items = cur.items() if isinstance(cur, dict) else enumerate(cur) if isinstance(cur, list) else ()
        for k, v in items:
            yield cur, k
            stack.append(v)


@st.composite
def mutated_docs(draw: st.DrawFn) -> Any:
    doc = draw(good_docs)
    for _ in range(draw(st.integers(0, 2))):
        slots = list(_slots(doc))
        container, key = draw(st.sampled_from(slots))
        how = draw(st.sampled_from(["replace", "delete", "add"]))
        value = draw(json_values | tensors() | st.sampled_from(["FP32", -1, 0, 1.0, True, [], {}]))
        if container is None:
            doc = value if how == "replace" else doc
        elif how == "replace":
            container[key] = value
        elif how == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(st.sampled_from(["name", "rtol", "extra", "data", "shape"]))] = value
        else:
            container.append(value)
    return doc


SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@SETTINGS
@given(doc=good_docs)
def test_generated_good_files_pass_both(doc: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, doc)  # rewritten for each example
    assert agent_accepts(path) and pydantic_accepts(path)


@SETTINGS
@given(doc=mutated_docs())
def test_readers_agree_on_mutated_files(doc: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, doc)  # rewritten for each example
    assert agent_accepts(path) == pydantic_accepts(path), json.dumps(doc, allow_nan=True)[:400]


# --- the push-mode entry point is the agent's gate ------------------------------------------------

class _FakeTriton(BaseHTTPRequestHandler):
    """READY for every model; answers every inference with ``answer`` (KServe v2 JSON)."""

    answer: dict[str, Any] = {}
    ready = True

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any = None) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802
        self._send(200 if self.ready and self.path.endswith("/ready") else 400, {})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(200, self.answer)


@pytest.fixture(scope="module")
def _server() -> Iterator[tuple[str, type[_FakeTriton]]]:
    handler = type("Handler", (_FakeTriton,), {"answer": {}, "ready": True})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def fake_triton(_server: tuple[str, type[_FakeTriton]]) -> tuple[str, type[_FakeTriton]]:
    _server[1].answer, _server[1].ready = {}, True
    return _server


def _repo(tmp_path: Path, golden: Any) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\n')
    (tmp_path / "m" / GOLDEN_FILE).write_bytes(_raw(golden))
    return tmp_path


ANSWERS = {
    "right": {"outputs": [{"name": "y", "datatype": "INT64", "shape": [1], "data": [2]}]},
    "wrong value": {"outputs": [{"name": "y", "datatype": "INT64", "shape": [1], "data": [3]}]},
    "wrong shape": {"outputs": [{"name": "y", "datatype": "INT64", "shape": [1, 1], "data": [2]}]},
    "output missing": {"outputs": []},
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("golden", ["minimal", "extra top-level key (a typo of rtol)", "rtol negative"])
def test_push_mode_decides_as_the_agents_gate(tmp_path: Path, fake_triton: tuple[str, type[_FakeTriton]],
                                              answer: str, golden: str) -> None:
    url, handler = fake_triton
    handler.answer = ANSWERS[answer]
    repo = _repo(tmp_path, GOOD.get(golden) or BAD[golden])
    pushed = push.golden(url, repo, timeout=1)
    pulled = golden_gate(Triton(url), repo, ["m"], timeout=1)
    assert (pushed["ok"], pushed["cases"], pushed["failed"]) == (pulled["ok"], pulled["cases"], pulled["failed"])
    assert pushed["ok"] == (answer == "right" and golden == "minimal")
    assert pushed["models"] == ["m"]


def test_push_mode_cli_exit_codes(tmp_path: Path, fake_triton: tuple[str, type[_FakeTriton]],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    url, handler = fake_triton
    repo = _repo(tmp_path, GOOD["minimal"])
    handler.answer = ANSWERS["right"]
    assert push.main(["golden", url, "--repository", str(repo), "--timeout", "1"]) == 0
    handler.answer = ANSWERS["wrong value"]
    assert push.main(["golden", url, "--repository", str(repo), "--timeout", "1"]) == 1
    assert "m golden case 'a': output 'y': values differ" in capsys.readouterr().err
    handler.ready = False
    assert push.main(["golden", url, "--repository", str(repo), "--timeout", "0"]) == 1
    assert "m: not READY after 0s" in capsys.readouterr().err
    assert push.main(["golden", "grpc://127.0.0.1:8001", "--repository", str(repo)]) == 2
    assert "HTTP/REST" in capsys.readouterr().err
    assert push.main(["golden", url, "--repository", str(tmp_path / "nothing")]) == 2


def test_push_mode_gate_needs_neither_tritonclient_nor_the_triton_package() -> None:
    code = ("import sys, tritonops.release.push; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'tritonclient' or m.startswith('tritonops.triton')); "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
