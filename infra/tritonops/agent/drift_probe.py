"""The node side of the drift check: what a node holds, what its Triton has loaded, and what really runs.

Runs on the node (``tritonops-agent probe`` pushed by ``tritonops drift``; ``tritonops-agent check
--textfile`` from the drift_check role's timer) and in the Kubernetes CronJob (``check --url`` against
the Triton Service with ``--expect``). ``check`` exits 0 clean, 1 drift found, 3 the check itself
failed (exitcodes.py). On a node it also compares the unit, the running process and the live security
posture with what the triton_server role rendered (effective.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError, UsageError
from ..core.exitcodes import ExitCode
from ..core.fsio import write_atomic
from ..core.names import MANIFEST_FILE, TRUSTED_FILE
from ..core.triton_cli import HTTP_PORT
from ..core.triton_http import DEFAULT_HEADER, SECRET_ENV, Triton
from ..release_format import waves
from ..release_format.manifest import tree_files
from ..release_format.node_drift import compare, expected_versions, node_findings, release_configs, textfile
from . import argtypes, effective, kube
from .releases import release_digest
from .releases import state as gated_state

TEXTFILE_NAME = "tritonops_drift_node.prom"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def probe(link: Path, releases: Path, url: str, header: str, secret: str,
          expected: Path | None = None, channel: str | None = None,
          identity: tuple[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Everything the controller needs, as one JSON-able dict (``host_findings``: effective.py's, when
    ``expected`` names the role's expected-state file). ``channel`` (a pull node): ``served_digest``, the
    digest of the release the link serves, and ``channel``, what the agent last verified the channel's
    pointer to name (:func:`channel_view`), with the agent's ``identity`` (waves.identity: its id and
    group labels, default the host name's) and its gated release, which a staged rollout decides by."""
    out: dict[str, Any] = {"link": str(link), "active": None, "current": None, "manifest": None,
                           "files": None, "models": None, "index": None, "index_error": None, "loaded": None,
                           "host_findings": effective.host_findings(expected) if expected else []}
    if link.is_symlink() or link.is_dir():
        target = link.resolve()
        out["active"] = target.name if target.parent == releases.resolve() else str(target)
        if target.is_dir():
            out["files"] = tree_files(target)
            doc = read_json(target / MANIFEST_FILE)
            out["manifest"] = dict(doc["files"]) if doc and isinstance(doc.get("files"), dict) else None
            if out["manifest"] is not None:  # the models Triton should have READY, by the release's own configs
                out["models"] = expected_versions(out["manifest"], release_configs(target, out["manifest"]))
    state = gated_state(releases)
    out["current"] = state.get("current")
    if channel is not None:
        active = out["active"]
        out["served_digest"] = release_digest(releases, active) if active and "/" not in active else None
        agent_id, groups = identity or waves.identity(None, ())
        out["channel"] = {**channel_view(releases, channel), "agent": agent_id, "groups": list(groups),
                          "gated": {"current": out["current"], "digest": state["digest"]}}
    out["index"], out["index_error"], out["loaded"] = index_or_error(url, header, secret)
    return out


def channel_view(releases: Path, channel: str) -> dict[str, Any]:
    """What the node's release agent last verified ``channel``'s pointer to name, under its trusted root
    (``<releases>/.trusted.json``, which the agent writes only for a pointer whose signatures, version and
    expiry it checked: metadata.Trusted): ``{"name", "release", "digest", "version", "rollout"}``, release
    and digest None while the agent has trusted no pointer of that channel (or the file is unreadable:
    ``error``); ``rollout`` the pointer's staged rollout (None: none)."""
    out: dict[str, Any] = {"name": channel, "release": None, "digest": None, "version": None, "rollout": None}
    path = releases / TRUSTED_FILE
    if not path.exists():
        return out
    channels = (read_json(path) or {}).get("channels")
    if not isinstance(channels, dict) or not isinstance(channels.get(channel, {}), dict):
        return {**out, "error": f"{path}: unreadable, or not the release agent's trusted state"}
    out.update({k: channels.get(channel, {}).get(k) for k in ("release", "digest", "version", "rollout")})
    return out


def index_or_error(url: str, header: str, secret: str
                   ) -> tuple[list[dict[str, Any]] | None, str | None, list[dict[str, Any]] | None]:
    """(index, None, loaded models), or (None, why it could not be read, None)."""
    triton = Triton(url, header, secret, timeout=10)
    try:
        return triton.index(), None, triton.loaded()
    except ReleaseError as e:
        return None, str(e), None


# --- command line ---------------------------------------------------------------------------------

