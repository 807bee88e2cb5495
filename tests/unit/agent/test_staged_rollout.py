"""Staged rollouts end to end (release/rollout.py, agent/rollout.py, `tritonops release rollout`).

Real agents (no Triton) poll a folder store; the controller starts a rollout, reads their status
reports and advances, waits or halts. The S3 report PUT is checked against botocore's signer and
against a local http.server standing in for the bucket.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_harness import release_source
from tritonops.agent.pull import Agent
from tritonops.core.errors import UsageError
from tritonops.core.keys import report_key
from tritonops.release import publish as pub
from tritonops.release import rollout as ro
from tritonops.release_format import signing
from tritonops.release_format import waves as ar
from tritonops.stores import open_store
from tritonops.stores.aws_credentials import sigv4_headers

WAVES = [{"percent": 50}, {"percent": 100}]


@pytest.fixture(scope="module")
def report_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The key pair an agent signs its reports with."""
    d = tmp_path_factory.mktemp("report-keys")
    key, pubkey = signing.keygen(d / "report.key", d / "report.pub")
    return {"key": key, "pub": pubkey}


def _ids(rid: str, inside: bool, n: int) -> list[str]:
    """``n`` agent ids that rollout ``rid``'s 50% wave takes (inside) or leaves for later."""
    return [a for a in (f"node-{i:03d}" for i in range(200)) if (ar.bucket(rid, a) < 50) == inside][:n]


@pytest.fixture
def fleet(tmp_path: Path, keys: dict[str, Path], published: Path) -> dict[str, Any]:
    """A copy of the store, and two agents serving r1 on it: one in r2's first wave, one in its second."""
    store = str(tmp_path / "store")
    shutil.copytree(published, store)
    agents = []
    for name in (_ids("r2-stable", True, 1)[0], _ids("r2-stable", False, 1)[0]):
        (tmp_path / name / "releases").mkdir(parents=True)
        agents.append(Agent(open_store(store), "stable", tmp_path / name / "models", tmp_path / name / "releases",
                            [keys["pub"]], log=lambda m: None, agent_id=name, report=True))
        assert agents[-1].poll()["release"] == "r1"
    return {"store": store, "inside": agents[0], "outside": agents[1], "rid": "r2-stable",
            "sign": {"keys": [keys["key"]]}}


def _current(agent: Agent) -> str | None:
    from tritonops.agent import releases

    return releases.state(agent.releases).get("current")


def test_a_wave_moves_its_agents_only_and_advance_takes_the_next_wave(fleet: dict[str, Any]) -> None:
    store, inside, outside = fleet["store"], fleet["inside"], fleet["outside"]
    r1 = pub.read_pointer(open_store(store), "stable")
    started = ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    assert started["rollout"] == {"id": fleet["rid"], "waves": WAVES, "wave": 0, "halted": False, "max_failures": 0.05,
                                  "previous": {"release": "r1", "digest": r1["digest"], "length": r1["length"]}}
    assert pub.read_pointer(open_store(store), "stable")["rollout"]["wave"] == 0

    before = outside.store.requests
    assert inside.poll()["result"] == "applied" and _current(inside) == "r2"
    out = outside.poll()
    assert _current(outside) == "r1" and out["rollout"].startswith("not targeted")  # keeps what it serves
    assert outside.store.requests == before + 1  # the pointer only: nothing downloaded
    assert outside.status()["rollout"] == ("not targeted: serving previous release r1 (rollout r2-stable at wave 0, "
                                           "this agent in wave 1)")
    text = outside.metrics.render()
    assert 'tritonops_release_rollout_targeted{channel="stable",previous="r1",rollout="r2-stable",wave="1"} 0' in text
    assert 'tritonops_release_up_to_date{channel="stable"} 1' in text  # where the rollout wants it: not behind
    assert 'tritonops_release_rollout_targeted{channel="stable",previous="",rollout="r2-stable",wave="0"} 1' in (
        inside.metrics.render())

    report = json.loads((Path(store) / "reports" / "stable" / f"{inside.agent_id}.json").read_text())
    assert report["unsigned"] is True and report["signatures"] == []
    assert {k: report["signed"][k] for k in ("agent", "channel", "release", "result", "rollout", "type")} == {
        "agent": inside.agent_id, "channel": "stable", "release": "r2", "result": "applied",
        "rollout": "r2-stable", "type": "report"}
    kept = json.loads((Path(store) / "reports" / "stable" / f"{outside.agent_id}.json").read_text())["signed"]
    assert (kept["release"], kept["rollout"]) == ("r1", None)  # its report of r1: nothing new applied

    adv = ro.advance(store, "stable", pointer_args=fleet["sign"])
    assert (adv["result"], adv["wave"], adv["targeted"], adv["failed"]) == ("advanced", 1, 1, 0)
    assert adv["waves"][0] | {"spec": "50%"} == {"wave": 0, "spec": "50%", "reached": True, "agents": 1,
                                                 "targeted": 1, "applied": 1, "gated": 0, "failed": 0,
                                                 "refused": 0, "pending": 0}
    assert outside.poll()["result"] == "applied" and _current(outside) == "r2"
    assert inside.poll()["result"] in ("unchanged", "not_modified") and inside.status()["rollout"].startswith(
        "serving: rollout r2-stable, this agent in wave 0 (at wave 1)")
    p = pub.read_pointer(open_store(store), "stable")
    assert p["rollout"]["wave"] == 1 and [h["release"] for h in p["history"]] == ["r1"]  # waves add no history
    assert ro.advance(store, "stable", pointer_args=fleet["sign"])["result"] == "complete"


