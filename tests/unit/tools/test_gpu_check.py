"""tools/gpu_check.py (`make gpu-check`) without a GPU: the no-GPU exit, which queries it runs, and
its nvidia-smi parsing, budget comparison and gpu_facts comparison against a fake nvidia-smi on PATH
(the only thing faked: it prints canned output for the fields it is asked for).

The GPU run itself (Triton on a GPU, nv_gpu_* in Prometheus) needs a machine with one.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import gpu_check as gc  # tools/ is on pytest's pythonpath
import pytest
from tritonops.k8s.catalog import GPU_FAMILIES
from tritonops.observability import dashboards as d
from tritonops.observability import rules as r

SCRIPT = Path(gc.__file__)

# What nvidia-smi prints on a machine with two H200s (fields in the order asked for).
H200 = [
    {"index": "0", "name": "NVIDIA H200", "uuid": "GPU-5f1d6a2e-0c3b-4d1e-9a77-1b2c3d4e5f60", "memory.total": "143771",
     "memory.used": "0", "driver_version": "570.124.06", "compute_cap": "9.0"},
    {"index": "1", "name": "NVIDIA H200", "uuid": "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d", "memory.total": "143771",
     "memory.used": "1", "driver_version": "570.124.06", "compute_cap": "9.0"},
]


def fake_nvidia_smi(folder: Path, gpus: list[dict[str, str]] | None = None, fail: str | None = None) -> Path:
    """An executable `nvidia-smi` in ``folder``: canned --query-gpu answers, or ``fail`` on stderr, exit 9."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        if {fail!r}:
            sys.stderr.write({fail!r} + "\\n")
            sys.exit(9)
        fields = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--query-gpu=")).split(",")
        for gpu in {gpus or H200!r}:
            print(", ".join(gpu[f] for f in fields))
        """))
    exe.chmod(0o755)
    return folder


def run_script(path_dirs: list[Path]) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PATH": os.pathsep.join(str(p) for p in path_dirs)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    return proc, time.monotonic() - start


# --- no GPU: say so, exit 0, quickly ------------------------------------------------------------------


def test_no_nvidia_smi_exits_0_and_says_so(tmp_path: Path) -> None:
    proc, seconds = run_script([tmp_path])
    assert proc.returncode == 0, proc.stderr
    assert "no NVIDIA GPU here (nvidia-smi is not on PATH); nothing to check." in proc.stdout
    assert seconds < 2, f"the no-GPU path took {seconds:.1f} s"


def test_failing_nvidia_smi_exits_0_with_its_error(tmp_path: Path) -> None:
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    proc, _ = run_script([fake_nvidia_smi(tmp_path / "bin", fail=msg)])
    assert proc.returncode == 0, proc.stderr
    assert f"no NVIDIA GPU here (nvidia-smi fails: {msg}); nothing to check." in proc.stdout


@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="this machine has a GPU device node")
def test_nvidia_smi_without_a_device_node_is_no_gpu(tmp_path: Path) -> None:
    proc, _ = run_script([fake_nvidia_smi(tmp_path / "bin")])
    assert proc.returncode == 0, proc.stderr
    assert "no NVIDIA GPU here (no /dev/nvidia0); nothing to check." in proc.stdout


# --- which queries: every GPU panel and alert of the observability module -----------------------------


def _reads_gpu(expr: str) -> bool:
    return "nv_gpu_" in expr or "DCGM_" in expr


def test_every_gpu_panel_query_is_selected_and_no_other() -> None:
    expected = {gc.promql(q.expr) for panels in d.panel_specs(gc.SETTINGS.scaling, gc.SETTINGS.job).values()
                for p in panels for q in p.queries if _reads_gpu(q.expr)}
    selected = gc.gpu_panel_queries()
    assert set(selected.values()) == expected
    assert len(selected) == len(expected)
    titles = {t.split(": ", 1)[1].split(" [")[0] for t in selected}
    assert {"GPU utilisation", "GPU memory used", "GPU power"} <= titles
    assert not any("CPU" in t for t in titles)


def test_every_gpu_alert_is_selected_and_no_other() -> None:
    expected = {rule["alert"] for g in r.rule_groups(gc.SETTINGS) for rule in g["rules"]
                if "alert" in rule and _reads_gpu(rule["expr"])}
    assert set(gc.gpu_alert_queries()) == expected
    assert {"TritonGpuUtilizationLowWhileQueueing", "TritonGpuUtilizationHigh", "TritonGpuMemoryHigh"} <= expected
    assert "TritonQueueTimeHigh" not in expected


@pytest.mark.parametrize(("expr", "gpu"), [
    ("avg by (instance) (nv_gpu_utilization) > 0.9", True),
    ('avg(DCGM_FI_DEV_GPU_UTIL{namespace="triton"}) / 100', True),
    ("sum(rate(nv_inference_count[1m]))", False),
    ('nv_cpu_utilization{gpu_uuid="x"}', False),  # a label called gpu_... is not a GPU metric
])
def test_a_gpu_query_is_one_that_reads_gpu_metrics(expr: str, gpu: bool) -> None:
    assert gc.is_gpu_query(expr) is gpu


def test_dashboard_queries_become_promql() -> None:
    assert gc.promql('sum(rate(x{model=~"$model"}[$__rate_interval]))') == 'sum(rate(x{model=~".*"}[5s]))'


# --- nvidia-smi parsing and the budget ------------------------------------------------------------------


def test_nvidia_smi_output_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path)))
    gpus = gc.query_gpus()
    assert gpus == [
        gc.Gpu(0, "NVIDIA H200", H200[0]["uuid"], 143771, 0, "570.124.06"),
        gc.Gpu(1, "NVIDIA H200", H200[1]["uuid"], 143771, 1, "570.124.06"),
    ]


def test_a_failing_nvidia_smi_is_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, fail="No devices were found")))
    with pytest.raises(gc.NoGpu, match="nvidia-smi fails: No devices were found"):
        gc.query_gpus()


@pytest.mark.parametrize(("name", "family"), [
    ("NVIDIA H200", "p5e"), ("NVIDIA H100 80GB HBM3", "p5"), ("NVIDIA A100-SXM4-80GB", "p4de"),
    ("NVIDIA A100-SXM4-40GB", "p4d"), ("NVIDIA L4", "g6"), ("NVIDIA L40S", "g6e"), ("NVIDIA A10G", "g5"),
    ("Tesla T4", "g4dn"), ("NVIDIA GeForce RTX 4090", None),
])
def test_nvidia_smi_names_map_to_the_catalog(name: str, family: str | None) -> None:
    found = gc.catalog_family(name)
    assert (found.family if found else None) == family


def _h200() -> gc.Gpu:
    return gc.Gpu(0, "NVIDIA H200", H200[0]["uuid"], 143771, 0, "570.124.06")


def test_budget_holds_when_triton_uses_less_than_its_figures() -> None:
    gpu, fam = _h200(), GPU_FAMILIES["p5e"]
    svc, budget = gc.local_budget(fam)
    assert svc.models[0].size_mib == gc.MLP_MIB
    loaded = budget.need_mib - budget.io_headroom_mib  # 600 context + 256 pool + 64 model
    assert loaded == 920
    results = gc.check_budget(gpu, fam, budget, used_mib=loaded)
    assert [res.ok for res in results] == [True, True]
    assert "measured 920 MiB after load; budget 920 MiB" in results[1].detail


@pytest.mark.parametrize("used_mib", [921, 0], ids=["over the budget", "nothing measured"])
def test_budget_fails_when_triton_uses_more_or_nothing_is_measured(used_mib: int) -> None:
    fam = GPU_FAMILIES["p5e"]
    _svc, budget = gc.local_budget(fam)
    results = gc.check_budget(_h200(), fam, budget, used_mib=used_mib)
    assert [res.ok for res in results] == [True, False]


def test_budget_fails_when_the_catalog_memory_is_not_the_gpus() -> None:
    fam = replace(GPU_FAMILIES["p5e"], memory_mib=141000)  # 1.9% below what nvidia-smi reports
    _svc, budget = gc.local_budget(fam)
    results = gc.check_budget(_h200(), fam, budget, used_mib=900)
    assert results[0].ok is False
    assert "catalog 141000 MiB, nvidia-smi 143771 MiB" in results[0].detail


def test_a_gpu_outside_the_catalog_has_no_budget_to_compare() -> None:
    gpu = gc.Gpu(0, "NVIDIA GeForce RTX 4090", "GPU-1", 24564, 0, "570.124.06")
    [res] = gc.check_budget(gpu, None, None, used_mib=900)
    assert res.ok is None


# --- gpu_facts: the real role against the fake nvidia-smi ---------------------------------------------


@pytest.fixture(scope="module")
def fact(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    if os.geteuid() != 0:
        pytest.skip("the gpu_facts role installs its fact as root")
    work = tmp_path_factory.mktemp("gpu-facts")
    bin_dir = fake_nvidia_smi(work / "bin")
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{old}"
    try:
        result: dict[str, object] = gc.run_gpu_facts(work)
    finally:
        os.environ["PATH"] = old
    return result


def test_gpu_facts_agree_with_nvidia_smi(fact: dict[str, object], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path)))
    results = gc.check_facts(fact, gc.query_gpus())
    assert [(res.check, res.ok) for res in results] == [
        ("gpu_facts: platform", True), ("gpu_facts: GPU count", True), ("gpu_facts: driver", True),
        ("gpu_facts: memory", True), ("gpu_facts: memory", True),
    ], results


def test_gpu_facts_that_disagree_fail(fact: dict[str, object]) -> None:
    gpus = [gc.Gpu(0, "NVIDIA H200", H200[0]["uuid"], 81559, 0, "560.35.03")]  # one GPU, other memory/driver
    results = {res.check: res for res in gc.check_facts(fact, gpus)}
    assert results["gpu_facts: GPU count"].ok is False
    assert results["gpu_facts: driver"].ok is False
    assert results["gpu_facts: memory"].ok is False
    assert results["gpu_facts: memory"].detail == "fact 143771 MiB, nvidia-smi 81559 MiB"


# --- the checks of Triton's /metrics and of the queries, against a real Prometheus ----------------------
# Triton's GPU series are faked (they are the GPU); Prometheus, the rules and the queries are real.


def _gpu_series(util: float, used_ratio: float) -> str:
    total = 143771 * 1024 * 1024
    lines = ['nv_inference_pending_request_count{model="mlp",version="1"} 0']
    for gpu in H200:
        label = f'{{gpu_uuid="{gpu["uuid"]}"}}'
        lines += [f"nv_gpu_utilization{label} {util}", f"nv_gpu_memory_total_bytes{label} {total}",
                  f"nv_gpu_memory_used_bytes{label} {int(total * used_ratio)}", f"nv_gpu_power_usage{label} 412.5"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def metrics_endpoint() -> Iterator[tuple[int, list[str]]]:
    """A loopback /metrics serving body[0] (set it in the test), like Triton's metrics port."""
    body = [""]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            data = body[0].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], body
    finally:
        httpd.shutdown()


