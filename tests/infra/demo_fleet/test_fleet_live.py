"""`make demo-fleet`'s test twin: the demo itself (tools/devkit/demo_fleet.py) on three Podman nodes, then
what it must have done, checked on the store's answers and on the nodes.

1. three nodes converged by ``ansible/edge.yml`` in pull mode: each agent's unit runs with ``--store-name``
   (the root's ``--name``), its own ``--report-key``, and the canary's ``--group-label``;
2. release v2 rolled out in waves: wave 0 is the canary alone, advance moved on when its signed report
   said gated, then every node gated it and serves it, every report attributed to its agent by the
   fleet file's ``key=`` (none rejected);
3. release v3 (golden answers changed) failed its gate on the canary alone (refused: not retried), the
   rollout halted at wave 0,
   the channel rolled back to v2, the other nodes never took v3, and every node serves v2.

Needs root, Podman and the image ``python -m devkit hosts build`` makes (built when missing). About 6
minutes on 2 busy cores, most of it the converge of three nodes.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

pytestmark = [pytest.mark.host, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def fleet() -> Iterator[Any]:
    if shutil.which("podman") is None or os.geteuid() != 0:
        pytest.skip("needs root and Podman (make apt installs it)")
    from devkit.demo_fleet import fleet_down, run_fleet

    try:
        yield run_fleet(Console(file=sys.stdout, width=160))
    finally:
        fleet_down()


def _by_agent(rollout: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["agent"]: r for r in rollout["agents"]}


def test_agents_run_pull_mode_with_the_store_name_and_their_own_report_key(fleet: Any) -> None:
    from devkit.demo_fleet import CANARY, NODES, STORE_NAME
    from devkit.hosts.podman import podman

    for node in NODES:
        unit = podman(["exec", node, "systemctl", "cat", "tritonops-release-agent"]).stdout
        assert f'"--store-name" "{STORE_NAME}"' in unit, unit
        assert '"--report" \\\n' in unit, unit
        assert '"--report-key" "/etc/tritonops/tritonops-release-agent-report.key"' in unit, unit
        assert '"--group-label=canary"' in unit if node == CANARY else "--group-label" not in unit
        active = podman(["exec", node, "systemctl", "is-active", "tritonops-release-agent"], check=False)
        assert active.stdout.strip() == "active"


def test_a_release_rolls_out_to_the_canary_then_to_every_node(fleet: Any) -> None:
    from devkit.demo_fleet import CANARY, NODES

    v2 = fleet.results["v2"]
    assert v2["advance"]["result"] == "complete"
    rollout = v2["rollout"]
    # gated: applied, and its golden gate passed on the node.
    assert [(w["spec"], w["targeted"], w["gated"], w["failed"]) for w in rollout["waves"]] == [
        ("groups canary", 1, 1, 0), ("100%", 2, 2, 0)]
    rows = _by_agent(rollout)
    assert rows[CANARY]["wave"] == 0 and all(rows[n]["wave"] == 1 for n in NODES if n != CANARY)
    # Each outcome is its agent's own signed report, bound by the fleet file's key=; none was rejected.
    assert {rows[n]["source"] for n in NODES} == {"report"} and rollout["rejected_reports"] == []
    assert {t["release"] for t in v2["status"]["targets"]} == {"v2"}
    assert fleet.phases["v2_publish_to_all_serving"] > 0


def test_a_failing_release_halts_at_its_first_wave_and_rolls_back(fleet: Any) -> None:
    from devkit.demo_fleet import CANARY, NODES

    v3 = fleet.results["v3"]
    assert v3["advance"]["result"] == "halted" and v3["advance"]["wave"] == 0
    assert v3["advance"]["rollback"]["release"] == "v2"
    rows = _by_agent(v3["rollout"])
    # A golden mismatch is no passing fault: the agent refuses the release for good (not retried).
    assert rows[CANARY]["outcome"] == "refused"
    assert (v3["failure"]["step"], v3["failure"]["class"]) == ("golden", "refused"), v3["failure"]
    assert all(rows[n]["wave"] == 1 and rows[n]["outcome"] is None for n in NODES if n != CANARY)
    assert [(w["targeted"], w["failed"] + w["refused"]) for w in v3["rollout"]["waves"]] == [(1, 1), (0, 0)]
    assert v3["after"] == {"channel": "v2", "serving": dict.fromkeys(NODES, "v2")}
