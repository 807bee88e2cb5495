"""``make gpu-check``: proof on a real NVIDIA GPU of what the test suite can only check on CPUs.

On a machine with an NVIDIA GPU it:

1. starts the nvidia-pytriton wheel's ``tritonserver`` with a GPU model and the memory flags the pods
   get from the budget (``tritonops.k8s.stacks.triton.workload.memory_settings``), and runs the golden inference;
2. scrapes Triton's ``/metrics`` for the ``nv_gpu_*`` series of every GPU nvidia-smi lists;
3. runs every GPU dashboard panel query and every GPU alert query (those reading ``nv_gpu_*`` or
   ``DCGM_*``, selected from ``tritonops.observability``) against a real Prometheus scraping that Triton;
4. runs the ``gpu_facts`` role on this machine (``ansible-playbook -c local``) and compares its facts
   with nvidia-smi;
5. compares the budget figures (catalog GPU memory; CUDA context + pool + model per GPU) with the GPU
   memory nvidia-smi measures once the model is loaded;
6. measures batching on a GPU instance (``tools/gpu_batching.py``): batching off, ``tune``'s pick and the
   grid's best, each by perf_analyzer, with ``nv_gpu_utilization`` and what bounds each setting;

then prints a table and exits 1 if a check failed (0 otherwise). Where there is no GPU (no nvidia-smi,
nvidia-smi fails, or no /dev/nvidia0) it says so and exits 0 at once.

What the wheel can serve on a GPU: its tritonserver 2.51 is a GPU build (it carries libcudart 12 and
libdcgm, and exports ``nv_gpu_*`` through DCGM where the driver's NVML is present), but it ships a
single backend, ``python`` (no onnxruntime or TensorRT backend, so the sample's
``configs/gpu.pbtxt`` cannot load here). The GPU model is therefore the sample MLP through the Python
backend with ``instance_group [{kind: KIND_GPU, gpus: [0]}]``: Triton places the instance on GPU 0 and
holds its CUDA context and memory pool there, while the MLP's arithmetic runs in the project's
onnxruntime, the CPU build (onnxruntime-gpu would replace it in the same environment, and the sample's
model.py asks for the CPU provider).

Needs the project's environment and Prometheus (``make venv apt``); run as root (the role installs
its fact as root, here into a temporary folder, not /etc).
"""

# ruff: noqa: E402 - the heavy imports come after the no-GPU exit, which must stay quick
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # a repository tool: it reads the samples and roles
SAMPLE = ROOT / "examples" / "model_repository" / "mlp"
ROLES = ROOT / "roles"
DEVICE = Path("/dev/nvidia0")
GPU_PREFIXES = ("nv_gpu_", "DCGM_")  # Triton's GPU metrics, and the DCGM exporter's
# The sample MLP's own GPU memory per instance, as a model service would declare it (sizeMib): its
# weights stay on the host (onnxruntime CPU), so only the Python backend's GPU instance remains.
MLP_MIB = 64
CATALOG_TOLERANCE = 0.01  # catalog memory vs nvidia-smi's total (drivers differ by a few MiB)
SMI_FIELDS = "index,name,uuid,memory.total,memory.used,driver_version"
TRITON_ARGS = ["--metrics-interval-ms=500", "--exit-timeout-secs=5"]
WAIT_S = 30  # for Prometheus' first scrapes and for panel queries to return data


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_total_mib: int
    memory_used_mib: int
    driver_version: str


@dataclass(frozen=True)
class Result:
    check: str
    target: str
    ok: bool | None  # None: not applicable here
    detail: str = ""


class NoGpu(RuntimeError):
    """nvidia-smi is missing or cannot talk to a GPU."""


# --- the GPU, through nvidia-smi --------------------------------------------------------------------


