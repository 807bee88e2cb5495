"""The jetson role's tegrastats exporter: parsing real tegrastats lines and the text format it writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client.parser import text_string_to_metric_families

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[3] / "roles/jetson/files/tegrastats_exporter.py"

# JetPack 6.1 (AGX Orin): timestamp prefix, per-GPC GPU clocks, mW rails.
ORIN_JP6 = ("11-30-2026 10:00:00 RAM 2448/62840MB (lfb 14221x4MB) SWAP 0/31420MB (cached 0MB) "
            "CPU [0%@729,3%@729,1%@729,0%@729,off,off,off,off,0%@729,0%@729,0%@729,0%@729] EMC_FREQ 0%@2133 "
            "GR3D_FREQ 45%@[611,611] NVENC off NVDEC off NVJPG off NVJPG1 off VIC off OFA off NVDLA0 off "
            "NVDLA1 off PVA0_FREQ off APE 174 cpu@45.062C soc2@42.875C soc0@43.25C gpu@42.156C tj@45.062C "
            "soc1@43.5C VDD_GPU_SOC 1197mW/1197mW VDD_CPU_CV 399mW/399mW VIN_SYS_5V0 2318mW/2318mW")
# JetPack 5.1 (Xavier NX style): single GPU clock, sensors that are off read -256C.
XAVIER_JP5 = ("RAM 2448/30536MB (lfb 6x4MB) SWAP 0/15268MB (cached 0MB) CPU [1%@2201,0%@2201,off,off] "
              "EMC_FREQ 0%@3199 GR3D_FREQ 12%@1300 VIC_FREQ 115 APE 174 CV0@-256C CPU@44.625C Tboard@35C "
              "GPU@-256C tj@44.625C VDD_GPU_SOC 2379mW/2379mW VDD_CPU_CV 793mW/793mW VIN_SYS_5V0 3526mW/3526mW")


@pytest.fixture(scope="module")
def exporter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tegrastats_exporter", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_orin_memory(exporter: ModuleType) -> None:
    s = exporter.parse(ORIN_JP6)
    assert s["ram_used_bytes"] == 2448 * 1024 * 1024
    assert s["ram_total_bytes"] == 62840 * 1024 * 1024
    assert s["swap_total_bytes"] == 31420 * 1024 * 1024


def test_orin_cpus_with_offline_cores(exporter: ModuleType) -> None:
    cpus = exporter.parse(ORIN_JP6)["cpus"]
    assert len(cpus) == 12
    assert [c["online"] for c in cpus[4:8]] == [0.0] * 4
    assert cpus[1] == {"online": 1.0, "util": 0.03, "mhz": 729.0}


def test_orin_gpu_per_gpc(exporter: ModuleType) -> None:
    s = exporter.parse(ORIN_JP6)
    assert s["gpu_utilization"] == 0.45
    assert s["gpu_mhz"] == 611.0
    assert s["emc_mhz"] == 2133.0


def test_power_rails(exporter: ModuleType) -> None:
    assert exporter.parse(ORIN_JP6)["power"] == {
        "VDD_GPU_SOC": (1197.0, 1197.0), "VDD_CPU_CV": (399.0, 399.0), "VIN_SYS_5V0": (2318.0, 2318.0)}


def test_sensors_that_are_off_are_dropped(exporter: ModuleType) -> None:
    temps = exporter.parse(XAVIER_JP5)["temperatures"]
    assert "cv0" not in temps and "gpu" not in temps
    assert temps["cpu"] == 44.625 and temps["tboard"] == 35.0


def test_jp5_single_gpu_clock(exporter: ModuleType) -> None:
    s = exporter.parse(XAVIER_JP5)
    assert s["gpu_utilization"] == 0.12 and s["gpu_mhz"] == 1300.0


def test_unrelated_line_gives_nothing(exporter: ModuleType) -> None:
    assert exporter.parse("tegrastats: interval set to 5000 ms") == {}


def test_render_is_valid_exposition(exporter: ModuleType) -> None:
    text = exporter.render(exporter.parse(ORIN_JP6), 1700000000.0)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["jetson_gpu_utilization_ratio"].samples[0].value == 0.45
    online = {s.labels["cpu"]: s.value for s in families["jetson_cpu_online"].samples}
    assert online["4"] == 0.0 and online["0"] == 1.0
    rails = {s.labels["rail"]: s.value for s in families["jetson_power_milliwatts"].samples}
    assert rails["VIN_SYS_5V0"] == 2318.0
    assert families["jetson_tegrastats_last_update_timestamp_seconds"].samples[0].value == 1700000000.0


def test_write_atomic_leaves_no_temp_files(exporter: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "jetson_tegrastats.prom"
    exporter.write_atomic(str(out), "a 1\n")
    exporter.write_atomic(str(out), "a 2\n")
    assert out.read_text() == "a 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jetson_tegrastats.prom"]
    assert out.stat().st_mode & 0o777 == 0o644


def test_render_keeps_byte_counts_exact(exporter: ModuleType) -> None:
    text = exporter.render(exporter.parse(ORIN_JP6), 1700000000.5)
    assert f"jetson_ram_total_bytes {62840 * 1024 * 1024}\n" in text
    assert "jetson_tegrastats_last_update_timestamp_seconds 1700000000.5" in text