def _node(tmp_path: Path, store: str, keys: dict[str, Path], name: str) -> Agent:
    """An agent on a node with nothing installed yet (a node added, a pod recreated, mid-rollout)."""
    (tmp_path / name / "releases").mkdir(parents=True)
    return Agent(open_store(store), "stable", tmp_path / name / "models", tmp_path / name / "releases", [keys["pub"]],
                 log=lambda m: None, agent_id=name, report=True)


def _report_of(store: str, agent: Agent) -> dict[str, Any]:
    return json.loads((Path(store) / "reports" / "stable" / f"{agent.agent_id}.json").read_text())["signed"]


def test_a_new_node_outside_the_wave_installs_the_previous_release_one_inside_the_new(
        fleet: dict[str, Any], tmp_path: Path, keys: dict[str, Path]) -> None:
    store, rid = fleet["store"], fleet["rid"]
    r1 = pub.read_pointer(open_store(store), "stable")
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    late_out = _node(tmp_path, store, keys, _ids(rid, False, 2)[1])  # joined mid-rollout, in wave 1
    late_in = _node(tmp_path, store, keys, _ids(rid, True, 2)[1])  # joined mid-rollout, in wave 0

    out = late_out.poll()
    assert (out["result"], out["release"]) == ("applied", "r1") and _current(late_out) == "r1"  # what wave 1 serves
    assert late_out.gated() and not (late_out.releases / "r2").exists()  # r2 never downloaded
    want = "not targeted: serving previous release r1 (rollout r2-stable at wave 0, this agent in wave 1)"
    assert out["rollout"] == want and late_out.status()["rollout"] == want
    text = late_out.metrics.render()
    assert 'tritonops_release_rollout_targeted{channel="stable",previous="r1",rollout="r2-stable",wave="1"} 0' in text
    assert f'tritonops_release_info{{channel="stable",digest="{r1["digest"]}",release="r1"}} 1' in text
    assert 'tritonops_release_up_to_date{channel="stable"} 1' in text  # where the rollout wants it
    assert {k: _report_of(store, late_out)[k] for k in ("release", "digest", "result", "rollout")} == {
        "release": "r1", "digest": r1["digest"], "result": "applied", "rollout": rid}  # not counted as r2's
    before = late_out.store.requests
    assert late_out.poll()["result"] == "not_modified" and late_out.store.requests == before + 1  # stays, idle
    assert late_out.status()["rollout"] == want

    out = late_in.poll()
    assert (out["result"], out["release"]) == ("applied", "r2") and _current(late_in) == "r2"  # its wave's release
    assert late_in.status()["rollout"] == "targeted: rollout r2-stable wave 0 (at wave 0)"

    fleet["inside"].poll()
    assert ro.advance(store, "stable", pointer_args=fleet["sign"])["result"] == "advanced"  # r1 reports: not r2's
    assert late_out.poll()["release"] == "r2" and _current(late_out) == "r2"  # its wave now: the new release


