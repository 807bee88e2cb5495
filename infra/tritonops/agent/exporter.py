"""The agent's Prometheus metrics, its /ready answer, and a small HTTP server for both.

Pods expose them on a port (scraped by a PodMonitor/ServiceMonitor, probed by the kubelet);
edge nodes write the same text into node-exporter's textfile folder.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..core import metric_names
from ..release_format.metadata import REASONS

Labels = tuple[tuple[str, str], ...]

HELP = {
    metric_names.RELEASE_INFO: ("gauge", "The release this target serves after its golden gate (value 1)."),
    metric_names.CHANNEL_INFO: ("gauge", "The release the channel pointer names, as last read (value 1)."),
    metric_names.UP_TO_DATE: ("gauge", "1 when the served release is the channel's, or the channel's "
                                       "release was refused and the last gated one serves."),
    metric_names.LAST_SUCCESS: ("gauge", "When the target last reached its channel."),
    metric_names.LAST_POLL: ("gauge", "When the channel pointer was last read."),
    metric_names.POLLS: ("counter", "Channel polls by result (not_modified, unchanged, changed, error)."),
    metric_names.FAILURES: ("counter", "Release attempts that failed, by the step that failed and "
                                       "its class: retry (may pass later: store, disk, Triton, "
                                       "lock) or refused (never will; failures.py)."),
    metric_names.TEXTFILE_ERRORS: ("counter", "Writes of the node-exporter textfile that failed, by "
                                              "errno (ENOSPC: a full disk); the agent goes on."),
    metric_names.APPLY_SECONDS: ("gauge", "Seconds the last release took from pointer to mark."),
    metric_names.DOWNLOADED_BYTES: ("counter", "Bytes downloaded from the store."),
    metric_names.STORE_REQUESTS: ("counter", "Requests sent to the store."),
    metric_names.METADATA_EXPIRED: ("gauge", "1 when the channel's signed pointer has expired (freeze: "
                                             "nothing new is applied, the gated release serves)."),
    metric_names.METADATA_REJECTED: ("counter", "Signed metadata refused, by reason "
                                                f"({', '.join(REASONS)})."),
    metric_names.ROLLOUT_TARGETED: ("gauge", "1 when the channel's rollout (or no rollout) takes this "
                                             "target, 0 when it waits for a later wave (wave: its first; "
                                             "previous: the release before the rollout that it serves "
                                             "meanwhile, else empty)."),
    metric_names.CREDENTIALS_ERRORS: ("counter", "Failed attempts to get S3 credentials (STS "
                                                 "AssumeRoleWithWebIdentity, the container credentials "
                                                 "endpoint, a token file), by source."),
    metric_names.CREDENTIALS_EXPIRY: ("gauge", "When the temporary S3 credentials in use "
                                               "expire, by source."),
}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = {name: {} for name in HELP}

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[name][tuple(sorted(labels.items()))] = float(value)

    def replace(self, name: str, value: float, **labels: str) -> None:
        """Set one series and drop the metric's others (an info metric that moved to a new release)."""
        with self._lock:
            self._values[name] = {tuple(sorted(labels.items())): float(value)}

    def clear(self, name: str) -> None:
        """Drop every series of the metric (an info metric that no longer holds)."""
        with self._lock:
            self._values[name] = {}

    def inc(self, name: str, by: float = 1.0, **labels: str) -> None:
        with self._lock:
            key = tuple(sorted(labels.items()))
            self._values[name][key] = self._values[name].get(key, 0.0) + by

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values[name].get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines = []
        with self._lock:
            for name, (kind, text) in HELP.items():
                series = self._values[name]
                if not series:
                    continue
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                for labels, value in sorted(series.items()):
                    lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels)
                    lines.append(f"{name}{{{lab}}} {value:.17g}" if lab else f"{name} {value:.17g}")
        return "\n".join(lines) + "\n"


def serve(address: str, metrics: Metrics, ready: Callable[[], bool],
          status: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """GET /metrics, /ready (200 or 503) and /status (JSON) on HOST:PORT, in a daemon thread."""
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/metrics":
                code, body, ctype = 200, metrics.render(), "text/plain; version=0.0.4"
            elif self.path == "/ready":
                ok = ready()
                code, body, ctype = (200 if ok else 503), ("ready\n" if ok else "not ready\n"), "text/plain"
            elif self.path == "/status":
                code, body, ctype = 200, json.dumps(status(), indent=2, sort_keys=True) + "\n", "application/json"
            else:
                code, body, ctype = 404, "not found\n", "text/plain"
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)  # noqa: S104 - the pod's port
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
