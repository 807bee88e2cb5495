"""Staged rollouts on the node (agent/rollout.py): who a wave takes, and the rollout's checks.

Membership is a pure function of (rollout id, agent id, groups): stable across polls and restarts,
growing wave by wave, and meeting the waves' percentages over a large fleet.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonops.core.errors import UsageError
from tritonops.release_format import waves as rollout
from tritonops.release_format.waves import RolloutError

AGENT_IDS = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,40}", fullmatch=True)
PREV = {"release": "r1", "digest": "a" * 64, "length": 2048}
WAVES = [{"percent": 1}, {"percent": 10}, {"groups": ["lab"]}, {"percent": 50}, {"percent": 100}]


def _ro(wave: int, rid: str = "r9-stable", waves: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return rollout.parse({"id": rid, "waves": waves or WAVES, "wave": wave, "halted": False}, "pointer")


def test_the_place_is_the_sha256_of_rollout_and_agent_ids() -> None:
    # A fixed value: not Python's hash() (salted per process) nor anything random, so every restart and
    # every other implementation (the controller) computes the same place.
    assert rollout.bucket("r9-stable", "node-0001") == pytest.approx(
        int.from_bytes(__import__("hashlib").sha256(b"r9-stable\nnode-0001").digest()[:8], "big") / 2**64 * 100)
    assert 0 <= rollout.bucket("r9-stable", "node-0001") < 100


@settings(max_examples=200, deadline=None)
@given(agent=AGENT_IDS, groups=st.lists(st.sampled_from(["lab", "edge", "qa"]), max_size=2))
def test_membership_is_stable_and_only_grows_wave_by_wave(agent: str, groups: list[str]) -> None:
    got = [rollout.targets(agent, groups, _ro(w)) for w in range(len(WAVES))]
    assert got == [rollout.targets(agent, tuple(groups), _ro(w)) for w in range(len(WAVES))]  # stable
    assert all(later for earlier, later in zip(got, got[1:], strict=False) if earlier)  # never leaves once in
    assert got[-1]  # the 100% wave takes everyone
    first = rollout.wave_of(agent, groups, _ro(0))
    assert got == [first is not None and first <= w for w in range(len(WAVES))]


@pytest.mark.parametrize(("wave", "share", "tolerance"), [(0, 0.01, 0.004), (1, 0.10, 0.012), (3, 0.50, 0.02)])
def test_the_waves_take_their_percentage_of_10000_agents(wave: int, share: float, tolerance: float) -> None:
    ids = [f"node-{i:05d}" for i in range(10_000)]
    took = sum(rollout.targets(a, [], _ro(wave)) for a in ids) / len(ids)
    assert abs(took - share) < tolerance


def test_another_rollout_draws_another_sample() -> None:
    ids = [f"node-{i:05d}" for i in range(10_000)]
    a = {x for x in ids if rollout.targets(x, [], _ro(1, "r9-stable"))}
    b = {x for x in ids if rollout.targets(x, [], _ro(1, "r10-stable"))}
    assert 0.08 * len(ids) < len(a) < 0.12 * len(ids) and len(a & b) < 0.25 * len(a)  # ~10% of 10%


def test_a_group_wave_takes_the_agents_labelled_so_and_only_them() -> None:
    ro = _ro(0, waves=[{"groups": ["lab", "qa"]}, {"percent": 100}])
    assert rollout.targets("node-1", ["qa"], ro) and rollout.targets("node-2", ["edge", "lab"], ro)
    assert not rollout.targets("node-3", ["edge"], ro) and not rollout.targets("node-4", [], ro)
    assert rollout.targets("node-3", ["edge"], _ro(1, waves=[{"groups": ["lab", "qa"]}, {"percent": 100}]))
    assert rollout.targets("node-5", [], None)  # no rollout: everyone


@pytest.mark.parametrize(("doc", "field"), [
    ([], "rollout is not an object"),
    ({"id": "r", "waves": [{"percent": 10}], "wave": 0, "speed": 2}, "rollout.speed: unknown field"),
    ({"id": "", "waves": [{"percent": 10}]}, "rollout.id"),
    ({"id": "a/b", "waves": [{"percent": 10}]}, "rollout.id"),
    ({"id": "r", "waves": []}, "rollout.waves"),
    ({"id": "r", "waves": [{"percent": 10}] * 33}, "rollout.waves"),
    ({"id": "r", "waves": [{"percent": 0}]}, "rollout.waves[0].percent"),
    ({"id": "r", "waves": [{"percent": 101}]}, "rollout.waves[0].percent"),
    ({"id": "r", "waves": [{"percent": True}]}, "rollout.waves[0].percent"),
    ({"id": "r", "waves": [{"percent": 50}, {"percent": 10}]}, "rollout.waves[1].percent 10 is below"),
    ({"id": "r", "waves": [{"percent": 10, "groups": ["a"]}]}, "rollout.waves[0]: expected"),
    ({"id": "r", "waves": [{"groups": []}]}, "rollout.waves[0].groups"),
    ({"id": "r", "waves": [{"groups": ["la b"]}]}, "rollout.waves[0].groups label"),
    ({"id": "r", "waves": [{"percent": 10}], "wave": 1}, "rollout.wave 1: expected a wave index 0-0"),
    ({"id": "r", "waves": [{"percent": 10}], "wave": "0"}, "rollout.wave"),
    ({"id": "r", "waves": [{"percent": 10}], "halted": "no"}, "rollout.halted"),
    ({"id": "r", "waves": [{"percent": 10}], "max_failures": 5}, "rollout.max_failures"),
    ({"id": "r", "waves": [{"percent": 10}], "previous": "r1"}, "rollout.previous: expected"),
    ({"id": "r", "waves": [{"percent": 10}], "previous": {"release": "r1", "digest": "a" * 64}}, "rollout.previous"),
    ({"id": "r", "waves": [{"percent": 10}], "previous": {**PREV, "release": "../r1"}}, "rollout.previous.release"),
    ({"id": "r", "waves": [{"percent": 10}], "previous": {**PREV, "digest": "A" * 64}}, "rollout.previous.digest"),
    ({"id": "r", "waves": [{"percent": 10}], "previous": {**PREV, "length": 0}}, "rollout.previous.length"),
    ({"id": "r", "waves": [{"percent": 10}], "previous": {**PREV, "length": 1 << 40}}, "rollout.previous.length"),
])
def test_a_bad_rollout_is_refused_naming_the_pointer_and_the_field(doc: Any, field: str) -> None:
    with pytest.raises(RolloutError) as e:
        rollout.parse(doc, "s3://b/channels/stable.json")
    assert str(e.value).startswith("s3://b/channels/stable.json: ") and field in str(e.value)


def test_the_previous_release_is_kept_through_parse() -> None:
    doc = {"id": "r", "waves": [{"percent": 10}], "wave": 0, "previous": PREV}
    assert rollout.parse(doc, "p")["previous"] == PREV  # advance and halt rewrite the rollout from parse()


def test_the_default_agent_id_is_the_pod_name_else_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "triton-7c9f-abcde")
    assert rollout.default_agent_id() == "triton-7c9f-abcde"
    monkeypatch.delenv("POD_NAME")
    assert rollout.default_agent_id() == __import__("socket").gethostname()


def test_the_pull_command_takes_the_agents_identity_groups_and_reports(tmp_path: Any) -> None:
    from tritonops.agent import cli
    from tritonops.core.triton_http import Triton

    key = tmp_path / "release.pub"
    common = ["pull", "--link", str(tmp_path / "models"), "--releases", str(tmp_path / "releases"), "--store",
              str(tmp_path / "store"), "--channel", "stable", "--trusted-key", str(key)]
    args = cli.parser().parse_args([*common, "--agent-id", "edge-7", "--group-label", "lab", "--group-label", "qa",
                                    "--report", "--report-key", str(tmp_path / "report.key")])
    __import__("tritonops.release_format.signing", fromlist=["keygen"]).keygen(tmp_path / "release.key", key)
    agent = cli._agent(args, Triton("http://127.0.0.1:1"))
    assert (agent.agent_id, agent.group_labels, agent.report) == ("edge-7", ("lab", "qa"), True)
    assert str(agent.report_key) == str(tmp_path / "report.key")
    bad = cli.parser().parse_args([*common, "--agent-id", "a/b"])
    with pytest.raises(UsageError, match="--agent-id: agent id 'a/b'"):
        cli._agent(bad, Triton("http://127.0.0.1:1"))
    assert cli.main([*common, "--once", "--report-key", str(tmp_path / "missing.key")]) == 2
