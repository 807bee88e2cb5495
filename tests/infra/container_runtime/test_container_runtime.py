"""Checks for roles/container_runtime: the engine runs, its configuration parses (TOML/JSON, not grep)
and carries the nvidia runtime; the toolkit repository is written as apt reads it.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest
from gpuhost_helpers import defaults, journal

DEFAULTS = defaults("container_runtime")
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DAEMON_JSON = "/etc/docker/daemon.json"
TOOLKIT_SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
CRI = 'io.containerd.grpc.v1.cri'


def _var(host_vars: dict[str, Any], name: str) -> Any:
    return host_vars.get(name, DEFAULTS[name])


@pytest.fixture(scope="module")
def gpu(host: Any) -> dict[str, Any]:
    return dict(json.loads(host.check_output("/etc/ansible/facts.d/gpu.fact")))


def _flag(value: Any, auto: bool) -> bool:
    return auto if str(value).lower() == "auto" else str(value).lower() in {"true", "yes", "1"}


@pytest.fixture(scope="module")
def nvidia(host_vars: dict[str, Any], gpu: dict[str, Any]) -> bool:
    return _flag(_var(host_vars, "container_runtime_nvidia"), gpu["platform"] in {"nvidia_gpu", "jetson"})


@pytest.fixture(scope="module")
def nvidia_default(host_vars: dict[str, Any], gpu: dict[str, Any]) -> bool:
    return _flag(_var(host_vars, "container_runtime_nvidia_default"), gpu["platform"] == "jetson")


@pytest.fixture(scope="module", autouse=True)
def applies(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any]) -> None:
    """edge.yml skips the role on CPU gateways that run Triton without a container: skip there too."""
    engine = _var(host_vars, "container_runtime_engine")
    if gpu["platform"] == "cpu" and not host.exists("containerd") and not host.exists("dockerd"):
        pytest.skip(f"no {engine} on this CPU-only host (container_runtime not applied)")


@pytest.fixture(scope="module")
def engine(host_vars: dict[str, Any]) -> str:
    return str(_var(host_vars, "container_runtime_engine"))


def test_engine_running(host: Any, engine: str) -> None:
    svc = host.service(engine)
    assert svc.is_enabled
    assert svc.is_running, journal(host, engine)


def test_containerd_answers_on_its_socket(host: Any, engine: str) -> None:
    if engine != "containerd":
        pytest.skip("docker engine")
    assert host.socket("unix:///run/containerd/containerd.sock").is_listening
    out = host.run("ctr version")
    assert out.rc == 0 and "Server:" in out.stdout, out.stderr


@pytest.fixture(scope="module")
def containerd_file(host: Any, engine: str) -> dict[str, Any]:
    if engine != "containerd":
        pytest.skip("docker engine")
    f = host.file(CONTAINERD_CONFIG)
    assert f.user == "root" and f.mode == 0o644
    return tomllib.loads(f.content_string)


@pytest.fixture(scope="module")
def containerd_merged(host: Any, engine: str) -> dict[str, Any]:
    """What containerd itself made of the file (merged with its defaults)."""
    if engine != "containerd":
        pytest.skip("docker engine")
    return tomllib.loads(host.check_output(f"containerd --config {CONTAINERD_CONFIG} config dump"))


@pytest.mark.parametrize("source", ["containerd_file", "containerd_merged"])
def test_containerd_nvidia_runtime(request: Any, source: str, nvidia: bool, host_vars: dict[str, Any]) -> None:
    cfg = request.getfixturevalue(source)
    runtimes = cfg["plugins"][CRI]["containerd"]["runtimes"]
    if not nvidia:
        assert "nvidia" not in runtimes
        return
    rt = runtimes["nvidia"]
    assert rt["runtime_type"] == "io.containerd.runc.v2"
    assert rt["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert rt["options"]["SystemdCgroup"] is bool(_var(host_vars, "container_runtime_systemd_cgroup"))


@pytest.mark.parametrize("source", ["containerd_file", "containerd_merged"])
def test_containerd_default_runtime(request: Any, source: str, nvidia: bool, nvidia_default: bool) -> None:
    cfg = request.getfixturevalue(source)
    expected = "nvidia" if (nvidia and nvidia_default) else "runc"
    assert cfg["plugins"][CRI]["containerd"]["default_runtime_name"] == expected


def test_containerd_runc_uses_systemd_cgroups(containerd_merged: dict[str, Any], host_vars: dict[str, Any]) -> None:
    runc = containerd_merged["plugins"][CRI]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is bool(_var(host_vars, "container_runtime_systemd_cgroup"))


def test_docker_daemon_json(host: Any, engine: str, nvidia: bool, nvidia_default: bool) -> None:
    if engine != "docker":
        pytest.skip("containerd engine")
    cfg = json.loads(host.file(DAEMON_JSON).content_string)
    if nvidia:
        assert cfg["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert (cfg.get("default-runtime") == "nvidia") is (nvidia and nvidia_default)
    info = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert ("nvidia" in info) is nvidia


def _deb822(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and not line.startswith("#"))


def test_toolkit_repository(host: Any, gpu: dict[str, Any], nvidia: bool, host_vars: dict[str, Any]) -> None:
    if not nvidia or gpu["platform"] == "jetson" or host.system_info.distribution not in {"debian", "ubuntu"}:
        pytest.skip("no NVIDIA apt repository on this host")
    fields = _deb822(host.file(TOOLKIT_SOURCES).content_string)
    assert fields["URIs"] == _var(host_vars, "container_runtime_nvidia_toolkit_apt_url") + "/$(ARCH)"
    assert fields["Suites"] == "/"
    assert fields["Signed-By"] == "/usr/share/keyrings/nvidia-container-toolkit.asc"
    installing = bool(_var(host_vars, "container_runtime_nvidia_toolkit_install"))
    assert fields["Enabled"] == ("yes" if installing else "no")
    # apt reads the file without complaint (a malformed deb822 stanza is an error here).
    out = host.run("apt-get -q -o Debug::NoLocking=1 indextargets --format '$(URI)'")
    assert out.rc == 0 and "E:" not in out.stderr, out.stderr
    assert any("libnvidia-container" in u for u in out.stdout.split()) is installing


def test_toolkit_installed_when_asked(host: Any, nvidia: bool, host_vars: dict[str, Any]) -> None:
    if not (nvidia and _var(host_vars, "container_runtime_nvidia_toolkit_install")):
        pytest.skip("toolkit install not requested")
    pkg = host.package("nvidia-container-toolkit")
    assert pkg.is_installed
    assert pkg.version.startswith(_var(host_vars, "container_runtime_nvidia_toolkit_version"))
    assert host.file("/usr/bin/nvidia-container-runtime").is_file


def test_cdi_spec_on_gpu_hosts(host: Any, gpu: dict[str, Any], nvidia: bool, host_vars: dict[str, Any]) -> None:
    if not (nvidia and gpu["platform"] in {"nvidia_gpu", "jetson"} and _var(host_vars, "container_runtime_cdi")
            and _var(host_vars, "container_runtime_nvidia_toolkit_install")):
        pytest.skip("CDI is generated only on GPU hosts with the toolkit")
    out = host.run("nvidia-ctk cdi list")
    assert out.rc == 0 and "nvidia.com/gpu=all" in out.stdout, out.stdout + out.stderr
