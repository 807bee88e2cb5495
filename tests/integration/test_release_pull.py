"""Pull mode end to end: moto_server as S3, three real tritonservers as replicas, each with its own
release agent process as its sidecar, and steady inference load spread over the three.

moto_server (the moto[server] package) on 127.0.0.1 is a plainly named stand-in for AWS S3; the agents
reach it through a small TCP relay that the test can cut, to play an S3 outage. The agents run the
shipped zipapp (``tritonops agent build``) with the argv the Kubernetes pod runs
(``tritonops.k8s.stacks.triton.release_agent.release_agent_args``). Steps, one test each, in order:

1. release 2 is published: every replica serves it within poll interval + load time, 0 failed requests;
2. a release whose golden check fails: every replica stays on release 2, 0 failed requests, the failure
   is counted in the agents' metrics (step="golden");
3. a release signed by an untrusted key, and one with a tampered file: refused before Triton sees a file;
4. S3 unreachable for a while: replicas keep serving, poll errors are counted, then they catch up;
5. ``release rollback`` moves the channel back: every replica returns to release 2 without downloading it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tritonops import agent_bundle as bundle
from tritonops.release import publish as pub
from tritonops.release.status import status as release_status
from tritonops.release_format import manifest as manifests
from tritonops.release_format import signing
from tritonops.stores import open_store
from tritonops.triton import server

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
SECRET = "integration-only-admin-secret"
INTERVAL = 2.0
BUCKET = "models"
STORE = f"s3://{BUCKET}/fleet"
GOLDEN = json.loads((SAMPLE / "mlp" / "golden.json").read_text())["cases"][0]


class Relay:
    """A TCP relay to moto_server that can be cut (connections refused and dropped) and restored."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = server.free_port()
        self.open = threading.Event()
        self.open.set()
        self.conns: list[socket.socket] = []
        self.sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if not self.open.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open.clear()
        for s in self.conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.conns.clear()

    def restore(self) -> None:
        self.open.set()


@dataclass
class Replica:
    name: str
    link: Path
    releases: Path
    triton: server.TritonServer
    agent: subprocess.Popen
    agent_port: int

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.agent_port}/status", timeout=5) as r:
            return dict(json.loads(r.read()))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.agent_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def failures(self, step: str) -> float:
        found = re.findall(rf'tritonops_release_failures_total{{channel="stable",class="\w+",step="{step}"}} (\S+)',
                           self.metrics())  # one series per class (retry, refused)
        return sum(float(v) for v in found)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.agent_port}/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False


@dataclass
class Load:
    """Golden inferences on mlp, round robin over the replicas' HTTP ports, from two threads."""

    ports: list[int]
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def _run(self, offset: int) -> None:
        body = json.dumps({"inputs": [{"name": n, **t} for n, t in GOLDEN["inputs"].items()]})
        conns = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in self.ports}
        i = offset
        while not self.stop.is_set():
            port = self.ports[i % len(self.ports)]
            i += 1
            try:
                conns[port].request("POST", "/v2/models/mlp/infer", body, {"Content-Type": "application/json"})
                resp = conns[port].getresponse()
                data = resp.read()
                if resp.status != 200 or b'"logits"' not in data:
                    self.failed.append(f"{port}: HTTP {resp.status} {data[:200]!r}")
                else:
                    self.ok += 1
            except (OSError, http.client.HTTPException) as e:
                self.failed.append(f"{port}: {e}")
                conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            time.sleep(0.02)

    def start(self) -> None:
        for k in range(2):
            threading.Thread(target=self._run, args=(k,), daemon=True).start()


@dataclass
class Fleet:
    tmp: Path
    endpoint: str
    key: Path
    pub_key: Path
    rogue_key: Path
    relay: Relay
    replicas: list[Replica] = field(default_factory=list)
    load: Load | None = None
    published: dict[str, dict] = field(default_factory=dict)

    def publish(self, name: str, edit: dict[str, str] | None = None, key: Path | None = None) -> dict:
        """Copy the sample, apply ``edit`` (path -> text appended or, for golden.json, replaced), publish."""
        src = self.tmp / "src" / name
        shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
        for rel, text in (edit or {}).items():
            p = src / rel
            p.write_text(text if rel.endswith(".json") else p.read_text() + text)
        # ``key`` signs the manifest; the channel pointer is always the channel key's (a rogue manifest behind a
        # good pointer: the agents refuse it at verify, before any file is fetched)
        out = pub.publish(src, STORE, "stable", key or self.key, target="cpu", version=name,
                          s3_endpoint=self.endpoint, channel_keys=[self.key])
        self.published[name] = out
        return out

    def wait(self, what: str, cond, timeout: float) -> float:  # type: ignore[no-untyped-def]
        start = time.monotonic()
        while not all(cond(r) for r in self.replicas):
            if time.monotonic() - start > timeout:
                states = {r.name: r.status() for r in self.replicas}
                raise AssertionError(f"{what}: not reached in {timeout:.0f}s: {json.dumps(states, indent=1)}")
            time.sleep(0.25)
        return time.monotonic() - start


