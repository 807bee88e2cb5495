"""Live: a real Triton, a real Prometheus scraping it, a real Alertmanager receiving from it.

All on loopback, with 1 s scrape/evaluation intervals and the rules from ``rule_groups()`` with
short windows (``for: 2s``, 5 s rates). The sample models and a fault-injection model
(``tests/integration/fault_repo/faulty``: latency and failures switched through a control file)
serve under bounded load from ``tritonops.triton.bench``; each fault (errors, slow model, model
unloaded, server stopped) must raise its alert in Alertmanager and resolve after the fault ends.
Every dashboard query must return data, every metric name must exist in Triton's /metrics, and
the KEDA query must give the replica count the formula predicts for the offered load.

Tests in this module share one stack and run in file order (they are one scenario, in steps).
"""

from __future__ import annotations

import http.server
import json
import math
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient
import yaml
from tritonops.agent import exporter as agent_metrics
from tritonops.k8s.stacks.triton.workload import SUMMARY_LATENCIES_ARG
from tritonops.observability import dashboards as d
from tritonops.observability import keda_trigger as keda
from tritonops.observability import metrics as m
from tritonops.observability import rules as r
from tritonops.triton import bench, server
from tritonops.triton.load_config import BenchConfig

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
SAMPLES = HERE.parent.parent / "examples" / "model_repository"
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager")
INSTANCE = "triton-0"  # fixed instance label, kept across Triton restarts (new ports)
FAULTY = "faulty"

# Scaling policy of the rules under test: 2 pending requests per replica, at most 2 replicas, so the
# slow-model scenario (8 pending: the formula asks for 4) holds the scaler at its maximum.
SCALING = keda.ScalingPolicy(threshold=2, min_replicas=1, max_replicas=2, window="5s")
SETTINGS = r.RuleSettings(
    rate_window="5s",
    for_override="2s",
    model_lookback="1m",
    queue_seconds=0.05,
    pending_saturation=4,
    scaling=SCALING,
)
SLOW_MS = 200
# Fast GPU/CPU metric refresh; a short shutdown grace so stopping the server does not take 30 s.
TRITON_ARGS = ["--metrics-interval-ms=500", "--exit-timeout-secs=5", SUMMARY_LATENCIES_ARG]  # as in the pods
SLOW_CONCURRENCY = 9  # one executing, eight pending on the single instance

if PROMETHEUS is None or ALERTMANAGER is None:
    pytestmark = [pytestmark, pytest.mark.skip(reason="prometheus or alertmanager missing: `make apt`")]


def _get(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ValueError) as e:  # a server restarting: keep polling
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


