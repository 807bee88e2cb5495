"""``python -m devkit hosts``: build images and manage disposable Podman nodes.

Exit codes: 0 ok, 1 a build or Podman step failed (the message names the log), 2 bad arguments.
"""

from __future__ import annotations

import json
import re
import time
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from tritonops.core.exitcodes import ExitCode

from devkit.hosts.images import ImageSpec, build_image, image_status
from devkit.hosts.lab_ssh import lab_public_key
from devkit.hosts.nodes import NAME_RE, list_nodes, node_dicts, node_down, node_up
from devkit.hosts.podman import HostsError

hosts_app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
console = Console(stderr=True)


class Arch(StrEnum):
    amd64 = "amd64"
    arm64 = "arm64"


_PORTS = re.compile(r"^\d{1,5}(-\d{1,5})?$")


def _name(value: str) -> str:
    """Checked before Podman is asked anything."""
    if not NAME_RE.match(value):
        raise typer.BadParameter(f"{value!r}: use lower-case letters, digits, '.', '_' or '-' (at most 63)")
    return value


def _publish(values: list[str] | None) -> list[str] | None:
    """Podman's [[IP:][HOST_PORT]:]CONTAINER_PORT[/PROTOCOL], checked before Podman is asked anything."""
    for v in values or []:
        spec, _, proto = v.partition("/")
        parts = spec.rsplit(":", 2)
        ok = bool(_PORTS.match(parts[-1])) and proto in ("", "tcp", "udp", "sctp")
        ok = ok and (len(parts) < 2 or parts[-2] == "" or bool(_PORTS.match(parts[-2])))
        if not ok:
            raise typer.BadParameter(f"{v!r}: expected [[IP:][HOST_PORT]:]CONTAINER_PORT[/tcp|udp]")
    return values


def _fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {exc}")
    return typer.Exit(ExitCode.FAILED)


@hosts_app.command("build")
def build(
    arch: Annotated[Arch, typer.Option("--arch", help="arm64 runs under qemu.")] = Arch.amd64,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the image is current.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")] = False,
) -> None:
    """Build the Debian bookworm systemd image (cached until its inputs change)."""
    start = time.monotonic()
    spec = ImageSpec(arch=arch.value)
    try:
        lab_public_key()  # the nodes' SSH key (molecule mounts it too): made with the image it goes with
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=console, transient=False) as progress:
            task = progress.add_task(f"image {spec.image}", total=None)

            def step(msg: str) -> None:
                progress.console.print(f"  {msg}")
                progress.update(task, description=msg)

            built = build_image(spec, step=step, force=force)
            progress.update(task, description=f"{spec.image} ready")
    except HostsError as exc:
        raise _fail(exc) from exc
    result = {"image": spec.image, "arch": spec.arch, "inputs": spec.inputs_hash(), "built": built,
              "seconds": round(time.monotonic() - start, 1)}
    if as_json:
        print(json.dumps(result))
    else:
        console.print(f"{spec.image} {'built' if built else 'cached'} in {result['seconds']}s")


@hosts_app.command("up")
def up(
    name: Annotated[str, typer.Argument(help="Node name (also its hostname).", callback=_name)],
    arch: Annotated[Arch, typer.Option("--arch")] = Arch.amd64,
    publish: Annotated[list[str] | None, typer.Option("--publish", "-p", help="host:container port.",
                                                      callback=_publish)] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Recreate the node if it exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create (or start) a node booting systemd; builds the image first when needed."""
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task(f"image for {arch.value}", total=None)
            build_image(ImageSpec(arch=arch.value),
                        step=lambda m: progress.update(task, description=m))
            progress.update(task, description=f"booting {name}")
            node = node_up(name, arch=arch.value, publish=publish or [], replace=replace)
    except HostsError as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps(node_dicts([node])[0]))
    else:
        console.print(f"{node.name} ({node.arch}) {node.state} at {node.address or '-'}")


@hosts_app.command("down")
def down(name: Annotated[str, typer.Argument(help="Node name.", callback=_name)]) -> None:
    """Remove a node."""
    try:
        removed = node_down(name)
    except HostsError as exc:
        raise _fail(exc) from exc
    console.print(f"{name}: {'removed' if removed else 'not present'}")


@hosts_app.command("list")
def list_(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the project's nodes and the state of the cached images."""
    try:
        nodes = node_dicts(list_nodes())
        images = image_status()
    except HostsError as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps({"nodes": nodes, "images": images}))
        return
    table = Table(title="nodes")
    for col in ("name", "arch", "state", "address", "image"):
        table.add_column(col)
    for n in nodes:
        table.add_row(n["name"], n["arch"], n["state"], n["address"], n["image"])
    Console().print(table)
    itable = Table(title="images")
    cols = ("arch", "image", "inputs", "present", "current", "rootfs_cached")
    for col in cols:
        itable.add_column(col)
    for i in images:
        itable.add_row(*(str(i[c]) for c in cols))
    Console().print(itable)