def test_tritons_metrics_must_carry_every_gpu(metrics_endpoint: tuple[int, list[str]]) -> None:
    port, body = metrics_endpoint
    gpus = [gc.Gpu(int(g["index"]), g["name"], g["uuid"], 143771, 0, "570.124.06") for g in H200]
    body[0] = _gpu_series(0.5, 0.5)
    assert all(res.ok for res in gc.check_triton_metrics(f"http://127.0.0.1:{port}/metrics", gpus))
    body[0] = "\n".join(line for line in _gpu_series(0.5, 0.5).splitlines() if H200[1]["uuid"] not in line)
    results = gc.check_triton_metrics(f"http://127.0.0.1:{port}/metrics", gpus)
    assert [res.ok for res in results] == [False] * 4
    assert all(res.detail == f"missing for {H200[1]['uuid']}" for res in results)


@pytest.fixture
def prometheus(tmp_path: Path, metrics_endpoint: tuple[int, list[str]]) -> Iterator[tuple[str, list[str]]]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus missing: `make apt`")
    port, body = metrics_endpoint
    proc, url = gc.start_prometheus(tmp_path, port)
    try:
        yield url, body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.integration  # a real Prometheus
def test_every_gpu_query_returns_data_from_a_prometheus_scraping_gpu_series(
        prometheus: tuple[str, list[str]]) -> None:
    url, body = prometheus
    body[0] = _gpu_series(util=0.95, used_ratio=0.9)
    results = gc.check_queries(url)
    assert len(results) == len(gc.gpu_panel_queries()) + len(gc.gpu_alert_queries())
    assert all(res.ok for res in results), results
    alerts = {res.target: res.detail for res in results if res.check == "alert query"}
    assert alerts["TritonGpuUtilizationHigh"].endswith("; firing")  # 0.95 > 0.9
    assert alerts["TritonGpuMemoryHigh"].endswith("; firing")  # 0.9 > 0.8
    assert alerts["TritonGpuUtilizationLowWhileQueueing"].endswith("; not firing")


