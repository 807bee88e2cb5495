"""Named disposable nodes: rootful Podman containers booting systemd from the project's images."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from devkit.hosts import lab_ssh
from devkit.hosts.images import ImageSpec
from devkit.hosts.podman import HostsError, podman

NODE_LABEL = "io.tritonops.node"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
# systemd's sandboxing (ProtectSystem=, PrivateTmp=, ...) needs mount namespaces inside the node;
# SYS_PTRACE lets host checks enter a service's namespaces (nsenter), as root can on a real host.
NODE_CAPS = ("SYS_ADMIN", "SYS_PTRACE")


@dataclass(frozen=True)
class Node:
    name: str
    arch: str
    image: str
    state: str
    address: str


def _check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise HostsError(f"node name {name!r}: use lower-case letters, digits, '.', '_' or '-'")


def node_address(name: str) -> str:
    res = podman(["container", "inspect", "--format", "{{ json .NetworkSettings }}", name], check=False)
    if res.returncode != 0:
        return ""
    settings = json.loads(res.stdout or "{}") or {}
    if settings.get("IPAddress"):
        return str(settings["IPAddress"])
    for net in (settings.get("Networks") or {}).values():
        if net.get("IPAddress"):
            return str(net["IPAddress"])
    return ""


def wait_systemd(name: str, timeout: float = 120.0) -> str:
    """Wait until systemd in the node has finished booting; return its state (running/degraded)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        res = podman(["exec", name, "systemctl", "is-system-running"], check=False, timeout=30)
        state = res.stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    raise HostsError(f"node {name}: systemd did not finish booting in {timeout:.0f}s (state {state!r})")


def node_up(name: str, arch: str = "amd64", publish: Sequence[str] = (), replace: bool = False,
            boot_timeout: float = 180.0) -> Node:
    """Start (or keep) a node. The image must be built first (``build_image``)."""
    _check_name(name)
    spec = ImageSpec(arch=arch)
    exists = podman(["container", "exists", name], check=False).returncode == 0
    if exists and replace:
        node_down(name)
        exists = False
    if exists:
        podman(["start", name])
    else:
        if podman(["image", "exists", spec.image], check=False).returncode != 0:
            raise HostsError(f"image {spec.image} is missing: run `python -m devkit hosts build --arch {arch}`")
        args = ["run", "-d", "--name", name, "--hostname", name, "--systemd=always",
                "--label", f"{NODE_LABEL}={arch}", "--arch", arch]
        for cap in NODE_CAPS:
            args += ["--cap-add", cap]
        for port in publish:
            args += ["--publish", port]
        args += ["--volume", f"{lab_ssh.lab_public_key()}:{lab_ssh.AUTHORIZED_KEYS}:ro"]
        podman([*args, spec.image, "/sbin/init"])
    wait_systemd(name, timeout=boot_timeout * (2.5 if spec.foreign else 1))
    return get_node(name)


def node_down(name: str) -> bool:
    """Remove a node; True when one existed."""
    _check_name(name)
    if podman(["container", "exists", name], check=False).returncode != 0:
        return False
    podman(["rm", "--force", "--time", "10", name])
    return True


def get_node(name: str) -> Node:
    res = podman(["container", "inspect", name], check=False)
    if res.returncode != 0:
        raise HostsError(f"node {name} does not exist")
    data = json.loads(res.stdout)
    data = data[0] if isinstance(data, list) else data
    labels = (data.get("Config") or {}).get("Labels") or {}
    return Node(
        name=name,
        arch=labels.get(NODE_LABEL, "?"),
        image=data.get("ImageName", ""),
        state=(data.get("State") or {}).get("Status", "?"),
        address=node_address(name),
    )


def list_nodes() -> list[Node]:
    res = podman(["ps", "-a", "--filter", f"label={NODE_LABEL}", "--format", "{{.Names}}"])
    return [get_node(n) for n in res.stdout.split()]


def node_dicts(nodes: Sequence[Node]) -> list[dict[str, str]]:
    return [asdict(n) for n in nodes]