def query_gpus() -> list[Gpu]:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except subprocess.CalledProcessError as e:
        last = (e.stdout + e.stderr).strip().splitlines()[-1:] or [f"exit code {e.returncode}"]
        raise NoGpu(f"nvidia-smi fails: {last[0]}") from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NoGpu(f"nvidia-smi fails: {e}") from None
    gpus = []
    for line in out.strip().splitlines():
        index, name, uuid, total, used, driver = (p.strip() for p in line.split(","))
        gpus.append(Gpu(int(index), name, uuid, int(total), int(used), driver))
    if not gpus:
        raise NoGpu("nvidia-smi lists no GPU")
    return gpus


def why_no_gpu() -> str | None:
    """Why this machine has no usable NVIDIA GPU, or None when it has one."""
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not on PATH"
    try:
        query_gpus()
    except NoGpu as e:
        return str(e)
    return None if DEVICE.exists() else f"no {DEVICE}"


# --- no GPU: say so and stop, before the imports that take a second ------------------------------------

if __name__ == "__main__" and (REASON := why_no_gpu()):
    print(f"gpu-check: no NVIDIA GPU here ({REASON}); nothing to check.")
    sys.exit(0)

try:
    import gpu_batching as gb
    import yaml
    from prometheus_client.parser import text_string_to_metric_families
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from tritonops.k8s.catalog import GPU_FAMILIES, GpuFamily
    from tritonops.k8s.config import ModelService, NodePoolRef, ServedModel, TritonStackConfig
    from tritonops.k8s.stacks.triton import budget as b
    from tritonops.k8s.stacks.triton import workload
    from tritonops.observability import dashboards as d
    from tritonops.observability import metrics as m
    from tritonops.observability import rules as r
    from tritonops.triton import args, perf_analyzer, server, smoke
except ImportError as e:  # an environment without the project's packages: say which, not a traceback
    if __name__ != "__main__":
        raise
    print(f"gpu-check: this Python ({sys.executable}) lacks {e.name or e}: run it in the project's environment "
          "(`make venv`, or the GPU bundle's run.sh: `python -m devkit gpu-bundle`)", file=sys.stderr)
    sys.exit(3)

SETTINGS = r.RuleSettings(rate_window="5s", for_override="0s")


# --- what to check ------------------------------------------------------------------------------------


def is_gpu_query(expr: str) -> bool:
    return any(name in m.GPU_METRICS or name.startswith(GPU_PREFIXES) for name in m.metric_names(expr))


def promql(expr: str) -> str:
    """A dashboard query as Prometheus takes it: every model, the rules' rate window."""
    return expr.replace("$model", ".*").replace("$__rate_interval", SETTINGS.rate_window)


def gpu_panel_queries() -> dict[str, str]:
    """'dashboard: panel [legend]' -> PromQL, for every dashboard query that reads GPU metrics."""
    return {
        f"{fname}: {panel.title} [{q.legend}]": promql(q.expr)
        for fname, panels in d.panel_specs(SETTINGS.scaling, SETTINGS.job).items()
        for panel in panels for q in panel.queries if is_gpu_query(q.expr)
    }


def gpu_alert_queries() -> dict[str, str]:
    """Alert name -> expression, for every alert that reads GPU metrics."""
    return {rule["alert"]: rule["expr"] for group in r.rule_groups(SETTINGS) for rule in group["rules"]
            if "alert" in rule and is_gpu_query(rule["expr"])}


# --- the budget -------------------------------------------------------------------------------------


def catalog_family(gpu_name: str) -> GpuFamily | None:
    """The catalog's family of the GPU nvidia-smi names ('NVIDIA H200' -> p5e), by whole name tokens."""
    tokens = set(gpu_name.upper().replace("-", " ").split())
    return next((f for f in GPU_FAMILIES.values() if set(f.gpu.upper().split("-")) <= tokens), None)


def local_budget(family: GpuFamily) -> tuple[ModelService, b.ServiceBudget]:
    """The budget of a one-GPU model service serving the sample MLP on this GPU family."""
    svc = ModelService(name="gpu-check", node_pool="local", models=[ServedModel(name="mlp", size_mib=MLP_MIB)])
    pool = NodePoolRef(instance_type=f"{family.family}.xlarge")
    cfg = TritonStackConfig(environment="gpu-check", tier="non-production", node_pools={"local": pool},
                            model_services=[svc])
    return svc, b.service_budget(svc, cfg)


