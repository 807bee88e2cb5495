"""``tritonops preflight``: before a stack's ``pulumi up``, what the live cluster lacks of the cluster contract.

Exit codes: 0 everything is there (``later``: an object the user creates in a namespace the stack's own
first ``pulumi up`` creates, with its command, is not missing); 1 something is missing (each line gives
the command that provides it); 2 a bad --stack/--env, stack file or kubeconfig; 3 no cluster to check
(no kubeconfig, the API server did not answer or refused the credentials).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tritonops import project
from tritonops.cli.params import ProjectDir, path
from tritonops.core.exitcodes import ExitCode
from tritonops.k8s import STACKS


def _print(found: list, api_note: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"cluster": api_note, "checks": [
            {"what": p.what, "ok": p.ok, "neededBy": p.needed_by, "provider": p.provider.name,
             "command": p.command if (p.later or not p.ok) else None, "later": p.later} for p in found]},
            indent=2))
        return
    out = Console(soft_wrap=True, highlight=False)
    out.print(escape(api_note))
    for p in found:
        mark = "later  " if p.later else "ok     " if p.ok else "[red]missing[/red]"
        out.print(f"{mark} {escape(p.what)}  [dim](needed by {escape(p.needed_by)})[/dim]")
        if p.later:
            out.print(f"        {escape(p.later)}: {escape(p.command)}")
        elif not p.ok:
            out.print(f"        provide: {escape(p.command)}")


def preflight(
    stack: Annotated[str, typer.Option("--stack", help=f"Stack under the project's stacks/: {', '.join(STACKS)}.")],
    env: Annotated[str, typer.Option("--env", help="Pulumi stack: any with a stacks/<stack>/Pulumi.<env>.yaml.")],
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", parser=path,
                                                    help="Kubeconfig of the cluster (default: $KUBECONFIG, "
                                                    "~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option("--context", help="Context of the kubeconfig (default: "
                                                "its current-context).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    project_dir: ProjectDir = None,
) -> None:
    """Check the live cluster for what the stack needs before its `pulumi up`; print what is missing and its fix.

    CRDs and their versions, StorageClass, IngressClass, Gateway and GatewayClass, the VPC CNI's network policy
    option, the Secrets to create (tritonops.k8s.preflight), and the image digests: each missing one with the
    command that provides it.
    """
    from tritonops.k8s import kubeapi
    from tritonops.k8s import preflight as pf
    from tritonops.k8s.config import ConfigError

    err = Console(stderr=True, soft_wrap=True, highlight=False)
    stacks_dir = project.stacks_dir(project_dir)
    try:
        found = pf.probes(stack, env, stacks_dir)
    except ConfigError as exc:
        err.print(f"[red]invalid configuration[/red] {escape(str(exc))}")
        raise typer.Exit(ExitCode.USAGE) from None
    config = kubeconfig or kubeapi.default_kubeconfig()
    try:
        api = kubeapi.client(config, context)
        status, _ = api.get("/version")
        if status in (401, 403):
            raise kubeapi.Unreachable(f"the API server {api.server} refused the credentials (HTTP {status})")
        checked = pf.run(found, api)
    except kubeapi.KubeconfigError as exc:
        if kubeconfig is not None and kubeconfig.is_file():
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(ExitCode.USAGE) from None
        _no_cluster(pf.offline(found), f"no cluster to check: {exc}", as_json, err)
    except kubeapi.Unreachable as exc:
        _no_cluster(pf.offline(found), f"no cluster to check: {exc}", as_json, err)
    _print(checked, f"preflight {stack}/{env} against {api.server} (context {api.context})", as_json)
    raise typer.Exit(ExitCode.FINDINGS if any(not p.ok for p in checked) else ExitCode.OK)


def _no_cluster(known: list, message: str, as_json: bool, err: Console) -> None:
    """What is known without the cluster, then the message; exit 3."""
    if known or as_json:
        _print(known, "without a cluster, from the stack file:", as_json)
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(ExitCode.FAILED)
