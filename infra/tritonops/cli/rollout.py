"""``tritonops release rollout``: start, advance and show a staged rollout of a channel (pull mode).

Exit codes: 0 done (started, advanced, complete), 1 the rollout halted or waits for agents (the figures
say which), 2 usage error (a bad wave list or threshold, an unknown release or channel, a channel with
no rollout), 3 the store did not answer or holds something unusable.
The domain logic is :mod:`tritonops.release.rollout`; the agents' half :mod:`tritonops.release_format.waves`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from tritonops.cli.extras import require_store
from tritonops.cli.output import console, run_release_op
from tritonops.cli.params import AgentUrl, AsJson, RolloutStore, S3Endpoint, path
from tritonops.core.errors import ReleaseError
from tritonops.core.exitcodes import ExitCode

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Staged rollouts: a channel's release to a share of the fleet, wave by wave, on evidence.")

Channel = Annotated[str, typer.Option(help="The channel the rollout moves")]
Fleet = Annotated[Path | None, typer.Option(
    help="The agents that must report: one per line, 'AGENT-ID [GROUP,GROUP] [key=REPORT-PUBLIC-KEY]' (a report "
         "counts only when its listed agent's key signed it; agents not listed are not counted)", parser=path)]
Key = Annotated[list[Path] | None, typer.Option(
    "--key", help="The private key(s) that sign the channel pointer (role 'channel'; repeatable for a threshold)",
    parser=path)]
Expires = Annotated[str, typer.Option(help="How long the signed pointer stays valid (30d, 12h)")]
ReportKey = Annotated[list[Path] | None, typer.Option(
    "--report-key", help="A public key whose signature a report must carry (repeatable; none: any report counts, "
                         "unsigned ones marked so)", parser=path)]


def _fleet(fleet: Path | None) -> Any:
    from tritonops.release import rollout as ro

    return ro.parse_fleet(fleet) if fleet is not None else None


def _signing(key: list[Path] | None, expires: str) -> dict[str, Any]:
    """How the pointer is signed when it moves (release.publish.move_pointer's keys and expiry)."""
    from tritonops.release import publish as pub

    return {"keys": list(key or []), "expires": pub.duration(expires)}


def waves_table(out: dict[str, Any]) -> None:
    from rich.table import Table

    r = out.get("rollout")
    rid = r["id"] if isinstance(r, dict) else str(r)  # summary: the rollout; advance: its id
    t = Table(title=f"rollout {escape(rid)} of {escape(out['release'])} "
                    f"on {escape(out['channel'])}")
    for col in ("wave", "agents", "targeted", "applied", "gated", "failed", "refused", "pending"):
        t.add_column(col, justify="left" if col == "wave" else "right", overflow="fold")
    for w in out["waves"]:
        t.add_row(f"{w['wave']} {escape(w['spec'])}" + ("" if w["reached"] else " (not yet)"),
                  *(str(w[k]) for k in ("agents", "targeted", "applied", "gated", "failed", "refused", "pending")))
    console.print(t)


def unattributed(out: dict[str, Any]) -> None:
    """The reports the gate could not attribute to an agent, and why (each one line)."""
    if out.get("rejected_reports"):
        console.print(f"{len(out['rejected_reports'])} report(s) not counted:", highlight=False)
        for why in out["rejected_reports"]:
            console.print(f"  {escape(why)}", highlight=False)


@app.command("start")
def start_cmd(
    channel: Channel,
    release: Annotated[str, typer.Option(help="A published release id (tritonops release publish --release)")],
    store: RolloutStore,
    waves: Annotated[str, typer.Option(
        help="The waves, in order: percentages of the fleet and group waves (lab+qa), e.g. 10,50,100")] = "10,50,100",
    groups: Annotated[str | None, typer.Option(help="A first wave of these groups (comma-separated labels)")] = None,
    max_failures: Annotated[str, typer.Option(
        help="The failed share of the targeted agents that halts the rollout (5% or 0.05)")] = "5%",
    rollout_id: Annotated[str | None, typer.Option(
        "--id", help="The rollout's id, which seeds each agent's place (default RELEASE-CHANNEL)")] = None,
    key: Key = None,
    expires: Expires = "30d",
    s3_endpoint: S3Endpoint = None,
    as_json: AsJson = False,
) -> None:
    """Point CHANNEL at RELEASE with a rollout at wave 0: only that wave's agents take it."""
    from tritonops.release import rollout as ro

    require_store("release rollout start", store)

    def run() -> dict[str, Any]:
        w = ro.parse_waves(waves, groups.split(",") if groups else None)
        return ro.start(store, channel, release, w, ro.parse_threshold(max_failures), rollout_id, s3_endpoint,
                        _signing(key, expires))

    run_release_op(run, as_json, lambda o: console.print(
        f"channel [bold]{escape(channel)}[/] -> {escape(o['release'])}, rollout {escape(o['rollout']['id'])} at wave 0 "
        f"of {len(o['rollout']['waves'])} (was {escape(str(o['previous']))})", highlight=False))


@app.command("advance")
def advance_cmd(
    channel: Channel,
    store: RolloutStore,
    agent_url: AgentUrl = None,
    fleet: Fleet = None,
    report_key: ReportKey = None,
    max_failures: Annotated[str | None, typer.Option(
        help="Override the threshold the rollout was started with (5% or 0.05)")] = None,
    rollback_on_halt: Annotated[bool, typer.Option(
        help="When the rollout halts, move the channel back to its previous release")] = False,
    unbound_reports: Annotated[bool, typer.Option(
        help="UNSAFE: accept several --report-key without a fleet file binding each agent to its key (key=): "
             "any of the keys then signs for any agent")] = False,
    cache_url: Annotated[list[str] | None, typer.Option(
        "--cache-url", help="A node cache daemon (tritonops-agent cache serve), http://HOST:PORT, of a node the "
                            "next wave runs on: the move waits until it holds the release (repeatable)")] = None,
    key: Key = None,
    expires: Expires = "30d",
    s3_endpoint: S3Endpoint = None,
    as_json: AsJson = False,
) -> None:
    """Move to the next wave if every targeted agent has an outcome and the failed share is at most the
    threshold (and each --cache-url's node cache holds the release); halt (exit 1) when it is over; exit 1
    "waiting" while an agent has no outcome yet or a node cache is not warm."""
    from tritonops.release import rollout as ro

    require_store("release rollout advance", store)
    out: dict[str, Any] = {}

    def run() -> dict[str, Any]:
        limit = ro.parse_threshold(max_failures) if max_failures is not None else None
        out.update(ro.advance(store, channel, agent_url or [], s3_endpoint, _fleet(fleet), report_key or None,
                              limit, rollback_on_halt, _signing(key, expires), unbound_reports, cache_url or None))
        return out

    def render(o: dict[str, Any]) -> None:
        waves_table(o)
        why = f": {escape(o['reason'])}" if o.get("reason") else ""
        console.print(f"[bold]{o['result']}[/] (wave {o['wave']}){why}", highlight=False)
        unattributed(o)
        if o.get("rollback"):
            console.print(f"channel [bold]{escape(channel)}[/] rolled back to {escape(o['rollback']['release'])}")

    run_release_op(run, as_json, render)
    if out.get("result") not in ("advanced", "complete"):
        raise typer.Exit(ExitCode.FINDINGS)


@app.command("status")
def status_cmd(
    channel: Channel,
    store: RolloutStore,
    agent_url: AgentUrl = None,
    fleet: Fleet = None,
    report_key: ReportKey = None,
    s3_endpoint: S3Endpoint = None,
    as_json: AsJson = False,
) -> None:
    """The channel's rollout: per wave, its agents and how many applied / gated / failed (read only)."""
    from tritonops.release import rollout as ro

    require_store("release rollout status", store)

    def run() -> dict[str, Any]:
        got = ro.summary(store, channel, agent_url or [], s3_endpoint, _fleet(fleet), report_key or None)
        if got is None:
            raise ReleaseError(f"{store}: channel {channel!r} has no rollout")
        return got

    def render(o: dict[str, Any]) -> None:
        waves_table(o)
        unattributed(o)

    run_release_op(run, as_json, render)
