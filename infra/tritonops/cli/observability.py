"""``tritonops observability``: write rule files and dashboards for edge hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tritonops.cli.extras import require
from tritonops.cli.params import finite, folder_to_write, path

app = typer.Typer(no_args_is_help=True, help="Prometheus rules, Grafana dashboards, KEDA queries.")


def _job(value: str) -> str:
    from tritonops.observability.rules import check_job

    try:
        return check_job(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


@app.command("export")
def export_cmd(
    directory: Annotated[Path, typer.Argument(help="Output directory: rules file and dashboards/.", parser=path,
                                              callback=folder_to_write)],
    job: Annotated[str, typer.Option(help="Prometheus scrape job of Triton's metrics port.",
                                     callback=_job)] = "triton",
    max_replicas: Annotated[int, typer.Option(help="The autoscaler's maximum replicas.")] = 10,
    pending_target: Annotated[float, typer.Option(help="Pending requests per replica to aim at.",
                                                  callback=finite(0, low_ok=False))] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the written files as JSON.")] = False,
) -> None:
    """Write Prometheus rule files and Grafana dashboard JSON into DIRECTORY.

    Exit codes: 0 written, 2 bad arguments, 3 the 'obs' extra (the dashboards' Grafana SDK) is not installed.
    """
    require("observability export", "obs")
    from tritonops.observability.export import export  # the Grafana SDK: the 'obs' extra
    from tritonops.observability.keda_trigger import ScalingPolicy
    from tritonops.observability.rules import RuleSettings

    try:
        policy = ScalingPolicy(threshold=pending_target, max_replicas=max_replicas)
        settings = RuleSettings(job=job, scaling=policy)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    files = export(directory, settings)
    if as_json:
        print(json.dumps({"files": [str(f) for f in files]}))
        return
    console = Console()
    for f in files:
        console.print(f"wrote {f}")
