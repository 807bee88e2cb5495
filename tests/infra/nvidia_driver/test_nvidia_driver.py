"""Checks for roles/nvidia_driver: packages pinned to the branch, nouveau blacklisted, DKMS module
registered, persistence daemon enabled, and no reboot pending on a host without a GPU.

The kernel module itself cannot load without an NVIDIA GPU; the checks that need it run only when
gpu_facts reports ``nvidia_gpu``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from gpuhost_helpers import defaults, journal

DEFAULTS = defaults("nvidia_driver")
PREFS = "/etc/apt/preferences.d/tritonops-nvidia-driver"
BLACKLIST = "/etc/modprobe.d/tritonops-blacklist-nouveau.conf"
SOURCES = "/etc/apt/sources.list.d/tritonops-nvidia-nonfree.sources"


def _var(host_vars: dict[str, Any], name: str) -> Any:
    return host_vars.get(name, DEFAULTS[name])


@pytest.fixture(scope="module")
def gpu(host: Any) -> dict[str, Any]:
    return dict(json.loads(host.check_output("/etc/ansible/facts.d/gpu.fact")))


@pytest.fixture(scope="module", autouse=True)
def applies(gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    """The role installs on NVIDIA GPU hosts (and CPU-only ones only when asked): skip elsewhere."""
    if gpu["platform"] == "jetson" or (
            gpu["platform"] == "cpu" and not _var(host_vars, "nvidia_driver_install_without_gpu")):
        pytest.skip(f"nvidia_driver does not apply to a {gpu['platform']} host")


@pytest.fixture(scope="module")
def branch(host_vars: dict[str, Any]) -> str:
    return str(_var(host_vars, "nvidia_driver_branch"))


def _debian(host: Any) -> None:
    if host.system_info.distribution != "debian":
        pytest.skip("Debian-specific check")


@pytest.mark.parametrize("package", ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-persistenced"])
def test_driver_package_installed_from_branch(host: Any, package: str, branch: str) -> None:
    _debian(host)
    pkg = host.package(package)
    assert pkg.is_installed, f"{package} is not installed"
    assert pkg.version.startswith(f"{branch}."), f"{package} {pkg.version} is not on branch {branch}"


def _policy_table(host: Any, package: str) -> dict[str, int]:
    """Version -> priority from `apt-cache policy` (apt's own reading of the pin)."""
    out = host.check_output(f"apt-cache policy {package}")
    table: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"^\s+(?:\*\*\*\s+)?(\S+)\s+(-?\d+)$", line)
        if m:
            table[m.group(1)] = int(m.group(2))
    return table


@pytest.mark.parametrize("package", ["nvidia-kernel-dkms", "libcuda1"])
def test_apt_pins_the_branch(host: Any, package: str, branch: str) -> None:
    _debian(host)
    table = _policy_table(host, package)
    installed = host.package(package).version
    assert table.get(installed) == 1001, f"apt does not pin {package} {installed}: {table}"
    assert all(p < 1000 for v, p in table.items() if not v.startswith(f"{branch}.")), table


def test_preferences_file(host: Any, branch: str, host_vars: dict[str, Any]) -> None:
    _debian(host)
    f = host.file(PREFS)
    assert f.user == "root" and f.mode == 0o644
    fields = dict(line.split(": ", 1) for line in f.content_string.splitlines() if ": " in line and not line.startswith("#"))
    version = _var(host_vars, "nvidia_driver_version")
    assert fields["Pin"] == f"version {version or branch + '.*'}"
    assert fields["Pin-Priority"] == "1001"
    assert "nvidia-*" in fields["Package"].split()


def test_nonfree_source(host: Any, host_vars: dict[str, Any]) -> None:
    _debian(host)
    fields = dict(line.split(": ", 1) for line in host.file(SOURCES).content_string.splitlines() if ": " in line)
    assert fields["URIs"] == _var(host_vars, "nvidia_driver_debian_mirror")
    assert set(fields["Components"].split()) == set(_var(host_vars, "nvidia_driver_debian_components"))
    # apt itself reads the source: non-free is among the indexes it knows.
    assert "non-free" in host.check_output("apt-cache policy")


def test_nouveau_blacklisted(host: Any) -> None:
    f = host.file(BLACKLIST)
    assert f.mode == 0o644
    # modprobe's merged configuration, not a grep of our own file.
    config = host.check_output("modprobe --showconfig").splitlines()
    assert "blacklist nouveau" in config
    assert "options nouveau modeset=0" in config


def test_dkms_knows_the_module(host: Any, branch: str) -> None:
    _debian(host)
    out = host.check_output("dkms status")
    assert re.search(rf"^nvidia-current/{re.escape(branch)}\.\S+: (added|built|installed)", out, re.M), out


def test_persistenced_enabled(host: Any) -> None:
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled, journal(host, "nvidia-persistenced")


def test_no_reboot_pending_without_gpu(host: Any, gpu: dict[str, Any]) -> None:
    if gpu["platform"] == "nvidia_gpu":
        pytest.skip("a GPU host: a reboot may legitimately be pending")
    assert not host.file("/run/reboot-required").exists


def test_module_loaded_on_gpu_host(host: Any, gpu: dict[str, Any], branch: str) -> None:
    if gpu["platform"] != "nvidia_gpu":
        pytest.skip("no NVIDIA GPU: the kernel module cannot load here")
    version = host.file("/sys/module/nvidia/version").content_string.strip()
    assert version.startswith(f"{branch}.")
    assert host.run("nvidia-smi -L").rc == 0
