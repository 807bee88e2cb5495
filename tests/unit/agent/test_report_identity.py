"""Fleet reports bound to who sent them (issue 34 item 2), through the real CLI.

A rollout of r2 on stable over a folder store; status reports written as agents (or an attacker who can
write reports) write them, signed with real Ed25519 keys. The fleet file maps each agent id to its own
report public key (``key=``): a report counts only when that agent's key signed it, under its own name,
unexpired; other agents' reports and the groups they claim are not counted, and are listed with the
reason. Last, ``rollout advance``, ``rollout status`` and ``release status`` are run over report files
hypothesis makes up: a reason or an exit code, never a traceback.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from agent_harness import cli, key_pairs, release_source
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonops.core.keys import report_key
from tritonops.release import publish as pub
from tritonops.release import rollout as ro
from tritonops.release_format import trust
from tritonops.release_format import waves as ar
from tritonops.stores import open_store


@pytest.fixture(scope="module")
def signer_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return key_pairs(tmp_path_factory.mktemp("keys"), "release", "a", "b")


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, signer_keys: dict[str, Path]) -> Path:
    base = tmp_path_factory.mktemp("published")
    pub.publish(release_source(base, "a"), str(base / "store"), "stable", signer_keys["release"], target="cpu", version="r1")
    pub.publish(release_source(base, "b", "two"), str(base / "store"), None, signer_keys["release"], target="cpu",
                version="r2", channels=["stable"])
    return base / "store"


def started(tmp_path: Path, signer_keys: dict[str, Path], published: Path, waves: str = "100",
            max_failures: str = "0") -> tuple[Path, str]:
    """A copy of the store with a rollout of r2 at wave 0, and the manifest digest of r2."""
    store = tmp_path / "store"
    shutil.copytree(published, store)
    code, out = cli("release", "rollout", "start", "--channel", "stable", "--release", "r2", "--store", store,
                    "--waves", waves, "--max-failures", max_failures, "--key", signer_keys["release"])
    assert code == 0, out
    p = pub.read_pointer(open_store(str(store)), "stable")
    assert p is not None
    return store, p["digest"]


def fleet_file(tmp_path: Path, signer_keys: dict[str, Path]) -> Path:
    shutil.copy(signer_keys["a.pub"], tmp_path / "a.pub")
    shutil.copy(signer_keys["b.pub"], tmp_path / "b.pub")
    listing = tmp_path / "fleet.txt"
    listing.write_text("node-a key=a.pub\nnode-b key=b.pub\n")
    return listing


def report(store: Path, agent: str, digest: str, result: str = "gated", key: Path | None = None,
           expires: float = 3600, **extra: Any) -> None:
    signed = {"type": "report", "version": int(time.time() * 1000), "agent": agent, "channel": "stable",
              "expires": trust.format_time(time.time() + expires), "release": "r2", "digest": digest,
              "result": result, "step": "golden", "time": trust.format_time(time.time()), "groups": [],
              "rollout": "r2-stable", **extra}
    data = (trust.sign_envelope(signed, [key]) if key else
            json.dumps({"signed": signed, "signatures": [], "unsigned": True}).encode())
    open_store(str(store)).put(report_key("stable", agent), data)


def test_a_report_signed_with_another_agents_key_is_not_counted(tmp_path: Path, signer_keys: dict[str, Path],
                                                                published: Path) -> None:
    store, digest = started(tmp_path, signer_keys, published)
    report(store, "node-a", digest, key=signer_keys["b"])  # node-b's key vouches "gated" for node-a
    report(store, "node-b", digest, key=signer_keys["b"])
    code, out = cli("release", "rollout", "advance", "--channel", "stable", "--store", store,
                    "--fleet", fleet_file(tmp_path, signer_keys), "--key", signer_keys["release"])
    assert code == 1 and "waiting" in out and "1 of 2 targeted agents have no outcome yet" in out, out
    assert "1 report(s) not counted" in out and "node-a.json (agent node-a's report key)" in out
    assert pub.read_pointer(open_store(str(store)), "stable")["rollout"]["wave"] == 0  # type: ignore[index]
    report(store, "node-a", digest, key=signer_keys["a"])
    code, out = cli("release", "rollout", "advance", "--channel", "stable", "--store", store,
                    "--fleet", tmp_path / "fleet.txt", "--key", signer_keys["release"])
    assert code == 0 and "complete" in out, out


def test_several_report_keys_not_bound_to_agents_are_refused_unless_named_unsafe(
        tmp_path: Path, signer_keys: dict[str, Path], published: Path) -> None:
    """With two report keys and no key= bindings, node-b's key could report its failing neighbour "gated":
    advance refuses (exit 2) before reading anything, names the fix, and moves nothing; --unbound-reports
    (named unsafe in --help) lets a lab go on, and counts exactly that forged report."""
    store, digest = started(tmp_path, signer_keys, published)
    report(store, "node-a", digest, key=signer_keys["b"])  # node-b's key vouches "gated" for node-a
    report(store, "node-b", digest, key=signer_keys["b"])
    unbound = tmp_path / "unbound.txt"
    unbound.write_text("node-a\nnode-b\n")
    common = ("release", "rollout", "advance", "--channel", "stable", "--store", store, "--key", signer_keys["release"],
              "--report-key", signer_keys["a.pub"], "--report-key", signer_keys["b.pub"])
    for fleet in (("--fleet", unbound), ()):
        code, out = cli(*common, *fleet)
        assert code == 2, out
        assert "2 --report-key given and" in out and "bind each agent with 'AGENT-ID key=FILE'" in out, out
        assert pub.read_pointer(open_store(str(store)), "stable")["rollout"]["wave"] == 0  # type: ignore[index]
    assert "2 agent(s) of the fleet file have no key= (node-a, node-b)" in cli(*common, "--fleet", unbound)[1]
    code, out = cli(*common, "--fleet", fleet_file(tmp_path, signer_keys))  # bound: judged, the forgery not counted
    assert code == 1 and "1 of 2 targeted agents have no outcome yet" in out, out
    code, out = cli(*common, "--fleet", unbound, "--unbound-reports")
    assert code == 0 and "complete" in out, out


def test_an_expired_report_is_not_counted(tmp_path: Path, signer_keys: dict[str, Path], published: Path) -> None:
    store, digest = started(tmp_path, signer_keys, published)
    report(store, "node-a", digest, key=signer_keys["a"], expires=-60)
    report(store, "node-b", digest, key=signer_keys["b"])
    code, out = cli("release", "rollout", "advance", "--channel", "stable", "--store", store,
                    "--fleet", fleet_file(tmp_path, signer_keys), "--key", signer_keys["release"])
    assert code == 1 and "waiting" in out and "node-a.json: expired at" in out, out


def test_reports_of_agents_outside_the_fleet_claiming_a_group_are_not_counted(
        tmp_path: Path, signer_keys: dict[str, Path], published: Path) -> None:
    store, digest = started(tmp_path, signer_keys, published, waves="lab,100")
    for ghost in ("ghost-1", "ghost-2"):
        report(store, ghost, digest, groups=["lab"])
    report(store, "node-a", digest, result="failed", key=signer_keys["a"], groups=["lab"])  # claims lab: not in the fleet's
    code, out = cli("release", "rollout", "advance", "--channel", "stable", "--store", store,
                    "--fleet", fleet_file(tmp_path, signer_keys), "--key", signer_keys["release"])
    assert code == 1 and "waiting" in out and "no agent of waves 0..0 is known" in out, out
    assert "ghost-1' is not in the fleet: not counted" in out and "2 report(s) not counted" in out
    code, out = cli("release", "rollout", "status", "--channel", "stable", "--store", store,
                    "--fleet", tmp_path / "fleet.txt", "--json")
    got = json.loads(out)
    assert code == 0 and got["unattributed"] == 2 and [w["targeted"] for w in got["waves"]] == [0, 0]


def test_an_older_report_written_back_is_not_counted(tmp_path: Path, signer_keys: dict[str, Path], published: Path) -> None:
    """Uptane's rule: a report counts only when it is not older than the one counted before for its agent."""
    store, digest = started(tmp_path, signer_keys, published, max_failures="0.5")
    fleet = fleet_file(tmp_path, signer_keys)

    def advance() -> tuple[int, str]:
        return cli("release", "rollout", "advance", "--channel", "stable", "--store", store, "--fleet", fleet,
                   "--key", signer_keys["release"])

    report(store, "node-a", digest, key=signer_keys["a"], version=1000)
    gated = (store / report_key("stable", "node-a")).read_bytes()
    assert advance()[0] == 1  # waiting for node-b; node-a's report 1000 counted
    report(store, "node-a", digest, result="failed", key=signer_keys["a"], version=2000)
    assert advance()[0] == 1  # 1 of 2 failed is within 0.5; node-b still pending; 2000 counted
    (store / report_key("stable", "node-a")).write_bytes(gated)  # the old "gated", written back
    report(store, "node-b", digest, key=signer_keys["b"], version=3000)
    code, out = advance()
    assert code == 1 and "waiting" in out and "1 of 2 targeted agents have no outcome yet" in out, out
    assert "node-a.json: version 1000 is older than the report counted before (2000): a replay" in out
    code, out = cli("release", "rollout", "status", "--channel", "stable", "--store", store, "--fleet", fleet,
                    "--json")
    assert code == 0 and json.loads(out)["unattributed"] == 1, out
    counted = trust.parse_envelope((store / "rollouts" / "stable.json").read_bytes(), "counted", "counted")
    assert counted["signed"]["agents"] == {"node-a": 2000, "node-b": 3000}


