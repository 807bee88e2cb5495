"""``tritonops drift``'s progress on a terminal: per source, hosts done of the play's hosts, the task now, elapsed.

The sources call :meth:`DriftProgress.event` from their threads with the progress callback's events
(ansible_check.run_json ``on_event``) and ``{"finished": true}`` when their check returns. Shown on stderr
only when it is a terminal (rich decides): never in ``--json`` or Markdown output, nor in a pipe.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class DriftProgress:
    """One line per source: ``ansible  host 0 of 1  task 37: Write the systemd unit  0:00:04``."""

    def __init__(self, progress: Progress, sources: Sequence[str]) -> None:
        self.progress = progress
        self._rows: dict[str, TaskID] = {s: progress.add_task(s, total=None, status="starting") for s in sources}
        self._hosts: dict[str, list[str]] = {s: [] for s in sources}
        self._done: dict[str, set[str]] = {s: set() for s in sources}
        self._tasks: dict[str, int] = dict.fromkeys(sources, 0)

    def event(self, source: str, event: dict[str, Any]) -> None:
        """Take one event of ``source``: play hosts, a host's finished task (done: that host ended), end, finished."""
        if source not in self._rows:
            return
        hosts, done = self._hosts[source], self._done[source]
        now = ""
        if "hosts" in event:
            hosts.extend(h for h in event["hosts"] if h not in hosts)
        if "task" in event:
            self._tasks[source] += 1
            now = f"task {self._tasks[source]}: {event['task']}"
            if event.get("done"):
                done.add(event["host"])
        if "end" in event:
            done.update(event["end"])
        if event.get("finished"):
            done.update(hosts)
            now = "finished"
        total = len(hosts) or None
        status = (f"host {len(done)} of {total}" if total else "reading the inventory") + (f"  {now}" if now else "")
        self.progress.update(self._rows[source], total=total, completed=len(done), status=escape(status))


@contextmanager
def drift_progress(console: Console, sources: Sequence[str]) -> Iterator[DriftProgress | None]:
    """A live DriftProgress on ``console`` while the block runs, when it is a terminal; else None."""
    if not console.is_terminal:
        yield None
        return
    columns = (TextColumn("drift [bold]{task.description:<7}[/]"), BarColumn(bar_width=12),
               TextColumn("{task.fields[status]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield DriftProgress(progress, sources)