def test_a_new_node_under_a_halted_rollout_installs_the_previous_release_even_in_the_wave(
        fleet: dict[str, Any], tmp_path: Path, keys: dict[str, Path]) -> None:
    store = fleet["store"]
    ro.start(store, "stable", "r2", WAVES, 0.0, pointer_args=fleet["sign"])
    pointer = pub.read_pointer(open_store(store), "stable")
    pub.move_pointer(pub.open_writer(store), "stable", "r2", pointer["digest"], "halt",
                     rollout={**pointer["rollout"], "halted": True}, keys=fleet["sign"]["keys"])
    late = _node(tmp_path, store, keys, _ids(fleet["rid"], True, 2)[1])
    out = late.poll()
    assert (out["result"], out["release"]) == ("applied", "r1") and _current(late) == "r1"
    assert late.status()["rollout"] == ("halted: rollout r2-stable stopped at wave 0 before this agent applied it: "
                                        "serving previous release r1")


def test_a_new_pod_syncs_the_previous_release_when_the_rollout_does_not_take_it(
        fleet: dict[str, Any], tmp_path: Path, keys: dict[str, Path]) -> None:
    from tritonops.agent import releases

    store, rid = fleet["store"], fleet["rid"]
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    outside, inside = _node(tmp_path, store, keys, _ids(rid, False, 2)[1]), _node(tmp_path, store, keys,
                                                                                  _ids(rid, True, 2)[1])
    assert outside.sync()["release"] == "r1" and releases.active_release(outside.link, outside.releases) == "r1"
    assert inside.sync()["release"] == "r2" and releases.active_release(inside.link, inside.releases) == "r2"


def test_a_channels_first_release_under_a_rollout_goes_to_a_new_node_and_status_says_why(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "e"), store, None, keys["key"], target="cpu", version="e1",
                channels=["stable"])
    started = ro.start(store, "stable", "e1", WAVES, 0.05, pointer_args={"keys": [keys["key"]]})
    assert "previous" not in started["rollout"] and started["previous"] is None
    late = _node(tmp_path, store, keys, _ids("e1-stable", False, 1)[0])
    out = late.poll()
    assert (out["result"], out["release"]) == ("applied", "e1") and _current(late) == "e1"
    assert late.status()["rollout"].startswith("no previous release: rollout e1-stable names none (the channel's "
                                               "first release), so this agent, with nothing gated, takes e1")


def test_a_rollout_started_again_keeps_the_release_before_the_first_start(fleet: dict[str, Any]) -> None:
    store = fleet["store"]
    first = ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    again = ro.start(store, "stable", "r2", [{"percent": 20}, {"percent": 100}], 0.05, pointer_args=fleet["sign"])
    assert again["changed"] and again["rollout"]["previous"] == first["rollout"]["previous"]
    assert pub.read_pointer(open_store(store), "stable")["rollout"]["previous"]["release"] == "r1"  # not r2 itself


def test_advance_waits_for_a_targeted_agent_listed_in_the_fleet(fleet: dict[str, Any], tmp_path: Path) -> None:
    store = fleet["store"]
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    other = _ids(fleet["rid"], True, 3)[1:]  # two more agents of wave 0 that never polled
    listing = tmp_path / "fleet.txt"
    listing.write_text("".join(f"{a}\n" for a in [fleet["inside"].agent_id, fleet["outside"].agent_id, *other])
                       + "# comment\n")
    fleet["inside"].poll()
    adv = ro.advance(store, "stable", fleet=ro.parse_fleet(listing), pointer_args=fleet["sign"])
    assert (adv["result"], sorted(adv["pending"]), adv["targeted"]) == ("waiting", sorted(other), 3)
    assert pub.read_pointer(open_store(store), "stable")["rollout"]["wave"] == 0  # nothing written


def _report(store: str, agent: str, result: str, digest: str, rid: str = "r2-stable") -> None:
    signed = {"type": "report", "version": 1, "expires": "2099-01-01T00:00:00Z", "agent": agent,
              "channel": "stable", "release": "r2", "digest": digest, "result": result, "step": "golden",
              "time": "2026-12-02T00:00:00Z", "groups": [], "rollout": rid}
    open_store(store).put(report_key("stable", agent),
           json.dumps({"signed": signed, "signatures": [], "unsigned": True}).encode())


@pytest.mark.parametrize(("failed", "limit", "result"), [(1, 0.05, "halted"), (2, 0.5, "advanced"),
                                                         (0, 0.0, "advanced"), (3, 0.5, "halted")])
