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
import re
import time
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError, UsageError
from ..core.exitcodes import ExitCode
from ..core.fsio import write_atomic
from ..core.names import MANIFEST_FILE
from . import argtypes, effective, kube, rollout
from .manifest import tree_files
from .metadata import TRUSTED_FILE
from .releases import STATE_FILE, release_digest
from .triton import DEFAULT_HEADER, SECRET_ENV, Triton

DRIFT_METRIC = "tritonops_drift_resources"  # tritonops.observability.metrics imports this one (nodes lack the package)
SUCCESS_METRIC = "tritonops_drift_check_success"
LAST_RUN_METRIC = "tritonops_drift_last_run_timestamp_seconds"
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
    pointer to name (:func:`channel_view`), with the agent's ``identity`` (rollout.identity: its id and
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
    state = read_json(releases / STATE_FILE)
    out["current"] = state.get("current") if state else None
    if channel is not None:
        active = out["active"]
        out["served_digest"] = release_digest(releases, active) if active and "/" not in active else None
        agent_id, groups = identity or rollout.identity(None, ())
        out["channel"] = {**channel_view(releases, channel), "agent": agent_id, "groups": list(groups),
                          "gated": {"current": out["current"], "digest": state.get("digest") if state else None}}
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


def channel_findings(node: dict[str, Any]) -> list[dict[str, str]]:
    """A pull node's release against its channel (the probe's ``channel`` and ``served_digest``): one
    ``release`` finding when the link does not serve what the agent's own decision (rollout.decide) takes
    from the channel's verified pointer: its release, or, during a staged rollout that does not take this
    node yet (or halted before it), the release the node keeps or the rollout's previous one.
    The node's timer (``check --channel``) and the controller (tritonops.drift.models) both call this."""
    view = node.get("channel") or {}
    name, active = view.get("name"), node.get("active")
    if view.get("error"):
        return [{"resource": "release", "detail": f"channel {name}: {view['error']}"}]
    if not view.get("release"):
        return [{"resource": "release", "detail": f"channel {name}: the release agent has verified no pointer of "
                                                  f"it yet; serving {active or 'none'}"}]
    gated = view.get("gated") or {}
    d = rollout.decide(view, str(view.get("agent") or ""), tuple(view.get("groups") or ()), gated,
                       f"{TRUSTED_FILE}: channels.{name}")
    # None: the agent keeps its gated release
    want = d.serve if d.serve is not None else {"release": gated.get("current"), "digest": gated.get("digest")}
    if active == want.get("release") and node.get("served_digest") == want.get("digest"):
        return []
    served = f"{active} ({str(node.get('served_digest') or 'no manifest')[:12]})" if active else "none"
    detail = (f"serving {served}, marked current {node.get('current') or 'none'}; channel {name} points to "
              f"{view['release']} ({str(view['digest'])[:12]}, version {view['version']}, verified by the release "
              "agent)")
    if d.serve is not view:
        kept = (f"{want['release']} ({str(want.get('digest') or 'no digest')[:12]})" if want.get("release")
                else "none")
        detail += (f"; rollout {d.rollout} at wave {d.at} keeps this node on {kept}" if d.rollout else
                   f"; {d.state}: the release agent keeps this node on {kept}")
    return [{"resource": "release", "detail": detail}]


def index_or_error(url: str, header: str, secret: str
                   ) -> tuple[list[dict[str, Any]] | None, str | None, list[dict[str, Any]] | None]:
    """(index, None, loaded models), or (None, why it could not be read, None)."""
    triton = Triton(url, header, secret, timeout=10)
    try:
        return triton.index(), None, triton.loaded()
    except ReleaseError as e:
        return None, str(e), None


# --- comparison (shared with the controller: tritonops.drift.models imports these) ------------------

_VERSION_DIR = re.compile(r"^(\d+)/")
_LATEST = re.compile(r"latest\s*\{\s*num_versions\s*:\s*(\d+)")
_SPECIFIC = re.compile(r"specific\s*\{([^}]*)\}")


def expected_versions(files: dict[str, str], configs: dict[str, str]) -> dict[str, list[str]]:
    """model -> versions Triton should have READY, from the release's files and each config's version_policy.

    ``configs`` maps model name to its config.pbtxt text. Default policy: the highest version.
    """
    out: dict[str, list[str]] = {}
    for model, text in sorted(configs.items()):
        versions = sorted({int(m.group(1)) for k in files if k.startswith(model + "/")
                           for m in [_VERSION_DIR.match(k[len(model) + 1:])] if m})
        if "version_policy" in text and re.search(r"version_policy\s*:?\s*\{\s*all\s*\{", text):
            chosen = versions
        elif (spec := _SPECIFIC.search(text)) and "version_policy" in text:
            chosen = sorted(int(v) for v in re.findall(r"\d+", spec.group(1)))
        else:
            latest = _LATEST.search(text)
            n = int(latest.group(1)) if latest and "version_policy" in text else 1
            chosen = versions[-n:] if versions else []
        # Ensembles have an empty version folder that holds no file; Triton reports version 1.
        out[model] = [str(v) for v in chosen] or ["1"]
    return out


