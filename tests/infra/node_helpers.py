"""Helpers shared by the host checks: a node's inventory name and variables, the address the controller
reaches it at (model_repository, release_agent), and a unit's systemd-analyze security exposure."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from testinfra.utils.ansible_runner import AnsibleRunner

PODMAN_CONNECTIONS = ("podman", "containers.podman.podman")


def podman_container(hostvars: dict[str, Any]) -> str | None:
    """The Podman container behind an inventory host, or None for a real host: nodes reached with the
    podman connection, and the lab's SSH nodes (ssh's ProxyCommand runs `podman exec`, devkit.hosts.lab_ssh)."""
    lab_ssh = "podman exec" in str(hostvars.get("ansible_ssh_common_args", ""))
    if hostvars.get("ansible_connection") in PODMAN_CONNECTIONS or lab_ssh:
        return str(hostvars.get("ansible_host") or hostvars.get("inventory_hostname"))
    return None


def host_name(host: Any) -> str:
    backend = host.backend
    return str(getattr(backend, "name", None) or getattr(backend, "host", None) or backend.get_hostname())


def inventory_for_playbook(config: Any) -> str | None:
    """The run's Ansible inventory (molecule's, or --ansible-inventory) as ansible-playbook takes it: molecule
    keeps group_vars beside its inventory file, so its folder; None without one."""
    inventory = getattr(config.option, "ansible_inventory", None) or os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        return None
    path = Path(inventory)
    return str(path.parent if path.is_file() and (path.parent / "group_vars").is_dir() else path)


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


# The most systemd-analyze security may score a unit the roles install (0 safest, 10 most exposed).
MAX_EXPOSURE = 4.0
_EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)")


def exposure(host: Any, unit: str, offline: bool = False) -> tuple[float, str]:
    """`systemd-analyze security UNIT` on the host (offline: UNIT is a unit file's path): the overall
    exposure and the table that explains it. systemd 252 (Debian 12) prints the overall figure only in
    the text form (--json=short lists the settings without it)."""
    out = host.run(f"systemd-analyze security --no-pager --offline={str(offline).lower()} %s", unit)
    found = _EXPOSURE.search(out.stdout)
    assert found, f"systemd-analyze security {unit}: rc={out.rc}\n{out.stdout}{out.stderr}"
    return float(found.group(1)), out.stdout


def assert_hardened(host: Any, unit: str, offline: bool = False) -> None:
    score, table = exposure(host, unit, offline)
    assert score <= MAX_EXPOSURE, f"{unit}: exposure {score} > {MAX_EXPOSURE}\n{table}"


def journal(host: Any, unit: str, lines: int = 60) -> str:
    """The unit's recent journal, appended to failure messages so they explain themselves."""
    out = host.run(f"journalctl -u {unit} --no-pager -n {lines}")
    return f"\n--- journalctl -u {unit} ---\n{out.stdout}{out.stderr}"
