"""``python -m devkit``: the development kit's commands (Podman hosts, the demo, role README tables, docs examples)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from tritonops.core.exitcodes import ExitCode

from devkit.hosts.commands import hosts_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.add_typer(hosts_app, name="hosts")


@app.command()
def demo(
    local: Annotated[
        bool, typer.Option("--local", help="Run tritonserver on loopback instead of converging a Podman edge node")
    ] = False,
) -> None:
    """Converge a local edge node with ansible/edge.yml, smoke-check it and print real inference results.

    Exit 0 when the smoke check passes, 1 when a check fails, 3 when a step fails.
    """
    from devkit.demo import DemoError, run, run_edge
    from devkit.hosts.podman import HostsError

    console = Console()
    try:
        report = run(console) if local else run_edge(console)
    except (DemoError, HostsError) as e:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(e))}")
        raise typer.Exit(ExitCode.FAILED) from None
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FINDINGS)


@app.command("demo-fleet")
def demo_fleet(
    down: Annotated[bool, typer.Option("--down", help="Remove the fleet's nodes instead")] = False,
) -> None:
    """Three local edge nodes in pull mode: a release rolled out in waves, a failing one halted and rolled back.

    Exit 0 when every step did what it should, 3 when one failed (the message says which).
    """
    from devkit.demo import DemoError
    from devkit.demo_fleet import fleet_down, run_fleet
    from devkit.hosts.podman import HostsError

    try:
        if down:
            Console().print(f"removed: {', '.join(fleet_down()) or 'nothing'}", highlight=False)
        else:
            run_fleet(Console())
    except (DemoError, HostsError) as e:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(e))}")
        raise typer.Exit(ExitCode.FAILED) from None


@app.command("demo-k8s")
def demo_k8s(
    keep: Annotated[bool, typer.Option("--keep", help="Leave the pod and the store running")] = False,
) -> None:
    """Publish the sample repository, run the rendered dev Triton pod with `podman kube play`, smoke-check it.

    Exit 0 when the smoke check passes, 1 when a check fails, 3 when a step fails.
    """
    from devkit.hosts.podman import HostsError
    from devkit.kube_play import demo as run_demo

    console = Console()
    try:
        report = run_demo(console, keep=keep)
    except HostsError as e:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(e))}")
        raise typer.Exit(ExitCode.FAILED) from None
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FINDINGS)


@app.command("role-docs")
def role_docs() -> None:
    """Rewrite the "Role Variables" table of every role README from its meta/argument_specs.yml."""
    from devkit.role_docs import main

    raise typer.Exit(main([]))


@app.command()
def diagrams(
    check: Annotated[bool, typer.Option("--check", help="Exit 1 naming each stale picture; write nothing")] = False,
) -> None:
    """Redraw the docs' Mermaid pictures (the release flow, what runs where) from the code.

    Exit 0 when every picture is current (or was redrawn), 1 when --check finds one stale.
    """
    from devkit import diagrams as d

    if check:
        for why in (found := d.stale()).values():
            Console(stderr=True).print(escape(why))
        raise typer.Exit(ExitCode.FINDINGS if found else ExitCode.OK)
    for path in d.update():
        Console().print(f"redrew {escape(path)}")


@app.command()
def docs(
    files: Annotated[
        list[str] | None, typer.Argument(help="Markdown files or globs (default: README.md docs/*.md)")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Run the console blocks; exit 1 with a diff if stale")] = False,
    update: Annotated[bool, typer.Option("--update", help="Rewrite stale console blocks' output in place")] = False,
) -> None:
    """Run the docs' console examples and compare (--check) or rewrite (--update) their output.

    Exit 0 when every example is current (or was rewritten), 1 when one is stale, 2 on a usage error.
    """
    from devkit.docs import main

    if check == update:
        Console(stderr=True).print("[red]error:[/] pass exactly one of --check and --update")
        raise typer.Exit(ExitCode.USAGE)
    raise typer.Exit(main(files or [], write=update))


@app.command()
def figures(
    files: Annotated[
        list[str] | None, typer.Argument(help="Markdown files or globs (default: README.md docs/*.md)")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 naming each stale figure; write nothing")] = False,
    write: Annotated[bool, typer.Option("--write", help="Rewrite every marked figure from the latest records")] = False,
) -> None:
    """Hold the docs' measured figures (`127 s<!-- fig: demo.total_s -->`) to tests/benchmarks/records/.

    Exit 0 when every marked figure is its record's (or was rewritten), 1 when one is stale or names no
    record or figure, 2 on a usage error.
    """
    from devkit.figures import main

    if check == write:
        Console(stderr=True).print("[red]error:[/] pass exactly one of --check and --write")
        raise typer.Exit(ExitCode.USAGE)
    raise typer.Exit(main(files or [], rewrite=write))


@app.command("gpu-bundle")
def gpu_bundle(
    dest: Annotated[Path, typer.Argument(help="A new or empty folder for the bundle")],
    python: Annotated[str, typer.Option("--python", help="The GPU machine's Python (major.minor)")] = "3.12",
) -> None:
    """Make a folder (under 64 MiB) that runs gpu-check on a GPU machine with no network: `sh DEST/run.sh`.

    Exit 0 with the bundle's size, 2 on a bad --python, 3 when it cannot be made or is over 64 MiB.
    """
    from tritonops.triton import server

    from devkit import gpu_bundle as g

    if not re.fullmatch(r"3\.\d+", python):
        Console(stderr=True).print(f"[red]error:[/] --python: a version such as 3.12, got {escape(python)!r}")
        raise typer.Exit(ExitCode.USAGE)
    console = Console()
    try:
        found = g.build(dest, python, log=lambda line: console.print(escape(line), highlight=False))
    except (g.BundleError, server.TritonNotInstalled) as e:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(e))}")
        raise typer.Exit(ExitCode.FAILED) from None
    for name, size in found.items():
        console.print(f"{escape(name):<22} {size / 2**20:6.1f} MiB", highlight=False)
    console.print(escape(f"{dest}: {sum(found.values()) / 2**20:.1f} MiB (the limit: {g.LIMIT_MIB} MiB); "
                         f"on the GPU machine: sh {dest}/run.sh [its Python {python}]"),
                  highlight=False, soft_wrap=True)


if __name__ == "__main__":
    app()