def compare(expected_files: dict[str, str], actual_files: dict[str, str] | None,
            expected_models: dict[str, list[str]], index: list[dict[str, Any]] | None,
            index_error: str | None, loaded: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
    """Findings: [{resource, detail}], one per drifted resource (file, model, service).

    ``loaded`` (the statistics API) adds the models loaded with their own files, which the repository
    index does not list.
    """
    findings: list[dict[str, str]] = []
    if actual_files is None:
        findings.append({"resource": "model-repository", "detail": "no active release on the node"})
    else:
        for k in sorted(expected_files.keys() - actual_files.keys()):
            findings.append({"resource": f"file:{k}", "detail": "missing"})
        for k in sorted(actual_files.keys() - expected_files.keys()):
            findings.append({"resource": f"file:{k}", "detail": "not in the release"})
        for k in sorted(expected_files.keys() & actual_files.keys()):
            if expected_files[k] != actual_files[k]:
                findings.append({"resource": f"file:{k}",
                                 "detail": f"sha256 {actual_files[k][:12]}, release says {expected_files[k][:12]}"})
    if index is None:
        findings.append({"resource": "triton", "detail": f"repository index unavailable: {index_error}"})
        return findings
    ready: dict[str, set] = {}
    states: dict[str, str] = {}
    for entry in index:
        name = str(entry.get("name"))
        state = str(entry.get("state", ""))
        if state == "READY":
            ready.setdefault(name, set()).add(str(entry.get("version", "")))
        else:
            states.setdefault(name, f"{state or 'not loaded'} {entry.get('reason', '')}".strip())
    for model, versions in sorted(expected_models.items()):
        have = ready.get(model, set())
        # No versions given (the CronJob's model list): any READY version will do.
        missing = [v for v in versions if v not in have] if versions else ([] if have else ["any"])
        if missing:
            why = states.get(model, "not in the repository index")
            findings.append({"resource": f"model:{model}",
                             "detail": f"version {','.join(missing)} not READY ({why})"})
        elif versions and have - set(versions):
            findings.append({"resource": f"model:{model}",
                             "detail": f"versions {','.join(sorted(have - set(versions)))} READY, release says "
                                       f"{','.join(versions)}"})
    for model in sorted(ready.keys() - expected_models.keys()):
        findings.append({"resource": f"model:{model}", "detail": "READY but not in the release"})
    by_hand: dict[str, set[str]] = {}
    for entry in loaded or []:
        name = str(entry.get("name"))
        if name not in expected_models and name not in ready:
            by_hand.setdefault(name, set()).add(str(entry.get("version", "")))
    for model, loaded_versions in sorted(by_hand.items()):
        findings.append({"resource": f"model:{model}",
                         "detail": f"version {','.join(sorted(loaded_versions))} loaded with its own files, "
                                   "not in the release nor in the model repository"})
    return findings


def node_findings(node: dict[str, Any]) -> list[dict[str, str]]:
    """A node's probe against the release it serves (its own manifest and configs, the probe's ``models``)
    and, on a pull node (probed with a channel), that release against the channel's (:func:`channel_findings`).
    The node's timer (``check``) and the controller (tritonops.drift.models, for a pull node) call this."""
    own = node.get("manifest") is not None and node.get("files") is not None
    findings = channel_findings(node) if "channel" in node else []
    findings += compare(node["manifest"] if own else {}, node["files"] if own else None,
                        (node.get("models") or {}) if own else {}, node.get("index"), node.get("index_error"),
                        node.get("loaded"))
    return findings + list(node.get("host_findings") or [])


def release_configs(root: Path, files: dict[str, str]) -> dict[str, str]:
    """model -> config.pbtxt text for every model folder of a release on disk."""
    return {k.split("/", 1)[0]: (root / k).read_text(errors="replace")
            for k in files if k.count("/") == 1 and k.endswith("/config.pbtxt") and (root / k).is_file()}


# --- textfile output ------------------------------------------------------------------------------

def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def textfile(rows: list[dict[str, Any]], ok: dict[str, bool]) -> str:
    """Prometheus text format: drifted resources per (source, host), check success per source."""
    lines = [f"# HELP {DRIFT_METRIC} Resources that differ from what the code says (0 = no drift).",
             f"# TYPE {DRIFT_METRIC} gauge"]
    for r in sorted(rows, key=lambda r: (r["source"], r["host"])):
        lines.append(f'{DRIFT_METRIC}{{source="{_label(r["source"])}",host="{_label(r["host"])}"}} {int(r["count"])}')
    lines += [f"# HELP {SUCCESS_METRIC} 1 when the drift check of a source ran to the end.",
              f"# TYPE {SUCCESS_METRIC} gauge"]
    for source, good in sorted(ok.items()):
        lines.append(f'{SUCCESS_METRIC}{{source="{_label(source)}"}} {1 if good else 0}')
    lines += [f"# HELP {LAST_RUN_METRIC} When the drift check last ran.",
              f"# TYPE {LAST_RUN_METRIC} gauge",
              f"{LAST_RUN_METRIC} {time.time():.0f}"]
    return "\n".join(lines) + "\n"


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
        sp.add_argument("--port", type=argtypes.port, default=8000)
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
        args.identity = rollout.identity(args.agent_id, args.group_label) if args.channel else None
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
