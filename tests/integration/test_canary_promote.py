"""Live: ``tritonops release promote canary stable --prometheus`` against a real Prometheus scraping
two real tritonservers, one labelled ``track="stable"``, one ``track="canary"``.

The way the ServiceMonitor's podTargetLabels label the pods' series on Kubernetes is done here by
the static scrape config's labels. Prometheus runs the project's rules (``rule_groups()`` with a
5 s rate window, 1 s scrape and evaluation), so the gate reads the very ``model_track:*`` records
it reads in a cluster. Both servers run with the pods' ``--metrics-config=summary_latencies=true``
and serve the fault-injection model (``fault_repo/faulty``: a sleep and failures switched through a
control file per server); each gets real inference load from ``tritonops.triton.bench`` (closed loop,
one request in flight, so a server's latency is its model's, not a queue's). The store is a folder:
release r1 on ``stable``, r2 (then r3) on ``canary``, signed with a key from ``signing.keygen``.

Scenario, in file order (one stack): no canary traffic -> refused, not enough data; both tracks alike
-> stable moves to r2; the canary fails its requests -> refused with the failure ratios; the canary
is slow -> refused with the p95s. A refused promote leaves the stable pointer where it was.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from test_observability_live import PROMETHEUS, _start, load, wait_for
from tritonops.cli import app
from tritonops.k8s.stacks.triton.workload import SUMMARY_LATENCIES_ARG
from tritonops.observability import rules as r
from tritonops.release import canary
from tritonops.release import publish as pub
from tritonops.release_format import signing
from tritonops.triton import server
from typer.testing import CliRunner

pytestmark = pytest.mark.integration
if PROMETHEUS is None:
    pytestmark = [pytestmark, pytest.mark.skip(reason="prometheus missing: `make apt`")]

HERE = Path(__file__).parent
MODEL = "faulty"
SETTINGS = r.RuleSettings(rate_window="5s")
WINDOW = "8s"
BASE_MS = 30  # both tracks sleep this long per request: a latency that scheduling noise barely moves
GATE = ["--model", MODEL, "--window", WINDOW, "--min-requests", "50", "--max-latency-increase", "0.5"]
TRITON_ARGS = [SUMMARY_LATENCIES_ARG, "--metrics-interval-ms=500", "--exit-timeout-secs=5"]


@dataclass
class Stack:
    work: Path
    store: str
    key: Path
    repos: dict[str, Path]
    servers: dict[str, server.TritonServer]
    prom_url: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def set_fault(self, track: str, **fault: Any) -> None:
        (self.repos[track] / "fault_control.json").write_text(json.dumps(fault))

    def query(self, expr: str) -> list[dict[str, Any]]:
        try:
            return canary.query(self.prom_url, expr)
        except canary.GateError as e:  # Prometheus still starting: wait_for polls on
            raise OSError(str(e)) from e

    def pointer(self, channel: str) -> str:
        p = pub.read_pointer(pub.open_writer(self.store).reader, channel)
        assert p is not None
        return str(p["release"])

    def publish(self, track: str, release: str, channel: str) -> None:
        pub.publish(self.repos[track], self.store, channel, self.key, target="cpu", version=release,
                    channels=["canary", "stable"])  # a canary release may be promoted to stable

    def load(self, track: str, seconds: float) -> Any:
        """Bounded closed-loop load (one request in flight) on one server: the live test's own helper."""
        target: Any = SimpleNamespace(triton=self.servers[track])  # load() reads only .triton.http_url
        return load(target, MODEL, seconds=seconds, mode="closed", concurrency=1, request_timeout_s=10)


def _repo(dest: Path, comment: str) -> Path:
    shutil.copytree(HERE / "fault_repo", dest)
    with (dest / MODEL / "1" / "model.py").open("a") as f:
        f.write(f"\n# {comment}\n")  # a release of its own (another digest)
    return dest


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("canary")
    key, _pub = signing.keygen(work / "keys" / "release.key", work / "keys" / "release.pub")
    repos = {"stable": _repo(work / "stable-repo", "release r1"), "canary": _repo(work / "canary-repo", "release r2")}
    st = Stack(work, str(work / "store"), key, repos, {}, "")
    for track in repos:
        st.set_fault(track, delay_ms=BASE_MS)
    st.publish("stable", "r1", "stable")
    st.publish("canary", "r2", "canary")
    errors: list[BaseException] = []

    def start(track: str) -> None:
        try:
            st.servers[track] = server.start(repos[track], model_control_mode="explicit", load_models=[MODEL],
                                             extra_args=TRITON_ARGS, workdir=work / f"triton-{track}")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=start, args=(t,)) for t in repos]  # two servers start in parallel
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        prom_port = server.free_port()
        (work / "rules.yml").write_text(yaml.safe_dump({"groups": r.rule_groups(SETTINGS)}, sort_keys=False))
        (work / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(work / "rules.yml")],
            "scrape_configs": [{"job_name": SETTINGS.job, "static_configs": [
                {"targets": [f"127.0.0.1:{srv.metrics_port}"], "labels": {"track": track}}
                for track, srv in st.servers.items()]}],
        }))
        assert PROMETHEUS
        st.procs.append(_start([
            PROMETHEUS, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ], work / "prometheus.log"))
        st.prom_url = f"http://127.0.0.1:{prom_port}"
        wait_for("both tracks scraped", lambda: len(st.query(f'up{{job="{SETTINGS.job}"}} == 1')) == 2, 30)
        yield st
    finally:
        for p in st.procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for srv in st.servers.values():
            srv.stop()


