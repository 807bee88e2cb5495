"""What a node serving a release should hold, compared with what it does: the drift rules of a node.

Pure functions over the drift probe's record of a node (:mod:`tritonops.agent.drift_probe` reads it on
the node) and the release's manifest: the files, the model versions Triton has loaded, and on a pull node
the channel's verified pointer (through the rollout's own decision, :func:`waves.decide`). The node's
timer (``tritonops-agent check``) and the controller (:mod:`tritonops.drift.models`) both call them, and
:func:`textfile` writes the drift series both export.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ..core.names import TRUSTED_FILE
from . import waves

DRIFT_METRIC = "tritonops_drift_resources"
SUCCESS_METRIC = "tritonops_drift_check_success"
LAST_RUN_METRIC = "tritonops_drift_last_run_timestamp_seconds"


def channel_findings(node: dict[str, Any]) -> list[dict[str, str]]:
    """A pull node's release against its channel (the probe's ``channel`` and ``served_digest``): one
    ``release`` finding when the link does not serve what the agent's own decision (waves.decide) takes
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
    d = waves.decide(view, str(view.get("agent") or ""), tuple(view.get("groups") or ()), gated,
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