def check_budget(gpu: Gpu, family: GpuFamily | None, budget: b.ServiceBudget | None, used_mib: int) -> list[Result]:
    """Catalog memory vs nvidia-smi's total; Triton's measured use (used_mib) vs the budget's figures."""
    if family is None or budget is None:
        return [Result("budget", gpu.name, None, "not a GPU of tritonops.k8s.catalog: no budget to compare")]
    off = abs(family.memory_mib - gpu.memory_total_mib) / gpu.memory_total_mib
    loaded_mib = budget.need_mib - budget.io_headroom_mib  # context + pool + models, before activations
    return [
        Result("budget: catalog memory", f"{family.family} ({family.gpu})", off <= CATALOG_TOLERANCE,
               f"catalog {family.memory_mib} MiB, nvidia-smi {gpu.memory_total_mib} MiB ({off:.2%} apart)"),
        # Nothing measured means nvidia-smi does not see Triton's use (a GPU instance always takes some).
        Result("budget: Triton's GPU memory", f"GPU {gpu.index}", 0 < used_mib <= loaded_mib,
               f"measured {used_mib} MiB after load; budget {loaded_mib} MiB (CUDA context, pool, "
               f"{MLP_MIB} MiB model) + {budget.io_headroom_mib} MiB I/O headroom"),
    ]


# --- gpu_facts --------------------------------------------------------------------------------------


def run_gpu_facts(workdir: Path) -> dict[str, Any]:
    """Run the gpu_facts role on this machine (fact folder under workdir) and return ansible_local.gpu."""
    out = workdir / "gpu_fact.json"
    playbook = workdir / "gpu_facts.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "gpu_facts on this machine", "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": "gpu_facts", "vars": {"gpu_facts_dir": str(workdir / "facts.d")}}],
        "post_tasks": [{"name": "Write the fact", "ansible.builtin.copy": {
            "content": "{{ ansible_local.gpu | to_json }}", "dest": str(out), "mode": "0644"}}],
    }], sort_keys=False))
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROLES), "ANSIBLE_LOCALHOST_WARNING": "false"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-c", "local", "-i", "localhost,",
         "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ansible-playbook exit {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-500:]}")
    fact: dict[str, Any] = json.loads(out.read_text())
    return fact


def check_facts(fact: dict[str, Any], gpus: list[Gpu]) -> list[Result]:
    smi = {g["uuid"]: g for g in fact.get("nvidia_smi", {}).get("gpus", [])}
    results = [
        Result("gpu_facts: platform", "localhost", fact.get("platform") == "nvidia_gpu", str(fact.get("platform"))),
        Result("gpu_facts: GPU count", "localhost", fact.get("gpu_count") == len(gpus),
               f"fact {fact.get('gpu_count')}, nvidia-smi {len(gpus)}"),
        Result("gpu_facts: driver", "localhost", fact.get("driver_version") == gpus[0].driver_version,
               f"fact {fact.get('driver_version')}, nvidia-smi {gpus[0].driver_version}"),
    ]
    for g in gpus:
        mib = smi.get(g.uuid, {}).get("memory_total_mib")
        results.append(Result("gpu_facts: memory", f"GPU {g.index} {g.uuid}", mib == g.memory_total_mib,
                              f"fact {mib} MiB, nvidia-smi {g.memory_total_mib} MiB"))
    return results


# --- Triton and Prometheus --------------------------------------------------------------------------


def gpu_repository(dest: Path) -> Path:
    """A repository holding the sample MLP with one instance on GPU 0."""
    shutil.copytree(SAMPLE, dest / SAMPLE.name, ignore=shutil.ignore_patterns("__pycache__", "configs"))
    gb.set_instance_kind(dest / SAMPLE.name / "config.pbtxt", "KIND_GPU")
    return dest


