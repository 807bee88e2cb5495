"""Ansible source: the playbooks in ``--check --diff`` mode, read through the JSON stdout callback.

Ansible's ``ansible.posix.json`` callback (bundled with the ``ansible`` package) prints one JSON
document: ``plays[].tasks[].hosts[HOST]`` holds each task's result (``changed``, ``diff``, loop
``results``), ``stats[HOST]`` the recap. Every task that would change a host is one finding, a loop
item that would change is one finding per item, with the unified diff when the module gave one.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tritonops import project
from tritonops.drift.report import Finding, SourceResult

CALLBACK = "ansible.posix.json"
# The progress callback beside it (on_event): loaded by path, enabled by name; it writes to the descriptor in
# FD_ENV (its own FD_ENV: a plugin file ansible loads, not imported here, so that tritonops needs no ansible).
PROGRESS_PLUGINS = Path(__file__).resolve().parent / "callback"
PROGRESS_CALLBACK = "tritonops_progress"
FD_ENV = "TRITONOPS_PROGRESS_FD"


class AnsibleRunError(RuntimeError):
    """ansible-playbook did not produce a usable JSON report."""


def ansible_env(extra: dict[str, str] | None = None, project_dir: Path | None = None) -> dict[str, str]:
    """ansible-playbook's environment: the JSON callback, the project's roles/ (tritonops.project)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    env.update({
        "ANSIBLE_STDOUT_CALLBACK": CALLBACK,
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_ROLES_PATH": str(project.project_dir(project_dir) / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
    })
    if extra:
        env.update(extra)
    return env


def playbook_cmd(playbook: Path, inventories: Sequence[Path | str], limit: str | None = None,
                 extra_vars: dict[str, Any] | None = None, check: bool = True, forks: int = 10,
                 extra_args: Sequence[str] = ()) -> list[str]:
    """``extra_args``: ``-e`` values as ansible-playbook takes them (KEY=VALUE, JSON or YAML, @FILE), after
    ``extra_vars``, so that they win."""
    exe = Path(sys.executable).parent / "ansible-playbook"
    cmd = [str(exe if exe.exists() else "ansible-playbook"), str(playbook), "--forks", str(forks)]
    if check:
        cmd += ["--check", "--diff"]
    for inv in inventories:
        cmd += ["-i", str(inv)]
    if limit:
        cmd += ["--limit", limit]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    for value in extra_args:
        cmd += ["-e", value]
    return cmd


def run_json(cmd: Sequence[str], timeout: float = 1800, project_dir: Path | None = None,
             on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run ansible-playbook with the JSON callback; return its document (rc 2 = failed hosts is still a report).

    ``on_event``: called (from a reader thread) with each line of the progress callback (callback/
    tritonops_progress.py) while the run goes: the play's hosts, each host's finished task, the end.
    """
    env = ansible_env(project_dir=project_dir)
    read_fd, write_fd = os.pipe() if on_event else (-1, -1)
    if on_event:
        env.update({"ANSIBLE_CALLBACK_PLUGINS": str(PROGRESS_PLUGINS), "ANSIBLE_CALLBACKS_ENABLED": PROGRESS_CALLBACK,
                    FD_ENV: str(write_fd)})
    try:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=project.project_dir(project_dir), pass_fds=(write_fd,) if on_event else ())
    except OSError:
        if on_event:
            os.close(read_fd)
        raise
    finally:
        if on_event:
            os.close(write_fd)  # the child holds its copy: the reader sees the end when ansible-playbook exits
    reader = threading.Thread(target=_read_events, args=(read_fd, on_event), daemon=True) if on_event else None
    if reader:
        reader.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    finally:
        if reader:
            reader.join(timeout=2)  # the last lines: written before ansible-playbook exited
    start = out.find("{")
    if start < 0:
        raise AnsibleRunError(f"{' '.join(cmd[:2])}: exit {proc.returncode}, no JSON report: "
                              f"{(err or out).strip()[-1500:]}")
    try:  # what other enabled callbacks print after it (profile_tasks' recap) is not part of the report
        doc: dict[str, Any] = json.JSONDecoder().raw_decode(out, start)[0]
    except ValueError as e:
        raise AnsibleRunError(f"{' '.join(cmd[:2])}: exit {proc.returncode}, unreadable JSON report ({e}): "
                              f"{err.strip()[-1500:]}") from None
    doc["_rc"] = proc.returncode
    doc["_stderr"] = err
    return doc


def _read_events(fd: int, on_event: Callable[[dict[str, Any]], None]) -> None:
    with os.fdopen(fd) as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # progress only: a torn line is not worth failing the check for
            on_event(event)


def render_diff(diff: Any) -> str:
    """A module's ``diff`` (dict or list of dicts: before/after or prepared text) as unified diff text."""
    parts = diff if isinstance(diff, list) else [diff]
    out: list[str] = []
    for d in parts:
        if not isinstance(d, dict):
            continue
        if d.get("prepared"):
            out.append(str(d["prepared"]).rstrip("\n"))
            continue
        if "before" not in d and "after" not in d:
            continue
        before, after = d.get("before", ""), d.get("after", "")
        if not isinstance(before, str) or not isinstance(after, str):
            before = json.dumps(before, indent=2, sort_keys=True, default=str) + "\n"
            after = json.dumps(after, indent=2, sort_keys=True, default=str) + "\n"
        if before == after:
            continue
        lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                     fromfile=str(d.get("before_header", "before")),
                                     tofile=str(d.get("after_header", "after")))
        out.append("".join(lines).rstrip("\n"))
    return "\n".join(o for o in out if o)


