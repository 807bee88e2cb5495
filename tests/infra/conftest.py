"""Shared fixtures for the host checks in tests/infra (pytest-testinfra).

The same checks run from molecule's verify step and against real fleets::

    pytest tests/infra --hosts=ansible://edge -i ansible/inventories/example/hosts.yml

Expectations come from the host's inventory variables when the Ansible backend is used (the role
variables ``triton_server_*`` and optional ``tritonops_expect_*`` overrides), with the roles'
defaults otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import testinfra
from node_helpers import podman_container
from testinfra.utils import ansible_runner

REPO = Path(__file__).resolve().parents[2]

# testinfra's Ansible backend runs every command through an Ansible module (seconds each) unless it
# knows the host's connection type; it knows ssh/docker/lxc but not podman. Map the Podman nodes
# (molecule's and `python -m devkit hosts` nodes, which Ansible itself reaches over the lab's SSH) to
# testinfra's own podman backend (`podman exec`), as the checks have always seen them.
_get_ansible_host = ansible_runner.get_ansible_host


def _get_ansible_host_with_podman(config: Any, inventory: Any, host: str, *args: Any, **kwargs: Any) -> Any:
    container = podman_container(inventory.get("_meta", {}).get("hostvars", {}).get(host, {}) | {
        "inventory_hostname": host})
    if container:
        return testinfra.get_host(f"podman://{container}")
    return _get_ansible_host(config, inventory, host, *args, **kwargs)


ansible_runner.get_ansible_host = _get_ansible_host_with_podman


@pytest.fixture(scope="module")
def host_vars(host: Any) -> dict[str, Any]:
    """Inventory variables of the host under test ({} without the Ansible backend)."""
    if host.backend.NAME != "ansible":
        return {}
    return dict(host.ansible.get_variables())