def _agent_argv(command: str, agent: Path, link: Path, releases: Path, triton_url: str, port: int, relay: Relay,
                trusted: Path, cache: Path) -> list[str]:
    from tritonops.k8s.stacks.triton.release_agent import release_agent_args

    return [sys.executable, "-I", str(agent), *release_agent_args(
        command, STORE, "stable", str(link), str(releases), [str(trusted)],
        s3_endpoint=f"http://127.0.0.1:{relay.port}", cache=str(cache),
        **({"triton_url": triton_url, "listen": f"127.0.0.1:{port}", "interval": INTERVAL}
           if command == "pull" else {}))]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, moto_s3: str) -> Iterator[Fleet]:
    import boto3

    tmp = tmp_path_factory.mktemp("release-pull")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "TRITONOPS_ADMIN_SECRET": SECRET}
    old_env = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update({k: env[k] for k in old_env})
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket=BUCKET)
    key, pub_key = signing.keygen(tmp / "keys" / "release.key", tmp / "keys" / "release.pub")
    rogue, _ = signing.keygen(tmp / "keys" / "rogue.key", tmp / "keys" / "rogue.pub")
    relay = Relay(int(moto_s3.rsplit(":", 1)[1]))
    f = Fleet(tmp, moto_s3, key, pub_key, rogue, relay)
    f.publish("r1")
    agent = bundle.build(tmp / "tritonops-agent.pyz")
    cache = tmp / "node-cache"  # shared by the three, as by pods on one node
    try:
        for i in range(3):
            root = tmp / f"replica-{i}"
            link, releases = root / "models", root / "releases"
            releases.mkdir(parents=True)
            init = subprocess.run(_agent_argv("sync", agent, link, releases, "", 0, relay, pub_key, cache),
                                  env=env, capture_output=True, text=True, timeout=120)
            assert init.returncode == 0, init.stdout + init.stderr
            triton = server.start(link, model_control_mode="explicit", load_models=["*"], workdir=root / "w",
                                  extra_args=[f"--http-restricted-api=model-repository:triton-admin-key={SECRET}"])
            port = server.free_port()
            log = (root / "agent.log").open("w")
            proc = subprocess.Popen(_agent_argv("pull", agent, link, releases, f"http://{triton.http_url}", port,
                                                relay, pub_key, cache), env=env, stdout=log, stderr=log)
            f.replicas.append(Replica(f"replica-{i}", link, releases, triton, proc, port))
        f.wait("replicas ready on r1", Replica.ready, 180)
        f.load = Load([r.triton.http_port for r in f.replicas])
        f.load.start()
        yield f
    finally:
        if f.load:
            f.load.stop.set()
        for r in f.replicas:
            r.agent.terminate()
            r.agent.wait(timeout=10)
            r.triton.stop()
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for r in f.replicas:
            print(f"--- {r.name} agent log\n{(r.link.parent / 'agent.log').read_text()[-3000:]}")


def _on(name: str):  # type: ignore[no-untyped-def]
    return lambda r: r.status().get("current") == name and r.status().get("active") == name


def _ready_models(r: Replica) -> set[str]:
    req = urllib.request.Request(f"http://{r.triton.http_url}/v2/repository/index", data=b"{}", method="POST",
                                 headers={"triton-admin-key": SECRET})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return {m["name"] for m in json.loads(resp.read()) if m.get("state") == "READY"}


def test_1_a_new_release_reaches_every_replica_with_no_failed_request(fleet: Fleet) -> None:
    assert all(_on("r1")(r) for r in fleet.replicas)
    time.sleep(2)
    fleet.publish("r2", {"mlp/1/model.py": "\n# release 2\n"})
    took = fleet.wait("all on r2", _on("r2"), timeout=INTERVAL * 1.2 + 60)
    print(f"r2 served by all 3 replicas {took:.1f}s after publish; {fleet.load.ok} requests ok")  # type: ignore
    time.sleep(1)
    assert fleet.load and fleet.load.failed == [] and fleet.load.ok > 0
    for r in fleet.replicas:
        assert _ready_models(r) == {"mlp", "mlp_batched", "pipeline", "postprocess", "preprocess"}
        assert os.readlink(r.link) == "releases/r2"