@pytest.mark.integration  # a real Prometheus
def test_gpu_queries_without_gpu_series_fail(prometheus: tuple[str, list[str]],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    url, body = prometheus
    body[0] = 'nv_inference_pending_request_count{model="mlp",version="1"} 0\n'  # a CPU-only Triton
    monkeypatch.setattr(gc, "WAIT_S", 5)
    results = gc.check_queries(url)
    assert results and all(res.ok is False for res in results), results
    assert {res.detail.split(":")[0] for res in results} == {"no data"}


# --- the whole run on this CPU machine: Triton refuses the GPU instance, gpu_facts still runs ------------


@pytest.mark.integration  # a real tritonserver
@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="this machine has a GPU")
def test_without_a_gpu_triton_refuses_the_gpu_instance_and_says_why(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("the gpu_facts role installs its fact as root")
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    results = gc.run_checks(gc.query_gpus(), tmp_path)
    stopped = results[0]
    assert (stopped.check, stopped.ok) == ("stopped early", False)
    assert "tritonserver exited with code 1" in stopped.detail
    # The wheel's tritonserver is a GPU build: it checks the instance group's GPU against CUDA's devices.
    assert "instance group mlp_0 of model mlp specifies invalid or unsupported gpu id 0" in stopped.detail
    assert [res.check for res in results[1:4]] == ["gpu_facts: platform", "gpu_facts: GPU count", "gpu_facts: driver"]
    assert all(res.ok for res in results[1:])


# --- what a GPU machine with only the bundle lacks: n/a, not a failure ------------------------------------


def test_without_ansible_playbook_the_gpu_facts_check_is_na(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc, "triton_checks", lambda gpus, workdir: [])
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # no ansible-playbook beside it
    [res] = gc.run_checks([_h200()], tmp_path)
    assert (res.check, res.ok) == ("gpu_facts", None)
    assert res.detail.startswith(f"ansible-playbook is not installed next to {tmp_path / 'bin' / 'python'}")


def test_the_batching_rows_become_results_and_a_failure_one_failed_row(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("tritonserver exited with code 1; log:\nE1204 model failed")

    monkeypatch.setattr(gc.gb, "batching_table", fails)
    [res] = gc.batching_checks([_h200()], tmp_path, Console(quiet=True))
    assert (res.check, res.ok, res.detail) == ("batching", False, "tritonserver exited with code 1; log:")
