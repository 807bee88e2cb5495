"""Triton over HTTP with the standard library: health, repository API (admin header), golden gate.

The admin header's value comes from the environment (``TRITONOPS_ADMIN_SECRET``), never argv.
The golden gate reads each model's ``golden.json`` from the release (bounded: a regular file of at
most ``GOLDEN_MAX_BYTES``) and sends its cases through the KServe v2 JSON protocol.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .manifest import GOLDEN_FILE, ReleaseError

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
        return json.loads(raw.decode()) if raw.strip() else None

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

    def ready_models(self) -> list[str]:
        return sorted({str(e.get("name")) for e in self.index() if e.get("state") == "READY"})

    def load(self, model: str, timeout: float = 600.0) -> None:
        self._call("POST", f"/v2/repository/models/{_q(model)}/load", {}, timeout=timeout, admin=True)

    def unload(self, model: str) -> None:
        self._call("POST", f"/v2/repository/models/{_q(model)}/unload",
                   {"parameters": {"unload_dependents": False}}, admin=True)

    def infer(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", f"/v2/models/{_q(model)}/infer", body))

    def model_ready(self, model: str) -> bool:
        try:
            self._call("GET", f"/v2/models/{_q(model)}/ready", timeout=5)
            return True
        except ReleaseError:
            return False


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def read_golden(path: Path) -> dict[str, Any]:
    """A golden.json, bounded: a regular file (never a FIFO or device) of at most GOLDEN_MAX_BYTES."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise ReleaseError(f"{path}: cannot open ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ReleaseError(f"{path}: not a regular file")
        if st.st_size > GOLDEN_MAX_BYTES:
            raise ReleaseError(f"{path}: {st.st_size} bytes, more than the {GOLDEN_MAX_BYTES} a golden file may have")
        raw = f.read(GOLDEN_MAX_BYTES + 1)
    try:
        doc = json.loads(raw.decode("utf-8"))
        cases = doc["cases"]
        assert isinstance(cases, list) and cases
        for c in cases:
            assert isinstance(c["inputs"], dict) and isinstance(c["outputs"], dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise ReleaseError(f"{path}: expected {{'cases': [{{'name', 'inputs': {{..}}, 'outputs': {{..}}}}]}}") from None
    return dict(doc)


def _close(want: Any, got: Any, rtol: float, atol: float) -> bool:
    if isinstance(want, bool) or isinstance(got, bool) or isinstance(want, str) or isinstance(got, str):
        return bool(want == got)
    try:
        w, g = float(want), float(got)
    except (TypeError, ValueError):
        return bool(want == got)
    if math.isnan(w) or math.isnan(g):
        return math.isnan(w) and math.isnan(g)
    return abs(g - w) <= atol + rtol * abs(w)  # numpy.allclose's rule


def golden_case(triton: Triton, model: str, case: dict[str, Any], rtol: float, atol: float) -> str | None:
    """None when the model's answer matches the case, else one line saying how it differs."""
    body = {"inputs": [{"name": n, "datatype": t["datatype"], "shape": t["shape"], "data": t["data"]}
                       for n, t in case["inputs"].items()],
            "outputs": [{"name": n} for n in case["outputs"]]}
    try:
        resp = triton.infer(model, body)
    except ReleaseError as e:
        return str(e)
    got = {o.get("name"): o for o in resp.get("outputs", [])}
    for name, want in case["outputs"].items():
        out = got.get(name)
        if out is None:
            return f"output {name!r} missing from the response"
        if list(out.get("shape", [])) != list(want["shape"]):
            return f"output {name!r}: shape {out.get('shape')} != expected {want['shape']}"
        data = out.get("data", [])
        pairs = list(zip(want["data"], data, strict=False))
        if len(data) != len(want["data"]) or not all(_close(w, g, rtol, atol) for w, g in pairs):
            worst = max((abs(float(g) - float(w)) for w, g in pairs
                         if not isinstance(w, (str, bool))), default=float("nan"))
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
