"""The unit variants no test node runs (the container method, the DCGM exporter, Triton on a GPU
platform), rendered by Ansible from the roles' templates and scored on the controller by the same
systemd-analyze (252, Debian 12) as the nodes', offline; and the container method's refusal to run
Triton as root. The units the nodes run are scored live by each role's host checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra
from node_helpers import assert_hardened

# Offline (ansible-playbook on localhost, systemd-analyze on files): the unit tier, not a host check.
pytestmark = pytest.mark.unit

PLAYBOOK = Path(__file__).with_name("unit_templates.yml")
BIN = Path(sys.executable).parent
VARIANTS = ["tritonserver-container-docker", "tritonserver-container-podman", "tritonserver-tarball-jetson",
            "dcgm-exporter-docker", "dcgm-exporter-containerd"]


def _play(tmp: Path, user: str, *tags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UNIT_OUT": str(tmp), "CONTAINER_USER": user, "PATH": f"{BIN}:{os.environ['PATH']}",
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(PLAYBOOK), *tags],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("units")
    run = _play(out, "nobody")
    assert list(out.glob("*.service")), run.stdout + run.stderr
    return out


@pytest.mark.parametrize("unit", VARIANTS)
def test_unit_variant_exposure(rendered: Path, unit: str) -> None:
    assert_hardened(testinfra.get_host("local://"), str(rendered / f"{unit}.service"), offline=True)


@pytest.mark.parametrize("user", ["no-such-user-7f3a", "root"])
def test_container_refuses_to_run_as_root(tmp_path: Path, user: str) -> None:
    run = _play(tmp_path, user)
    assert run.returncode != 0 and "the container would run as root" in run.stdout, run.stdout + run.stderr
