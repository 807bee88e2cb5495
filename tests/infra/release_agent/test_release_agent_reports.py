"""The release_agent role's staged-rollout settings (the fleet demo's nodes use them): status reports, the
agent's own report key, its group labels, passed to the agent as the agent's own parser reads them; a
report into an HTTP mirror (read-only to agents) and a key without reports are refused by preflight.
Offline, in --check mode against localhost (test_release_agent_preflight's harness)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_release_agent_preflight import _argv, _failed_message, _run

pytestmark = pytest.mark.unit

PRIVATE = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+5h8cIl3o0sQ2qg2ZpKX6bq1Vn9f1dK0Zr3o1J7dQZ\n-----END PRIVATE KEY-----\n"


def test_reports_key_and_groups_reach_the_agent(tmp_path: Path) -> None:
    from tritonops.agent.cli import parser

    code, out = _run(tmp_path, {"release_agent_report": True, "release_agent_report_key": PRIVATE,
                                "release_agent_group_labels": ["canary", "lab"]})
    assert code == 0, out["stats"]
    args = parser().parse_args(_argv(out)[1:])
    assert args.report is True and args.group_label == ["canary", "lab"]
    assert str(args.report_key) == "/etc/tritonops/tritonops-release-agent-report.key"  # a path: never the key
    code, out = _run(tmp_path, {})
    args = parser().parse_args(_argv(out)[1:])
    assert code == 0 and (args.report, args.report_key, args.group_label) == (False, None, [])


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"release_agent_report": True, "release_agent_store_url": "http://mirror.example/edge"},
     "release_agent_report needs an s3:// or folder store"),
    ({"release_agent_report_key": PRIVATE}, "needs release_agent_report: true"),
    ({"release_agent_report": True, "release_agent_report_key": "not a key"}, "a PEM private key"),
    ({"release_agent_group_labels": ["can ary"]}, "release_agent_group_labels"),
], ids=["http-mirror", "key-without-reports", "not-a-key", "bad-label"])
def test_preflight_refuses_reports_it_cannot_write_or_sign(tmp_path: Path, overrides: dict[str, Any],
                                                          needle: str) -> None:
    code, out = _run(tmp_path, overrides)
    assert code != 0 and needle in _failed_message(out)
    assert out["stats"]["localhost"]["changed"] == 0
