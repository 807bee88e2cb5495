"""Checks for roles/gpu_facts: the local fact exists, runs, and tells the truth about the host."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

FACT = "/etc/ansible/facts.d/gpu.fact"


@pytest.fixture(scope="module")
def fact(host: Any) -> dict[str, Any]:
    out = host.run(FACT)
    assert out.rc == 0, f"{FACT} failed: {out.stderr}"
    return dict(json.loads(out.stdout))


def test_fact_script_installed(host: Any) -> None:
    f = host.file(FACT)
    assert f.is_file
    assert f.user == "root"
    assert f.mode == 0o755


def test_fact_schema(fact: dict[str, Any]) -> None:
    assert fact["schema"] == 1
    assert fact["platform"] in {"cpu", "nvidia_gpu", "jetson"}
    assert fact["errors"] == []


def test_arch_matches_uname(host: Any, fact: dict[str, Any]) -> None:
    assert fact["arch"] == host.check_output("uname -m")


def test_gpu_count_matches_sysfs(host: Any, fact: dict[str, Any]) -> None:
    # Count NVIDIA display/3D controllers independently of the fact script.
    out = host.check_output(
        "for d in /sys/bus/pci/devices/*; do "
        "[ \"$(cat $d/vendor 2>/dev/null)\" = 0x10de ] && case $(cat $d/class) in 0x03*) echo $d;; esac; "
        "done | wc -l")
    assert len(fact["pci_devices"]) == int(out)


def test_platform_matches_host(host: Any, fact: dict[str, Any]) -> None:
    if host.file("/etc/nv_tegra_release").exists:
        expected = "jetson"
    elif fact["gpu_count"] > 0:
        expected = "nvidia_gpu"
    else:
        expected = "cpu"
    assert fact["platform"] == expected


def test_platform_matches_inventory(host_vars: dict[str, Any], fact: dict[str, Any]) -> None:
    expected = host_vars.get("tritonops_expect_gpu_platform")
    if expected is None:
        pytest.skip("no tritonops_expect_gpu_platform in the inventory")
    assert fact["platform"] == expected


def test_jetson_release(host: Any, host_vars: dict[str, Any], fact: dict[str, Any]) -> None:
    if fact["platform"] != "jetson":
        pytest.skip("not a Jetson")
    text = host.file("/etc/nv_tegra_release").content_string
    m = re.search(r"R(\d+) \(release\), REVISION: (\d+)\.(\d+)", text)
    assert m, text
    assert fact["jetson"]["l4t_release"] == ".".join(m.groups())
    assert fact["jetson"]["l4t_major"] == int(m.group(1))
    assert fact["jetson"]["source"] == "/etc/nv_tegra_release"
    assert fact["jetson"]["orin"] is (int(m.group(1)) >= 36 or fact["jetson"]["soc"] == "tegra234")
    if "tritonops_expect_l4t_release" in host_vars:
        assert fact["jetson"]["l4t_release"] == host_vars["tritonops_expect_l4t_release"]
    if "tritonops_expect_jetpack_version" in host_vars:
        assert fact["jetson"]["jetpack_version"] == host_vars["tritonops_expect_jetpack_version"]