def check_triton_metrics(metrics_url: str, gpus: list[Gpu]) -> list[Result]:
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        families = list(text_string_to_metric_families(resp.read().decode()))
    results = []
    for name in sorted(m.GPU_METRICS):
        uuids = {s.labels.get("gpu_uuid") for f in families if f.name == name for s in f.samples}
        missing = [g.uuid for g in gpus if g.uuid not in uuids]
        results.append(Result("Triton /metrics", name, not missing,
                              f"missing for {', '.join(missing)}" if missing else f"{len(uuids)} GPU(s)"))
    return results


def start_prometheus(workdir: Path, metrics_port: int) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus on loopback scraping Triton's metrics port every second, with the project's rules."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus not found: `make apt` installs it")
    port = server.free_port()
    (workdir / "rules.yml").write_text(yaml.safe_dump({"groups": r.rule_groups(SETTINGS)}, sort_keys=False))
    (workdir / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [str(workdir / "rules.yml")],
        "scrape_configs": [{"job_name": SETTINGS.job, "static_configs": [
            {"targets": [f"127.0.0.1:{metrics_port}"], "labels": {"instance": "gpu-check"}}]}],
    }))
    with (workdir / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'prom'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return proc, f"http://127.0.0.1:{port}"


def query(prom_url: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        return list(json.loads(resp.read())["data"]["result"])


def has_numbers(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(s["value"][1])) for s in result)


def wait_for_data(prom_url: str, exprs: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each expression's result, polled until all return numbers or WAIT_S pass."""
    results: dict[str, list[dict[str, Any]]] = {}
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for e in exprs:
            try:
                results[e] = query(prom_url, e)
            except OSError:  # Prometheus still starting
                results[e] = []
        if all(has_numbers(v) for v in results.values()):
            break
        time.sleep(1)
    return results


def check_queries(prom_url: str) -> list[Result]:
    """Each GPU panel must return numbers; each GPU alert must find data for every series it reads."""
    panels, alerts = gpu_panel_queries(), gpu_alert_queries()
    reads = sorted(set().union(*(m.metric_names(e) for e in alerts.values())))
    found = wait_for_data(prom_url, [*panels.values(), *reads])
    results = []
    for title, expr in panels.items():
        if has_numbers(found[expr]):
            results.append(Result("dashboard panel", title, True, f"{len(found[expr])} series"))
        else:
            results.append(_without_data("dashboard panel", title, m.metric_names(expr)))
    for name, expr in alerts.items():
        missing = {n for n in m.metric_names(expr) if not found[n]}
        if missing:
            results.append(_without_data("alert query", name, missing))
        else:
            state = "firing" if query(prom_url, expr) else "not firing"
            names = ", ".join(sorted(m.metric_names(expr)))
            results.append(Result("alert query", name, True, f"data for {names}; {state}"))
    return results


def _without_data(check: str, target: str, names: set[str]) -> Result:
    """No data: n/a where only the DCGM exporter's series are missing (it does not run here), else failed."""
    if names and all(n.startswith("DCGM_") for n in names):
        return Result(check, target, None, f"needs the DCGM exporter: {', '.join(sorted(names))}")
    return Result(check, target, False, f"no data: {', '.join(sorted(names))}")


# --- the run ----------------------------------------------------------------------------------------


def triton_checks(gpus: list[Gpu], workdir: Path) -> list[Result]:
    """Triton with the GPU model (golden inference, budget, /metrics), then the queries in Prometheus."""
    gpu0 = gpus[0]
    family = catalog_family(gpu0.name)
    svc, budget = local_budget(family) if family else (None, None)
    memory_args = (args.memory_args(args.TritonSettings("", **workload.memory_settings(svc, budget)))
                   if svc and budget else [])
    repo = gpu_repository(workdir / "repo")
    with gb.stub_sees_this_path():
        triton = server.start(repo, extra_args=[*TRITON_ARGS, *memory_args], workdir=workdir / "triton")
    prom: subprocess.Popen[bytes] | None = None
    try:
        report = smoke.smoke(triton.http_url, repository=repo, metrics_url=triton.metrics_url)
        results = [Result(f"Triton {c.check}", c.target, c.ok, c.detail) for c in report.checks]
        used = next(g for g in query_gpus() if g.index == gpu0.index).memory_used_mib - gpu0.memory_used_mib
        results += check_budget(gpu0, family, budget, used)
        results += check_triton_metrics(triton.metrics_url, gpus)
        if shutil.which("prometheus") is None:  # a GPU machine with only the bundle: the queries cannot run
            results.append(Result("dashboard panels, alert queries", "Prometheus", None,
                                  "prometheus is not installed here (`make apt` installs it): queries not run"))
        else:
            prom, prom_url = start_prometheus(workdir, triton.metrics_port)
            results += check_queries(prom_url)
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        triton.stop()
    return results


def run_checks(gpus: list[Gpu], workdir: Path) -> list[Result]:
    try:
        results = triton_checks(gpus, workdir)
    except (RuntimeError, OSError) as e:  # Triton or Prometheus did not start or stopped answering
        log = workdir / "triton" / "tritonserver.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        errors = [line for line in lines if re.match(r"E\d{4} |error: ", line)]
        first = str(e).splitlines()[0].removesuffix("; log:")
        results = [Result("stopped early", "tritonserver / prometheus", False, "\n".join([first, *errors]))]
    playbook = Path(sys.executable).parent / "ansible-playbook"
    if not playbook.exists():
        results.append(Result("gpu_facts", "localhost", None,
                              f"ansible-playbook is not installed next to {sys.executable} (the ansible extra, "
                              "or the GPU bundle's ansible-core): the role not run"))
        return results
    try:
        results += check_facts(run_gpu_facts(workdir), gpus)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        results.append(Result("gpu_facts", "localhost", False, str(e)))
    return results


def batching_checks(gpus: list[Gpu], workdir: Path, console: Console) -> list[Result]:
    """The batching table (tools/gpu_batching.py) on a GPU instance of GPU 0, printed; its rows as results."""
    try:
        run = gb.batching_table("KIND_GPU", workdir / "batching", uuids=[gpus[0].uuid], log=console,
                                concurrency=gb.GPU_CONCURRENCY)
    except (RuntimeError, OSError, ValueError, perf_analyzer.PerfAnalyzerError) as e:
        return [Result("batching", "tritonserver / perf_analyzer", False, str(e).splitlines()[0])]
    gb.print_run(console, run)
    return [Result(*check) for check in run.checks()]


def table(results: list[Result]) -> Table:
    t = Table(title="tritonops gpu-check")
    for col in ("check", "target", "result", "detail"):
        t.add_column(col)
    for res in results:
        mark = {True: "[green]ok[/]", False: "[red]FAILED[/]", None: "[yellow]n/a[/]"}[res.ok]
        t.add_row(res.check, escape(res.target), mark, escape(res.detail))
    return t


def main() -> int:
    console = Console()
    problem = server.numpy_problem()  # the GPU model runs on the Python backend: refused before anything starts
    if problem:
        console.print(f"gpu-check: refused: {escape(problem)}", soft_wrap=True, highlight=False)
        return 1
    gpus = query_gpus()
    console.print("gpu-check: " + "; ".join(f"GPU {g.index} {g.name}, {g.memory_total_mib} MiB, driver "
                                             f"{g.driver_version}" for g in gpus))
    with tempfile.TemporaryDirectory(prefix="tritonops-gpu-check-") as tmp:
        results = run_checks(gpus, Path(tmp))
        results += batching_checks(gpus, Path(tmp), console)
    console.print(table(results))
    failed = [res for res in results if res.ok is False]
    console.print(f"{len(results) - len(failed)} of {len(results)} checks passed or n/a; {len(failed)} failed.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
