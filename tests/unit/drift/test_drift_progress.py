"""``tritonops drift``'s progress: the Ansible callback's events from a real ansible-playbook run, their rendering
(host k of n per source, the task, elapsed), and the command's --json output staying pure JSON while it shows."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tritonops.cli import app
from tritonops.core.exitcodes import ExitCode
from tritonops.drift import ansible_check
from tritonops.drift.progress import drift_progress
from typer.testing import CliRunner

PLAYBOOK = """
- name: Two hosts, one unreachable
  hosts: all
  gather_facts: false
  tasks:
    - name: First step
      ansible.builtin.debug: {msg: one}
    - name: Second step
      ansible.builtin.command: "true"
      changed_when: false
"""


@pytest.fixture
def play(tmp_path: Path) -> tuple[Path, Path]:
    """A playbook and an inventory: ``here`` runs locally, ``gone`` is an SSH port nothing listens on."""
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        "here": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_connection": "ssh"},
    }}}))
    return tmp_path / "play.yml", inventory


def test_callback_reports_hosts_tasks_and_each_hosts_end(play: tuple[Path, Path]) -> None:
    playbook, inventory = play
    events: list[dict[str, Any]] = []
    doc = ansible_check.run_json(ansible_check.playbook_cmd(playbook, [inventory], check=False),
                                 project_dir=playbook.parent, on_event=events.append)
    assert sorted(events[0]["hosts"]) == ["gone", "here"]
    tasks = [(e["host"], e["task"], e["done"]) for e in events if "task" in e]
    assert ("here", "First step", False) in tasks and ("here", "Second step", False) in tasks
    assert ("gone", "Second step", True) in tasks  # unreachable (the first command it runs): that host has ended
    assert events[-1] == {"end": ["gone", "here"]}
    # The JSON stdout callback's document is still whole beside it.
    assert set(doc["stats"]) == {"here", "gone"} and doc["stats"]["gone"]["unreachable"] == 1


def test_without_a_listener_the_report_is_the_same(play: tuple[Path, Path]) -> None:
    playbook, inventory = play
    doc = ansible_check.run_json(ansible_check.playbook_cmd(playbook, [inventory], check=False),
                                 project_dir=playbook.parent)
    assert doc["stats"]["here"]["ok"] == 2 and doc["stats"]["gone"]["unreachable"] == 1


def test_plugin_and_controller_agree_on_the_descriptor_variable() -> None:
    sys.path.insert(0, str(ansible_check.PROGRESS_PLUGINS))
    try:
        import tritonops_progress  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert tritonops_progress.FD_ENV == ansible_check.FD_ENV
    assert tritonops_progress.CallbackModule.CALLBACK_NAME == ansible_check.PROGRESS_CALLBACK


def _render(console: Console) -> str:
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def test_progress_lines_say_host_k_of_n_the_task_and_the_time() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=140)
    with drift_progress(console, ["ansible", "models"]) as shown:
        assert shown is not None
        shown.event("ansible", {"play": "p", "hosts": ["a", "b"]})
        shown.event("ansible", {"host": "a", "task": "Gathering Facts", "done": False})
        shown.event("ansible", {"host": "b", "task": "Gathering Facts", "done": True})
        shown.event("models", {"play": "q", "hosts": ["a", "b"]})
        shown.event("models", {"end": ["a", "b"]})
        shown.progress.refresh()
        text = _render(console)
    assert "host 1 of 2  task 2: Gathering Facts" in text
    assert "models" in text and "host 2 of 2" in text
    assert "0:00:0" in text  # elapsed


def test_no_progress_off_a_terminal() -> None:
    console = Console(file=io.StringIO(), force_terminal=False)
    with drift_progress(console, ["ansible"]) as shown:
        assert shown is None
    assert _render(console) == ""


def test_json_output_stays_pure_json_while_progress_shows(play: tuple[Path, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    playbook, inventory = play
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: stderr counts as a terminal, so the progress is drawn
    out = CliRunner().invoke(app, ["drift", "--source", "ansible", "--playbook", str(playbook), "-i", str(inventory),
                                   "--limit", "here", "--json"])
    assert out.exit_code == ExitCode.OK, out.output
    doc = json.loads(out.stdout)
    assert doc["errors"] == {} and doc["results"][0]["hosts"] == ["here"]
    assert "drift" in out.stderr and "host" in out.stderr  # the progress went to stderr, not into the JSON
