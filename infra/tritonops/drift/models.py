"""Model-repository source: the release the code says vs the files on each host and what Triton has READY.

One read-only ``ansible-playbook ansible/drift_probe.yml`` run covers every host in parallel: it stages
the desired release on the controller with the model_repository role's own steps, and runs
the release agent's ``probe`` on each node (active release's files with their sha256; the unit, process and
live security posture against the triton_server role's expected state, ``tritonops.agent.effective``) and reads
Triton's repository index and loaded models through the admin header. The comparison is
``tritonops.release_format.node_drift.compare``, the same code the node's own timer and the Kubernetes CronJob run.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tritonops import project
from tritonops.core.errors import ReleaseError
from tritonops.drift.ansible_check import AnsibleRunError, playbook_cmd, run_json
from tritonops.drift.report import Finding, SourceResult
from tritonops.release_format import manifest, node_drift

PROBE_PLAYBOOK = "ansible/drift_probe.yml"  # in the project folder (tritonops.project)
PROBE_TASK = "Report the desired release and the node's state"


def compare_host(host: str, release: dict[str, Any] | None, node: dict[str, Any]) -> list[Finding]:
    """Findings for one host from the staged release (controller) and the node's probe.

    A pull node (``release`` None: the probe ran with ``--channel``): node_drift.node_findings, what the
    node's own timer reports (the release served against the one its channel's verified pointer names, and
    against its own manifest and configs)."""
    if release is None:
        raw = node_drift.node_findings(node)
    else:
        path = Path(release["path"])
        want = manifest.read(path)
        expected_models = node_drift.expected_versions(want, node_drift.release_configs(path, want))
        active, current = node.get("active"), node.get("current")
        files_expected = want
        raw = []
        if active != release["release"] or current != release["release"]:
            raw.append({"resource": "release", "detail": f"active {active or 'none'}, marked current "
                                                         f"{current or 'none'}; the code says {release['release']}"})
            # Another release is active: check its files against its own manifest (integrity on the node).
            files_expected = node.get("manifest") or {}
        raw += node_drift.compare(files_expected, node.get("files"), expected_models, node.get("index"),
                                   node.get("index_error"), node.get("loaded"))
        raw += node.get("host_findings") or []
    return [Finding(source="models", host=host, resource=f["resource"], detail=f["detail"]) for f in raw]

def parse(doc: dict[str, Any]) -> tuple[list[Finding], dict[str, str], list[str]]:
    findings: list[Finding] = []
    failures: dict[str, str] = {}
    seen: set[str] = set()
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            name = str(task.get("task", {}).get("name", ""))
            for host, result in (task.get("hosts") or {}).items():
                if result.get("failed") or result.get("unreachable"):
                    failures.setdefault(host, f"task {name!r} failed: {str(result.get('msg', ''))[:500]}")
                    continue
                if name != PROBE_TASK:
                    continue
                msg = result.get("msg") or {}
                seen.add(host)
                try:
                    findings += compare_host(host, msg["release"], msg["node"])
                except (KeyError, TypeError, ReleaseError) as e:
                    failures[host] = f"unexpected probe result: {e}"
    hosts = sorted(set(doc.get("stats") or {}) | seen)
    for host in hosts:
        if host not in seen:
            failures.setdefault(host, "the probe did not report")
    return findings, failures, hosts


def check(inventories: Sequence[Path | str], limit: str | None = None, extra_vars: dict[str, Any] | None = None,
          forks: int = 10, project_dir: Path | None = None,
          on_event: Callable[[dict[str, Any]], None] | None = None, extra_args: Sequence[str] = ()) -> SourceResult:
    started = time.monotonic()
    result = SourceResult(source="models")
    try:
        probe = project.require(PROBE_PLAYBOOK, project_dir)
        doc = run_json(playbook_cmd(probe, inventories, limit, extra_vars, check=False, forks=forks,
                                    extra_args=extra_args),
                       project_dir=project_dir, on_event=on_event)
    except project.ProjectError as e:
        result.error = str(e)
    except (AnsibleRunError, subprocess.TimeoutExpired, OSError) as e:
        result.error = f"{Path(PROBE_PLAYBOOK).name}: {e}"
    else:
        result.findings, failures, result.hosts = parse(doc)
        errors = [f"{h}: {m}" for h, m in sorted(failures.items())]
        if not result.hosts and doc.get("_rc"):
            errors.append(f"exit {doc['_rc']}: {str(doc.get('_stderr', '')).strip()[-1000:]}")
        result.error = "; ".join(errors) or None
    result.seconds = round(time.monotonic() - started, 1)
    return result
