"""gpu-check's batching measurement: batching off vs ``tune``'s pick vs the grid's best, in one run.

One model is served through the Python backend on an instance group of ``kind`` (``KIND_GPU`` on a
GPU; ``KIND_CPU`` where a test runs it on CPUs), by the best engine this environment has:

* ``pytorch``: where ``import torch`` works and CUDA is available (on a GPU instance), the memory-bound
  MLP of issue 35 (1024-8192-8192-8192-1024, fp32, seeded random weights made on the GPU);
* ``onnxruntime-gpu``: else, where onnxruntime has the CUDA provider, the wide MLP of
  ``tests/wide_mlp.py`` asking that provider;
* ``onnxruntime-cpu``: else the wide MLP as it is (its sample ``model.py``, the CPU provider).

Both of ``tune``'s searches run on the same server, one after the other, over the same
:class:`tune.Space` (``tune``'s defaults unless one is given), each setting measured by perf_analyzer:
the climb gives the pick, the grid every setting (batching off among them) and its best. While they
run, Triton's ``/metrics`` is scraped every half second; a setting's GPU utilization is the mean of
``nv_gpu_utilization`` over the windows perf_analyzer measured it in ("n/a", with why, where Triton
exports none: a CPU-only machine). What bounds each setting comes from Triton's own counters
(:mod:`tritonops.triton.bounds`).

``tools/gpu_check.py`` runs it on a GPU after its other checks; on CPUs:

    .venv/bin/python tools/gpu_batching.py --kind KIND_CPU --concurrency 8 --instances 1 --delays 0
"""

from __future__ import annotations

import argparse
import math
import os
import site
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tritonclient.grpc import model_config_pb2
from tritonops.model_repo import pbtxt
from tritonops.model_repo.spec import ModelSpec
from tritonops.observability.metrics import GPU_UTILIZATION as UTILIZATION
from tritonops.triton import bench, bounds, server, tune
from tritonops.triton.load_config import BenchConfig

ROOT = Path(__file__).resolve().parent.parent  # a repository tool: the wide MLP lives in tests/
KINDS = ("KIND_GPU", "KIND_CPU")
ENGINES = ("pytorch", "onnxruntime-gpu", "onnxruntime-cpu")
PICK_TOLERANCE = 0.10  # tune's pick, as the grid measured it, within this of the grid's best
SAMPLE_S = 0.5  # /metrics scrape period; Triton refreshes its GPU series as often (--metrics-interval-ms)
TRITON_ARGS = ["--metrics-interval-ms=500", "--exit-timeout-secs=5"]
GPU_CONCURRENCY = 64  # the load of issue 35's GPU figures (perf_analyzer c=64 over HTTP)

TORCH_MODEL = "torch_mlp"
TORCH_WIDTHS = (1024, 8192, 8192, 8192, 1024)
TORCH_CONFIG = f"""\
# {TORCH_MODEL}: a memory-bound MLP ({'-'.join(map(str, TORCH_WIDTHS))}, fp32) in PyTorch (tools/gpu_batching.py).
name: "{TORCH_MODEL}"
backend: "python"
max_batch_size: 64
input {{
  name: "features"
  data_type: TYPE_FP32
  dims: [ {TORCH_WIDTHS[0]} ]
}}
output {{
  name: "logits"
  data_type: TYPE_FP32
  dims: [ {TORCH_WIDTHS[-1]} ]
}}
instance_group {{
  count: 1
  kind: KIND_GPU
  gpus: [ 0 ]
}}
"""
TORCH_MODEL_PY = f'''\
"""A memory-bound MLP in PyTorch on the instance's device (gpu-check's batching measurement)."""

import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

WIDTHS = {TORCH_WIDTHS!r}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.output = config["output"][0]["name"]
        gpu = args["model_instance_kind"] == "GPU"
        self.device = torch.device("cuda", int(args["model_instance_device_id"])) if gpu else torch.device("cpu")
        gen = torch.Generator(device=self.device).manual_seed(0)
        self.layers = [
            (torch.randn(n_in, n_out, generator=gen, device=self.device) / n_in**0.5,
             torch.zeros(n_out, device=self.device))
            for n_in, n_out in zip(WIDTHS, WIDTHS[1:])
        ]

    @torch.inference_mode()
    def execute(self, requests):
        # Requests Triton batched together run as one pass: each layer's weights are read once for all.
        arrays = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
        x = torch.from_numpy(np.concatenate(arrays)).to(self.device)
        for i, (w, b) in enumerate(self.layers):
            x = torch.addmm(b, x, w)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        result = x.cpu().numpy()
        responses, start = [], 0
        for a in arrays:
            out = result[start : start + len(a)]
            start += len(a)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.output, out)]))
        return responses
'''