def promote(stack: Stack, *extra: str) -> tuple[int, dict[str, Any]]:
    """``tritonops release promote canary stable --prometheus ... --json``: exit code and report."""
    res = CliRunner().invoke(app, ["release", "promote", "canary", "stable", "--store", stack.store,
                                   "--key", str(stack.key), "--prometheus", stack.prom_url, *GATE, "--json", *extra])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def steady(track: str) -> str:
    """True once every sample of the gate's window (and the step before it) saw requests on ``track``,
    and the gate's own figure (its average over the window) says so too: a Prometheus starved by a busy
    machine can lag its rule evaluations, and the gate must then wait, not read a gap as no traffic."""
    # > 8/s over the window: comfortably above --min-requests 50 in 8 s, so the gate never lacks data
    rate = f'{r.TRACK_REQUESTS_RATE}{{track="{track}",model="{MODEL}"}}'
    gate_view = canary.average_expr(r.TRACK_REQUESTS_RATE, WINDOW)
    return f'min_over_time({rate}[10s]) > 8 and on(model, track) ({gate_view}) > 8'


def figures(report: dict[str, Any]) -> dict[str, Any]:
    model = report["models"][0] if "models" in report else report["gate"]["models"][0]
    assert model["model"] == MODEL
    return dict(model)


# --- the scenario, in steps -------------------------------------------------------------------------


def test_no_canary_traffic_refuses_for_want_of_data(stack: Stack) -> None:
    with stack.load("stable", seconds=30):
        wait_for("stable traffic over the whole window", lambda: stack.query(steady("stable")), 25)
        code, report = promote(stack)
    assert code == 1 and report["verdict"] == "refuse"
    model = figures(report)
    assert model["reasons"] == [f"not enough data: canary served 0 requests in {WINDOW} (need 50)"]
    assert model["stable"]["requests"] >= 50
    assert stack.pointer("stable") == "r1"


def test_canary_as_good_as_stable_is_promoted(stack: Stack) -> None:
    with stack.load("stable", seconds=30), stack.load("canary", seconds=30):
        wait_for("canary traffic over the whole window", lambda: stack.query(steady("canary")), 25)
        started = time.monotonic()
        code, out = promote(stack)
        took = time.monotonic() - started
    assert code == 0, out
    assert (out["release"], out["previous"], out["gate"]["verdict"]) == ("r2", "r1", "promote")
    assert stack.pointer("stable") == "r2"
    model = figures(out)
    for track in ("stable", "canary"):
        f = model[track]
        assert f["requests"] >= 100 and f["failure_ratio"] == 0  # ~8 s at ~30 requests/s
        assert BASE_MS / 1e3 <= f["p95_seconds"] < 2 * BASE_MS / 1e3, f  # the model's own sleep, seen at p95
    print(f"gate promote: {took:.2f}s; figures {json.dumps(model)}")


def test_failing_canary_is_refused_with_its_failure_ratio(stack: Stack) -> None:
    stack.publish("canary", "r3", "canary")  # the next canary release, which fails its requests
    stack.set_fault("canary", delay_ms=BASE_MS, fail=True)
    try:
        with stack.load("stable", seconds=20), stack.load("canary", seconds=20):
            wait_for("canary failures recorded", lambda: stack.query(
                f'{r.TRACK_FAILURE_RATIO}{{track="canary",model="{MODEL}"}} > 0.5'), 20)
            time.sleep(3)
            code, report = promote(stack)
            res = CliRunner().invoke(app, ["release", "promote", "canary", "stable", "--store", stack.store,
                                           "--key", str(stack.key), "--prometheus", stack.prom_url, *GATE])
    finally:
        stack.set_fault("canary", delay_ms=BASE_MS)
    assert code == 1 and report["verdict"] == "refuse"
    model = figures(report)
    assert model["canary"]["failure_ratio"] > 0.2 and model["stable"]["failure_ratio"] == 0
    assert any(reason.startswith("failure ratio ") for reason in model["reasons"]), model
    assert stack.pointer("stable") == "r2"  # not moved to r3
    # The table an operator reads: the figures of both tracks and why.
    assert res.exit_code == 1
    text = " ".join(res.output.split())
    assert f"canary vs stable over {WINDOW}" in text and "refuse" in text and f"{MODEL}: failure ratio" in text
    print(res.output)


def test_slow_canary_is_refused_with_its_p95(stack: Stack) -> None:
    stack.set_fault("canary", delay_ms=3 * BASE_MS)
    try:
        with stack.load("stable", seconds=25), stack.load("canary", seconds=25):
            # The failures of the step before must leave the gate's window (plus a step: the subquery
            # [8s:] also reads the sample at its start).
            wait_for("the canary's failures out of the window", lambda: stack.query(
                f'max_over_time({r.TRACK_FAILURE_RATIO}{{track="canary",model="{MODEL}"}}[10s]) == 0'), 25)
            code, report = promote(stack)
    finally:
        stack.set_fault("canary", delay_ms=BASE_MS)
    assert code == 1 and report["verdict"] == "refuse"
    model = figures(report)
    assert model["canary"]["p95_seconds"] > 1.5 * model["stable"]["p95_seconds"], model
    assert [reason.split(" ")[0] for reason in model["reasons"]] == ["p95"], model
    assert model["canary"]["failure_ratio"] == 0
    assert stack.pointer("stable") == "r2"