def _item_label(item_result: dict[str, Any]) -> str:
    label = item_result.get("_ansible_item_label", item_result.get("item", ""))
    if isinstance(label, dict):
        label = label.get("name") or label.get("src") or label.get("path") or json.dumps(label, sort_keys=True)
    return str(label)


def _detail(result: dict[str, Any]) -> str:
    if result.get("_ansible_no_log"):
        return "would change (details hidden: no_log)"
    for key in ("msg", "state", "dest", "path", "name"):
        value = result.get(key)
        if isinstance(value, str) and value and key != "msg":
            return f"would change {key}={value}"
    return "would change"


def parse(doc: dict[str, Any], source: str = "ansible") -> tuple[list[Finding], dict[str, str], list[str]]:
    """(findings, per-host failures, every host in the run) from an ansible.posix.json document."""
    findings: list[Finding] = []
    last_failure: dict[str, str] = {}
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            name = str(task.get("task", {}).get("name", "?"))
            for host, result in (task.get("hosts") or {}).items():
                if result.get("unreachable"):
                    last_failure[host] = f"unreachable: {str(result.get('msg', ''))[:500]}"
                elif result.get("failed"):
                    last_failure[host] = f"task {name!r} failed: {str(result.get('msg', ''))[:500]}"
                if not result.get("changed"):
                    continue
                items = [r for r in result.get("results") or [] if isinstance(r, dict) and r.get("changed")]
                if items:
                    for item in items:
                        findings.append(Finding(source=source, host=host, resource=f"{name} [{_item_label(item)}]",
                                                detail=_detail(item), diff=render_diff(item.get("diff"))))
                else:
                    findings.append(Finding(source=source, host=host, resource=name, detail=_detail(result),
                                            diff=render_diff(result.get("diff"))))
    # The recap decides who failed: ignored and rescued failures are not the check failing.
    stats = doc.get("stats") or {}
    failures = {host: last_failure.get(host, f"failures={s.get('failures', 0)} unreachable={s.get('unreachable', 0)}")
                for host, s in stats.items() if s.get("failures") or s.get("unreachable")}
    return findings, failures, sorted(stats)


def check(playbooks: Sequence[Path], inventories: Sequence[Path | str], limit: str | None = None,
          extra_vars: dict[str, Any] | None = None, forks: int = 10, project_dir: Path | None = None,
          on_event: Callable[[dict[str, Any]], None] | None = None, extra_args: Sequence[str] = ()) -> SourceResult:
    """Run each playbook in check+diff mode; per host, each task that would change."""
    started = time.monotonic()
    result = SourceResult(source="ansible")
    errors: list[str] = []
    hosts: set[str] = set()
    for pb in playbooks:
        try:
            cmd = playbook_cmd(pb, inventories, limit, extra_vars, check=True, forks=forks, extra_args=extra_args)
            doc = run_json(cmd, project_dir=project_dir, on_event=on_event)
        except (AnsibleRunError, subprocess.TimeoutExpired, OSError) as e:
            errors.append(f"{pb.name}: {e}")
            continue
        findings, failures, ran = parse(doc)
        result.findings += findings
        hosts.update(ran)
        errors += [f"{pb.name}: {h}: {msg}" for h, msg in sorted(failures.items())]
        if not ran and doc.get("_rc"):
            errors.append(f"{pb.name}: exit {doc['_rc']}: {str(doc.get('_stderr', '')).strip()[-1000:]}")
    result.hosts = sorted(hosts)
    result.error = "; ".join(errors) or None
    result.seconds = round(time.monotonic() - started, 1)
    return result