# --- the model ----------------------------------------------------------------------------------------


def set_instance_kind(config: Path, kind: str, count: int = 1) -> None:
    """Rewrite ``config`` (config.pbtxt) to one instance group of ``kind`` (``KIND_GPU``: on GPU 0)."""
    if kind not in KINDS:
        raise ValueError(f"kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    msg = pbtxt.parse_proto(config.read_text(), config)
    del msg.instance_group[:]
    group = msg.instance_group.add(count=count, kind=model_config_pb2.ModelInstanceGroup.Kind.Value(kind))
    if kind == "KIND_GPU":
        group.gpus.append(0)
    config.write_text(text_format.MessageToString(msg))


def serving_engine(kind: str, python: str = sys.executable) -> str:
    """The engine that serves the model: PyTorch on CUDA, onnxruntime's CUDA provider, or onnxruntime on CPUs.

    Only a GPU instance looks for a GPU engine; torch is probed in a child (its import takes seconds and
    would initialise CUDA here)."""
    if kind != "KIND_GPU":
        return "onnxruntime-cpu"
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        if subprocess.run([python, "-c", probe], capture_output=True, timeout=300).returncode == 0:
            return "pytorch"
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        import onnxruntime

        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            return "onnxruntime-gpu"
    except ImportError:
        pass
    return "onnxruntime-cpu"


def build_model(repository: Path, kind: str, engine: str) -> Path:
    """Write the model ``engine`` serves into ``repository`` with one instance of ``kind``; its folder."""
    if engine == "pytorch":
        folder = repository / TORCH_MODEL
        (folder / "1").mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(TORCH_CONFIG)
        (folder / "1" / "model.py").write_text(TORCH_MODEL_PY)
    elif engine in ENGINES:
        if str(ROOT / "tests") not in sys.path:
            sys.path.append(str(ROOT / "tests"))
        import wide_mlp  # the wide MLP (tests/wide_mlp.py), reused as it is

        folder = wide_mlp.build(repository)
        if engine == "onnxruntime-gpu":
            model_py = folder / "1" / "model.py"
            cpu = 'providers=["CPUExecutionProvider"]'
            text = model_py.read_text()
            if cpu not in text:
                raise RuntimeError(f"{wide_mlp.SAMPLE_MODEL_PY}: no {cpu} to point at the CUDA provider")
            model_py.write_text(text.replace(cpu, 'providers=["CUDAExecutionProvider"]'))
    else:
        raise ValueError(f"engine: must be one of {', '.join(ENGINES)}, got {engine!r}")
    set_instance_kind(folder / "config.pbtxt", kind)
    return folder


@contextmanager
def stub_sees_this_path() -> Iterator[None]:
    """Within: servers started give the Python backend's stub this interpreter's whole path, in its order.

    The stub imports from this interpreter's site-packages, then PYTHONPATH (``server.stub_pythonpath``);
    folders a ``.pth`` file adds after site-packages (the GPU bundle's venv reaches the machine's own
    torch that way, behind the project's numpy) would be missing, so they go on PYTHONPATH, last."""
    sites = site.getsitepackages()
    first = next((i for i, p in enumerate(sys.path) if p in sites), len(sys.path))
    extra = [p for p in sys.path[first:] if p not in sites and Path(p).is_dir()]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([*filter(None, (old or "").split(os.pathsep)), *extra])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


# --- GPU utilization, from Triton's /metrics ------------------------------------------------------------


def gpu_utilization(metrics_text: str, uuids: Collection[str] = ()) -> float | None:
    """The mean of ``nv_gpu_utilization`` (0..1) over the GPUs in ``uuids`` (all when empty); None: no series."""
    values = [s.value for f in text_string_to_metric_families(metrics_text) if f.name == UTILIZATION
              for s in f.samples if not uuids or s.labels.get("gpu_uuid") in uuids]
    return sum(values) / len(values) if values else None


class Sampler:
    """Scrapes ``metrics_url`` every ``period`` seconds in a thread: (time, utilization or None) samples."""

    def __init__(self, metrics_url: str, uuids: Collection[str] = (), period: float = SAMPLE_S) -> None:
        self.url, self.uuids, self.period = metrics_url, tuple(uuids), period
        self.samples: list[tuple[float, float | None]] = []
        self.error = ""  # the last scrape's failure
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    text = resp.read().decode()
            except OSError as e:
                self.error = f"could not scrape {self.url}: {e}"
                continue
            self.samples.append((time.monotonic(), gpu_utilization(text, self.uuids)))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def mean(self, windows: Collection[tuple[float, float]]) -> tuple[float | None, str]:
        """(mean utilization over the samples inside ``windows``, why there is none when None)."""
        inside = [v for t, v in self.samples if any(a <= t <= b for a, b in windows)]
        values = [v for v in inside if v is not None]
        if values:
            return sum(values) / len(values), ""
        if not any(v is not None for _, v in self.samples):
            return None, self.error or f"Triton exports no {UTILIZATION} (it sees no GPU: DCGM found none)"
        return None, f"no {UTILIZATION} sample during the measurement ({len(inside)} scrapes)"


class Windows:
    """``run`` for :func:`tune.tune`: bench.run, timed; ``on_trial`` files the windows under the trial's setting."""

    def __init__(self, log: Console | None = None) -> None:
        self.log = log
        self.pending: list[tuple[float, float]] = []
        self.of: dict[tune.Setting, list[tuple[float, float]]] = {}

    def run(self, cfg: BenchConfig) -> bench.BenchReport:
        start = time.monotonic()
        try:
            return bench.run(cfg)
        finally:
            self.pending.append((start, time.monotonic()))

    def on_trial(self, t: tune.Trial) -> None:
        # A setting measured more than once (tune's runoff: its runs, then their median with no run of its
        # own) keeps every run's windows.
        self.of.setdefault(t.setting, []).extend(self.pending)
        self.pending = []
        if self.log:
            self.log.print(f"  {escape(t.setting.label)}: {t.report.inferences_per_s:.0f} inf/s, "
                           f"p95 {t.report.p95_ms:.1f} ms ({t.measured}){escape(' ' + t.failure if t.failure else '')}",
                           highlight=False)


# --- the measurement ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table: a named setting, the trial that measured it, and its GPU utilization."""

    name: str  # "batching off", "tune's pick", "grid best"
    trial: tune.Trial | None  # None: there is no such setting (why)
    utilization: float | None = None
    why: str = ""  # why no utilization (or no trial)

    @property
    def bound(self) -> bounds.Bound | None:
        if self.trial is None or self.trial.unmeasured:
            return None
        mean = self.trial.report.mean_ms
        return bounds.bound(self.trial.report.server, None if math.isnan(mean) else mean)

    @property
    def measured_by(self) -> str:
        return f"{self.trial.report.engine}, {self.trial.measured}" if self.trial else "-"

    def to_dict(self) -> dict[str, Any]:
        b = self.bound
        return {"row": self.name, "setting": self.trial.setting.label if self.trial else None,
                "inferences_per_s": self.trial.report.inferences_per_s if self.trial else None,
                "p95_ms": self.trial.report.p95_ms if self.trial else None, "gpu_utilization": self.utilization,
                "why": self.why or None, "bound": b.to_dict() if b else None, "measured_by": self.measured_by}


@dataclass
class BatchingRun:
    kind: str
    engine: str
    model: str
    concurrency: int
    climb: tune.TuneResult
    grid: tune.TuneResult
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0

    def grid_trial(self, setting: tune.Setting | None) -> tune.Trial | None:
        return next((t for t in self.grid.trials if setting is not None and t.setting == setting), None)

    def checks(self) -> list[tuple[str, str, bool | None, str]]:
        """(check, target, ok or None for n/a, detail): the pick within 10% of the grid's best, batching off
        below the pick (both as the grid measured them, in one server state), GPU utilization present."""
        off, pick, best = self.rows
        target = f"{self.model} ({self.engine}, {self.kind})"
        pick_g = self.grid_trial(pick.trial.setting if pick.trial else None)
        if pick_g and best.trial and pick_g.usable:
            ratio = pick_g.report.inferences_per_s / best.trial.report.inferences_per_s
            near = (ratio >= 1 - PICK_TOLERANCE,
                    f"{pick_g.setting.label}: {pick_g.report.inferences_per_s:.0f} inf/s as the grid measured it, "
                    f"{ratio:.0%} of the grid's best ({best.trial.setting.label}, "
                    f"{best.trial.report.inferences_per_s:.0f} inf/s)")
        else:
            near = (False, pick.why or best.why or "the pick is not among the grid's usable settings")
        if off.trial and pick_g and off.trial.error_free and pick_g.error_free:
            gain = pick_g.report.inferences_per_s / max(off.trial.report.inferences_per_s, 1e-9)
            faster = (gain > 1, f"{off.trial.report.inferences_per_s:.0f} inf/s off, "
                                f"{pick_g.report.inferences_per_s:.0f} with the pick ({gain:.2f}x)")
        else:
            faster = (False, off.why or "batching off or the pick was not measured")
        utils = [(r.name, r.utilization, r.why) for r in self.rows]
        if all(u is None for _, u, _ in utils) and len(self.why_na()) == 1:
            detail = f"n/a for every row: {self.why_na()[0]}"
        else:
            detail = "; ".join(f"{n} {u:.0%}" if u is not None else f"{n} n/a ({w})" for n, u, w in utils)
        present: bool | None = all(u is not None for _, u, _ in utils)
        if self.kind != "KIND_GPU":
            present = None  # nothing to require of a CPU instance
        return [("batching: pick vs grid best", target, near[0], near[1]),
                ("batching: off vs pick", target, faster[0], faster[1]),
                ("batching: GPU utilization", target, present, detail)]

    def why_na(self) -> list[str]:
        """Why GPU utilization is n/a, once per distinct reason."""
        return list(dict.fromkeys(r.why for r in self.rows if r.utilization is None))

    def table(self) -> Table:
        why = self.why_na()
        t = Table(title=f"batching: {self.model} ({self.engine}, {self.kind}), perf_analyzer c={self.concurrency}",
                  caption=escape(f"GPU util n/a: {'; '.join(why)}") if why else None, caption_justify="left")
        for col in ("row", "setting", "inf/s", "p95 ms", "GPU util", "bound", "measured by"):
            t.add_column(col, justify="right" if col in ("inf/s", "p95 ms", "GPU util") else "left")
        for r in self.rows:
            tr, b = r.trial, r.bound
            t.add_row(r.name, escape(tr.setting.label) if tr else f"none: {escape(r.why)}",
                      f"{tr.report.inferences_per_s:.0f}" if tr else "-",
                      f"{tr.report.p95_ms:.1f}" if tr and not math.isnan(tr.report.p95_ms) else "-",
                      f"{r.utilization:.0%}" if r.utilization is not None else "n/a",
                      f"{b.name} (model {b.shares['compute infer']:.0%})" if b else "-", escape(r.measured_by))
        return t

    def bound_sentences(self) -> list[str]:
        return [f"{r.name}: {b.sentence()}" for r in self.rows if (b := r.bound)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "engine": self.engine, "model": self.model, "concurrency": self.concurrency,
                "rows": [r.to_dict() for r in self.rows], "seconds": round(self.seconds, 1),
                "checks": [dict(zip(("check", "target", "ok", "detail"), c, strict=True)) for c in self.checks()],
                "climb_incomplete": self.climb.incomplete or None, "grid_incomplete": self.grid.incomplete or None}


def _rows(climb: tune.TuneResult, grid: tune.TuneResult, space: tune.Space, sampler: Sampler,
          windows: dict[tune.Search, Windows]) -> list[Row]:
    """Batching off (the grid's), the climb's pick (its own measurement), the grid's best."""
    def row(name: str, search: tune.Search, trial: tune.Trial | None, none: str) -> Row:
        if trial is None:
            return Row(name, None, None, none)
        util, why = sampler.mean(windows[search].of.get(trial.setting, []))
        return Row(name, trial, util, why)

    off = next((t for t in grid.trials if t.setting == tune.Setting(False, space.counts[0])), None)
    usable = [t for t in grid.trials if t.usable]
    best = max(usable, key=lambda t: t.report.inferences_per_s) if usable else None
    return [row("batching off", "grid", off, "the grid did not measure it"),
            row("tune's pick", "climb", climb.best, climb.incomplete or "no setting met the p95 budget error-free"),
            row("grid best", "grid", best, grid.incomplete or "no setting met the p95 budget error-free")]


def batching_table(kind: str, workdir: Path, *, space: tune.Space | None = None, engine: str | None = None,
                   uuids: Collection[str] = (), log: Console | None = None, **load: Any) -> BatchingRun:
    """Serve the model on ``kind``, run tune's climb and grid over ``space`` on it, measure GPU utilization.

    ``load``: :class:`tune.TuneConfig` fields (concurrency, budget_ms, max_seconds, ...; tune's defaults
    otherwise); ``uuids``: the GPUs whose utilization counts (all when empty)."""
    started = time.monotonic()
    engine = engine or serving_engine(kind)
    folder = build_model(workdir / "repo", kind, engine)
    spec: ModelSpec = pbtxt.parse((folder / "config.pbtxt").read_text(), folder / "config.pbtxt")
    with stub_sees_this_path():
        triton = server.start(workdir / "repo", model_control_mode="explicit", load_models=[spec.name],
                              extra_args=TRITON_ARGS, workdir=workdir / "triton")
    try:
        cfg = tune.TuneConfig(url=triton.http_url, model=spec.name, **load)
        space = space or cfg.space(spec.max_batch_size or 0)
        windows: dict[tune.Search, Windows] = {"climb": Windows(log), "grid": Windows(log)}
        results: dict[str, tune.TuneResult] = {}
        with Sampler(triton.metrics_url, uuids) as sampler:
            for search, w in windows.items():
                if log:
                    log.print(f"batching: tune's {search} over {len(space.grid())} settings' space", highlight=False)
                results[search] = tune.tune(triton.http_url, spec, space, cfg.load, cfg.budget_ms, search=search,
                                            warmup_requests=cfg.warmup_requests, on_trial=w.on_trial, run=w.run)
        rows = _rows(results["climb"], results["grid"], space, sampler, windows)
    finally:
        triton.stop()
    return BatchingRun(kind, engine, spec.name, cfg.concurrency, results["climb"], results["grid"], rows,
                       time.monotonic() - started)


def print_run(console: Console, run: BatchingRun) -> None:
    console.print(run.table())
    for line in run.bound_sentences():
        console.print(escape(line), highlight=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=KINDS, default="KIND_CPU")
    ap.add_argument("--engine", choices=ENGINES, help="default: the best this environment has for --kind")
    ap.add_argument("--concurrency", type=int, default=GPU_CONCURRENCY)
    ap.add_argument("--instances", help="instance counts, comma-separated (default: tune's)")
    ap.add_argument("--delays", help="queue delays in microseconds, comma-separated (default: tune's)")
    ap.add_argument("--max-seconds", type=float, help="per setting (default: tune's)")
    ap.add_argument("--budget-ms", type=float, help="p95 budget (default: tune's)")
    args = ap.parse_args(argv)
    load: dict[str, Any] = {"concurrency": args.concurrency}
    for name, value in (("instance_counts", args.instances), ("queue_delays_us", args.delays)):
        if value:
            load[name] = tuple(int(x) for x in value.split(","))
    for name, value in (("max_seconds", args.max_seconds), ("budget_ms", args.budget_ms)):
        if value is not None:
            load[name] = value
    console = Console()
    with tempfile.TemporaryDirectory(prefix="tritonops-batching-") as tmp:
        run = batching_table(args.kind, Path(tmp), engine=args.engine, log=Console(stderr=True), **load)
    print_run(console, run)
    for check, _target, ok, detail in run.checks():
        mark = {True: "ok", False: "FAILED", None: "n/a"}[ok]
        console.print(f"{check}: {mark}: {escape(detail)}", highlight=False, soft_wrap=True)
    return 1 if any(ok is False for _, _, ok, _ in run.checks()) else 0


if __name__ == "__main__":
    sys.exit(main())
