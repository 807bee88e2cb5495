"""Pulumi source: per stack and environment, a preview with expect-no-changes and a refresh preview.

Uses the Automation API (``pulumi.automation``) on the committed projects under ``stacks/<name>`` with
the stack named after the environment (``Pulumi.<env>.yaml``). The Automation API drives the Pulumi
CLI; where the CLI is missing this source fails with a clear error and the other sources still run.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tritonops import project
from tritonops.drift.report import Finding, SourceResult

NO_CLI = ("the Pulumi CLI is not installed (not on PATH): the Automation API needs it to preview "
          "{targets}. Install it (https://www.pulumi.com/docs/install/) or run without --source pulumi; "
          "the other sources were still checked.")


def targets(stacks: Sequence[str] = (), envs: Sequence[str] = (),
            stacks_dir: Path | None = None) -> list[tuple[str, str]]:
    """(stack, env) pairs from the committed Pulumi.<env>.yaml files, filtered by the given names.

    ``stacks_dir``: default the project folder's stacks/ (tritonops.project); none there, no pairs.
    """
    folder = stacks_dir or project.stacks_dir()
    out = []
    projects = sorted(p for p in folder.iterdir() if (p / "Pulumi.yaml").is_file()) if folder.is_dir() else []
    for proj in projects:
        if stacks and proj.name not in stacks:
            continue
        for cfg in sorted(proj.glob("Pulumi.*.yaml")):
            env = cfg.name[len("Pulumi."):-len(".yaml")]
            if not envs or env in envs:
                out.append((proj.name, env))
    return out


def _events(stack: str, env: str, kind: str, sink: list[Finding]) -> Callable[[Any], None]:
    def on_event(event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        meta = getattr(pre, "metadata", None) if pre else None
        if meta is None:
            return
        op = str(getattr(meta.op, "value", meta.op))
        if op in ("same", "read"):
            return
        keys = ", ".join(meta.diffs or []) if getattr(meta, "diffs", None) else ""
        sink.append(Finding(source="pulumi", host=f"{stack}/{env}", resource=str(meta.urn),
                            detail=f"{kind}: {op}" + (f" ({keys})" if keys else "")))
    return on_event


def preview_one(stack: str, env: str, stacks_dir: Path | None = None) -> list[Finding]:
    """Both previews of one stack; raises on failure (not on drift)."""
    from pulumi import automation as auto

    work_dir = (stacks_dir or project.stacks_dir()) / stack
    st = auto.create_or_select_stack(stack_name=env, work_dir=str(work_dir))
    found: list[Finding] = []
    try:
        st.preview(expect_no_changes=True, diff=True, on_event=_events(stack, env, "preview", found))
    except auto.CommandError as e:
        if "no changes were expected" not in str(e) or not found:
            raise
    st.preview_refresh(on_event=_events(stack, env, "refresh", found))
    return found


def check(stacks: Sequence[str] = (), envs: Sequence[str] = (),
          preview: Callable[[str, str], list[Finding]] | None = None, stacks_dir: Path | None = None) -> SourceResult:
    started = time.monotonic()
    folder = stacks_dir or project.stacks_dir()
    preview = preview or partial(preview_one, stacks_dir=folder)
    pairs = targets(stacks, envs, folder)
    result = SourceResult(source="pulumi", hosts=[f"{s}/{e}" for s, e in pairs])
    if not pairs:
        result.error = (f"no Pulumi stacks match {list(stacks) or 'any'} / {list(envs) or 'any'} under {folder}"
                        f" (stacks/<name>/Pulumi.yaml and Pulumi.<env>.yaml); {project.HINT}")
    elif shutil.which("pulumi") is None:
        result.error = NO_CLI.format(targets=", ".join(result.hosts))
    else:
        errors = []
        for s, e in pairs:
            try:
                result.findings += preview(s, e)
            except Exception as exc:  # noqa: BLE001 - one stack's failure is reported, the others still run
                errors.append(f"{s}/{e}: {type(exc).__name__}: {str(exc).strip()[-800:]}")
        result.error = "; ".join(errors) or None
    result.seconds = round(time.monotonic() - started, 1)
    return result
