"""Checks for roles/jetson: JetPack source for the L4T release, power mode, jetson_clocks service,
swap settings, and a tegrastats exporter that really turns tegrastats output into metrics.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from gpuhost_helpers import defaults, journal
from node_helpers import assert_hardened
from prometheus_client.parser import text_string_to_metric_families

DEFAULTS = defaults("jetson")
SOURCES = "/etc/apt/sources.list.d/nvidia-l4t-apt-source.sources"


def _var(host_vars: dict[str, Any], name: str) -> Any:
    return host_vars.get(name, DEFAULTS[name])


@pytest.fixture(scope="module")
def gpu(host: Any) -> dict[str, Any]:
    fact = dict(json.loads(host.check_output("/etc/ansible/facts.d/gpu.fact")))
    if fact["platform"] != "jetson":
        pytest.skip("not a Jetson")
    return fact


def test_jetpack_source_for_the_release(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    text = host.file(SOURCES).content_string
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and not line.startswith("#"))
    mirror = _var(host_vars, "jetson_apt_mirror")
    soc = "t234" if gpu["jetson"]["orin"] else "t194"
    assert fields["URIs"].split() == [f"{mirror}/common", f"{mirror}/{soc}"]
    assert fields["Suites"] == _var(host_vars, "jetson_supported_l4t")[gpu["jetson"]["l4t_release"]]
    assert fields["Enabled"] == ("yes" if _var(host_vars, "jetson_apt_enabled") else "no")
    assert not host.file("/etc/apt/sources.list.d/nvidia-l4t-apt-source.list").exists
    out = host.run("apt-get -q -o Debug::NoLocking=1 indextargets --format '$(URI)'")
    assert out.rc == 0 and "E:" not in out.stderr, out.stderr


def test_power_mode(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    mode = int(_var(host_vars, "jetson_nvpmodel_mode"))
    if mode < 0:
        pytest.skip("power mode left alone")
    assert host.check_output("nvpmodel -q").splitlines()[-1].strip() == str(mode)


def test_jetson_clocks_service(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    if not _var(host_vars, "jetson_clocks_service"):
        pytest.skip("jetson_clocks service disabled")
    svc = host.service("jetson-clocks")
    assert svc.is_enabled
    assert svc.systemd_properties["ActiveState"] == "active", journal(host, "jetson-clocks")
    assert svc.systemd_properties["Result"] == "success"
    assert_hardened(host, "jetson-clocks")


def test_zram_configured(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    if _var(host_vars, "jetson_swap") != "zram":
        pytest.skip("not zram")
    settings = dict(line.split("=", 1) for line in host.file("/etc/default/zramswap").content_string.splitlines()
                    if "=" in line and not line.startswith("#"))
    assert settings["ALGO"] == _var(host_vars, "jetson_zram_algorithm")
    assert int(settings["PERCENT"]) == int(_var(host_vars, "jetson_zram_percent"))
    assert host.service("zramswap").is_enabled


def test_swapfile(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    if _var(host_vars, "jetson_swap") != "swapfile":
        pytest.skip("not a swap file")
    path = _var(host_vars, "jetson_swapfile_path")
    f = host.file(path)
    assert f.user == "root" and f.mode == 0o600
    assert f.size == int(_var(host_vars, "jetson_swapfile_size_mb")) * 1024 * 1024
    # mkswap's signature sits at the end of the first page.
    page = int(host.check_output("getconf PAGESIZE"))
    sig = host.check_output(f"dd if={path} bs=1 skip={page - 10} count=10 status=none")
    assert sig == "SWAPSPACE2"
    fstab = [line.split() for line in host.file("/etc/fstab").content_string.splitlines() if line.strip()]
    assert [path, "none", "swap", "sw", "0", "0"] in fstab


def test_exporter_running(host: Any, gpu: dict[str, Any]) -> None:
    svc = host.service("tegrastats-exporter")
    assert svc.is_enabled
    assert svc.is_running, journal(host, "tegrastats-exporter")
    assert_hardened(host, "tegrastats-exporter")


def _families(host: Any, host_vars: dict[str, Any]) -> dict[str, Any]:
    path = f"{_var(host_vars, 'jetson_tegrastats_textfile_dir')}/jetson_tegrastats.prom"
    deadline = time.monotonic() + 30
    while not host.file(path).exists and time.monotonic() < deadline:
        time.sleep(1)
    f = host.file(path)
    assert f.exists, journal(host, "tegrastats-exporter")
    assert f.mode == 0o644
    return {fam.name: fam for fam in text_string_to_metric_families(f.content_string)}


def test_exporter_metrics_from_tegrastats(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    fams = _families(host, host_vars)
    gpu_util = fams["jetson_gpu_utilization_ratio"].samples[0].value
    assert 0.0 <= gpu_util <= 1.0
    assert fams["jetson_ram_total_bytes"].samples[0].value > 0
    rails = {s.labels["rail"] for s in fams["jetson_power_milliwatts"].samples}
    assert "VIN_SYS_5V0" in rails
    temps = {s.labels["sensor"] for s in fams["jetson_temperature_celsius"].samples}
    assert "gpu" in temps and "cv0" not in temps  # -256C means powered off: not exported


def test_exporter_keeps_updating(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    first = _families(host, host_vars)["jetson_tegrastats_last_update_timestamp_seconds"].samples[0].value
    interval = int(_var(host_vars, "jetson_tegrastats_interval_ms")) / 1000
    deadline = time.monotonic() + max(15.0, 5 * interval)
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = _families(host, host_vars)["jetson_tegrastats_last_update_timestamp_seconds"].samples[0].value
        if now > first:
            return
    pytest.fail("the exporter stopped writing: " + journal(host, "tegrastats-exporter"))
