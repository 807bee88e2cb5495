"""Ansible callback: one JSON line per event on the file descriptor in TRITONOPS_PROGRESS_FD.

``tritonops drift`` enables it (ansible_check.run_json with ``on_event``) beside the JSON stdout callback, whose
document arrives only when the run ends: these lines say, while it runs, which hosts the play has, which task
each host finished and when a host is done (failed, unreachable, or the play's end).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: tritonops_progress
    type: aggregate
    short_description: JSON lines of play progress for tritonops drift
    description:
      - Writes the play's hosts, each host's finished tasks and its end to the descriptor TRITONOPS_PROGRESS_FD.
"""

FD_ENV = "TRITONOPS_PROGRESS_FD"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tritonops_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        fd = os.environ.get(FD_ENV)
        self._out = os.fdopen(int(fd), "w", buffering=1, closefd=False) if fd else None

    def _emit(self, **event: Any) -> None:
        if self._out is not None:
            self._out.write(json.dumps(event) + "\n")

    def v2_playbook_on_play_start(self, play: Any) -> None:
        hosts = play.get_variable_manager()._inventory.get_hosts(play.hosts)
        self._emit(play=play.get_name(), hosts=[h.get_name() for h in hosts])

    def _task(self, result: Any, done: bool = False) -> None:
        self._emit(host=result.host.get_name(), task=result.task.get_name(), done=done)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._task(result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._task(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._task(result, done=not ignore_errors)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._task(result, done=True)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._emit(end=sorted(stats.processed))
