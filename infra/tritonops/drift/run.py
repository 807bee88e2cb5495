"""Run the drift sources in parallel and collect one report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from tritonops import project
from tritonops.drift import ansible_check, models, pulumi_check
from tritonops.drift.report import DriftReport, SourceResult

# The ansible source's playbook when none is given, in the project folder (tritonops.project).
DEFAULT_PLAYBOOK = "ansible/edge.yml"
# Check mode touches nothing, so every host is checked at once (edge.yml rolls out in waves otherwise).
CHECK_VARS: dict[str, Any] = {"edge_serial": "100%"}


def run(
    sources: Sequence[str],
    inventories: Sequence[Path | str] = (),
    playbooks: Sequence[Path] = (),
    limit: str | None = None,
    stacks: Sequence[str] = (),
    envs: Sequence[str] = (),
    forks: int = 10,
    extra_vars: dict[str, Any] | None = None,
    project_dir: Path | None = None,
    extra_args: Sequence[str] = (),
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
) -> DriftReport:
    """Each source in its own thread; each Ansible run reaches its hosts in parallel (forks).

    ``project_dir`` holds ansible/ (the default playbook, the models probe), roles/ and stacks/
    (default: tritonops.project's). No ``playbooks``: the project's ansible/edge.yml. ``on_event(source, event)``:
    the Ansible sources' progress events while they run (tritonops.drift.progress), ``{"finished": True}`` as each
    source returns. ``extra_args``: ``-e`` values for every ansible-playbook run, as given (``tritonops drift
    -e``), after ``extra_vars``: a host's mode (release_agent_enabled) is its inventory's, or theirs.
    """
    started = time.monotonic()
    evars = {**CHECK_VARS, **(extra_vars or {})}
    root = project.project_dir(project_dir)
    jobs: dict[str, Callable[[], SourceResult]] = {}
    for source in sources:
        if source in ("ansible", "models") and not inventories:
            jobs[source] = partial(SourceResult, source=source, error="needs an inventory (-i)")
        elif source == "ansible" and not playbooks and not (root / DEFAULT_PLAYBOOK).is_file():
            jobs[source] = partial(SourceResult, source=source, error=project.missing(DEFAULT_PLAYBOOK, root))
        elif source == "ansible":
            jobs[source] = partial(ansible_check.check, list(playbooks) or [root / DEFAULT_PLAYBOOK], inventories,
                                   limit, evars, forks, root, on_event=partial(on_event, source) if on_event else None,
                                   extra_args=extra_args)
        elif source == "models":
            jobs[source] = partial(models.check, inventories, limit, evars, forks, root,
                                   on_event=partial(on_event, source) if on_event else None, extra_args=extra_args)
        elif source == "pulumi":
            jobs[source] = partial(pulumi_check.check, stacks, envs, stacks_dir=project.stacks_dir(root))
        else:
            jobs[source] = partial(SourceResult, source=source, error=f"unknown source {source!r}")
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = {s: pool.submit(fn) for s, fn in jobs.items()}
        results = []
        for s, fut in futures.items():
            try:
                results.append(fut.result())
            except Exception as e:  # noqa: BLE001 - a crashed source is a failed check, reported as such
                results.append(SourceResult(source=s, error=f"{type(e).__name__}: {e}"))
            if on_event:
                on_event(s, {"finished": True})
    return DriftReport(results=results, seconds=round(time.monotonic() - started, 1))
