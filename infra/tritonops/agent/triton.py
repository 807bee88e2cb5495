"""Triton over HTTP with the standard library: health, repository API (admin header), golden gate.

The admin header's value comes from the environment (``TRITONOPS_ADMIN_SECRET``), never argv.
The golden gate reads each model's ``golden.json`` from the release (bounded: a regular file of at
most ``GOLDEN_MAX_BYTES``, its structure checked) and sends its cases through the KServe v2 JSON protocol.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .manifest import GOLDEN_FILE, ReleaseError, read_bounded

SECRET_ENV = "TRITONOPS_ADMIN_SECRET"
DEFAULT_HEADER = "triton-admin-key"
GOLDEN_MAX_BYTES = 16 << 20


class Triton:
    """One Triton server's HTTP endpoint (``http://127.0.0.1:8000``)."""

    def __init__(self, url: str, header: str = DEFAULT_HEADER, secret: str | None = None,
                 timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.header = header
        self.secret = os.environ.get(SECRET_ENV, "") if secret is None else secret
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, timeout: float | None = None,
              admin: bool = False) -> Any:
        headers = {"Content-Type": "application/json"}
        if admin and self.secret:
            headers[self.header] = self.secret
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:  # noqa: S310
                raw = resp.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("error", detail)
            raise ReleaseError(f"{method} {self.url}{path}: HTTP {e.code}: {detail}") from None
        except (OSError, ValueError) as e:
            raise ReleaseError(f"{method} {self.url}{path}: {getattr(e, 'reason', None) or e}") from None
        try:
            return json.loads(raw.decode()) if raw.strip() else None
        except (ValueError, RecursionError):
            raise ReleaseError(f"{method} {self.url}{path}: the answer is not JSON") from None

    def ready(self) -> bool:
        try:
            self._call("GET", "/v2/health/ready", timeout=5)
            return True
        except ReleaseError:
            return False

    def live(self) -> bool:
        """The server answers (it may still be loading, or hold a model that failed)."""
        try:
            self._call("GET", "/v2/health/live", timeout=5)
            return True
        except ReleaseError:
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise ReleaseError(f"{self.url}: Triton not ready after {timeout:.0f}s")
            time.sleep(1)

    def index(self) -> list[dict[str, Any]]:
        return list(self._call("POST", "/v2/repository/index", {}, admin=True) or [])

    def loaded(self) -> list[dict[str, Any]]:
        """Every loaded model version (statistics API), also one loaded with its own files, which the index omits."""
        return list((self._call("GET", "/v2/models/stats", admin=True) or {}).get("model_stats", []))

    def ready_models(self) -> list[str]:
        return sorted({str(e.get("name")) for e in self.index() if e.get("state") == "READY"})

    def load(self, model: str, timeout: float = 600.0) -> None:
        self._call("POST", f"/v2/repository/models/{_q(model)}/load", {}, timeout=timeout, admin=True)

    def unload(self, model: str) -> None:
        self._call("POST", f"/v2/repository/models/{_q(model)}/unload",
                   {"parameters": {"unload_dependents": False}}, admin=True)

    def infer(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self._call("POST", f"/v2/models/{_q(model)}/infer", body)
        if not isinstance(resp, dict):
            raise ReleaseError(f"POST {self.url}/v2/models/{_q(model)}/infer: the answer is not a JSON object")
        return resp

    def model_ready(self, model: str) -> bool:
        try:
            self._call("GET", f"/v2/models/{_q(model)}/ready", timeout=5)
            return True
        except ReleaseError:
            return False


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def read_golden(path: Path) -> dict[str, Any]:
    """A golden.json, bounded (a regular file of at most GOLDEN_MAX_BYTES, never a FIFO or device) and
    checked: every case has tensors with a datatype, a shape of sizes and a data list; tolerances are
    finite and not negative. Anything else is a ReleaseError naming the file and the field."""
    raw = read_bounded(path, GOLDEN_MAX_BYTES, follow=False)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ReleaseError(f"{path}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list) or not doc["cases"]:
        raise ReleaseError(f"{path}: expected {{'cases': [{{'name', 'inputs': {{..}}, 'outputs': {{..}}}}]}}")
    for field in ("rtol", "atol"):
        value = doc.get(field, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ReleaseError(f"{path}: {field} {value!r} is not a finite number >= 0")
    for i, case in enumerate(doc["cases"]):
        if not isinstance(case, dict):
            raise ReleaseError(f"{path}: cases[{i}] is not an object")
        for side in ("inputs", "outputs"):
            tensors = case.get(side)
            if not isinstance(tensors, dict):
                raise ReleaseError(f"{path}: cases[{i}].{side} is not an object of tensors")
            for name, t in tensors.items():
                _check_tensor(t, f"{path}: cases[{i}].{side}[{name!r}]")
    return dict(doc)


def _check_tensor(t: Any, where: str) -> None:
    if not isinstance(t, dict) or not isinstance(t.get("datatype"), str):
        raise ReleaseError(f"{where}: expected {{'datatype', 'shape', 'data'}}")
    shape = t.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ReleaseError(f"{where}.shape: expected a list of sizes")
    if not isinstance(t.get("data"), list):
        raise ReleaseError(f"{where}.data: expected a list")


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
            if not path.exists():
                continue
            try:
                doc = read_golden(path)
            except ReleaseError as e:
                failed.append(f"{model}: {e}")
                continue
            rtol, atol = float(doc.get("rtol", 1e-4)), float(doc.get("atol", 1e-5))
            for case in doc["cases"]:
                checked += 1
                why = golden_case(triton, model, case, rtol, atol)
                if why:
                    failed.append(f"{model} golden case {case.get('name', '?')!r}: {why}")
    return {"ok": not failed, "cases": checked, "failed": failed}
