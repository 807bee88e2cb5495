"""The rendered dev Triton pod, run for real with ``podman kube play`` (issue 20, "Pods that really run").

``tritonops render --stack triton --env dev`` is re-rendered here (``devkit.kube_play.plan``); its stable
``vision`` Deployment plays with only its images (a CPU Triton image built from the nvidia-pytriton
wheel), its store URL (an HTTP mirror of a folder, in a container on Podman's network) and its
trusted public key substituted, plus ``restartPolicy: OnFailure`` (podman 4.3 restarts a succeeded
init container under Always). The module shows, in order:

1. the init container installs the channel's release before Triton starts (the sidecar downloads nothing);
2. every container runs with the rendered securityContext (uid/gid, read-only root, no capabilities,
   no privilege escalation) and memory limit, read back from ``podman inspect`` and ``/proc``;
3. env from Secrets reaches the containers: Triton's restricted API takes the token from the Secret;
4. the sidecar's ``/ready`` turns 200 only once the init release passed its golden gate;
5. every probe path of the rendered pod answers 200 on its port (podman 4.3 runs none of them: readiness
   and startup probes are dropped, liveness becomes a healthcheck on port 0 that needs curl and systemd);
6. a new publish reaches the running pod (seconds printed), with no failed request under steady load;
7. a release with a tampered file never reaches Triton: the agent refuses it, Triton keeps the old model.

Needs root, Podman 4.3+, ``catatonit`` (``make apt``) and the devkit's Debian image (built when missing,
cached). At low load: image cached, about 2 minutes (pod ready ~20-40 s, each publish up to one poll
interval of the rendered agent, 30 s, plus its load and golden gate).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from devkit import kube_play as kp
from devkit import triton_image
from tritonops.release import publish as pub
from tritonops.release_format import manifest as manifests
from tritonops.release_format import signing
from tritonops.stores import open_store

pytestmark = [pytest.mark.host, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "model_repository"
GOLDEN = json.loads((SAMPLE / "mlp" / "golden.json").read_text())["cases"][0]
ADMIN_TOKEN = "kube-play-only-admin-token"  # a test value: never a real secret
ADMIN_HEADER = "triton-admin-key"
FIGURES: dict[str, str] = {}


@dataclass
class Load:
    """Golden inferences on mlp against the pod's Triton, one thread, until stopped."""

    url: str
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        body = json.dumps({"inputs": [{"name": n, **t} for n, t in GOLDEN["inputs"].items()]})
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        while not self.stop.is_set():
            try:
                conn.request("POST", "/v2/models/mlp/infer", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200 or b'"logits"' not in data:
                    self.failed.append(f"HTTP {resp.status} {data[:200]!r}")
                else:
                    self.ok += 1
            except (OSError, http.client.HTTPException) as e:
                self.failed.append(str(e))
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
            time.sleep(0.05)

    def start(self) -> Load:
        threading.Thread(target=self._run, daemon=True).start()
        return self


@dataclass
class Played:
    tmp: Path
    key: Path
    store: kp.StoreServer
    plan: kp.PodPlan
    pod: kp.PlayedPod
    channel: str
    interval: float
    samples: list[dict] = field(default_factory=list)
    ready_s: float = 0.0
    gated_inferences: dict[str, int] = field(default_factory=dict)  # Triton's success counts when /ready said 200
    load: Load | None = None

    def publish(self, name: str, edit: dict[str, str] | None = None, channel: str | None = "") -> dict:
        src = self.tmp / "src" / name
        if not src.exists():
            shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
            for rel, text in (edit or {}).items():
                (src / rel).write_text((src / rel).read_text() + text)
        return pub.publish(src, str(self.store.folder), self.channel if channel == "" else channel, self.key,
                           target="cpu", version=name, channels=[self.channel])  # signed for it, moved or not

    def agent(self, path: str) -> str:
        with _urlopen(f"{self.pod.url(kp.AGENT_PORT_NAME)}{path}") as r:
            return str(r.read().decode())

    def status(self) -> dict:
        return dict(json.loads(self.agent("/status")))

    def failures(self, step: str) -> float:
        found = re.findall(rf'tritonops_release_failures_total{{channel="{self.channel}",class="\w+",step="{step}"}} '
                           r'(\S+)', self.agent("/metrics"))  # one series per class (retry, refused)
        return sum(float(v) for v in found)

    def wait(self, what: str, cond: Callable[[], bool], timeout: float) -> float:
        start = time.monotonic()
        while not cond():
            if time.monotonic() - start > timeout:
                raise AssertionError(f"{what}: not reached in {timeout:.0f}s: {json.dumps(self.status())}\n"
                                     f"{self.pod.logs('release-agent', 30)}")
            time.sleep(0.25)
        return time.monotonic() - start

    def served_model_py(self) -> str:
        """The mlp model file Triton's repository link resolves to, read inside the triton container."""
        return self.pod.exec("triton", "cat", "/var/lib/tritonops/models/mlp/1/model.py")


def _urlopen(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
    import urllib.request

    return urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {},
                                                         method="POST" if data is not None else "GET"), timeout=10)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    if why := kp.unmet():
        pytest.skip(why)
    built = time.monotonic()
    triton_image.build()
    FIGURES["image (cached unless its inputs changed)"] = f"{time.monotonic() - built:.1f} s"
    tmp = tmp_path_factory.mktemp("kube-play")
    key, pub_key = signing.keygen(tmp / "keys" / "release.key", tmp / "keys" / "release.pub")
    store = kp.StoreServer(tmp / "store")
    pod: kp.PlayedPod | None = None
    try:
        store.start()
        plan = kp.plan(store.url, {"release.pub": pub_key.read_bytes()})
        p = Played(tmp, key, store, plan, kp.PlayedPod(plan, tmp), plan.agent_arg("--channel"),
                   float(plan.agent_arg("--interval")))
        p.publish("r1")
        secrets = {name: {k: ADMIN_TOKEN if name == "triton-admin-api" else f"unused-by-http-{k.lower()}"
                          for k, optional in keys.items() if not optional}
                   for name, keys in plan.secrets.items()}
        pod = p.pod = kp.play(plan, tmp / "play", secrets)
        triton_ready = f"{pod.url('http')}/v2/health/ready"

        def sample(t: float, s: dict) -> None:
            s["t"], s["triton"] = round(t, 2), kp.http_status(triton_ready)
            if s["ready"] is not None:
                s["current"] = p.status().get("current")
            p.samples.append(s)

        p.ready_s = kp.wait_ready(pod, timeout=300, on_sample=sample)
        FIGURES["pod ready (kube play -> sidecar /ready 200)"] = f"{p.ready_s:.1f} s"
        with _urlopen(f"{pod.url('http')}/v2/models/stats", headers={ADMIN_HEADER: ADMIN_TOKEN}) as r:
            p.gated_inferences = {m["name"]: int(m["inference_stats"]["success"]["count"])
                                  for m in json.loads(r.read())["model_stats"]}
        p.load = Load(pod.url("http")).start()
        yield p
    finally:
        if pod is not None:
            if os.environ.get("TRITONOPS_KUBE_PLAY_LOGS"):
                for c in ("triton", "release-agent"):
                    print(f"--- {c}\n{pod.logs(c, 40)}")
            pod.down()
        store.stop()
        print("\nkube play figures: " + "; ".join(f"{k}: {v}" for k, v in FIGURES.items()))


