"""``tritonops release``: publish, verify, promote, rollback, refresh, status, keygen, root init/rotate.

Every channel move (publish, promote, rollback, refresh) writes a signed pointer (a new version, an
expiry: ``--expires``, default 30d) with the ``--key`` file(s); ``root init`` / ``root rotate`` write
the store's next root document (keys and thresholds per role) that nodes follow without a redeploy.

Exit codes: 0 done, 1 the operation failed (the message names the file, object or step) or the canary
gate refused a promotion (with the figures), 2 usage error (a bad argument, an unknown channel, an
unusable key or folder), 3 the store or Prometheus did not answer or holds something unusable (or an
s3:// store without the 's3' extra, boto3).

The store is ``--store`` (as the agent names it); ``--to`` is its old spelling, and ``status --target``
that of ``--agent-url``, kept for one release (tritonops.cli.params.old_spelling).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from tritonops.cli.extras import require, require_store
from tritonops.cli.output import console, err_console, run_release_op
from tritonops.cli.params import AgentUrl, AsJson, S3Endpoint, Store, either, finite, old_spelling, path
from tritonops.core.errors import ReleaseError
from tritonops.core.exitcodes import ExitCode
from tritonops.model_repo.target import Target

app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="Publish signed model releases to a store and move channel pointers.")


# --to: the old spelling of --store (the agent's name for it too), kept for one release.
OldStore = Annotated[str | None, old_spelling("--to", "--store")]
# The keys that sign a channel pointer (role "channel"): repeatable, for a threshold of several.
Keys = Annotated[list[Path] | None, typer.Option(
    "--key", help="A private signing key (repeatable: a threshold of several); default release-signing.key",
    parser=path)]
# A model producer's public key(s): an OpenSSF model-signing bundle (model.sig) must verify with one of them.
ProducerKeys = Annotated[list[Path] | None, typer.Option(
    "--producer-key", help="A model producer's public key (PEM, repeatable): the repository's model.sig must "
                           "verify with one of them", parser=path)]
Expires = Annotated[str, typer.Option(help="How long the signed pointer stays valid: 30d, 12h, 90m (nodes freeze "
                                           "after it: run tritonops release refresh before)")]


def _expires(text: str) -> float:
    from tritonops.release import publish as pub

    try:
        return pub.duration(text)
    except ReleaseError as e:
        raise typer.BadParameter(str(e), param_hint="'--expires'") from None


def _signing(keys: list[Path] | None) -> list[Path]:
    return list(keys) if keys else [Path("release-signing.key")]


def _store(command: str, store: str | None, to: str | None) -> str:
    """--store, or its old spelling --to (one of them is required); an s3:// store needs the 's3' extra."""
    chosen = either(store, to, "--store", "--to",
                    required="where releases live, s3://BUCKET/PREFIX or the folder an HTTP mirror serves")
    assert chosen is not None
    require_store(f"release {command}", chosen)
    return chosen


@app.command("keygen")
def keygen_cmd(
    private_key: Annotated[Path, typer.Argument(help="Where to write the private key (0600); keep it secret",
                                                parser=path)],
    public_key: Annotated[Path, typer.Argument(help="Where to write the public key that nodes trust", parser=path)],
    as_json: AsJson = False,
) -> None:
    """Create an Ed25519 signing key pair (OpenSSL); refuses to overwrite a private key."""
    from tritonops.release_format import signing

    def render(out: dict) -> None:
        console.print(f"private key {escape(out['private_key'])} (0600, keep it secret)", highlight=False)
        console.print(f"public key  {escape(out['public_key'])} (give it to the nodes: --trusted-key)",
                      highlight=False)

    run_release_op(lambda: dict(zip(("private_key", "public_key"),
                                    map(str, signing.keygen(private_key, public_key)), strict=True)), as_json, render)