def test_a_counted_record_not_signed_by_the_channel_keys_is_refused(tmp_path: Path, signer_keys: dict[str, Path],
                                                                     published: Path) -> None:
    store, digest = started(tmp_path, signer_keys, published)
    (store / "rollouts").mkdir()
    forged = {"type": "counted", "version": 1, "rollout": "r2-stable", "agents": {"node-a": 10**15},
              "expires": trust.format_time(time.time() + 3600)}
    (store / "rollouts" / "stable.json").write_bytes(trust.sign_envelope(forged, [signer_keys["a"]]))
    report(store, "node-a", digest, key=signer_keys["a"])
    code, out = cli("release", "rollout", "advance", "--channel", "stable", "--store", store,
                    "--fleet", fleet_file(tmp_path, signer_keys), "--key", signer_keys["release"])
    assert code != 0 and "rollouts/stable.json" in out and "Traceback" not in out, out
    assert pub.read_pointer(open_store(str(store)), "stable")["rollout"]["wave"] == 0  # type: ignore[index]


def test_a_malformed_report_is_refused_with_a_reason_in_every_command(tmp_path: Path, signer_keys: dict[str, Path],
                                                                      published: Path) -> None:
    store, digest = started(tmp_path, signer_keys, published)
    report(store, "node-a", digest, groups=5)
    report(store, "node-b", digest)
    code, out = cli("release", "rollout", "advance", "--channel", "stable", "--store", store, "--key", signer_keys["release"])
    assert code == 0 and "node-a.json: groups '5' is not a list" in out, out
    for command in (("rollout", "status"), ("status",)):
        code, out = cli("release", *command, "--channel", "stable", "--store", store, "--json")
        assert code == 0 and "node-a.json: groups '5' is not a list" in out, out


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
FIELDS = ("type", "version", "expires", "agent", "channel", "release", "digest", "result", "groups", "rollout")
SIGNED = st.dictionaries(st.sampled_from(FIELDS), JSON | st.sampled_from(["node-a", "gated", "r2-stable", "stable"]),
                         max_size=len(FIELDS))