def test_1_the_init_container_installs_the_channels_release(played: Played) -> None:
    assert "initContainers" in played.plan.pod_spec and played.plan.container("release-sync")
    st = played.status()
    assert st["current"] == st["active"] == "r1" and st["pointer"]["release"] == "r1"
    # The sidecar found the release in place: it downloaded nothing, the init container did.
    downloaded = re.findall(r"^tritonops_release_downloaded_bytes_total (\S+)", played.agent("/metrics"), re.M)
    assert downloaded in ([], ["0"], ["0.0"])
    listing = played.pod.exec("release-agent", "ls", "/var/lib/tritonops/releases")
    assert "r1" in listing.split()
    # Triton loaded the release at its own start (--load-model=*), before the sidecar was ready.
    assert "successfully loaded 'mlp'" in played.pod.logs("triton", 2000)


@pytest.mark.parametrize("container", ["triton", "release-agent"])
def test_2_containers_run_with_the_rendered_security_context(played: Played, container: str) -> None:
    want = played.plan.container(container)["securityContext"]
    limits = played.plan.container(container)["resources"]["limits"]
    info = played.pod.inspect(container)
    assert info["Config"]["User"] == f"{want['runAsUser']}:{want['runAsGroup']}"
    assert info["HostConfig"]["ReadonlyRootfs"] is want["readOnlyRootFilesystem"] is True
    assert ("no-new-privileges" in info["HostConfig"]["SecurityOpt"]) is (want["allowPrivilegeEscalation"] is False)
    assert info["HostConfig"]["Memory"] == _bytes(limits["memory"])
    status = played.pod.exec(container, "cat", "/proc/1/status")
    assert re.search(rf"^Uid:\s+{want['runAsUser']}\s", status, re.M)
    assert want["capabilities"]["drop"] == ["ALL"] and re.search(r"^CapEff:\s+0+$", status, re.M)
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    with pytest.raises(kp.PlayError, match="Read-only file system"):
        played.pod.exec(container, "touch", "/written-to-root")