def test_advance_halts_over_the_threshold(fleet: dict[str, Any], failed: int, limit: float, result: str) -> None:
    store = fleet["store"]
    digest = ro.start(store, "stable", "r2", WAVES, limit, pointer_args=fleet["sign"])["digest"]
    for i, a in enumerate(_ids(fleet["rid"], True, 4)):
        _report(store, a, "refused" if i < failed else "gated", digest)
    _report(store, "node-stale", "failed", digest, rid="an-older-rollout")  # another rollout's: not counted
    adv = ro.advance(store, "stable", pointer_args=fleet["sign"])
    assert (adv["result"], adv["failed"], adv["targeted"]) == (result, failed, 4)
    p = pub.read_pointer(open_store(store), "stable")
    assert (p["release"], p["rollout"]["halted"], p["rollout"]["wave"]) == (
        "r2", result == "halted", 0 if result == "halted" else 1)
    if result == "halted":
        assert ro.advance(store, "stable", pointer_args=fleet["sign"])["result"] == "already halted"


def test_a_halted_rollout_takes_nobody_new_and_rollback_on_halt_moves_everyone_back(fleet: dict[str, Any]) -> None:
    store, inside, outside = fleet["store"], fleet["inside"], fleet["outside"]
    digest = ro.start(store, "stable", "r2", WAVES, 0.0, pointer_args=fleet["sign"])["digest"]
    late = _ids(fleet["rid"], True, 2)[1]
    _report(store, late, "failed", digest)
    adv = ro.advance(store, "stable", rollback_on_halt=True, pointer_args=fleet["sign"])
    assert adv["result"] == "halted" and adv["rollback"]["release"] == "r1"
    p = pub.read_pointer(open_store(store), "stable")
    assert p["release"] == "r1" and "rollout" not in p  # back for everyone
    assert inside.poll()["result"] != "applied" and _current(inside) == "r1" and _current(outside) == "r1"


def test_a_halted_rollout_leaves_an_agent_of_its_wave_that_had_not_applied_it(fleet: dict[str, Any]) -> None:
    store, inside = fleet["store"], fleet["inside"]
    ro.start(store, "stable", "r2", WAVES, 0.0, pointer_args=fleet["sign"])
    pointer = pub.read_pointer(open_store(store), "stable")
    pub.move_pointer(pub.open_writer(store), "stable", "r2", pointer["digest"], "halt",
                     rollout={**pointer["rollout"], "halted": True}, keys=fleet["sign"]["keys"])
    out = inside.poll()
    assert _current(inside) == "r1" and out["rollout"].startswith("halted: rollout r2-stable")


def test_signed_reports_count_only_with_a_trusted_report_key(fleet: dict[str, Any], keys: dict[str, Path],
                                                             report_keys: dict[str, Path]) -> None:
    store, inside = fleet["store"], fleet["inside"]
    inside.report_key = report_keys["key"]
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    inside.poll()
    raw = json.loads((Path(store) / "reports" / "stable" / f"{inside.agent_id}.json").read_text())
    assert len(raw["signatures"]) == 1 and "unsigned" not in raw
    assert ro.advance(store, "stable", report_keys=[report_keys["pub"]], pointer_args=fleet["sign"])["result"] == "advanced"
    got = ro.summary(store, "stable", [], report_keys=[keys["pub"]])  # not the key that signed it
    assert got is not None and got["agents"] == []  # neither its signed report nor the other's unsigned one
    assert any(r.startswith(f"{store}/reports/stable/{inside.agent_id}.json: ") for r in got["rejected_reports"])


def test_start_refuses_an_unpublished_release_and_bad_waves(fleet: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="never published"):
        ro.start(fleet["store"], "stable", "r7", WAVES, 0.05, pointer_args=fleet["sign"])
    with pytest.raises(UsageError, match=r"--waves: rollout.waves\[1\].percent 10 is below"):
        ro.parse_waves("50,10")
    assert ro.parse_waves("10,50,100", ["lab"]) == [{"groups": ["lab"]}, {"percent": 10}, {"percent": 50},
                                                    {"percent": 100}]
    assert ro.parse_waves("lab+qa,25.5") == [{"groups": ["lab", "qa"]}, {"percent": 25.5}]
    assert (ro.parse_threshold("5%"), ro.parse_threshold("0.1")) == (0.05, 0.1)
    for bad in ("five", "120%", "nan", "-1"):
        with pytest.raises(UsageError, match="--max-failures"):
            ro.parse_threshold(bad)
    with pytest.raises(UsageError, match="has no rollout"):
        ro.advance(fleet["store"], "stable", pointer_args=fleet["sign"])


