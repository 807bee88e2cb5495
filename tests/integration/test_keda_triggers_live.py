"""Live: the optional KEDA triggers and the scale-to-zero wake-up trigger, each query on a real Prometheus.

- queue time per request and served requests/s: a real Triton serving the fault-injection model
  (``fault_repo/faulty``) slowed down under closed-loop load; the triggers' queries must give the
  average queue time and the rate Triton's own counters give, through the HPA formula the replicas
  predicted, and the queue time nothing (not NaN) once idle;
- GPU utilisation: no GPU here, so a stand-in exporter serves samples in dcgm-exporter's format
  (``DCGM_FI_DEV_GPU_UTIL`` with its pod attribution), scraped like the GPU Operator's ServiceMonitor
  does (the exporter pod's own ``namespace``/``pod`` target labels turn the samples' into
  ``exported_namespace``/``exported_pod``); the query must sum the Deployment's pods only, and an
  exporter outage must read as no data (the trigger then fails, so KEDA's fallback holds the replicas);
- wake-up: a stand-in serves ingress-nginx's ``nginx_ingress_controller_requests`` counter with the
  controller's labels; the query must stay at 0 while the counter stands still and pass the
  activation threshold when requests arrive for the service's Ingresses (and not for others').

Tests in this module share one stack and run in file order.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_observability_live import _get, wait_for
from tritonops.observability import keda_trigger as keda
from tritonops.observability import metrics as m
from tritonops.triton import bench, server
from tritonops.triton.load_config import BenchConfig

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
PROMETHEUS = shutil.which("prometheus")
FAULTY = "faulty"
WINDOW = "10s"
SLOW_MS = 200
CONCURRENCY = 9  # one executing, eight queued on the single instance: ~8 x 200 ms in the queue
NAMESPACE, DEPLOYMENT = "triton", "triton-vision"
INGRESSES = [f"{DEPLOYMENT}-http", f"{DEPLOYMENT}-grpc"]

if PROMETHEUS is None:
    pytestmark = [pytestmark, pytest.mark.skip(reason="prometheus missing: `make apt`")]


class Exporter:
    """A /metrics endpoint whose body the test sets (the stand-in for dcgm-exporter or ingress-nginx);
    ``up = False`` answers 503, as an exporter that cannot read its source."""

    def __init__(self) -> None:
        self.body = ""
        self.up = True
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                data = exporter.body.encode()
                self.send_response(200 if exporter.up else 503)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"


@dataclass
class Stack:
    repo: Path
    triton: server.TritonServer
    prom_url: str
    dcgm: Exporter
    ingress: Exporter

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = _get(f"{self.prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def value(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, result  # KEDA refuses more than one element
        return float(result[0]["value"][1])

    def set_fault(self, **fault: Any) -> None:
        (self.repo / "fault_control.json").write_text(json.dumps(fault))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("keda-live")
    repo = work / "repo"
    shutil.copytree(HERE / "fault_repo", repo)
    triton = server.start(repo, model_control_mode="explicit", load_models=[FAULTY],
                          extra_args=["--metrics-interval-ms=500", "--exit-timeout-secs=5"], workdir=work / "triton")
    dcgm, ingress = Exporter(), Exporter()
    prom: subprocess.Popen[bytes] | None = None
    try:
        port = server.free_port()
        (work / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [
                {"job_name": "triton", "static_configs": [{"targets": [f"127.0.0.1:{triton.metrics_port}"],
                                                            "labels": {"instance": "triton-0"}}]},
                # The GPU Operator's ServiceMonitor: the exporter pod's own namespace and pod are target
                # labels, honorLabels false.
                {"job_name": "nvidia-dcgm-exporter", "static_configs": [{"targets": [dcgm.address], "labels": {
                    "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-7xk2p"}}]},
                {"job_name": "ingress-nginx", "static_configs": [{"targets": [ingress.address], "labels": {
                    "namespace": "ingress-nginx", "pod": "ingress-nginx-controller-5c8d66c76d-q7h2n"}}]},
            ],
        }))
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'prom-data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=(work / "prometheus.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        st = Stack(repo, triton, f"http://127.0.0.1:{port}", dcgm, ingress)
        wait_for("Triton scraped", lambda: st.query('up{job="triton"} == 1'), 30)
        yield st
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
        triton.stop()
        dcgm.httpd.shutdown()
        ingress.httpd.shutdown()


def _triton_counters(stack: Stack) -> tuple[float, float]:
    """(queue µs, successes) of the faulty model, straight from Triton's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.triton.metrics_port}/metrics", timeout=5).read().decode()
    values = {}
    for name in (m.QUEUE_DURATION_US, m.REQUEST_SUCCESS):
        (line,) = [ln for ln in text.splitlines() if ln.startswith(f"{name}{{") and f'model="{FAULTY}"' in ln]
        values[name] = float(line.rsplit(" ", 1)[1])
    return values[m.QUEUE_DURATION_US], values[m.REQUEST_SUCCESS]