REPORTS = st.one_of(JSON, st.fixed_dictionaries({"signed": SIGNED | JSON, "signatures": JSON | st.just([])}))


def test_the_three_commands_survive_any_report_file(tmp_path: Path, signer_keys: dict[str, Path], published: Path) -> None:
    """1,000 generated report files (made-up JSON, and envelopes whose fields hold anything): each read as the
    three commands read it (ro.read_reports, observe, waves_table), then all of them at once through the
    real commands; every one counted or rejected with a reason, never an exception."""
    store, _ = started(tmp_path, signer_keys, published)
    writer = pub.open_writer(str(store))
    rollout = pub.read_pointer(writer, "stable")
    assert rollout is not None
    parsed = ar.parse(rollout["rollout"], "pointer")
    folder = store / "reports" / "stable"
    folder.mkdir(parents=True, exist_ok=True)
    seen = [0]

    @settings(max_examples=1000, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(doc=REPORTS)
    def one(doc: Any) -> None:
        seen[0] += 1
        agent = f"node-{seen[0]}"
        (folder / f"{agent}.json").write_text(json.dumps(doc, allow_nan=True))
        got = ro.read_reports(writer, "stable", fleet=[(agent, [], None)])
        ro.waves_table(parsed, ro.observe(rollout, parsed, got["reports"], [], [(agent, [], None)]))
        assert len(got["reports"]) + len(got["rejected"]) == 1
        (folder / f"{agent}.json").rename(kept / f"{agent}.json")  # for the commands below

    kept = tmp_path / "kept"
    kept.mkdir()
    one()
    assert seen[0] == 1000
    shutil.rmtree(folder)
    kept.rename(folder)
    for command in (("rollout", "advance", "--key", signer_keys["release"]), ("rollout", "status"), ("status",)):
        code, out = cli("release", *command, "--channel", "stable", "--store", store, "--json")
        assert code in (0, 1), out
