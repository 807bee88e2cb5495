"""The docs' two pictures are drawn from the code (issue 35: the only picture was the capacity plot): the
release flow in docs/releases.md and what runs where in the README, each a Mermaid block that
``python -m devkit diagrams`` redraws and this test finds stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from devkit import diagrams
from tritonops.agent import failures

ROOT = Path(__file__).resolve().parents[3]


def test_the_docs_pictures_are_what_the_code_draws_today() -> None:
    assert diagrams.stale() == {}


def test_the_release_flow_draws_every_step_of_the_agents_failure_table() -> None:
    assert sorted(diagrams.PIPELINE + diagrams.AROUND) == sorted(failures.STEP_CAUSES)
    flow = diagrams.release_flow()
    for step in diagrams.PIPELINE:
        cause = failures.STEP_CAUSES[step]
        assert f'{step}["{step}<br/><i>fails: {cause}, {failures.CAUSES[cause][0]}</i>"]' in flow
    assert " --> ".join(diagrams.PIPELINE) in flow and "oci://REGISTRY/REPO" in flow


def test_a_change_in_the_code_makes_the_picture_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(failures.STEP_CAUSES, "golden", "store")
    assert "fails: store, retry" in diagrams.release_flow()
    assert list(diagrams.stale()) == ["release-flow"]


def test_what_runs_where_names_the_pods_containers_and_the_edge_units() -> None:
    where = diagrams.what_runs_where()
    for name in ("pod_release_sync", "pod_triton", "pod_release_agent", "tritonserver.service",
                 "release-agent.service", "drift-check.timer", "http 8000", "agent-metrics 8003"):
        assert name in where
    # Only the edge playbook's roles: the bare-metal driver role installs no unit of its own here.
    assert "nvidia_driver" not in where


def test_the_command_redraws_a_stale_picture_and_check_says_so(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "releases.md"
    doc.write_text("intro\n<!-- BEGIN DIAGRAM release-flow -->\n```mermaid\nflowchart LR\n  old\n```\n"
                   "<!-- END DIAGRAM release-flow -->\nafter\n")
    monkeypatch.setattr(diagrams, "ROOT", tmp_path)
    monkeypatch.setattr(diagrams, "DOCS", {"release-flow": doc})
    monkeypatch.setattr(diagrams, "DIAGRAMS", {"release-flow": diagrams.release_flow})
    assert "stale" in diagrams.stale()["release-flow"]
    assert diagrams.update() == ["releases.md"]
    assert diagrams.stale() == {} and doc.read_text().endswith("<!-- END DIAGRAM release-flow -->\nafter\n")
    assert diagrams.update() == []


def test_devkit_diagrams_check_exits_0_on_the_checkout() -> None:
    res = subprocess.run([sys.executable, "-m", "devkit", "diagrams", "--check"], cwd=ROOT, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert res.returncode == 0, res.stderr
