"""The rendered node cache DaemonSet's pod, run with ``podman kube play`` (issue 46): its init container hands
the hostPath folder to uid 1000, the daemon (the agent zipapp from the ConfigMap, in the local CPU Triton
image) prefetches the channel from a store on the Podman bridge, and the rendered Triton pod's
``release-sync`` argv, run here with ``--cache-url`` at the played pod, reads every file from it and none
from the store. The Triton pod with ``--cache-url`` is otherwise the one tests/infra/kube_play/test_kube_play.py
plays (no volume or securityContext of its own: tests/unit/k8s/test_k8s_node_cache.py). About 15 s with
the image cached.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from devkit import kube_play as kp
from devkit import triton_image
from local_servers import counting_store
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import node_cache, workload
from tritonops.release import publish as pub
from tritonops.release.status import scrape_cache
from tritonops.release_format import manifest, signing
from tritonops.stores import open_store

pytestmark = [pytest.mark.host, pytest.mark.slow, pytest.mark.timeout(600)]

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def _swap(argv: list[str], flag: str, value: str | None) -> list[str]:
    """``argv`` with ``flag``'s value replaced (None: the flag dropped)."""
    if flag not in argv:
        return argv
    i = argv.index(flag)
    return argv[:i] + ([flag, value] if value is not None else []) + argv[i + 2:]


def test_the_played_cache_daemon_serves_the_rendered_pods_sync(tmp_path: Path) -> None:
    if why := kp.unmet():
        pytest.skip(why)
    triton_image.build()
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["release"]["nodeCache"] = True
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig) and cfg.model_services[0].release is not None
    channel = cfg.model_services[0].release.channel
    key, pubkey = signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")
    pub.publish(SAMPLE, str(tmp_path / "store"), channel, key, target="cpu", version="r1")

    with counting_store(tmp_path / "store", kp.bridge_gateway()) as (store, handler):
        objs = node_cache.node_cache_objects(cfg)
        ds = next(o for o in objs if o["kind"] == "DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        spec["restartPolicy"] = "OnFailure"  # podman 4.3 restarts a succeeded init container under Always
        for c in [*spec["initContainers"], *spec["containers"]]:
            c["image"] = triton_image.IMAGE
        daemon = spec["containers"][0]
        daemon["command"] = _swap(_swap(daemon["command"], "--store", store), "--store-name", None)
        (tmp_path / "node").mkdir()
        spec["volumes"][0]["hostPath"]["path"] = str(tmp_path / "node")
        maps = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tritonops-agent"]
        keys_cm = next(v for v in spec["volumes"] if v["name"] == "trusted-keys")["configMap"]
        maps.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": keys_cm["name"]},
                     "data": {i["key"]: pubkey.read_text() for i in keys_cm["items"]}})
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "node-cache-play"},  # kube play 4.3:
               "spec": {"replicas": 1, "selector": ds["spec"]["selector"], "template": ds["spec"]["template"]}}  # no DaemonSet
        played = kp.play(kp.PodPlan(dep, maps, {}), tmp_path / "play", {})
        try:
            url = f"http://{played.ip}:{spec['containers'][0]['ports'][0]['containerPort']}"
            deadline, status = time.monotonic() + 120, {}
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"{url}/status", timeout=5) as r:
                        status = json.loads(r.read())
                    if any(c.get("warm") for c in status["channels"] if c["channel"] == channel):
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            else:
                pytest.fail(f"the cache daemon never warmed {channel}: {status}\n{played.logs('node-cache')}")
            assert (tmp_path / "node" / "warm" / f"{channel}.json").exists()  # the hostPath folder, written by uid 1000
            digest = pub.read_pointer(open_store(str(tmp_path / "store")), channel)["digest"]  # type: ignore[index]
            assert scrape_cache(url, channel, digest) == {"url": url, "warm": True}  # what rollout advance waits on
            assert (tmp_path / "node" / "blobs").stat().st_uid == 1000
            prefetched = sum(handler.counts.values())
            assert prefetched == len(set(manifest.tree_files(SAMPLE).values()))
            sync = workload.deployment(cfg, cfg.model_services[0])["spec"]["template"]["spec"]["initContainers"][0]
            argv = sync["command"][2:]
            for flag, value in (("--store", store), ("--cache-url", url), ("--store-name", None),
                                ("--link", str(tmp_path / "pod" / "models")), ("--releases", str(tmp_path / "pod" / "releases")),
                                ("--trusted-key", str(pubkey))):
                argv = _swap(argv, flag, value)
            r = subprocess.run([sys.executable, "-m", "tritonops.agent", *argv], capture_output=True, text=True,
                               timeout=120, check=False)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            assert out["downloaded"] == 0 and out["mirrored"] + out["reused"] == len(manifest.tree_files(SAMPLE))
            assert sum(handler.counts.values()) == prefetched  # the pod's files came from the node's cache
        finally:
            played.down()
