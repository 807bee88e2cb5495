"""Triton's own load generator, ``perf_analyzer``, as the measuring engine of ``tritonops bench`` and ``tune``.

perf_analyzer ships in the ``tritonclient`` wheel (``bin/perf_analyzer``, installed next to this
interpreter). It needs two shared libraries only to load, no GPU: ``libb64.so.0d`` (Debian package
``libb64-0d``) and ``libcudart.so.12`` (PyPI wheel ``nvidia-cuda-runtime-cu12``, put on
``LD_LIBRARY_PATH`` here). It reaches about twice the throughput of a Python asyncio client on a
small machine, so its figures are the reference; this module runs it, bounded in time, and reads its
``-f`` CSV export (``--verbose-csv``), never its console text.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tritonops.triton.load_config import BenchConfig

# The run's time budget is split into ``BenchConfig.max_windows`` windows (perf_analyzer's
# --max-trials); it ends after 3 when they agree, and fails (:class:`Unstable`) after the last.
MIN_WINDOW_MS = 200
# Shared libraries perf_analyzer needs to start, and where each comes from.
_LIBRARIES = {
    "libb64.so.0d": "the Debian package libb64-0d (apt-get install libb64-0d, or `make apt`)",
    "libcudart.so.12": "the PyPI wheel nvidia-cuda-runtime-cu12 (pip install 'tritonops[obs]', or `make venv`)",
}


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer is missing, cannot start, or could not measure."""


class Unstable(PerfAnalyzerError):
    """perf_analyzer ran, but found no stable windows: throughput or latency varied more than allowed."""


class Overran(PerfAnalyzerError):
    """perf_analyzer ran past its time limit and was stopped (a busy machine: its windows never settled)."""


UNSTABLE_MARK = "Failed to obtain stable measurement"


@dataclass(frozen=True)
class Measurement:
    """One perf_analyzer measurement (the last, stable windows), from its CSV export."""

    inferences_per_s: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float


@dataclass(frozen=True)
class PerfAnalyzer:
    binary: Path
    cudart_dir: Path | None  # folder holding libcudart.so.12 (None: the system's loader finds it)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.cudart_dir is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (str(self.cudart_dir), env.get("LD_LIBRARY_PATH", "")) if p
            )
        return env

    def check(self) -> None:
        """Start it once (``--version``); a missing shared library becomes an error naming its package."""
        try:
            proc = subprocess.run([str(self.binary), "--version"], env=self.env(), capture_output=True,
                                  text=True, timeout=30, check=False)
        except OSError as e:
            raise PerfAnalyzerError(f"{self.binary}: cannot start: {e}") from None
        if proc.returncode == 0:
            return
        text = proc.stderr + proc.stdout
        for lib, source in _LIBRARIES.items():
            if lib in text:
                raise PerfAnalyzerError(f"perf_analyzer needs {lib}, which is missing: install {source}")
        raise PerfAnalyzerError(f"{self.binary} --version failed: {text.strip()[:300]}")

    def command(self, cfg: BenchConfig, csv_path: Path) -> list[str]:
        """perf_analyzer's command line for one bounded measurement of ``cfg``."""
        return [str(self.binary), *arguments(cfg), "-f", str(csv_path), "--verbose-csv"]

    def shell_command(self, cfg: BenchConfig, header_value: str = "") -> str:
        """The command line an operator runs to measure ``cfg`` with perf_analyzer (its own console report),
        with the library path :meth:`env` gives it in front.

        The admin header's value is ``header_value``: shell text the shell expands (``$(cat FILE)``,
        ``${VAR}``), so the key itself is never shown (:func:`arguments` puts the real one in argv)."""
        env = self.env()
        words = [f"LD_LIBRARY_PATH={shlex.quote(env['LD_LIBRARY_PATH'])}"] if self.cudart_dir else []
        words += [shlex.quote(w) for w in (str(self.binary), *arguments(dataclasses.replace(cfg, headers=())))]
        words += [f'-H "{name}:{header_value}"' for name, _ in cfg.headers if cfg.protocol == "http"]
        return " ".join(words)

    def measure(self, cfg: BenchConfig) -> Measurement:
        """Run perf_analyzer once for ``cfg``; PerfAnalyzerError with its own message when it fails."""
        with tempfile.TemporaryDirectory(prefix="tritonops-pa-") as tmp:
            out = Path(tmp) / "report.csv"
            try:
                proc = subprocess.run(self.command(cfg, out), env=self.env(), capture_output=True, text=True,
                                      timeout=time_limit(cfg), check=False)
            except subprocess.TimeoutExpired:
                raise Overran(f"perf_analyzer ran past {time_limit(cfg):.0f} s and was stopped") from None
            if proc.returncode != 0 or not out.exists():
                text = proc.stdout + proc.stderr
                raise (Unstable if UNSTABLE_MARK in text else PerfAnalyzerError)(failure(text, cfg))
            return parse_csv(out.read_text())