@dataclass
class Stack:
    repo: Path
    workdir: Path
    triton: server.TritonServer
    prom_url: str
    am_url: str
    targets_file: Path
    procs: list[subprocess.Popen[bytes]]
    drift_file: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        data = _get(url)
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def am_alerts(self, name: str) -> list[dict[str, Any]]:
        """Alerts named ``name`` that Alertmanager holds as active (not resolved)."""
        url = f"{self.am_url}/api/v2/alerts?" + urllib.parse.urlencode({"filter": f'alertname="{name}"'})
        return [a for a in _get(url) if a["status"]["state"] == "active"]

    def prom_alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in _get(f"{self.prom_url}/api/v1/alerts")["data"]["alerts"]
                if a["labels"]["alertname"] == name]

    def set_fault(self, **fault: Any) -> None:
        (self.repo / "fault_control.json").write_text(json.dumps(fault))

    def set_drift(self, text: str) -> None:
        tmp = self.drift_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.drift_file)

    def point_prometheus_at(self, triton: server.TritonServer) -> None:
        targets = [{"targets": [f"127.0.0.1:{triton.metrics_port}"], "labels": {"instance": INSTANCE}}]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets))
        tmp.replace(self.targets_file)  # atomic: Prometheus' file watcher never sees half a file


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def _serve_textfile(path: Path) -> http.server.ThreadingHTTPServer:
    """Serve ``path`` at /metrics: a stand-in for node-exporter's textfile collector, which is how
    the drift checks' ``tritonops_drift_resources`` gauge reaches Prometheus on edge hosts."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            body = path.read_bytes() if path.exists() else b""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _build_repo(dest: Path) -> list[str]:
    shutil.copytree(HERE / "fault_repo", dest)
    models = [FAULTY]
    if SAMPLES.is_dir():
        for model_dir in sorted(SAMPLES.iterdir()):
            if (model_dir / "config.pbtxt").exists():
                shutil.copytree(model_dir, dest / model_dir.name,
                                ignore=shutil.ignore_patterns("__pycache__"))
                models.append(model_dir.name)
    return models


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("obs-live")
    repo = work / "repo"
    models = _build_repo(repo)
    procs: list[subprocess.Popen[bytes]] = []
    triton = server.start(repo, model_control_mode="explicit", load_models=models,
                          extra_args=TRITON_ARGS, workdir=work / "triton")
    st: Stack | None = None
    drift_file = work / "tritonops_drift.prom"
    textfile = _serve_textfile(drift_file)
    try:
        am_port, prom_port = server.free_port(), server.free_port()
        (work / "am.yml").write_text(yaml.safe_dump({
            "route": {"receiver": "tritonops", "group_by": ["alertname", "model"], "group_wait": "1s",
                      "group_interval": "1s", "repeat_interval": "1h"},
            "receivers": [{"name": "tritonops"}],
        }))
        assert ALERTMANAGER and PROMETHEUS
        procs.append(_start([
            ALERTMANAGER, f"--config.file={work / 'am.yml'}", f"--storage.path={work / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address=",
        ], work / "alertmanager.log"))
        (work / "rules.yml").write_text(yaml.safe_dump({"groups": r.rule_groups(SETTINGS)}, sort_keys=False))
        targets = work / "targets.json"
        (work / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(work / "rules.yml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [
                {"job_name": SETTINGS.job, "file_sd_configs": [{"files": [str(targets)]}]},
                {"job_name": "node", "static_configs": [
                    {"targets": [f"127.0.0.1:{textfile.server_address[1]}"]}]},
            ],
        }))
        st = Stack(repo, work, triton, f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}",
                   targets, procs, drift_file)
        st.point_prometheus_at(triton)
        procs.append(_start([
            PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--rules.alert.resend-delay=1s",
        ], work / "prometheus.log"))
        wait_for("Alertmanager ready", lambda: _get(f"{st.am_url}/api/v2/status"), 30)
        wait_for("Triton scraped", lambda: st.query(f'up{{job="{SETTINGS.job}"}} == 1'), 30)
        yield st
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        (st.triton if st else triton).stop()
        textfile.shutdown()


@contextmanager
def load(stack: Stack, model: str, *, seconds: float, chunk: float = 2.0, **cfg: Any) -> Iterator[None]:
    """Bounded background load: bench runs of ``chunk`` seconds until the block ends or ``seconds`` pass."""
    stop = threading.Event()
    deadline = time.monotonic() + seconds
    base = BenchConfig(url=stack.triton.http_url, model=model, max_requests=100_000,
                       max_seconds=chunk, **cfg)
    errors: list[BaseException] = []

    def run() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                bench.run(replace(base, url=stack.triton.http_url,
                                  max_seconds=max(0.2, min(chunk, deadline - time.monotonic()))),
                          should_stop=stop.is_set)
            except Exception as e:  # noqa: BLE001 - the server may be stopped on purpose
                errors.append(e)
                time.sleep(0.5)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=chunk + 35)


def _alert_for(stack: Stack, name: str, **labels: str) -> Callable[[], list[dict[str, Any]]]:
    def check() -> list[dict[str, Any]]:
        return [a for a in stack.am_alerts(name) if all(a["labels"].get(k) == v for k, v in labels.items())]

    return check


def _resolved(stack: Stack, name: str, **labels: str) -> Callable[[], bool]:
    def check() -> bool:
        firing = _alert_for(stack, name, **labels)()
        in_prom = [a for a in stack.prom_alerts(name)
                   if all(a["labels"].get(k) == v for k, v in labels.items())]
        return not firing and not in_prom

    return check


# --- the scenario, in steps -------------------------------------------------------------------------


def test_no_alert_fires_on_a_healthy_server(stack: Stack) -> None:
    with load(stack, FAULTY, seconds=8, mode="open", rate=30):
        time.sleep(7)
        firing = [a["labels"]["alertname"] for a in _get(f"{stack.prom_url}/api/v1/alerts")["data"]["alerts"]]
    assert firing == [], firing
    assert _get(f"{stack.am_url}/api/v2/alerts") == []


def test_every_metric_name_exists_in_tritons_metrics(stack: Stack) -> None:
    with urllib.request.urlopen(stack.triton.metrics_url, timeout=5) as resp:
        exposed = {line.split("{")[0].split(" ")[0] for line in resp.read().decode().splitlines()
                   if line and not line.startswith("#")}
    exprs = r.all_exprs(r.rule_groups(SETTINGS))
    exprs += [q for dash in d.dashboards(SCALING).values() for _t, q in d.panel_queries(dash)]
    exprs.append(keda.query(FAULTY, SCALING.window))
    used = set().union(*(m.metric_names(e) for e in exprs))
    ours = set(r.RECORDING_RULES) | {m.UP} | m.DRIFT_METRICS | set(agent_metrics.HELP)
    triton_names = used - ours
    cpu_only = not (exposed & m.GPU_METRICS)
    expected = triton_names - m.GPU_METRICS if cpu_only else triton_names
    assert expected <= exposed, f"not in Triton's /metrics: {sorted(expected - exposed)}"
    assert triton_names <= m.TRITON_METRICS
    if cpu_only:  # this machine: no GPU, so Triton exports no nv_gpu_* series (checked, not assumed)
        assert not any(name.startswith("nv_gpu_") for name in exposed)


def _panel_params() -> list[Any]:
    out = []
    for fname, panels in d.panel_specs(SCALING, SETTINGS.job).items():
        for p in panels:
            for q in p.queries:
                gpu = bool(m.metric_names(q.expr) & m.GPU_METRICS)
                out.append(pytest.param(q.expr, gpu, id=f"{fname}:{p.title}:{q.legend}"))
    return out


def _promql(expr: str) -> str:
    return expr.replace("$model", ".*").replace("$__rate_interval", SETTINGS.rate_window)


def _has_numbers(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(s["value"][1])) for s in result)


@pytest.fixture(scope="module")
def panel_results(stack: Stack) -> dict[str, list[dict[str, Any]]]:
    """Every dashboard query, evaluated by the live Prometheus under load (one load for all panels)."""
    exprs = {_promql(p.values[0]) for p in _panel_params()}
    results: dict[str, list[dict[str, Any]]] = {}
    batched = "mlp_batched" if (SAMPLES / "mlp_batched").is_dir() else FAULTY
    with load(stack, batched, seconds=40, mode="closed", concurrency=4), \
         load(stack, FAULTY, seconds=40, mode="open", rate=30):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for e in exprs - {k for k, v in results.items() if _has_numbers(v)}:
                results[e] = stack.query(e)
            if all(_has_numbers(results.get(e, [])) for e in exprs - _gpu_exprs()):
                break
            time.sleep(1)
    return results


def _gpu_exprs() -> set[str]:
    return {_promql(p.values[0]) for p in _panel_params() if p.values[1]}


@pytest.mark.parametrize(("expr", "gpu"), _panel_params())
def test_dashboard_panel_returns_data(stack: Stack, panel_results: dict[str, list[dict[str, Any]]],
                                      expr: str, gpu: bool) -> None:
    promql = _promql(expr)
    if gpu and not stack.query(" or ".join(sorted(m.GPU_METRICS))):
        pytest.skip("CPU-only Triton: no GPU metrics on this machine (the query is checked on GPU hosts)")
    assert _has_numbers(panel_results[promql]), f"{promql}: {panel_results[promql]}"


def test_failing_model_raises_failure_ratio_alert_then_resolves(stack: Stack) -> None:
    name = "TritonFailureRatioHigh"
    with load(stack, FAULTY, seconds=60, mode="open", rate=30):
        stack.set_fault(fail=True)
        alerts = wait_for(f"{name} in Alertmanager", _alert_for(stack, name, model=FAULTY), 30)
        assert alerts[0]["labels"]["severity"] == "warning"
        assert alerts[0]["annotations"]["runbook"]
        reasons = stack.query(f'{r.FAILURE_RATIO_BY_REASON}{{model="{FAULTY}"}} > 0')
        assert {s["metric"]["reason"] for s in reasons} == {"BACKEND"}
        stack.set_fault()
        wait_for(f"{name} resolved", _resolved(stack, name, model=FAULTY), 30)


def test_slow_model_raises_queue_pending_and_scaler_alerts_and_keda_matches_formula(stack: Stack) -> None:
    stack.set_fault(delay_ms=SLOW_MS)
    predicted = keda.desired_replicas(SLOW_CONCURRENCY - 1, replace(SCALING, max_replicas=10))
    try:
        with load(stack, FAULTY, seconds=60, chunk=60, mode="closed", concurrency=SLOW_CONCURRENCY,
                  request_timeout_s=30):
            for name, labels in [("TritonQueueTimeHigh", {"model": FAULTY}),
                                 ("TritonPendingRequestsSaturating", {"model": FAULTY}),
                                 ("TritonScalerAtMaxReplicas", {"job": SETTINGS.job})]:
                wait_for(f"{name} in Alertmanager", _alert_for(stack, name, **labels), 40)
            # KEDA: the trigger's own query, evaluated by Prometheus, through the HPA formula.
            trigger = keda.prometheus_trigger(FAULTY, stack.prom_url, policy=SCALING)
            value = float(stack.query(trigger["metadata"]["query"])[0]["value"][1])
            policy = replace(SCALING, max_replicas=10)
            assert keda.desired_replicas(value, policy) == predicted == math.ceil((SLOW_CONCURRENCY - 1) / 2)
            recorded = stack.query(f'{r.DESIRED_REPLICAS}{{model="{FAULTY}"}}')
            assert float(recorded[0]["value"][1]) == predicted
    finally:
        stack.set_fault()
    for name, labels in [("TritonQueueTimeHigh", {"model": FAULTY}),
                         ("TritonPendingRequestsSaturating", {"model": FAULTY}),
                         ("TritonScalerAtMaxReplicas", {"job": SETTINGS.job})]:
        wait_for(f"{name} resolved", _resolved(stack, name, **labels), 40)


def test_unloaded_model_raises_model_not_ready_then_resolves(stack: Stack) -> None:
    name = "TritonModelNotReady"
    client = httpclient.InferenceServerClient(stack.triton.http_url)
    try:
        client.unload_model(FAULTY)
        # 120 s: on 2 busy cores runs saw nothing reach Alertmanager within 30 s, once not within 60 s (for: 2 s,
        # 1 s scrapes and evaluations; it passed alone in 21 s); the wait ends as soon as the alert is there.
        alerts = wait_for(f"{name} in Alertmanager", _alert_for(stack, name, model=FAULTY), 120)
        assert alerts[0]["labels"]["severity"] == "critical"
        client.load_model(FAULTY)
        wait_for(f"{name} resolved", _resolved(stack, name, model=FAULTY), 60)
    finally:
        if not client.is_model_ready(FAULTY):
            client.load_model(FAULTY)
        client.close()


def test_stopped_server_raises_triton_down_then_resolves(stack: Stack) -> None:
    name = "TritonDown"
    stack.triton.stop()
    alerts = wait_for(f"{name} in Alertmanager", _alert_for(stack, name, instance=INSTANCE), 30)
    assert alerts[0]["labels"]["severity"] == "critical"
    # Not a model problem: TritonModelNotReady stays quiet while the whole server is down.
    assert not stack.prom_alerts("TritonModelNotReady")
    models = [p.name for p in stack.repo.iterdir() if (p / "config.pbtxt").exists()]
    stack.triton = server.start(stack.repo, model_control_mode="explicit", load_models=models,
                                extra_args=TRITON_ARGS)
    stack.point_prometheus_at(stack.triton)
    wait_for(f"{name} resolved", _resolved(stack, name, instance=INSTANCE), 40)


def test_drift_gauge_raises_configuration_drift_then_resolves(stack: Stack) -> None:
    name = "TritonopsConfigurationDrift"
    stack.set_drift(f'# TYPE {m.DRIFT_METRIC} gauge\n{m.DRIFT_METRIC}{{source="ansible",host="edge-1"}} 3\n')
    alerts = wait_for(f"{name} in Alertmanager", _alert_for(stack, name, source="ansible", host="edge-1"), 30)
    assert alerts[0]["annotations"]["runbook"]
    stack.set_drift(f'# TYPE {m.DRIFT_METRIC} gauge\n{m.DRIFT_METRIC}{{source="ansible",host="edge-1"}} 0\n')
    wait_for(f"{name} resolved", _resolved(stack, name, source="ansible", host="edge-1"), 30)
