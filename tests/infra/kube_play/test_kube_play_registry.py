"""The rendered dev Triton pod pulling its releases from an OCI registry (issue 37, "pods from a registry").

The dev stack file is copied and its ``vision`` service given ``release.store: oci://GATEWAY:PORT/
tritonops/vision`` with ``registryAuthSecret`` (a kubernetes.io/dockerconfigjson Secret: the registry's
htpasswd user), ``registryCaConfigMap`` (the registry's self-signed CA) and ``pollSeconds: 5``; its
stable Deployment plays with ``podman kube play`` as in test_kube_play.py (``devkit.kube_play.plan``:
images, trusted key, restartPolicy; the Secret volume plays as a ConfigMap volume, podman 4.3 panics
on secret volumes). The registry is the CNCF distribution registry of tests/oci_registry.py (TLS,
htpasswd), bound on the Podman bridge's gateway address so the pod reaches it.

Shows: the init container installs the channel's release from the registry with the mounted
credentials and CA (the registry refuses anonymous requests), Triton serves mlp's golden answer, and a
new publish reaches the running pod. Needs root, Podman 4.3+, catatonit and docker-registry
(``make apt``); about a minute with the image cached.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from devkit import kube_play as kp
from devkit import triton_image
from tritonops.k8s import registry_source
from tritonops.release import publish as pub
from tritonops.release_format import signing

pytestmark = [pytest.mark.host, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "model_repository"
GOLDEN = json.loads((SAMPLE / "mlp" / "golden.json").read_text())
ADMIN_TOKEN = "kube-play-only-admin-token"  # a test value: never a real secret
AUTH_SECRET, CA_CONFIG_MAP = "vision-registry", "vision-registry-ca"
FIGURES: dict[str, str] = {}


@dataclass
class Played:
    tmp: Path
    key: Path
    store: str
    registry: Any  # oci_registry.Registry
    plan: kp.PodPlan
    pod: kp.PlayedPod
    channel: str
    interval: float
    ready_s: float = 0.0

    def publish(self, name: str, edit: str = "") -> dict:
        src = self.tmp / "src" / name
        shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
        if edit:
            (src / "mlp/1/model.py").write_text((src / "mlp/1/model.py").read_text() + edit)
        return pub.publish(src, self.store, self.channel, self.key, target="cpu", version=name, channels=[self.channel])

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.pod.url(kp.AGENT_PORT_NAME)}/status", timeout=10) as r:
            return dict(json.loads(r.read()))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.pod.url(kp.AGENT_PORT_NAME)}/metrics", timeout=10) as r:
            return str(r.read().decode())


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    if why := kp.unmet():
        pytest.skip(why)
    if shutil.which("docker-registry") is None:
        pytest.skip("docker-registry is not installed (make apt)")
    from oci_registry import running

    triton_image.build()
    tmp = tmp_path_factory.mktemp("kube-play-registry")
    key, pub_key = signing.keygen(tmp / "keys" / "release.key", tmp / "keys" / "release.pub")
    saved = {k: os.environ.get(k) for k in (registry_source.AUTH_ENV, registry_source.CA_ENV)}
    pod: kp.PlayedPod | None = None
    (tmp / "registry").mkdir()
    with running(tmp / "registry", kp.bridge_gateway()) as reg:
        os.environ[registry_source.AUTH_ENV], os.environ[registry_source.CA_ENV] = str(reg.config), str(reg.ca)
        try:
            store = reg.url("tritonops/vision")
            users = {AUTH_SECRET: {registry_source.AUTH_KEY: reg.config.read_text()},
                     CA_CONFIG_MAP: {registry_source.CA_KEY: reg.ca.read_text()}}
            plan = kp.plan(store, {"release.pub": pub_key.read_bytes()}, stacks_dir=kp.registry_stacks(tmp, store, AUTH_SECRET, CA_CONFIG_MAP),
                           user_objects=users)
            p = Played(tmp, key, store, reg, plan, kp.PlayedPod(plan, tmp), plan.agent_arg("--channel"),
                       float(plan.agent_arg("--interval")))
            p.publish("r1")
            secrets = {name: {k: ADMIN_TOKEN for k, optional in keys.items() if not optional}
                       for name, keys in plan.secrets.items()}
            pod = p.pod = kp.play(plan, tmp / "play", secrets)
            p.ready_s = kp.wait_ready(pod, timeout=300)
            FIGURES["pod ready (kube play -> sidecar /ready 200, release from the registry)"] = f"{p.ready_s:.1f} s"
            yield p
        finally:
            if pod is not None:
                if os.environ.get("TRITONOPS_KUBE_PLAY_LOGS"):
                    for c in ("release-sync", "triton", "release-agent"):
                        print(f"--- {c}\n{pod.logs(c, 40)}")
                pod.down()
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
            print("\nkube play (registry) figures: " + "; ".join(f"{k}: {v}" for k, v in FIGURES.items()))


def _golden_answer(played: Played) -> None:
    """Every golden case of mlp, sent to the pod's Triton, answers the recorded logits."""
    for case in GOLDEN["cases"]:
        body = json.dumps({"inputs": [{"name": n, **t} for n, t in case["inputs"].items()]}).encode()
        req = urllib.request.Request(f"{played.pod.url('http')}/v2/models/mlp/infer", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            got = {o["name"]: o["data"] for o in json.loads(r.read())["outputs"]}
        want = case["outputs"]["logits"]["data"]
        assert all(math.isclose(g, w, rel_tol=GOLDEN["rtol"], abs_tol=GOLDEN["atol"])
                   for g, w in zip(got["logits"], want, strict=True)), (case["name"], got["logits"])


def test_1_the_init_container_installs_the_release_from_the_registry(played: Played) -> None:
    sync = played.plan.container("release-sync")
    assert sync["command"][sync["command"].index("--store") + 1] == played.store
    env = {e["name"]: e.get("value") for e in sync["env"]}
    assert env[registry_source.AUTH_ENV] == registry_source.AUTH_PATH
    assert env[registry_source.CA_ENV] == registry_source.CA_PATH
    # The registry refuses anonymous reads: the pod read it with the mounted credentials, over TLS checked
    # with the mounted CA.
    context = ssl.create_default_context(cafile=str(played.registry.ca))
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(f"https://{played.registry.host}/v2/tritonops/vision/tags/list", timeout=5,
                               context=context)
    st = played.status()
    assert st["current"] == st["active"] == "r1" and st["pointer"]["release"] == "r1"
    downloaded = re.findall(r"^tritonops_release_downloaded_bytes_total (\S+)", played.metrics(), re.M)
    assert downloaded in ([], ["0"], ["0.0"])  # the init container fetched it, the sidecar nothing
    assert "r1" in played.pod.exec("release-agent", "ls", "/var/lib/tritonops/releases").split()
    assert played.pod.exec("release-agent", "head", "-c", "9", registry_source.AUTH_PATH) == '{"auths":'
    _golden_answer(played)


def test_2_a_new_publish_reaches_the_running_pod(played: Played) -> None:
    started = time.monotonic()
    played.publish("r2", "\n# release 2\n")
    published = time.monotonic() - started
    FIGURES["publish r2 to the registry"] = f"{published:.1f} s"
    while not (played.status().get("current") == played.status().get("active") == "r2"):
        assert time.monotonic() - started < played.interval * 2 + 120, played.pod.logs("release-agent", 30)
        time.sleep(0.25)
    FIGURES["publish -> serving in the pod"] = f"{time.monotonic() - started:.1f} s (poll interval {played.interval:g} s)"
    assert played.pod.exec("triton", "cat", "/var/lib/tritonops/models/mlp/1/model.py").endswith("# release 2\n")
    _golden_answer(played)