def _expected(args: argparse.Namespace) -> Path | None:
    return Path(args.expected) if args.expected else None


def _check(args: argparse.Namespace, secret: str) -> int:
    if args.url:
        url = args.url
        index, index_error, loaded = index_or_error(url, args.header, secret)
        models: dict[str, list[str]] = {}
        for spec in args.expect:
            name, _, versions = spec.partition(":")
            models[name] = versions.split(",") if versions else []
        findings = compare({}, {}, models, index, index_error, loaded)
        findings += effective.posture_findings(url, args.restricted, args.grpc, args.restricted, args.grpc_tls)
        if args.pods:
            findings += kube.check(json.loads(Path(args.pods).read_text()), kube.Kube())
    else:
        findings = node_findings(probe(Path(args.link), Path(args.releases), f"http://127.0.0.1:{args.port}",
                                       args.header, secret, _expected(args), args.channel, args.identity))
    result = {"host": args.host, "source": args.source, "findings": findings}
    print(json.dumps(result, indent=2, sort_keys=True))
    if args.textfile:
        write_atomic(Path(args.textfile) / TEXTFILE_NAME,
                     textfile([{"source": args.source, "host": args.host, "count": len(findings)}],
                              {args.source: True}))
    return ExitCode.FINDINGS if findings else ExitCode.OK


def add_commands(sub: Any) -> None:
    """``probe`` and ``check`` on the agent's command line."""
    for name in ("probe", "check"):
        sp = sub.add_parser(name, help="drift: " + ("the node's state as JSON" if name == "probe" else
                                                     "compare the node with its release (exit 1 on drift)"))
        sp.add_argument("--link", default="/var/lib/triton/models")
        sp.add_argument("--releases", default="/var/lib/triton/releases")
        sp.add_argument("--port", type=argtypes.port, default=HTTP_PORT)
        sp.add_argument("--header", default=DEFAULT_HEADER)
        sp.add_argument("--expected", default=effective.EXPECTED_FILE,
                        help="the triton_server role's expected state: unit, process and posture are "
                             "compared with it (node mode; '' skips them, for a Triton no role manages)")
        sp.add_argument("--channel",
                        help="a pull node's channel: the release served must be the one the release agent last "
                             "verified the channel's pointer to name (its trusted state in --releases)")
        sp.add_argument("--agent-id", help="with --channel: the release agent's --agent-id, which a staged rollout's "
                                           "percent waves decide by (default: POD_NAME, else the host name)")
        sp.add_argument("--group-label", action="append", default=[],
                        help="with --channel: the release agent's --group-label (repeatable), which a staged "
                             "rollout's group waves decide by")
        if name == "check":
            sp.add_argument("--host", default=os.uname().nodename)
            sp.add_argument("--source", default="models")
            sp.add_argument("--url", type=argtypes.url,
                            help="check a remote Triton against --expect instead of the node")
            sp.add_argument("--expect", action="append", default=[],
                            help="MODEL[:V1,V2] that must be READY (any version when none is given)")
            sp.add_argument("--restricted", action="store_true",
                            help="with --url: the repository API must refuse a call without the admin header "
                                 "(HTTP, and gRPC with --grpc)")
            sp.add_argument("--grpc", type=argtypes.grpc_address, help="with --url: Triton's gRPC endpoint HOST:PORT")
            sp.add_argument("--grpc-tls", action="store_true", help="with --grpc: it must speak TLS")
            sp.add_argument("--pods", help="with --url, in a pod: a JSON file of the Deployments whose pods' "
                                           "containers and releases are compared (Kubernetes API)")
            sp.add_argument("--textfile", type=argtypes.folder,
                            help="write Prometheus textfile metrics into this folder")


def run(args: argparse.Namespace) -> int:
    secret = os.environ.get(SECRET_ENV, "")
    try:  # a pull node's agent, as the agent names itself (a rollout decides by it)
        args.identity = waves.identity(args.agent_id, args.group_label) if args.channel else None
    except UsageError as e:
        print(json.dumps({"error": str(e)}))
        return ExitCode.USAGE
    try:
        if args.cmd == "probe":
            print(json.dumps(probe(Path(args.link), Path(args.releases), f"http://127.0.0.1:{args.port}",
                                   args.header, secret, _expected(args), args.channel, args.identity),
                             sort_keys=True))
            return ExitCode.OK
        return _check(args, secret)
    except Exception as e:  # noqa: BLE001 - the check itself failed: say so, exit 3
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        if getattr(args, "textfile", None):
            with contextlib.suppress(OSError):
                write_atomic(Path(args.textfile) / TEXTFILE_NAME, textfile([], {args.source: False}))
        return ExitCode.FAILED