def test_the_cli_starts_and_advances_a_rollout(fleet: dict[str, Any]) -> None:
    from tritonops.cli import app
    from typer.testing import CliRunner

    store, key = fleet["store"], ["--key", str(fleet["sign"]["keys"][0])]
    run = CliRunner().invoke
    r = run(app, ["release", "rollout", "start", "--channel", "stable", "--release", "r2", "--store", store,
                  "--waves", "50,100", "--max-failures", "5%", "--json", *key])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["rollout"]["waves"] == WAVES
    r = run(app, ["release", "rollout", "advance", "--channel", "stable", "--store", store, *key])
    assert r.exit_code == 1 and "waiting" in r.output  # nobody reported yet
    fleet["inside"].poll()
    r = run(app, ["release", "rollout", "status", "--channel", "stable", "--store", store])
    assert r.exit_code == 0 and "50%" in r.output
    r = run(app, ["release", "status", "--channel", "stable", "--store", store, "--json"])
    waves = json.loads(r.output)["rollouts"]["stable"]["waves"]
    assert [(w["targeted"], w["applied"], w["failed"], w["pending"]) for w in waves] == [(1, 1, 0, 0), (0, 0, 0, 0)]
    r = run(app, ["release", "status", "--channel", "stable", "--store", store])
    assert "rollout r2-stable of r2 on stable" in r.output.replace("\n", " ")
    r = run(app, ["release", "rollout", "advance", "--channel", "stable", "--store", store, *key])
    assert r.exit_code == 0 and "advanced" in r.output
    r = run(app, ["release", "rollout", "start", "--channel", "stable", "--release", "r2", "--store", store,
                  "--waves", "50,10"])
    assert r.exit_code == 2 and "below" in r.output


def test_the_report_put_is_signed_as_botocore_signs_it() -> None:
    import datetime

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url, body = "http://127.0.0.1:9000/bucket/fleet/reports/stable/node-1.json", b'{"signed": {}}'
    now = datetime.datetime(2026, 12, 2, 3, 4, 5, tzinfo=datetime.UTC)
    ours = sigv4_headers(url, "us-east-1", now=now, env={"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"},
                         method="PUT", payload_hash=hashlib.sha256(body).hexdigest())
    req = AWSRequest(method="PUT", url=url, data=body, headers={"x-amz-content-sha256": ours["x-amz-content-sha256"],
                                                                "X-Amz-Date": ours["x-amz-date"]})
    req.context["timestamp"] = ours["x-amz-date"]
    auth = S3SigV4Auth(Credentials("AK", "SK"), "s3", "us-east-1")
    signature = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    assert ours["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert ours["Authorization"].endswith(f"Signature={signature}")


def test_an_s3_store_gets_the_report_as_a_signed_put(monkeypatch: pytest.MonkeyPatch) -> None:
    got: dict[str, Any] = {}

    class Bucket(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802
            got.update(path=self.path, headers={k.lower(): v for k, v in self.headers.items()},
                       body=self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Bucket)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for k in ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
        store = open_store("s3://bucket/fleet", s3_endpoint=f"http://127.0.0.1:{server.server_port}")
        store.put(report_key("stable", "node-1"), b'{"x": 1}\n')
    finally:
        server.shutdown()
    assert got["path"] == "/bucket/fleet/reports/stable/node-1.json" and got["body"] == b'{"x": 1}\n'
    assert got["headers"]["x-amz-content-sha256"] == hashlib.sha256(b'{"x": 1}\n').hexdigest()
    assert got["headers"]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AK/")
    with pytest.raises(UsageError, match="read-only"):
        open_store("http://127.0.0.1:1/mirror").put("reports/stable/a.json", b"{}")


def test_release_status_reads_a_rollout_from_an_http_mirror(fleet: dict[str, Any]) -> None:
    import functools

    store = fleet["store"]
    ro.start(store, "stable", "r2", WAVES, 0.05, pointer_args=fleet["sign"])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=store)
    handler.log_message = lambda *a: None  # type: ignore[method-assign, assignment]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = ro.summary(f"http://127.0.0.1:{server.server_port}", "stable", [])
    finally:
        server.shutdown()
    assert got is not None and got["rollout"]["id"] == "r2-stable" and "cannot be listed" in got["rejected_reports"][0]
