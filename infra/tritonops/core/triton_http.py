"""Triton over HTTP with the standard library: health, the repository API (admin header), inference.

The admin header's value comes from the environment (``TRITONOPS_ADMIN_SECRET``), never argv. Every
call has one overall deadline (its ``timeout``) and a byte cap (``ANSWER_MAX``), and follows redirects
only within Triton's origin (:mod:`netio`), so the admin header never reaches another host. The
golden gate that sends each release's golden cases through this client is :mod:`golden`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.parse
from typing import Any

from .errors import ReleaseError

SECRET_ENV = "TRITONOPS_ADMIN_SECRET"
DEFAULT_HEADER = "triton-admin-key"
ANSWER_MAX = 64 << 20  # bytes of one answer (an inference result of the golden gate is the largest)


class Triton:
    """One Triton server's HTTP endpoint (``http://127.0.0.1:PORT``)."""

    def __init__(self, url: str, header: str = DEFAULT_HEADER, secret: str | None = None,
                 timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.header = header
        self.secret = os.environ.get(SECRET_ENV, "") if secret is None else secret
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, timeout: float | None = None,
              admin: bool = False) -> Any:
        from . import netio  # HTTP and TLS load with the first call, not with the names above (tritonops --help)

        headers = {"Content-Type": "application/json"}
        if admin and self.secret:
            headers[self.header] = self.secret
        data = None if body is None else json.dumps(body).encode()
        where = f"{method} {self.url}{path}"
        resp = netio.request(self.url + path, what=where, headers=headers, data=data, method=method,
                             deadline=timeout or self.timeout, limit=ANSWER_MAX, error=ReleaseError)
        raw = resp.body
        if not 200 <= resp.status < 300:
            detail = raw.decode(errors="replace")[:300]
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("error", detail)
            err = ReleaseError(f"{where}: HTTP {resp.status}: {detail}")
            err.status = resp.status  # failures.py: a 5xx may pass on retry, a refused load (400) never
            raise err
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