@app.command("publish")
def publish_cmd(
    repository: Annotated[Path, typer.Argument(help="The model repository folder to release", parser=path)],
    store: Store = None,
    channel: Annotated[str | None, typer.Option(help="Move this channel to the release (none: upload only)")] = None,
    key: Keys = None,
    channel_key: Annotated[list[Path] | None, typer.Option(
        help="A key that signs the channel pointer, if not the --key(s) (repeatable)", parser=path)] = None,
    for_channel: Annotated[list[str] | None, typer.Option(
        help="Another channel the release may be served on (repeatable; e.g. stable, for a later promote)")] = None,
    expires: Expires = "30d",
    target: Annotated[Target | None, typer.Option(help="Validate for this hardware")] = None,
    release: Annotated[str | None, typer.Option(
        help="Release id, as rollback and the agent name it (default: the digest's first 16 hex digits)")] = None,
    config_name: Annotated[str | None, typer.Option(help="Validate configs/NAME.pbtxt as the active config")] = None,
    s3_endpoint: S3Endpoint = None,
    model_signature: Annotated[bool, typer.Option(
        "--model-signature", help="Publish only if the repository's OpenSSF model signature (model.sig) "
                                  "verifies with a --producer-key (as release verify); it ships with the release",
    )] = False,
    producer_key: ProducerKeys = None,
    warmup: Annotated[bool, typer.Option(
        "--warmup", help="First generate model_warmup from golden.json where a model has none (tritonops warmup: "
                         "written into the folder, so the manifest and signature cover it)")] = False,
    as_json: AsJson = False,
    to: OldStore = None,
    version: Annotated[str | None, old_spelling("--version", "--release")] = None,
) -> None:
    """Validate, sign and upload a release (each file once, by content), then move the channel pointer."""
    from tritonops.release import publish as pub

    where = _store("publish", store, to)
    release = either(release, version, "--release", "--version")
    if producer_key and not model_signature:
        raise typer.BadParameter("--producer-key needs --model-signature (it names who signed the model)")
    if model_signature:
        require("release publish --model-signature", "signing")

    def render(out: dict) -> None:
        if out["model_signature"]:
            _render_verified(out["model_signature"])
        if out["model_signature_unverified"]:
            err_console.print(f"[yellow]warning:[/] {escape(out['model_signature_unverified'])}", soft_wrap=True,
                              highlight=False)
        console.print(f"release [bold]{out['release']}[/] ({out['digest'][:16]}): {_counts(out, where)}")
        if channel:
            moved = f"moved from {out['previous']}" if out.get("previous") else "new channel"
            moved = moved if out.get("changed") else "already there"
            console.print(f"channel [bold]{channel}[/] -> {out['release']} ({moved})")

    seconds = _expires(expires)

    def run() -> dict[str, Any]:
        if warmup:  # before the files are hashed: the generated warmup is signed as the rest of the release
            from tritonops.model_repo import warmup as warmups
            from tritonops.model_repo.pbtxt import ModelConfigError

            try:
                warmups.generate(repository)
            except ModelConfigError as e:
                raise ReleaseError(f"--warmup: {e}") from None
        # The producer's signature is checked before anything is read into the store.
        with _upload_progress(not as_json) as progress:  # gone before the summary is printed
            return pub.publish(
                repository, where, channel, _signing(key), target.value if target else None, release, config_name,
                s3_endpoint, progress, channels=for_channel, expires=seconds, channel_keys=channel_key,
                producer_keys=(producer_key or []) if model_signature else None)

    run_release_op(run, as_json, render)


