"""``tritonops smoke``, ``bench``, ``tune`` and ``serve``: checks, load and tuning against a Triton, a local one."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tritonops.cli import params as cli_params
from tritonops.cli.extras import require
from tritonops.cli.output import console as stdout
from tritonops.cli.output import err_console, print_json
from tritonops.cli.params import JsonReport
from tritonops.cli.params import path as path_arg
from tritonops.core.errors import ReleaseError
from tritonops.core.exitcodes import ExitCode
from tritonops.core.names import check_path
from tritonops.core.triton_cli import GRPC_PORT, HTTP_PORT, METRICS_PORT
from tritonops.core.triton_http import DEFAULT_HEADER, SECRET_ENV
from tritonops.triton.admin import AdminKeyError, admin_headers, admin_key, check_header_name
from tritonops.triton.load_config import BenchConfig
from tritonops.triton.tune_space import TuneConfig

if TYPE_CHECKING:  # the modules below load Triton's client (and numpy): each command imports what it runs
    from rich.progress import Progress
    from rich.table import Table

    from tritonops.model_repo import pbtxt
    from tritonops.triton import bench, steady
    from tritonops.triton import tune as tuner

console = Console(stderr=True)  # bench/tune progress and tables


def _progress(enabled: bool) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not enabled, transient=True,
    )


AllowHost = Annotated[list[str] | None, typer.Option(help="A non-loopback project host that may receive load")]


def _report_table(r: bench.BenchReport, measured: str = "", tries: steady.Tries | None = None) -> Table:
    from rich.table import Table

    t = Table(title=f"{r.config['model']} over {r.config['protocol']} ({r.config['mode']} loop, {r.engine})")
    t.add_column("metric", overflow="fold")
    t.add_column("value", justify="right", overflow="fold")
    rows = [
        ("requests sent / ok", f"{r.sent} / {r.succeeded}"),
        ("elapsed (stopped by " + r.stopped_by + ")", f"{r.elapsed_s:.2f} s"),
        ("throughput", f"{r.throughput_rps:.1f} req/s ({r.inferences_per_s:.1f} inf/s)"),
        ("latency p50 / p95 / p99", f"{r.p50_ms:.2f} / {r.p95_ms:.2f} / {r.p99_ms:.2f} ms"),
        ("server queue", f"{r.server.queue_ms:.3f} ms"),
        ("server compute input / infer / output",
         f"{r.server.compute_input_ms:.3f} / {r.server.compute_infer_ms:.3f} / "
         f"{r.server.compute_output_ms:.3f} ms"),
        ("server batch size (inferences/execution)", f"{r.server.batch_size:.2f}"),
        ("errors", ", ".join(f"{k}: {v}" for k, v in r.errors.items()) or "none"),
        ("what bounds it (Triton's counters)", (r.to_dict()["bound"] or {}).get("says", "nothing counted")),
    ]
    if tries is not None:  # perf_analyzer: how it measured, and what a retry relaxed to get there
        rows.append(("measured", measured + (f" +-{r.spread:.0%}" if r.spread else "")
                     + (f" ({len(tries.tries)} runs)" if len(tries.tries) > 1 else "")))
        rows.append(("relaxed to measure", ", ".join(tries.relaxed()) or "nothing"))
    for k, v in rows:
        t.add_row(k, v)
    return t


def _model_name(name: str) -> str:
    """A typer callback: a model name Triton could serve (one safe path part), checked before any request."""
    try:
        return check_path(name, where="model")
    except ReleaseError as e:
        raise typer.BadParameter(str(e)) from None


def _endpoint(url: str) -> str:
    """A typer callback: host:port, or a URL with a scheme as ``smoke`` takes it (http://HOST:PORT,
    grpc://HOST:PORT), checked; :func:`_address` turns it into host:port and a protocol."""
    if not url.strip():
        raise typer.BadParameter("an empty endpoint: give host:port")
    from tritonops.triton.smoke import Endpoint

    if "://" not in url:
        return url
    try:
        endpoint = Endpoint.parse(url)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if endpoint.tls:
        raise typer.BadParameter(f"{url!r}: load is measured over plain HTTP or gRPC; give http:// or grpc://")
    return url


def _address(url: str, protocol: str | None) -> tuple[str, str]:
    """(host:port, protocol) from --url and --protocol: the URL's scheme, when it has one, is the protocol,
    and a --protocol that contradicts it is a usage error."""
    from tritonops.triton.smoke import Endpoint

    if "://" not in url:
        return url, protocol or "http"
    endpoint = Endpoint.parse(url)
    if protocol is not None and protocol != endpoint.protocol:
        raise typer.BadParameter(f"--url {url!r} is {endpoint.protocol}, --protocol says {protocol}: give one",
                                 param_hint="'--protocol'")
    return endpoint.address, endpoint.protocol


_DURATION = cli_params.finite(0, low_ok=False)

# The admin key for Triton's restricted APIs, as the roles and stacks hand it out: a file, or the release
# agent's environment variable; never a command-line value (--header names the header only).
AdminHeader = Annotated[str, typer.Option(
    "--header", help=f"The admin header's name (its value: --admin-key-file, else ${SECRET_ENV})")]
AdminKeyFile = Annotated[Path | None, typer.Option(
    help=f"A file holding the admin key alone, for restricted admin APIs (default: ${SECRET_ENV})",
    parser=path_arg)]


def _admin(header: str, key_file: Path | None) -> dict[str, str]:
    """The admin header to send ({} without a key); a usage error (exit 2) when the key cannot be read."""
    try:
        return admin_headers(check_header_name(header), admin_key(key_file))
    except AdminKeyError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None


def bench_cmd(
    model: Annotated[str, typer.Argument(help="Model name", callback=_model_name)],
    url: Annotated[
        str, typer.Option(help="Triton HTTP or gRPC endpoint: host:port or http://HOST:PORT", callback=_endpoint)
    ] = f"127.0.0.1:{HTTP_PORT}",
    protocol: Annotated[
        str | None, typer.Option(help="http or grpc (default: --url's scheme, else http)")
    ] = None,
    mode: Annotated[str, typer.Option(help="closed (concurrency) or open (Poisson rate)")] = BenchConfig.mode,
    concurrency: Annotated[int, typer.Option(help="Closed loop: requests in flight")] = BenchConfig.concurrency,
    rate: Annotated[float, typer.Option(help="Open loop: mean requests per second")] = BenchConfig.rate,
    requests: Annotated[
        int | None, typer.Option(help="Measure this many requests (default: as many as --duration allows)")
    ] = None,
    duration: Annotated[
        float, typer.Option(help="Measurement time budget in seconds", callback=_DURATION)
    ] = BenchConfig.max_seconds,
    batch_size: Annotated[int, typer.Option(help="Batch size per request (batching models)")] = BenchConfig.batch_size,
    engine: Annotated[
        str, typer.Option(help="perf_analyzer (Triton's load generator, the reference) or python (asyncio)")
    ] = "perf_analyzer",
    stability: Annotated[
        float, typer.Option(help="perf_analyzer: % by which windows may differ and still be stable")
    ] = BenchConfig.stability_pct,
    allow_host: AllowHost = None,
    header: AdminHeader = DEFAULT_HEADER,
    admin_key_file: AdminKeyFile = None,
    show_command: Annotated[bool, typer.Option(
        "--show-command", help="Print the perf_analyzer command line (library path included) that measures "
        "the same load, and exit without sending any")] = False,
    as_json: JsonReport = False,
) -> None:
    """Send bounded load to MODEL and report throughput, latency percentiles, errors and server breakdown.

    The perf_analyzer engine splits --duration into measurement windows and reports the stable ones
    (it needs libb64-0d from Debian and nvidia-cuda-runtime-cu12 from PyPI: `make apt venv`). When its
    windows never settle (a busy machine), it measures again as tune does: windows twice as long and twice
    as many, then the median of 5 rounds that demand no stability; the report says how it measured and
    what it relaxed, each try with its windows and stability. --show-command prints perf_analyzer's own
    command line for the first try (the admin key as $(cat FILE) or $TRITONOPS_ADMIN_SECRET, never its value).

    A Triton with restricted admin APIs (the triton_server role, the triton stack) needs their key for
    the model configuration and statistics: --admin-key-file, else $TRITONOPS_ADMIN_SECRET.

    Exit codes: 0 every request succeeded, 1 some failed, 2 bad arguments, a target that is not
    loopback (or --allow-host) or a model the server does not serve, 3 no Triton answers at --url, it
    refuses or garbles an answer (a restricted API without the key: 403), or the engine could not
    measure, retries included (or the 'obs' extra, perf_analyzer's CUDA runtime, is not installed). With
    --json a failure is a JSON document too: {"error", "exit_code", "relaxed", "tries"}.
    """
    from tritonops.triton import bench, perf_analyzer, steady

    url, protocol = _address(url, protocol)
    admin = tuple(_admin(header, admin_key_file).items())
    if engine == "perf_analyzer" or show_command:
        require("bench", "obs")  # perf_analyzer loads libcudart.so.12 (nvidia-cuda-runtime-cu12)
    tries = steady.Tries()
    try:
        cfg = BenchConfig(
            url=url, model=model, protocol=protocol, mode=mode, concurrency=concurrency,  # type: ignore[arg-type]
            rate=rate, max_requests=requests, max_seconds=duration, batch_size=batch_size,
            allowed_hosts=tuple(allow_host or ()), engine=engine, stability_pct=stability,  # type: ignore[arg-type]
            headers=admin,
        )
        if show_command:
            _show_command(cfg, admin_key_file, as_json)
        with _progress(not as_json) as progress:
            what = f"{model} {protocol} {mode} ({engine})"
            task = progress.add_task(what, total=requests if cfg.engine == "python" else None)
            tries.on_done = lambda n: progress.advance(task, n)
            tries.on_try = lambda k, c: progress.update(task, description=f"{what} try {k}: {_flags(steady.Try.of(c))}")
            report, measured, _why = steady.measure_steadily(cfg, tries)  # _why: each try's failure is in tries
    except ValueError as e:  # bad bounds, a refused target, an unknown model
        _bench_failed(str(e), ExitCode.USAGE, tries, as_json)
    except (bench.ServerError, perf_analyzer.PerfAnalyzerError) as e:
        _bench_failed(str(e), ExitCode.FAILED, tries, as_json)
    retried = tries.to_dict() if cfg.engine == "perf_analyzer" else {}
    if as_json:
        print(json.dumps(report.to_dict() | {"measured": measured} | retried, indent=2))
    else:
        Console().print(_report_table(report, measured, tries if retried else None))
    raise typer.Exit(ExitCode.FINDINGS if report.errors else ExitCode.OK)


def _flags(t: steady.Try) -> str:
    return f"windows {t.window_ms} ms x{t.windows}, stability {t.stability}"


def _show_command(cfg: BenchConfig, admin_key_file: Path | None, as_json: bool) -> None:
    """Print perf_analyzer's command line for ``cfg`` (the admin key as the shell reads it, never its value); exit 0."""
    from tritonops.triton import perf_analyzer

    key = f"$(cat {shlex.quote(str(admin_key_file))})" if admin_key_file else f"${{{SECRET_ENV}}}"
    text = perf_analyzer.find().shell_command(cfg, key)
    if as_json:
        print(json.dumps({"command": text}, indent=2))
    else:
        print(text)
    raise typer.Exit(ExitCode.OK)


def _bench_failed(reason: str, code: ExitCode, tries: steady.Tries, as_json: bool) -> NoReturn:
    """The one-line reason (with --json a JSON document on stdout) and each try, then exit ``code``."""
    if as_json:
        print(json.dumps({"error": reason, "exit_code": int(code)} | tries.to_dict(), indent=2))
    else:
        console.print(f"[red]error:[/] {escape(reason)}", soft_wrap=True)
        for k, t in enumerate(tries.tries[:-1] if len(tries.tries) > 1 else [], 1):
            console.print(f"  try {k} ({_flags(t)}): {escape(t.failure or 'measured')}", soft_wrap=True)
    raise typer.Exit(code)


def _ints(low: int) -> Callable[[str], str]:
    """A typer callback: comma-separated integers, each at least ``low`` (checked before any request)."""
    def check(text: str) -> str:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise typer.BadParameter(f"{text!r}: expected comma-separated integers") from None
        if not values or min(values) < low:
            raise typer.BadParameter(f"{text!r}: expected comma-separated integers >= {low}")
        return text
    return check


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _int_text(values: tuple[int, ...]) -> str:
    """A default of comma-separated integers as the option takes it (the inverse of :func:`_int_list`)."""
    return ",".join(map(str, values))


_TUNE = TuneConfig  # tune's defaults, each one written once (TuneConfig)


def tune_cmd(
    model: Annotated[str, typer.Argument(help="Model name (loaded, explicit mode)", callback=_model_name)],
    repository: Annotated[Path, typer.Option(help="Model repository holding MODEL/config.pbtxt")],
    url: Annotated[
        str, typer.Option(help="Triton HTTP endpoint: host:port or http://HOST:PORT", callback=_endpoint)
    ] = f"127.0.0.1:{HTTP_PORT}",
    budget_ms: Annotated[float, typer.Option(help="p95 latency budget (ms)")] = _TUNE.budget_ms,
    concurrency: Annotated[int, typer.Option(help="Closed-loop concurrency for every setting")] = _TUNE.concurrency,
    requests: Annotated[
        int | None, typer.Option(help="Requests measured per setting (default: as many as --duration allows)")
    ] = _TUNE.max_requests,
    duration: Annotated[
        float, typer.Option(help="Measurement time budget per setting (s)", callback=_DURATION)
    ] = _TUNE.max_seconds,
    engine: Annotated[str, typer.Option(help="perf_analyzer (the reference) or python")] = _TUNE.engine,
    stability: Annotated[
        float, typer.Option(help="perf_analyzer: % by which windows may differ and still be stable")
    ] = _TUNE.stability_pct,
    instances: Annotated[
        str, typer.Option(help="Instance counts to try", callback=_ints(1))
    ] = _int_text(_TUNE.instance_counts),
    delays: Annotated[
        str, typer.Option(help="max_queue_delay_microseconds values to try", callback=_ints(0))
    ] = _int_text(_TUNE.queue_delays_us),
    search: Annotated[
        str, typer.Option(help="climb (one dimension at a time, kept when it gains) or grid (every setting)")
    ] = _TUNE.search,
    grpc_url: Annotated[str | None, typer.Option(
        help="Triton's gRPC endpoint (host:port or grpc://HOST:PORT): the search also measures over gRPC",
        callback=lambda v: v and _endpoint(v))] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="PNG (default tune-MODEL.png)")] = None,
    allow_host: AllowHost = None,
    header: AdminHeader = DEFAULT_HEADER,
    admin_key_file: AdminKeyFile = None,
    write: Annotated[bool, typer.Option(help="Write the recommendation into MODEL/config.pbtxt")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable result")] = False,
) -> None:
    """Search dynamic batching and instance counts for MODEL; recommend the best setting within the budget.

    --search climb (the default) tries batching off and on, then more instances, then longer queue
    delays and the max batch size as preferred size, keeping each only when it gains over 5%, and with
    --grpc-url the best over gRPC (clients choose the protocol: it is not written); --search grid
    measures every combination. Each setting is measured with perf_analyzer (--engine). The
    recommendation is written into MODEL/config.pbtxt changing only dynamic_batching and
    instance_group: comments, license header and field order stay, and the file is replaced atomically.

    A setting perf_analyzer cannot measure stably is measured again with longer windows, then (or at
    once when a run overran its time limit) as the median of 5 short rounds, with their spread as the
    noise: settings rank only when they differ by more than it. Each trial says how it was measured
    (stable, stable-after-retry, median-of-5 +-spread).
    The settings within 20% of the fastest (at most 3) are then measured 5 more times each, in turns, and
    compared in pairs, so a busy host's drift between runs cancels within a pair: a setting wins over a
    simpler one only when the bound on its median throughput ratio (sign test, 93.8% for 5 pairs) clears
    1.05 and its p95 is not worse beyond its own bound; otherwise "indistinguishable: kept the simpler
    setting", with the ratio and bound (a table of every trial with its spread, and `comparisons` in --json).
    On a terminal a progress bar shows trial k of n, the setting, elapsed and time left.
    A setting that could not be measured at all stops the climb there, and nothing is recommended.

    Exit codes: 0 a recommendation (written unless --no-write), 1 no setting met the budget without
    errors, or a setting could not be measured, 2 bad arguments, an unusable config.pbtxt or a model
    the server does not serve, 3 no Triton answers at --url, it refuses or garbles an answer (the
    repository API of a hardened Triton without --admin-key-file or $TRITONOPS_ADMIN_SECRET: 403), the
    engine is missing, or the 'obs' extra (matplotlib, for the plot) is not installed.
    """
    admin = tuple(_admin(header, admin_key_file).items())
    url, protocol = _address(url, None)
    if protocol != "http":
        raise typer.BadParameter("tune reloads models through Triton's HTTP repository API: give http://HOST:PORT",
                                 param_hint="'--url'")
    config_path = repository / model / "config.pbtxt"
    spec, cfg = _tune_config(config_path, lambda: TuneConfig(
        url=url, model=model, budget_ms=budget_ms, concurrency=concurrency, max_requests=requests,
        max_seconds=duration, engine=engine, stability_pct=stability,  # type: ignore[arg-type]
        instance_counts=tuple(_int_list(instances)), queue_delays_us=tuple(_int_list(delays)),
        search=search, headers=admin, allowed_hosts=tuple(allow_host or ()),  # type: ignore[arg-type]
        grpc_url=_address(grpc_url, "grpc")[0] if grpc_url else None))
    result = _tune_run(cfg, spec, progress=not as_json)
    _tune_report(result, cfg, config_path, plot_path or Path(f"tune-{model}.png"), write, as_json)


