"""Helpers shared by the host checks that talk to a node from the controller (model_repository,
release_agent): its inventory name and variables, and the address the controller reaches it at."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from testinfra.utils.ansible_runner import AnsibleRunner


def host_name(host: Any) -> str:
    backend = host.backend
    return str(getattr(backend, "name", None) or getattr(backend, "host", None) or backend.get_hostname())


def inventory_vars(host: Any, config: Any) -> dict[str, Any]:
    """The host's variables from the run's Ansible inventory (molecule's, or --ansible-inventory)."""
    inventory = getattr(config.option, "ansible_inventory", None) or os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        return {}
    return dict(AnsibleRunner(inventory).get_variables(host_name(host)))


def node_address(host: Any) -> str:
    """The node's address as the controller reaches it (Podman bridge for the local nodes)."""
    if host.backend.NAME == "podman":
        out = subprocess.run(["podman", "inspect", "--format", "{{ .NetworkSettings.IPAddress }}", host_name(host)],
                             capture_output=True, text=True, check=True)
        if out.stdout.strip():
            return out.stdout.strip()
    return str(host.interface.default().addresses[0])