def arguments(cfg: BenchConfig) -> list[str]:
    """The load and the bounds, in perf_analyzer's terms (the same for the engine and a reference run)."""
    url = cfg.url.split("://", 1)[-1]
    args = ["-m", cfg.model, "-u", url, "-i", cfg.protocol, "-b", str(cfg.batch_size)]
    if cfg.model_version:
        args += ["-x", cfg.model_version]
    # The admin header, for the model configuration and statistics perf_analyzer reads (HTTP only: it
    # sends no headers over gRPC, bench.run refuses that pair). perf_analyzer has no other way to take
    # it than its argv, which only this user and root can read (/proc/PID/cmdline with hidepid, else
    # anyone on the host): the command line is never logged or shown.
    for name, value in cfg.headers if cfg.protocol == "http" else ():
        args += ["-H", f"{name}:{value}"]
    if cfg.mode == "closed":
        args += ["--concurrency-range", f"{cfg.concurrency}:{cfg.concurrency}"]
    else:
        args += ["--request-rate-range", f"{cfg.rate:g}:{cfg.rate:g}", "--request-distribution", "poisson"]
    if cfg.max_requests is not None:
        args += ["--request-count", str(cfg.max_requests)]
    else:
        args += ["--measurement-interval", str(window_ms(cfg)), "--max-trials", str(cfg.max_windows),
                 "--stability-percentage", f"{cfg.stability_pct:g}"]
    return args


def window_ms(cfg: BenchConfig) -> int:
    return max(MIN_WINDOW_MS, int(cfg.max_seconds * 1000 / cfg.max_windows))


def time_limit(cfg: BenchConfig) -> float:
    """Wall-clock ceiling for one run: the measurement budget plus perf_analyzer's start and warm-up."""
    return cfg.max_seconds * 2 + 30


def failure(output: str, cfg: BenchConfig) -> str:
    """A one-line reason from perf_analyzer's output for a failed run."""
    if UNSTABLE_MARK in output:
        return (f"perf_analyzer found no stable measurement: throughput and latency varied by more than "
                f"{cfg.stability_pct:g}% over {cfg.max_windows} windows of {window_ms(cfg)} ms (a busy machine or "
                "server); raise --duration or --stability")
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return "perf_analyzer failed: " + ((errors or lines or ["no output"])[0])[:300]


def _ms(row: dict[str, str], column: str) -> float:
    return float(row[column]) / 1000.0  # perf_analyzer reports microseconds


def parse_csv(text: str) -> Measurement:
    """The measurement from perf_analyzer's ``-f`` CSV (one row per concurrency or rate; we run one)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise PerfAnalyzerError("perf_analyzer wrote an empty CSV report")
    row = rows[-1]
    try:
        return Measurement(
            inferences_per_s=float(row["Inferences/Second"]),
            p50_ms=_ms(row, "p50 latency"), p90_ms=_ms(row, "p90 latency"), p95_ms=_ms(row, "p95 latency"),
            p99_ms=_ms(row, "p99 latency"), mean_ms=_ms(row, "Avg latency"),
        )
    except (KeyError, ValueError) as e:
        raise PerfAnalyzerError(f"perf_analyzer's CSV report lacks a usable {e} column") from None


def find() -> PerfAnalyzer:
    """perf_analyzer from the tritonclient wheel (next to this interpreter, else on PATH), checked to start."""
    here = Path(sys.executable).parent
    found = shutil.which("perf_analyzer", path=os.pathsep.join([str(here), os.environ.get("PATH", "")]))
    if not found:
        raise PerfAnalyzerError("perf_analyzer not found: it ships in the tritonclient wheel "
                                "(pip install 'tritonclient[all]', or `make venv`)")
    spec = importlib.util.find_spec("nvidia.cuda_runtime") if importlib.util.find_spec("nvidia") else None
    cudart = None
    if spec and spec.submodule_search_locations:
        lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
        cudart = lib if (lib / "libcudart.so.12").exists() else None
    pa = PerfAnalyzer(Path(found), cudart)
    pa.check()
    return pa