def _tune_config(config_path: Path,
                 settings: Callable[[], tuner.TuneConfig]) -> tuple[pbtxt.ModelSpec, tuner.TuneConfig]:
    """The model's configuration and tune's settings, checked before any request is sent: an unusable
    config.pbtxt or setting exits 2, a Triton that does not answer (or a missing engine) exits 3."""
    from tritonops.model_repo import pbtxt
    from tritonops.triton import bench, perf_analyzer

    try:
        spec = pbtxt.parse(pbtxt.read_text(config_path), config_path)
        cfg = settings()
        cfg.space(spec.max_batch_size or 0)
        require("tune", "obs")  # the plot (matplotlib), perf_analyzer's CUDA runtime: before any request
        bench.check_target(cfg.url, cfg.allowed_hosts)
        bench.preflight(cfg.load)
        if cfg.engine == "perf_analyzer":
            perf_analyzer.find()
    except (ValueError, pbtxt.ModelConfigError) as e:
        console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
    except (bench.ServerError, perf_analyzer.PerfAnalyzerError) as e:
        console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(ExitCode.FAILED) from None
    return spec, cfg


def _tune_run(cfg: tuner.TuneConfig, spec: pbtxt.ModelSpec, progress: bool) -> tuner.TuneResult:
    """The search, one line per trial on stderr and, on a terminal (``progress``: not --json), a progress bar:
    trial k of n (at most n while the search runs), the setting, elapsed and about how long is left (the
    measurements left at the mean time of those done; before the first, --duration each). A refused or
    garbled answer mid-search exits 3."""
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tritonops.triton import bench
    from tritonops.triton import tune as tuner

    started = time.monotonic()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[left]}"), console=console, transient=True,
                  disable=not (progress and console.is_terminal)) as bar:
        task = bar.add_task(f"tune {cfg.model} ({cfg.search})", total=None, left="")

        def on_measure(setting: tuner.Setting, k: int, n: int) -> None:
            each = (time.monotonic() - started) / (k - 1) if k > 1 else cfg.max_seconds
            left = round((n - k + 1) * each)
            bar.update(task, description=f"tune {cfg.model}: trial {k} of {n}: {setting.label}", completed=k - 1,
                       total=n, left=f"about {left // 60}m{left % 60:02d}s left")

        def on_trial(t: tuner.Trial) -> None:
            bar.console.print(
                f"{t.setting.label:<45} {t.report.inferences_per_s:9.1f} inf/s  p95 {t.report.p95_ms:8.2f} ms"
                f"  {t.measured}" + (f" +-{t.report.spread:.0%}" if t.report.spread else "")
                + ("" if t.error_free else f"  errors {t.report.errors} {t.failure}"),
                highlight=False, markup=False)

        try:
            return tuner.run(cfg, spec, on_trial=on_trial, on_measure=on_measure)
        except bench.ServerError as e:  # a refused or garbled answer mid-search (a reload, the statistics)
            console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)
            raise typer.Exit(ExitCode.FAILED) from None