def test_2_a_release_failing_its_golden_check_is_rolled_back_everywhere(fleet: Fleet) -> None:
    golden = json.loads((SAMPLE / "mlp" / "golden.json").read_text())
    golden["cases"][0]["outputs"]["logits"]["data"][0] += 10.0
    fleet.publish("r3", {"mlp/golden.json": json.dumps(golden)})
    fleet.wait("golden failure counted", lambda r: r.failures("golden") >= 1, timeout=INTERVAL * 1.2 + 60)
    time.sleep(1)
    assert all(_on("r2")(r) for r in fleet.replicas)
    assert fleet.load and fleet.load.failed == []
    for r in fleet.replicas:
        assert fleet.published["r3"]["digest"] in r.status()["refused"]
        assert re.search(r'tritonops_release_info\{channel="stable",digest="\w+",release="r2"\} 1', r.metrics())
        assert 'tritonops_release_up_to_date{channel="stable"} 1' in r.metrics()


def test_3_unsigned_or_tampered_releases_never_reach_triton(fleet: Fleet) -> None:
    fleet.publish("r4", {"mlp/1/model.py": "\n# signed by someone else\n"}, key=fleet.rogue_key)
    fleet.wait("signature refusal counted", lambda r: r.failures("verify") >= 1, timeout=INTERVAL * 1.2 + 30)
    for r in fleet.replicas:
        assert not (r.releases / "r4").exists() and not list(r.releases.glob(".staging-r4*"))
    out = fleet.publish("r5", {"mlp/1/model.py": "\n# tampered in the bucket after publishing\n"})
    import boto3

    raw = open_store(STORE, s3_endpoint=fleet.endpoint).get(f"releases/{out['digest']}/manifest.json")
    files = manifests.parse(raw or b"", "manifest")
    boto3.client("s3", endpoint_url=fleet.endpoint).put_object(
        Bucket=BUCKET, Key=f"fleet/blobs/sha256/{files['mlp/1/model.py']}", Body=b"import os  # evil\n")
    fleet.wait("tampered file refused", lambda r: r.failures("fetch") >= 1, timeout=INTERVAL * 1.2 + 30)
    for r in fleet.replicas:
        assert not (r.releases / "r5").exists() and not list(r.releases.glob(".staging-r5*"))
        assert _on("r2")(r)
    assert fleet.load and fleet.load.failed == []


def test_4_replicas_keep_serving_through_an_s3_outage_and_catch_up(fleet: Fleet) -> None:
    fleet.relay.cut()
    try:
        fleet.publish("r6", {"mlp/1/model.py": "\n# release 6\n"})  # straight to moto: only the agents are cut off
        errors = [r.metrics() for r in fleet.replicas]
        time.sleep(INTERVAL * 4)
        for r, before in zip(fleet.replicas, errors, strict=True):
            assert _on("r2")(r)
            count = re.findall(r'tritonops_release_polls_total\{channel="stable",result="error"\} (\S+)', r.metrics())
            was = re.findall(r'tritonops_release_polls_total\{channel="stable",result="error"\} (\S+)', before)
            assert count and float(count[0]) > float((was or ["0"])[0])
    finally:
        fleet.relay.restore()
    took = fleet.wait("all on r6 after the outage", _on("r6"), timeout=INTERVAL * 1.2 + 60)
    print(f"caught up with r6 {took:.1f}s after S3 came back")
    assert fleet.load and fleet.load.failed == []


def test_5_rollback_moves_every_replica_back_without_a_download(fleet: Fleet) -> None:
    before = [r.metrics() for r in fleet.replicas]
    out = pub.rollback(STORE, "stable", release="r2", s3_endpoint=fleet.endpoint, keys=fleet.key)
    assert out["release"] == "r2" and out["previous"] == "r6"
    fleet.wait("all back on r2", _on("r2"), timeout=INTERVAL * 1.2 + 60)
    pattern = r"tritonops_release_downloaded_bytes_total (\S+)"
    for r, m in zip(fleet.replicas, before, strict=True):
        assert re.findall(pattern, r.metrics()) == re.findall(pattern, m)
    report = release_status(STORE, ["stable"], [f"http://127.0.0.1:{r.agent_port}/metrics" for r in fleet.replicas],
                            s3_endpoint=fleet.endpoint)
    assert report["channels"]["stable"]["release"] == "r2"
    assert [(t["release"], t["up_to_date"]) for t in report["targets"]] == [("r2", True)] * 3
    assert fleet.load and fleet.load.failed == []
    print(f"load: {fleet.load.ok} requests ok, {len(fleet.load.failed)} failed over the whole test")
