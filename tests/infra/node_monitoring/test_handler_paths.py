"""node_monitoring writes all its files in one tritonops.triton.files task that notifies every handler; each
handler acts only when one of its own paths is in the task's changed_paths. These checks read the role's
YAML: every path a handler waits for is one the task writes, and every service file the task writes has a
handler that restarts or reloads for it (a renamed path would otherwise silently stop the restart)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROLE = Path(__file__).resolve().parents[3] / "roles" / "node_monitoring"
# What each handler must act on: the handler's listen topic -> the paths (as the role's YAML names them).
EXPECTED = {
    "node_monitoring restart node_exporter": {"'/etc/default/prometheus-node-exporter'"},
    "node_monitoring restart dcgm-exporter": {"'/etc/systemd/system/dcgm-exporter.service'"},
    "node_monitoring restart prometheus": {"'/etc/default/prometheus'"},
    "node_monitoring reload prometheus": {"_node_monitoring_prometheus_config",
                                          "_node_monitoring_rules_dir ~ '/' ~ _node_monitoring_rules_file"},
}


def _bundle() -> dict:
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    return next(t for t in tasks if "tritonops.triton.files" in t)


def test_the_files_task_notifies_every_handler() -> None:
    assert set(_bundle()["notify"]) == set(EXPECTED)
    assert _bundle()["register"] == "_node_monitoring_files"


@pytest.mark.parametrize("topic", sorted(EXPECTED))
def test_each_handler_acts_on_its_own_paths_only(topic: str) -> None:
    handlers = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
    handler = next(h for h in handlers if h["listen"] == topic)
    condition = " ".join(handler["when"])
    assert "_node_monitoring_files.changed_paths" in condition, condition
    assert "not ansible_check_mode" in handler["when"]
    named = {p for p in EXPECTED[topic] if p in condition}
    assert named == EXPECTED[topic], condition
    files = _bundle()["tritonops.triton.files"]["files"]
    for path in EXPECTED[topic]:
        assert re.search(r"'path': " + re.escape(path) + r"[,}]", files), f"configure.yml does not write {path}"