# --- queue time per request ----------------------------------------------------------------------


def test_queue_time_trigger_follows_tritons_counters_and_the_formula(stack: Stack) -> None:
    expr = keda.queue_time_query(FAULTY, WINDOW)
    stack.set_fault(delay_ms=SLOW_MS)
    cfg = BenchConfig(url=stack.triton.http_url, model=FAULTY, max_requests=100_000, max_seconds=30,
                      mode="closed", concurrency=CONCURRENCY, request_timeout_s=30)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: bench.run(cfg, should_stop=stop.is_set), daemon=True)
    thread.start()
    try:
        time.sleep(15)  # the window fills with steady-state requests
        q0, s0 = _triton_counters(stack)
        t0 = time.monotonic()
        time.sleep(10)
        q1, s1 = _triton_counters(stack)
        served_per_s = (s1 - s0) / (time.monotonic() - t0)
        value = stack.value(expr)
        rate = stack.value(keda.request_rate_query(FAULTY, WINDOW))
    finally:
        stop.set()
        thread.join(timeout=60)
        stack.set_fault()
    direct_ms = (q1 - q0) / (s1 - s0) / 1000
    print(f"queue time per request: trigger {value:.0f} ms, Triton's counters {direct_ms:.0f} ms "
          f"(about {(CONCURRENCY - 1) * SLOW_MS} ms expected: {CONCURRENCY - 1} requests ahead x {SLOW_MS} ms)")
    assert direct_ms > (CONCURRENCY - 1) * SLOW_MS * 0.7
    assert value == pytest.approx(direct_ms, rel=0.2)  # one replica reporting: total = the average
    target = 450.0  # ms per replica: ~1600 ms asks for 4
    policy = keda.ScalingPolicy(threshold=target, min_replicas=1, max_replicas=10)
    trig = keda.trigger(expr, stack.prom_url, threshold=target)
    assert (trig["metricType"], trig["metadata"]["threshold"]) == ("AverageValue", "450")
    assert keda.desired_replicas(value, policy) == math.ceil(direct_ms / target) == 4
    # The served-rate trigger under the same load: Triton's success counter per second (~1 / 200 ms).
    print(f"served rate: trigger {rate:.2f}/s, Triton's counters {served_per_s:.2f}/s")
    assert served_per_s == pytest.approx(1000 / SLOW_MS, rel=0.3)
    assert rate == pytest.approx(served_per_s, rel=0.2)
    assert keda.desired_replicas(rate, keda.ScalingPolicy(threshold=2.0, max_replicas=10)) == math.ceil(rate / 2.0)


def test_idle_queue_time_is_no_data_not_nan(stack: Stack) -> None:
    """An idle window is 0/0 in PromQL: the query must drop it (KEDA would pass NaN on), so KEDA reads
    the empty result as 0 (ignoreNullValues)."""
    expr = keda.queue_time_query(FAULTY, WINDOW)
    raw = expr.removesuffix(" >= 0")
    wait_for("an idle window", lambda: any(math.isnan(float(r["value"][1])) for r in stack.query(raw)), 40)
    assert stack.query(expr) == []


# --- GPU utilisation (DCGM format) ---------------------------------------------------------------


def _dcgm(pod: str, namespace: str, gpu: int, util: float) -> str:
    return (f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-5fd4c8e2-0b9a-4f7e-9c1d-{gpu:012d}",pci_bus_id="00000000:3{gpu}:00.0",'
            f'device="nvidia{gpu}",modelName="NVIDIA L4",Hostname="ip-10-0-1-23",DCGM_FI_DRIVER_VERSION="550.90.07",'
            f'container="triton",namespace="{namespace}",pod="{pod}"}} {util}')