def _trials_table(result: tuner.TuneResult) -> Table:
    """Every trial: throughput with its spread (the noise its rounds measured), p95, and how it was measured."""
    from rich.table import Table

    table = Table(title=f"tune {result.model}: every setting measured (p95 budget {result.budget_ms:g} ms)")
    for name, justify in (("setting", "left"), ("inf/s", "right"), ("spread", "right"), ("p95 ms", "right"),
                          ("measured", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for t in result.trials:
        mark = " (pick)" if result.best is t else ("" if t.usable else " (over budget or errors)")
        table.add_row(t.setting.label + mark, f"{t.report.inferences_per_s:.1f}",
                      f"+-{t.report.spread:.0%}" if t.report.spread else "-", f"{t.report.p95_ms:.2f}", t.measured)
    return table


def _tune_report(result: tuner.TuneResult, cfg: tuner.TuneConfig, config_path: Path, plot_path: Path,
                 write: bool, as_json: bool) -> None:
    """Plot every trial, write the recommendation (when there is one and ``write``), print, and exit 0 or 1."""
    from tritonops.triton import tune as tuner

    png = tuner.plot(result, plot_path)
    out = result.to_dict()
    out["plot"] = str(png)
    if result.best and write:  # never when the search is incomplete (then there is no best)
        tuner.write_recommendation(config_path, result.best.setting)
        out["written"] = str(config_path)
    if as_json:
        print(json.dumps(out, indent=2, default=str))
    else:
        c = Console()
        c.print(_trials_table(result))
        for comparison in result.comparisons:
            c.print(f"runoff: {comparison.says}", soft_wrap=True, highlight=False, markup=False)
        if result.best:
            best = result.best.report
            c.print(f"recommended: [bold]{result.best.setting.label}[/]: "
                    f"{best.inferences_per_s:.1f} inf/s, p95 {best.p95_ms:.2f} ms (budget {cfg.budget_ms:g} ms)")
            if result.best.setting.protocol != "http":
                c.print(f"clients: send over {result.best.setting.protocol} (not part of config.pbtxt)")
            if found := best.to_dict()["bound"]:
                c.print(f"what bounds it: {escape(found['says'])}", soft_wrap=True)
                if found["bound"] == "frontend/client" and not cfg.grpc_url:
                    c.print("gRPC was not tried: give --grpc-url HOST:PORT (Triton's gRPC port) to measure it")
            over_grpc = dataclasses.replace(result.best.setting, protocol="grpc")
            if result.best.setting.protocol == "http" and (g := next(
                    (t for t in result.trials if t.setting == over_grpc and not t.unmeasured), None)):
                c.print(f"over gRPC it read {g.report.inferences_per_s:.1f} inf/s, p95 {g.report.p95_ms:.2f} ms: "
                        "not a gain beyond the noise, so HTTP stays")
            if write:
                c.print(f"wrote {config_path}")
        elif result.incomplete:
            c.print(f"[red]no recommendation: {escape(result.incomplete)}[/]", soft_wrap=True)
        else:
            c.print(f"[red]no setting kept p95 within {cfg.budget_ms:g} ms without errors[/]")
        c.print(f"plot: {png}")
    raise typer.Exit(ExitCode.OK if result.best else ExitCode.FINDINGS)


# --- inference checks and a local server ---------------------------------------------------------

def smoke(
    url: Annotated[str, typer.Argument(help=f"http://HOST:{HTTP_PORT}, grpc://HOST:{GRPC_PORT} or grpcs://HOST:{GRPC_PORT}")],
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Check only these models")] = None,
    repository: Annotated[
        Path | None, typer.Option(help="Local copy of the deployed repository: golden data and the expected models",
                                  parser=path_arg)
    ] = None,
    metrics_url: Annotated[str | None, typer.Option(help=f"Default: http://HOST:{METRICS_PORT}/metrics")] = None,
    header: AdminHeader = DEFAULT_HEADER,
    admin_key_file: AdminKeyFile = None,
    ca: Annotated[Path | None, typer.Option(help="CA bundle for grpcs://", parser=path_arg)] = None,
    cert: Annotated[Path | None, typer.Option(help="Client certificate for mutual TLS", parser=path_arg)] = None,
    key: Annotated[Path | None, typer.Option(help="Client key for mutual TLS", parser=path_arg)] = None,
    as_json: JsonReport = False,
) -> None:
    """Live, ready, every model READY, golden inference within tolerance, metrics served.

    Without --model or --repository the models come from the repository index, a restricted API on a
    hardened Triton: its key from --admin-key-file, else $TRITONOPS_ADMIN_SECRET.

    Exit 0 when every check passes, 1 when any fails (a server that refuses or garbles an answer
    fails its check), 2 on a usage error.
    """
    from tritonops.triton.smoke import report_table
    from tritonops.triton.smoke import smoke as run_smoke

    headers = _admin(header, admin_key_file)
    problems = [f"--repository {repository}: not a folder"] if repository and not repository.is_dir() else []
    problems += [f"--{opt} {p}: not found, or not a regular file"
                 for opt, p in (("ca", ca), ("cert", cert), ("key", key)) if p is not None and not p.is_file()]
    if problems:
        err_console.print(f"[red]error:[/] {escape(problems[0])}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE)
    try:
        report = run_smoke(url, models=model or (), repository=repository, metrics_url=metrics_url,
                           headers=headers, ca=ca, cert=cert, key=key)
    except ValueError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
    if as_json:
        print_json(report.model_dump(mode="json") | {"ok": report.ok})
    else:
        stdout.print(report_table(report))
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FINDINGS)


class ControlMode(StrEnum):
    none = "none"
    poll = "poll"
    explicit = "explicit"


def serve(
    repository: Annotated[
        Path, typer.Argument(help="Model repository to serve", parser=path_arg)
    ] = Path("examples/model_repository"),
    model_control_mode: Annotated[ControlMode, typer.Option(help="Triton's --model-control-mode")] = ControlMode.none,
) -> None:
    """Run a local CPU-only tritonserver (from the nvidia-pytriton wheel) on free loopback ports until Ctrl-C."""
    from tritonops.triton.server import start as start_server

    require("serve", "triton")
    if not repository.is_dir():
        err_console.print(f"[red]error:[/] {escape(str(repository))}: not a folder (a model repository is one)",
                          soft_wrap=True, highlight=False)
        raise typer.Exit(ExitCode.USAGE)
    try:
        server = start_server(repository, model_control_mode=model_control_mode.value,
                              load_models=["*"] if model_control_mode == ControlMode.explicit else ())
    except RuntimeError as e:  # tritonserver refused the repository or died while starting: its log says why
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.FAILED) from None
    try:  # a Ctrl-C while the line is printed stops the server as one during the wait does
        stdout.print(f"tritonserver ready: http://{server.http_url} grpc://{server.grpc_url} {server.metrics_url}",
                     soft_wrap=True, highlight=False)
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
