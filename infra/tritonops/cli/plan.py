"""``tritonops plan``: replicas, nodes, GPU memory fit and cost of a model service for a day of traffic.

Exit codes: 0 the plan carries the peak and the models fit; 1 they do not (peak above maxReplicas,
GPU memory short); 2 an unusable input (stack config, bench JSON, traffic profile, price file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tritonops import project
from tritonops.capacity import PROFILES
from tritonops.cli.params import ProjectDir, finite, old_spelling, path
from tritonops.core.exitcodes import ExitCode

if TYPE_CHECKING:
    from tritonops.capacity import plan as planner


def plan_cmd(
    service: Annotated[str, typer.Argument(help="Model service (modelServices[].name) of the triton stack")],
    bench: Annotated[Path, typer.Option("--bench", parser=path,
                                        help="One replica's figures: `tritonops bench --json` or `tune --json`")],
    traffic: Annotated[str, typer.Option("--traffic", help=f"Traffic profile: a YAML/JSON file (peak_rps, 24 "
                                         f"hourly values) or a built-in name ({', '.join(PROFILES)})")],
    env: Annotated[str, typer.Option("--env", help="Pulumi stack: any with a stacks/triton/Pulumi.<env>.yaml.")],
    peak_rps: Annotated[float | None, typer.Option("--peak-rps", callback=finite(0, low_ok=False),
                                                   help="Peak requests/s (overrides the profile's)")] = None,
    prices: Annotated[Path | None, typer.Option("--prices", parser=path,
                                                help="Price file (default: the shipped prices.json)")] = None,
    region: Annotated[str, typer.Option("--region", help="Region of the price file")] = "us-east-1",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable plan")] = False,
    project_dir: ProjectDir = None,
    stacks_dir: Annotated[Path | None, old_spelling("--stacks-dir", "--project-dir", parser=path)] = None,
) -> None:
    """Plan a model service: replicas the KEDA scaler settles on, nodes, GPU memory fit, cost per day.

    Exit codes: 0 the plan carries the peak and the models fit, 1 they do not, 2 unusable input.
    """
    from tritonops.capacity import plan as planner
    from tritonops.k8s.config import ConfigError, TritonStackConfig
    from tritonops.k8s.stack_file import load_stack_config

    err = Console(stderr=True)
    # --stacks-dir (deprecated) named the stacks/ folder itself; --project-dir names the folder holding it.
    stacks = stacks_dir if stacks_dir is not None else project.stacks_dir(project_dir)
    try:
        cfg = load_stack_config("triton", env, stacks)
        assert isinstance(cfg, TritonStackConfig)
        result = planner.plan(cfg, service, planner.load_throughput(bench), planner.load_traffic(traffic, peak_rps),
                              planner.load_prices(prices), region)
    except (ConfigError, planner.InputError) as e:
        err.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if as_json:
        print(json.dumps({**result.model_dump(), "findings": result.findings}, indent=2))
    else:
        _print(result)
    raise typer.Exit(ExitCode.FINDINGS if result.findings else ExitCode.OK)


def _print(p: planner.Plan) -> None:
    from rich.table import Table

    c = Console()
    t = Table(title=f"tritonops plan {p.service}: {p.traffic} day, peak {p.peak_rps:g} req/s", show_header=False)
    t.add_row("node pool", f"{p.node_pool}: {p.instance_type} ({p.gpu}), {p.pods_per_node} pod(s) per node")
    t.add_row("GPU memory", f"{p.gpu_memory_need_mib} of {p.gpu_memory_share_mib} MiB per share: "
                            + ("fits" if p.fits else "[red]does not fit[/]"))
    p95 = f", p95 {p.replica_p95_ms:.1f} ms" if p.replica_p95_ms is not None else ""
    t.add_row("one replica", f"{p.replica_rps:.0f} req/s{p95} (measured)")
    t.add_row("replicas at peak", f"{p.replicas_peak} (min {p.min_replicas}, max {p.max_replicas}), "
                                  f"utilisation {p.utilisation_peak:.0%}"
                                  + ("" if p.peak_carried else " [red]peak not carried[/]"))
    t.add_row("nodes at peak", str(p.nodes_peak))
    t.add_row("replicas by hour", " ".join(str(n) for n in p.hourly_replicas))
    c.print(t)
    s = Table(title=f"cost, {p.region} prices as of {p.prices_as_of}")
    for col in ("strategy", "node-hours/day", "$/day", "$/hour", "$/M inferences"):
        s.add_column(col, justify="left" if col == "strategy" else "right", overflow="fold")
    for st in p.strategies:
        s.add_row(st.name, f"{st.node_hours:.0f}", f"{st.cost_per_day:.2f}", f"{st.cost_per_hour:.2f}",
                  f"{st.cost_per_million:.4f}")
    c.print(s)
    c.print(f"prices: {escape(p.prices_source)}", soft_wrap=True)
    for f in p.findings:
        c.print(f"[red]finding:[/] {escape(f)}", soft_wrap=True)