def test_gpu_trigger_sums_the_deployments_pods_and_an_exporter_outage_is_no_data(stack: Stack) -> None:
    stack.dcgm.body = "\n".join([
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        _dcgm(f"{DEPLOYMENT}-7d9c8b6f5-x2k4q", NAMESPACE, 0, 90),
        _dcgm(f"{DEPLOYMENT}-7d9c8b6f5-m8n2z", NAMESPACE, 1, 60),  # a pod with two GPUs: 60 and 80
        _dcgm(f"{DEPLOYMENT}-7d9c8b6f5-m8n2z", NAMESPACE, 2, 80),
        _dcgm(f"{DEPLOYMENT}-canary-5b7f9c4d8-q2w4e", NAMESPACE, 3, 100),  # the canary: not scaled here
        _dcgm(f"{DEPLOYMENT}-7d9c8b6f5-aaaaa", "other", 4, 100),  # another namespace
        _dcgm("triton-embeddings-6c5d4b3a2-zz9yx", NAMESPACE, 5, 100),  # another service
    ]) + "\n"
    expr = keda.gpu_utilization_query(NAMESPACE, DEPLOYMENT, WINDOW)
    # The scrape renames the samples' namespace/pod (the exporter pod's own are target labels).
    wait_for("DCGM samples", lambda: stack.query(f'{keda.DCGM_GPU_UTIL}{{exported_pod!=""}}'), 30)
    value = wait_for("a full window of DCGM samples", lambda: (v := stack.value(expr)) == 160 and v, 30)
    print(f"GPU trigger: {value:g} (90 + mean(60, 80)); target 80 per replica -> "
          f"{keda.desired_replicas(value, keda.ScalingPolicy(threshold=80, max_replicas=10))} replicas")
    assert keda.desired_replicas(value, keda.ScalingPolicy(threshold=80, min_replicas=1, max_replicas=10)) == 2
    stack.dcgm.up = False  # the exporter fails: its series go stale, the trigger gets no data
    wait_for("no DCGM data", lambda: stack.query(expr) == [] or None, 30)
    stack.dcgm.up = True


# --- wake-up: ingress-nginx's request counter ----------------------------------------------------


def _requests(ingress: str, namespace: str, status: str, count: int) -> str:
    service = ingress.rsplit("-", 1)[0]
    return (f'nginx_ingress_controller_requests{{canary="",controller_class="k8s.io/ingress-nginx",'
            f'controller_namespace="ingress-nginx",controller_pod="ingress-nginx-controller-5c8d66c76d-q7h2n",'
            f'host="vision.dev.tritonops.example.com",ingress="{ingress}",method="POST",namespace="{namespace}",'
            f'path="/v2/models/resnet50/infer",service="{service}",status="{status}"}} {count}')


def _ingress_body(ours: int, others: int) -> str:
    return "\n".join([
        "# HELP nginx_ingress_controller_requests The total number of client requests",
        "# TYPE nginx_ingress_controller_requests counter",
        _requests(INGRESSES[0], NAMESPACE, "503", ours),  # no endpoints yet: 503, still counted
        _requests("web-http", "apps", "200", others),
    ]) + "\n"


def test_wake_trigger_activates_on_requests_for_the_service_only(stack: Stack) -> None:
    expr = keda.ingress_requests_query(NAMESPACE, INGRESSES, WINDOW)
    activation = 2.0
    trig = keda.trigger(expr, stack.prom_url, threshold=keda.WAKE_TARGET, activation_threshold=activation)
    assert trig["metadata"]["activationThreshold"] == "2"
    stack.ingress.body = _ingress_body(ours=7, others=100)
    wait_for("ingress samples", lambda: stack.query(keda.INGRESS_REQUESTS), 30)
    time.sleep(3)
    # The counter stands still for our Ingresses while another service gets traffic: not active.
    for others in range(200, 2000, 200):
        stack.ingress.body = _ingress_body(ours=7, others=others)
        time.sleep(1)
    idle = stack.value(expr)
    assert idle == 0, idle
    # Requests arrive (503s: no pod yet): the value passes the activation threshold, KEDA wakes the service.
    for ours in range(8, 20):
        stack.ingress.body = _ingress_body(ours=ours, others=2000)
        time.sleep(0.5)
    woken = wait_for("requests in the window", lambda: (v := stack.value(expr)) > activation and v, 15)
    print(f"wake trigger: {idle:g} while idle, {woken:.1f} requests in {WINDOW} after traffic "
          f"(activationThreshold {activation:g})")
    # It only wakes: the HPA's request from this trigger is one replica.
    assert keda.desired_replicas(woken, keda.ScalingPolicy(threshold=keda.WAKE_TARGET, max_replicas=10)) == 1
