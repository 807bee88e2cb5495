"""The golden gate, the one release decision of both modes: read ``golden.json``, send it, compare.

Each model of a release may carry ``<model>/golden.json``: cases of input tensors and the outputs the
model must answer, within ``rtol``/``atol`` (numpy.allclose's rule). The pull agent gates every
release with :func:`golden_gate` on the node; push mode runs the same function from the controller
(``python -m tritonops.release.push golden``). :func:`read_golden` is the file's schema, written by
hand (standard library); ``tritonops.model_repo.golden.Golden`` (pydantic, for ``validate`` and for
writing golden files) must accept and refuse exactly the same files (tests/unit/release/
test_golden_parity.py). The file format::

    {"rtol": 1e-4, "atol": 1e-5,                       # optional; finite numbers >= 0
     "cases": [{"name": "batch1",                      # at least one case
                "inputs":  {"x": {"datatype": "FP32", "shape": [1, 4], "data": [0.1, 0.2, 0.3, 0.4]}},
                "outputs": {"y": {"datatype": "INT64", "shape": [1, 1], "data": [2]}}}]}

No other keys; at least one input and one output per case; ``data`` is flat, holds exactly
prod(shape) values of the datatype (BOOL: true/false; integers within the type's range; FP16/32/64:
finite numbers the type can hold; BYTES: strings).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError
from ..core.fsio import read_bounded
from ..core.names import GOLDEN_FILE
from ..core.triton_http import Triton

GOLDEN_MAX_BYTES = 16 << 20
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5

# Triton's wire datatypes (KServe v2) -> (kind, lowest, highest) of the JSON values they carry
# (for floats: the largest finite magnitude of the type).
WIRE_DATATYPES: dict[str, tuple[str, float, float]] = {
    "BOOL": ("bool", 0, 1),
    **{f"UINT{b}": ("int", 0, (1 << b) - 1) for b in (8, 16, 32, 64)},
    **{f"INT{b}": ("int", -(1 << (b - 1)), (1 << (b - 1)) - 1) for b in (8, 16, 32, 64)},
    "FP16": ("float", -65504.0, 65504.0),
    "FP32": ("float", -3.4028234663852886e38, 3.4028234663852886e38),
    "FP64": ("float", -sys.float_info.max, sys.float_info.max),
    "BYTES": ("str", 0, 0),
}
_DOC_KEYS = {"rtol", "atol", "cases"}
_CASE_KEYS = {"name", "inputs", "outputs"}
_TENSOR_KEYS = {"datatype", "shape", "data"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def value_error(datatype: str, value: Any) -> str | None:
    """None when ``value`` is one JSON value of ``datatype``, else why not (shared by both readers)."""
    kind, low, high = WIRE_DATATYPES[datatype]
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = _is_int(value) and low <= value <= high
    elif kind == "float":
        try:
            ok = (_is_int(value) or isinstance(value, float)) and low <= float(value) <= high
        except OverflowError:  # an integer beyond any float
            ok = False
    else:
        ok = isinstance(value, str)
    if ok:
        return None
    want = {"bool": "true or false", "int": f"an integer from {low} to {high}",
            "float": f"a finite number within +-{high:.6g}", "str": "a string"}[kind]
    return f"{value!r} is not {want} ({datatype})"


def tensor_data_error(datatype: str, shape: list[int], data: list[Any]) -> str | None:
    """None when ``data`` holds prod(``shape``) values of ``datatype``, else why not (``data[i]: ...``)."""
    need = math.prod(shape)
    if need != len(data):
        return f"shape {shape} needs {need} values, got {len(data)}"
    for i, value in enumerate(data):
        why = value_error(datatype, value)
        if why:
            return f"data[{i}]: {why}"
    return None


def _keys(obj: dict[str, Any], allowed: set[str], required: set[str], where: str) -> None:
    extra = sorted(set(obj) - allowed)
    missing = sorted(required - set(obj))
    if extra or missing:
        raise ReleaseError(f"{where}: " + "; ".join(
            ([f"unknown key(s) {extra}"] if extra else []) + ([f"missing key(s) {missing}"] if missing else []))
            + f" (keys: {', '.join(sorted(allowed))})")


def read_golden(path: Path) -> dict[str, Any]:
    """A golden.json, bounded (a regular file of at most GOLDEN_MAX_BYTES, never a FIFO or device) and
    checked against the format above. Anything else is a ReleaseError naming the file and the field."""
    raw = read_bounded(path, GOLDEN_MAX_BYTES, follow=False)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ReleaseError(f"{path}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list) or not doc["cases"]:
        raise ReleaseError(f"{path}: expected {{'cases': [{{'name', 'inputs': {{..}}, 'outputs': {{..}}}}]}}")
    _keys(doc, _DOC_KEYS, {"cases"}, str(path))
    for field in ("rtol", "atol"):
        value = doc.get(field, 0.0)
        if not (_is_int(value) or isinstance(value, float)) or not 0 <= value < math.inf:
            raise ReleaseError(f"{path}: {field} {value!r} is not a finite number >= 0")
    for i, case in enumerate(doc["cases"]):
        where = f"{path}: cases[{i}]"
        if not isinstance(case, dict):
            raise ReleaseError(f"{where} is not an object")
        _keys(case, _CASE_KEYS, _CASE_KEYS, where)
        if not isinstance(case["name"], str):
            raise ReleaseError(f"{where}.name: expected a string")
        for side in ("inputs", "outputs"):
            tensors = case[side]
            if not isinstance(tensors, dict) or not tensors:
                raise ReleaseError(f"{where}.{side}: expected an object of at least one tensor")
            for name, t in tensors.items():
                _check_tensor(t, f"{where}.{side}[{name!r}]")
    return dict(doc)


def _check_tensor(t: Any, where: str) -> None:
    if not isinstance(t, dict):
        raise ReleaseError(f"{where}: expected {{'datatype', 'shape', 'data'}}")
    _keys(t, _TENSOR_KEYS, _TENSOR_KEYS, where)
    if not isinstance(t["datatype"], str) or t["datatype"] not in WIRE_DATATYPES:
        raise ReleaseError(f"{where}.datatype: {t['datatype']!r} is not one of {sorted(WIRE_DATATYPES)}")
    shape = t["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise ReleaseError(f"{where}.shape: expected a list of sizes")
    if not isinstance(t["data"], list):
        raise ReleaseError(f"{where}.data: expected a list")
    why = tensor_data_error(t["datatype"], shape, t["data"])
    if why:
        raise ReleaseError(f"{where}.{why if why.startswith('data[') else 'data: ' + why}")


def _close(want: Any, got: Any, rtol: float, atol: float) -> bool:
    if isinstance(want, bool) or isinstance(got, bool) or isinstance(want, str) or isinstance(got, str):
        return bool(want == got)
    try:
        w, g = float(want), float(got)
    except (TypeError, ValueError, OverflowError):
        return bool(want == got)
    if math.isnan(w) or math.isnan(g):
        return math.isnan(w) and math.isnan(g)
    return abs(g - w) <= atol + rtol * abs(w)  # numpy.allclose's rule


def _abs_error(want: Any, got: Any) -> float:
    try:
        return abs(float(got) - float(want))
    except (TypeError, ValueError, OverflowError):
        return math.nan


def golden_case(triton: Triton, model: str, case: dict[str, Any], rtol: float, atol: float) -> str | None:
    """None when the model's answer matches the case, else one line saying how it differs."""
    body = {"inputs": [{"name": n, "datatype": t["datatype"], "shape": t["shape"], "data": t["data"]}
                       for n, t in case["inputs"].items()],
            "outputs": [{"name": n} for n in case["outputs"]]}
    try:
        resp = triton.infer(model, body)
    except ReleaseError as e:
        return str(e)
    outputs = resp.get("outputs") if isinstance(resp, dict) else None
    if not isinstance(outputs, list):
        return "the answer holds no list of outputs"
    got = {o["name"]: o for o in outputs if isinstance(o, dict) and isinstance(o.get("name"), str)}
    for name, want in case["outputs"].items():
        out = got.get(name)
        if out is None:
            return f"output {name!r} missing from the response"
        data = out.get("data")
        if not isinstance(out.get("shape"), list) or not isinstance(data, list):
            return f"output {name!r}: the answer has no shape or data list"
        if out["shape"] != list(want["shape"]):
            return f"output {name!r}: shape {out['shape']} != expected {want['shape']}"
        pairs = list(zip(want["data"], data, strict=False))
        if len(data) != len(want["data"]) or not all(_close(w, g, rtol, atol) for w, g in pairs):
            worst = max((_abs_error(w, g) for w, g in pairs if not isinstance(w, (str, bool))), default=math.nan)
            return f"output {name!r}: values differ (max abs error {worst:.3g}, rtol={rtol}, atol={atol})"
    return None


def golden_gate(triton: Triton, release_dir: Path, models: list[str], timeout: float = 120.0) -> dict[str, Any]:
    """The release gate: every model READY (waiting up to ``timeout``), every golden case within tolerance."""
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    checked = 0
    for model in models:
        while not triton.model_ready(model):
            if time.monotonic() > deadline:
                failed.append(f"{model}: not READY after {timeout:.0f}s")
                break
            time.sleep(1)
        else:
            path = Path(release_dir) / model / GOLDEN_FILE
            if not path.exists() and not path.is_symlink():
                continue
            try:
                doc = read_golden(path)
            except ReleaseError as e:
                failed.append(f"{model}: {e}")
                continue
            rtol, atol = float(doc.get("rtol", DEFAULT_RTOL)), float(doc.get("atol", DEFAULT_ATOL))
            for case in doc["cases"]:
                checked += 1
                why = golden_case(triton, model, case, rtol, atol)
                if why:
                    failed.append(f"{model} golden case {case['name']!r}: {why}")
    return {"ok": not failed, "cases": checked, "failed": failed}