def test_3_env_from_secrets_reaches_the_containers(played: Played) -> None:
    index = f"{played.pod.url('http')}/v2/repository/index"
    with _urlopen(index, b"{}", {ADMIN_HEADER: ADMIN_TOKEN}) as r:
        assert r.status == 200
    # The $(TRITON_ADMIN_KEY) of the rendered args was expanded (kubelet's rule), not taken literally.
    for literal in ("$(TRITON_ADMIN_KEY)", "wrong"):
        with pytest.raises(Exception, match="403"):
            _urlopen(index, b"{}", {ADMIN_HEADER: literal})


def test_4_ready_turns_true_only_after_the_golden_gate(played: Played) -> None:
    answered = [s for s in played.samples if s["ready"] is not None]
    first_ready = next(s for s in answered if s["ready"] == 200)
    # release r1 is marked current only once its golden gate passed; /ready never said 200 before.
    assert first_ready["current"] == "r1"
    assert all(s["ready"] == 503 for s in answered if s["t"] < first_ready["t"])
    # The gate ran against Triton before /ready said 200: nothing else had sent an inference by then (the
    # load starts after), so every model with golden cases shows its gate's successful requests. (A sample
    # between Triton ready and the sidecar ready is printed when the 0.25 s polling catches one: the gate can
    # take less.)
    golden = {p.parent.name for p in SAMPLE.glob("*/golden.json")}
    assert golden and {m: n for m, n in played.gated_inferences.items() if m in golden and n < 1} == {}
    assert golden <= set(played.gated_inferences)
    caught = [s for s in played.samples if s["triton"] == 200 and s["ready"] != 200]
    if caught:
        FIGURES["Triton ready -> sidecar ready (golden gate, first poll)"] = f"{first_ready['t'] - caught[0]['t']:.1f} s"


def test_5_every_probe_of_the_rendered_pod_answers(played: Played) -> None:
    probed = []
    for c in played.plan.pod_spec["containers"]:
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe := c.get(kind):
                get = probe["httpGet"]
                port = ports.get(get["port"], get["port"])
                with _urlopen(f"http://{played.pod.ip}:{port}{get['path']}") as r:
                    assert r.status == 200, (c["name"], kind)
                probed.append(f"{c['name']}.{kind}")
    assert {"triton.livenessProbe", "triton.readinessProbe", "release-agent.readinessProbe"} <= set(probed)
    health = played.pod.inspect("triton")["Config"].get("Healthcheck") or {}
    print(f"podman 4.3 maps triton's livenessProbe to the healthcheck {health.get('Test')} (needs curl and systemd "
          "timers to run); readiness and startup probes are not applied")


def test_6_a_new_publish_reaches_the_running_pod(played: Played) -> None:
    assert played.load is not None
    time.sleep(1)
    before = played.load.ok
    played.publish("r2", {"mlp/1/model.py": "\n# release 2\n"})
    took = played.wait("r2 serving", lambda: played.status().get("current") == played.status().get("active") == "r2",
                       timeout=played.interval * 1.3 + 120)
    FIGURES["publish -> serving in the pod"] = f"{took:.1f} s (poll interval {played.interval:g} s)"
    time.sleep(1)
    assert played.served_model_py().endswith("# release 2\n")
    assert played.load.ok > before
    FIGURES["failed requests during the switch"] = f"{len(played.load.failed)} of {played.load.ok - before}"
    assert played.load.failed == [], played.load.failed[:5]


def test_7_a_tampered_release_never_reaches_triton(played: Played) -> None:
    # Upload r3 without moving the channel, replace one of its files in the store, then move the channel.
    out = played.publish("r3", {"mlp/1/model.py": "\n# release 3\n"}, channel=None)
    files = manifests.parse(open_store(str(played.store.folder)).get(f"releases/{out['digest']}/manifest.json") or b"",
                            "manifest")
    (played.store.folder / "blobs" / "sha256" / files["mlp/1/model.py"]).write_bytes(b"import os  # tampered\n")
    played.publish("r3")
    took = played.wait("tampered file refused", lambda: played.failures("fetch") >= 1,
                       timeout=played.interval * 1.3 + 60)
    FIGURES["tampered release refused after"] = f"{took:.1f} s"
    st = played.status()
    assert st["current"] == st["active"] == "r2" and st["pointer"]["release"] == "r3"
    # A fetch failure is retried with backoff (the store may be fixed); it is never installed meanwhile.
    assert f"release r3 ({out['digest'][:12]}) not applied" in played.pod.logs("release-agent", 200)
    assert "r3" not in played.pod.exec("release-agent", "ls", "-a", "/var/lib/tritonops/releases")
    assert played.served_model_py().endswith("# release 2\n")
    assert played.load is not None and played.load.failed == []


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * factor)
    return int(quantity)