@contextmanager
def _upload_progress(enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """publish's ``progress(done, total)`` as a bar of bytes on stderr: only on a terminal, never with --json
    (the bar is gone when the upload ends)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(TextColumn("upload"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True, disable=not (enabled and err_console.is_terminal)) as bar:
        task = bar.add_task("upload", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@app.command("verify")
def verify_cmd(
    repository: Annotated[Path, typer.Argument(help="The model repository folder whose model.sig to check",
                                               parser=path)],
    producer_key: ProducerKeys = None,
    as_json: AsJson = False,
) -> None:
    """Check a repository's OpenSSF model signature (model.sig, as the model-signing tool writes it) against the
    producer keys: the signature is valid under one of them, every signed file is there with its digest, and
    every file the release would ship is signed. Exit 1 refused (one line naming the files), 2 an unusable key."""
    from tritonops.release import model_signature as ms

    require("release verify", "signing")
    run_release_op(lambda: ms.verify(repository, producer_key or []), as_json, _render_verified)


def _render_verified(out: dict[str, Any]) -> None:
    console.print(f"model signature {escape(out['signature'])}: {out['files']} file(s) signed by "
                  f"{escape(out['producer_key'])}, all present and unchanged", highlight=False)


@app.command("promote")
def promote_cmd(
    source_channel: Annotated[str, typer.Argument(help="The channel whose release moves on (e.g. canary)")],
    channel: Annotated[str, typer.Argument(help="The channel to move (e.g. stable)")],
    store: Store = None,
    s3_endpoint: S3Endpoint = None,
    prometheus: Annotated[str | None, typer.Option(
        help="Gate on Prometheus (base URL): move only if the canary's failure ratio and p95 are no worse "
             "than stable's")] = None,
    model: Annotated[list[str] | None, typer.Option(
        help="A model to compare (repeatable; default: every model either track served)")] = None,
    window: Annotated[str, typer.Option(help="How far back to compare (a Prometheus duration)")] = "10m",
    max_failure_increase: Annotated[float, typer.Option(
        help="Canary failure ratio may exceed stable's by this much (absolute, 0.01 = 1 point)",
        callback=finite(0, 1))] = 0.01,
    max_latency_increase: Annotated[float, typer.Option(
        help="Canary p95 may exceed stable's by this fraction (0.2 = 20%)", callback=finite(0))] = 0.2,
    min_requests: Annotated[int, typer.Option(
        help="Requests each track must have served per model in the window")] = 100,
    key: Keys = None,
    expires: Expires = "30d",
    as_json: AsJson = False,
    to: OldStore = None,
) -> None:
    """Point CHANNEL at SOURCE_CHANNEL's release; with --prometheus only if the canary is no worse.

    The gate reads the model_track:* recording rules (pods labelled track=stable|canary) and refuses,
    exit 1 with the figures, when the canary fails more, is slower at p95, or served too few requests.
    """
    from tritonops.agent.cli import exit_code
    from tritonops.release import canary
    from tritonops.release import publish as pub

    where = _store("promote", store, to)
    seconds = _expires(expires)
    gate = None
    if prometheus is not None:
        try:
            gate = canary.Gate(prometheus, window, tuple(model or ()), max_failure_increase,
                               max_latency_increase, min_requests)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    elif model:
        raise typer.BadParameter("--model needs --prometheus (it selects what the gate compares)")
    try:
        out = pub.promote(where, source_channel, channel, s3_endpoint, gate=gate, keys=_signing(key), expires=seconds)
    except canary.PromotionRefused as e:
        if as_json:
            typer.echo(json.dumps({**e.report, "channel": channel, "source_channel": source_channel},
                                  indent=2, sort_keys=True))
        else:
            _gate_table(e.report)
            err_console.print(f"[red]refused:[/] channel [bold]{escape(channel)}[/] not moved to "
                              f"{escape(source_channel)}'s release (figures above)")
        raise typer.Exit(ExitCode.FINDINGS) from None
    except ReleaseError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True, highlight=False)
        raise typer.Exit(ExitCode.FAILED if isinstance(e, canary.GateError) else exit_code(e)) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    if "gate" in out:
        _gate_table(out["gate"])
    console.print(f"channel [bold]{channel}[/] -> {out['release']} ({_moved(out)})")


def _moved(out: dict[str, Any]) -> str:
    """What a channel pointed to before (promote, rollback): a release, or nothing (a new channel)."""
    return f"was {out['previous']}" if out.get("previous") else "new channel"


def _fmt(value: float | None, scale: float = 1, spec: str = ".4g", unit: str = "") -> str:
    return "n/a" if value is None else f"{value * scale:{spec}}{unit}"


def _gate_table(report: dict[str, Any]) -> None:
    """The canary gate's figures: one row per model and track, the verdict on the canary's row."""
    from rich.table import Table

    tol = report["tolerance"]
    t = Table(title=f"canary vs stable over {escape(report['window'])} ({escape(report['prometheus'])}); "
                    f"allowed: failure ratio +{tol['max_failure_increase']:.2%}, "
                    f"p95 x{1 + tol['max_latency_increase']:g}")
    for col in ("model", "track", "requests", "failure ratio", "mean", "p95", "verdict"):
        t.add_column(col, justify="right" if col not in ("model", "track", "verdict") else "left", overflow="fold")
    for m in report["models"]:
        for track in ("stable", "canary"):
            f = m[track]
            ok = "[green]ok[/]" if m["ok"] else "[red]refuse[/]"
            t.add_row(escape(m["model"]), track, _fmt(f["requests"], spec=".0f"),
                      _fmt(f["failure_ratio"], spec=".2%"), _fmt(f["mean_seconds"], 1e3, ".2f", " ms"),
                      _fmt(f["p95_seconds"], 1e3, ".2f", " ms"), ok if track == "canary" else "")
    console.print(t)
    for m in report["models"]:
        for reason in m["reasons"]:
            console.print(f"[red]{escape(m['model'])}[/]: {escape(reason)}", highlight=False)
    for reason in report.get("reasons", []):
        console.print(f"[red]{escape(reason)}[/]", highlight=False)


@app.command("rollback")
def rollback_cmd(
    channel: Annotated[str, typer.Argument(help="The channel to move back")],
    store: Store = None,
    release: Annotated[str | None, typer.Option(help="An earlier release from the channel's history")] = None,
    s3_endpoint: S3Endpoint = None,
    key: Keys = None,
    expires: Expires = "30d",
    as_json: AsJson = False,
    to: OldStore = None,
) -> None:
    """Move CHANNEL back to its previous release (or to --release from its history)."""
    from tritonops.release import publish as pub

    where = _store("rollback", store, to)
    seconds = _expires(expires)
    run_release_op(lambda: pub.rollback(where, channel, release, s3_endpoint, keys=_signing(key), expires=seconds),
                   as_json,
                   lambda o: console.print(f"channel [bold]{channel}[/] -> {o['release']} ({_moved(o)})"))


@app.command("refresh")
def refresh_cmd(
    channel: Annotated[str, typer.Option(help="The channel whose pointer to sign again")],
    store: Store = None,
    s3_endpoint: S3Endpoint = None,
    key: Keys = None,
    expires: Expires = "30d",
    as_json: AsJson = False,
) -> None:
    """Sign CHANNEL's release again with a new version and expiry (run it from a cron well within --expires:
    a pointer that expires freezes its nodes on the release they serve)."""
    from tritonops.release import publish as pub

    where = _store("refresh", store, None)
    seconds = _expires(expires)
    run_release_op(lambda: pub.refresh(where, channel, s3_endpoint, keys=_signing(key), expires=seconds), as_json,
                   lambda o: console.print(f"channel [bold]{channel}[/] -> {o['release']} version {o['version']}, "
                                           f"valid until {o['expires']}"))


root_app = typer.Typer(no_args_is_help=True, add_completion=False,
                       help="The store's root document: which keys sign what, how many must (nodes follow it).")
app.add_typer(root_app, name="root")
RootKeys = Annotated[list[Path] | None, typer.Option(help="A public key that signs the next root (repeatable)",
                                                     parser=path)]
ReleaseKeys = Annotated[list[Path] | None, typer.Option(help="A public key that signs release manifests (repeatable)",
                                                        parser=path)]
ChannelKeys = Annotated[list[Path] | None, typer.Option(
    help="A public key that signs channel pointers: publish, promote, rollback, refresh (repeatable)", parser=path)]
ReportKeys = Annotated[list[Path] | None, typer.Option(
    help="A public key that signs agents' status reports (optional role; repeatable)", parser=path)]
Thresholds = Annotated[list[str] | None, typer.Option(help="ROLE=N signatures needed (repeatable; default 1)")]
StoreName = Annotated[str | None, typer.Option(
    help="The store's (fleet's) name, signed into the root and every pointer: nodes run with --store-name refuse "
         "any other store's metadata, even under the same keys (rotate keeps the current root's name)")]
RootProducerKeys = Annotated[list[Path] | None, typer.Option(
    "--producer-key", help="A model producer's EC public key (PEM, repeatable), signed into the root: a release's "
                           "model.sig must verify with one of them, at publish and on every node before it installs "
                           "(rotate keeps the current root's keys unless given)", parser=path)]
RequireModelSignature = Annotated[bool | None, typer.Option(
    "--require-model-signature/--no-require-model-signature",
    help="Nodes install only releases that carry a model.sig verifying with a --producer-key of the root, and "
         "publish refuses any other (rotate keeps the current root's setting unless given)")]


def _root_cmd(first: bool, store: str | None, root_key: list[Path] | None, release_key: list[Path] | None,
              channel_key: list[Path] | None, report_key: list[Path] | None, threshold: list[str] | None,
              sign_with: list[Path] | None, expires: str, s3_endpoint: str | None, as_json: bool,
              trusted_key: list[Path] | None = None, name: str | None = None,
              producer_key: list[Path] | None = None, require_model_signature: bool | None = None) -> None:
    from tritonops.release import publish as pub

    where = _store("root", store, None)
    keys = {r: list(k) for r, k in (("root", root_key), ("release", release_key), ("channel", channel_key),
                                    ("report", report_key)) if k}
    thresholds: dict[str, int] = {}
    for t in threshold or []:
        role, _, n = t.partition("=")
        if not n.isdigit():
            raise typer.BadParameter(f"{t!r}: expected ROLE=N (e.g. channel=2)", param_hint="'--threshold'")
        thresholds[role] = int(n)
    if not sign_with:
        raise typer.BadParameter("the old root's root key(s) and the new one's (for root 1: the key nodes trust "
                                 "today, and the new root keys)", param_hint="'--sign-with'")
    seconds = _expires(expires)
    def render(o: dict[str, Any]) -> None:
        if o.get("replaced"):
            console.print("root version 1 replaced: no node followed the one before (--trusted-key did not sign it)")
        roles = ", ".join(f"{r} {v['threshold']} of {len(v['keyids'])}" for r, v in sorted(o["roles"].items()))
        console.print(f"root version {o['root_version']} written, valid until {o['expires']}: {roles}")
        if o.get("model_signature"):
            m = o["model_signature"]
            console.print(f"producer signatures {'required' if m['required'] else 'checked when present'}: "
                          f"{len(m['keyids'])} producer key(s)")

    run_release_op(lambda: pub.write_root(where, keys, list(sign_with), thresholds, seconds, s3_endpoint, first,
                                          trusted_key, name, producer_key, require_model_signature), as_json, render)


@root_app.command("init")
def root_init_cmd(
    store: Store = None,
    root_key: RootKeys = None, release_key: ReleaseKeys = None, channel_key: ChannelKeys = None,
    report_key: ReportKeys = None,
    threshold: Thresholds = None,
    sign_with: Annotated[list[Path] | None, typer.Option(
        help="Private keys that sign it: the key nodes trust today (their --trusted-key) and the new root keys",
        parser=path)] = None,
    expires: Annotated[str, typer.Option(help="How long the root stays valid")] = "365d",
    s3_endpoint: S3Endpoint = None,
    as_json: AsJson = False,
    trusted_key: Annotated[list[Path] | None, typer.Option(
        help="A public key the nodes trust today, their --trusted-key (repeatable; default: the keys that "
             "signed the store's channel pointers): root 1 is refused unless one of them signs it",
        parser=path)] = None,
    name: StoreName = None,
    producer_key: RootProducerKeys = None,
    require_model_signature: RequireModelSignature = None,
) -> None:
    """Write root version 1: public keys per role (--root-key, --release-key, --channel-key: repeatable)."""
    _root_cmd(True, store, root_key, release_key, channel_key, report_key, threshold, sign_with, expires,
              s3_endpoint, as_json, trusted_key, name, producer_key, require_model_signature)


@root_app.command("rotate")
def root_rotate_cmd(
    store: Store = None,
    root_key: RootKeys = None, release_key: ReleaseKeys = None, channel_key: ChannelKeys = None,
    report_key: ReportKeys = None,
    threshold: Thresholds = None,
    sign_with: Annotated[list[Path] | None, typer.Option(
        help="Private keys that sign it: a threshold of the current root's root keys and of the new one's",
        parser=path)] = None,
    expires: Annotated[str, typer.Option(help="How long the root stays valid")] = "365d",
    s3_endpoint: S3Endpoint = None,
    as_json: AsJson = False,
    name: StoreName = None,
    producer_key: RootProducerKeys = None,
    require_model_signature: RequireModelSignature = None,
) -> None:
    """Write the next root version (rotate or revoke keys: a key the new root leaves out is trusted no more)."""
    _root_cmd(False, store, root_key, release_key, channel_key, report_key, threshold, sign_with, expires,
              s3_endpoint, as_json, None, name, producer_key, require_model_signature)


@app.command("status")
def status_cmd(
    channel: Annotated[list[str], typer.Option(help="A channel to show (repeatable)")],
    store: Store = None,
    agent_url: AgentUrl = None,
    s3_endpoint: S3Endpoint = None,
    as_json: AsJson = False,
    to: OldStore = None,
    target: Annotated[list[str] | None, old_spelling("--target", "--agent-url")] = None,
) -> None:
    """Which release each channel names, and which release each agent serves. Exit 1 when an agent lags."""
    from rich.table import Table

    where = _store("status", store, to)
    agents = [*(agent_url or []), *(target or [])]

    def render(out: dict) -> None:
        t = Table(title=f"channels in {escape(where)}")
        for col in ("channel", "release", "digest", "published", "note"):
            t.add_column(col, overflow="fold")
        for name, p in out["channels"].items():
            p = p or {}
            t.add_row(name, p.get("release") or "(none)", (p.get("digest") or "")[:16], p.get("published") or "",
                      escape(p.get("note") or ""))
        console.print(t)
        if out["targets"]:
            t = Table(title="agents")
            for col in ("agent", "channel", "serves", "up to date", "error"):
                t.add_column(col, overflow="fold")
            for r in out["targets"]:
                t.add_row(escape(r["target"]), r.get("channel") or "", r.get("release") or "",
                          {True: "yes", False: "[red]no[/]"}.get(r.get("up_to_date"), ""), escape(r.get("error", "")))
            console.print(t)
        from tritonops.cli.rollout import unattributed, waves_table

        for r in out.get("rollouts", {}).values():
            waves_table(r)
            unattributed(r)

    out: dict = {}

    def run() -> dict:
        from tritonops.release.status import status

        out.update(status(where, channel, agents, s3_endpoint))
        from tritonops.release import rollout  # a staged rollout: targeted / applied / gated / failed per wave

        found = {c: rollout.summary(where, c, agents, s3_endpoint) for c in channel}
        out["rollouts"] = {c: {k: v[k] for k in ("channel", "release", "rollout", "waves", "rejected_reports",
                                                 "unattributed")}
                           for c, v in found.items() if v is not None}
        return out

    run_release_op(run, as_json, render)
    if any(r.get("error") or not r.get("up_to_date") for r in out.get("targets", [])):
        raise typer.Exit(ExitCode.FINDINGS)


def _counts(out: dict, store: str) -> str:
    """``18 files: 15 uploaded, 3 duplicates of another file`` (what each file cost: a duplicate's content is
    uploaded once, for the file before it)."""
    parts = [f"{out['uploaded']} uploaded"]
    if out["already_there"]:
        parts.append(f"{out['already_there']} already in {escape(store)}")
    if out.get("duplicates"):
        n = out["duplicates"]
        parts.append(f"{n} duplicate{'' if n == 1 else 's'} of another file")
    return f"{out['files']} files: " + ", ".join(parts)
