#!/usr/bin/python3
"""tegrastats -> Prometheus textfile exporter for NVIDIA Jetson.

Triton exports no GPU metrics on Jetson (no NVML on the integrated GPU), so this reads the one tool
every L4T release has, ``tegrastats``, and writes its figures in the Prometheus text format into
node_exporter's textfile collector directory (atomically: write a temporary file, then rename).

    tegrastats_exporter.py --tegrastats /usr/bin/tegrastats --interval-ms 5000 \
        --output /var/lib/prometheus/node-exporter/jetson_tegrastats.prom

``parse`` and ``render`` are pure functions (unit-tested with real tegrastats lines from JetPack 5
and 6); ``main`` is the loop.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

MB = 1024 * 1024

_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_TEMP = re.compile(r"\b([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C\b")
_POWER = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)mW/(\d+)mW")
_POWER_OLD = re.compile(r"\b(POM_[A-Z0-9_]+|VDD_[A-Z0-9_]+) (\d+)/(\d+)\b")
# A sensor that is powered off reads -256C.
_SENSOR_OFF = -256.0


def parse(line: str) -> dict[str, object]:
    """One tegrastats line -> a dict of figures (absent fields are left out)."""
    out: dict[str, object] = {}
    if m := _RAM.search(line):
        out["ram_used_bytes"], out["ram_total_bytes"] = int(m.group(1)) * MB, int(m.group(2)) * MB
    if m := _SWAP.search(line):
        out["swap_used_bytes"], out["swap_total_bytes"] = int(m.group(1)) * MB, int(m.group(2)) * MB
    if m := _CPU.search(line):
        cpus: list[dict[str, float | None]] = []
        for item in m.group(1).split(","):
            item = item.strip()
            cm = re.match(r"(\d+)%@(\d+)", item)
            if cm:
                cpus.append({"online": 1.0, "util": int(cm.group(1)) / 100, "mhz": float(cm.group(2))})
            elif item.endswith("%") and item[:-1].isdigit():
                cpus.append({"online": 1.0, "util": int(item[:-1]) / 100, "mhz": None})
            else:  # "off"
                cpus.append({"online": 0.0, "util": None, "mhz": None})
        out["cpus"] = cpus
    if m := _EMC.search(line):
        out["emc_utilization"] = int(m.group(1)) / 100
        if m.group(2):
            out["emc_mhz"] = float(m.group(2))
    if m := _GR3D.search(line):
        out["gpu_utilization"] = int(m.group(1)) / 100
        if m.group(2):
            # Orin reports one frequency per GPC ("@[611,611]"): export the highest.
            out["gpu_mhz"] = float(max(int(f) for f in m.group(2).split(",") if f))
    temps = {}
    for name, value in _TEMP.findall(line):
        if float(value) != _SENSOR_OFF:
            temps[name.lower()] = float(value)
    if temps:
        out["temperatures"] = temps
    power = {name: (float(cur), float(avg)) for name, cur, avg in _POWER.findall(line)}
    if not power:
        power = {name: (float(cur), float(avg)) for name, cur, avg in _POWER_OLD.findall(line)}
    if power:
        out["power"] = power
    return out


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    """Exact text for a sample: integers without exponent or fraction (byte counts stay exact)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(stats: dict[str, object], now: float) -> str:
    """Prometheus text format for ``stats`` (from ``parse``)."""
    lines: list[str] = []

    def metric(name: str, help_: str, kind: str, samples: list[tuple[str, float]]) -> None:
        if not samples:
            return
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {_num(value)}" for labels, value in samples)

    def single(key: str, name: str, help_: str) -> None:
        if key in stats:
            metric(name, help_, "gauge", [("", float(stats[key]))])  # type: ignore[arg-type]

    single("ram_used_bytes", "jetson_ram_used_bytes", "RAM in use (CPU and GPU share it).")
    single("ram_total_bytes", "jetson_ram_total_bytes", "Total RAM.")
    single("swap_used_bytes", "jetson_swap_used_bytes", "Swap in use (zram and swap files).")
    single("swap_total_bytes", "jetson_swap_total_bytes", "Total swap.")
    cpus = stats.get("cpus") or []
    metric("jetson_cpu_online", "1 when the core is online.", "gauge",
           [(f'{{cpu="{i}"}}', c["online"]) for i, c in enumerate(cpus)])  # type: ignore[index,arg-type]
    metric("jetson_cpu_utilization_ratio", "Core utilisation, 0-1.", "gauge",
           [(f'{{cpu="{i}"}}', c["util"]) for i, c in enumerate(cpus) if c["util"] is not None])  # type: ignore[index,misc]
    metric("jetson_cpu_frequency_mhz", "Core clock.", "gauge",
           [(f'{{cpu="{i}"}}', c["mhz"]) for i, c in enumerate(cpus) if c["mhz"] is not None])  # type: ignore[index,misc]
    single("gpu_utilization", "jetson_gpu_utilization_ratio", "Integrated GPU (GR3D) utilisation, 0-1.")
    single("gpu_mhz", "jetson_gpu_frequency_mhz", "Integrated GPU clock (highest GPC).")
    single("emc_utilization", "jetson_emc_utilization_ratio", "External memory controller utilisation, 0-1.")
    single("emc_mhz", "jetson_emc_frequency_mhz", "External memory controller clock.")
    temps = stats.get("temperatures") or {}
    metric("jetson_temperature_celsius", "Thermal zone temperature.", "gauge",
           [(f'{{sensor="{_esc(k)}"}}', v) for k, v in sorted(temps.items())])  # type: ignore[union-attr]
    power = stats.get("power") or {}
    metric("jetson_power_milliwatts", "Rail power now.", "gauge",
           [(f'{{rail="{_esc(k)}"}}', v[0]) for k, v in sorted(power.items())])  # type: ignore[union-attr]
    metric("jetson_power_average_milliwatts", "Rail power averaged by tegrastats since it started.", "gauge",
           [(f'{{rail="{_esc(k)}"}}', v[1]) for k, v in sorted(power.items())])  # type: ignore[union-attr]
    metric("jetson_tegrastats_last_update_timestamp_seconds", "When tegrastats last reported.", "gauge",
           [("", now)])
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tegrastats-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tegrastats", default="/usr/bin/tegrastats")
    ap.add_argument("--interval-ms", type=int, default=5000)
    ap.add_argument("--output", required=True)
    args = ap.parse_args(argv)
    proc = subprocess.Popen([args.tegrastats, "--interval", str(args.interval_ms)],
                            stdout=subprocess.PIPE, text=True, bufsize=1)
    signal.signal(signal.SIGTERM, lambda *_: (proc.terminate(), sys.exit(0)))
    assert proc.stdout is not None
    for line in proc.stdout:
        stats = parse(line)
        if stats:
            write_atomic(args.output, render(stats, time.time()))
    return proc.wait() or 1  # tegrastats should never stop: let systemd restart us


if __name__ == "__main__":
    sys.exit(main())
