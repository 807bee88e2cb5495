"""The node cache in the triton stack (k8s/stacks/triton/node_cache.py): the Triton pod reads through it with
no hostPath and passes Pod Security restricted; the cache DaemonSet is the only hostPath, in a namespace of
its own; the rendered commands of both run here, against a store on this machine."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from local_servers import counting_store
from pod_security import violations
from tritonops.agent.cli import parser as agent_parser
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.labels import NODE_POOL_LABEL
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import node_cache, workload
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.release import publish as pub
from tritonops.release_format import manifest, signing

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


def _cfg(**node_cache_cfg: Any) -> TritonStackConfig:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["release"]["nodeCache"] = True
    raw["nodeCache"] = node_cache_cfg
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def test_the_triton_pod_with_the_node_cache_passes_pod_security_restricted() -> None:
    cfg = _cfg()
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    assert "--cache-url" in pod["initContainers"][0]["command"]
    assert violations(pod, "restricted") == []
    assert triton.namespace(cfg)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The check means something: the hostPath cache this replaces is refused even at baseline.
    old = {**pod, "volumes": [*pod["volumes"], {"name": "node-cache", "hostPath": {"path": "/var/cache/tritonops"}}]}
    assert violations(old, "baseline") == ["volume node-cache: hostPath"]


def test_the_cache_daemon_is_the_only_host_path_in_a_namespace_of_its_own() -> None:
    cfg = _cfg(quotaBytes=50 << 30, maxRateBytes=200 << 20)
    ns = "tritonops-node-cache"
    objs = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in triton.namespace_objects(cfg)}
    assert objs[("Namespace", "", ns)]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert objs[("Namespace", "", "triton")]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    ds = objs[("DaemonSet", ns, node_cache.NAME)]
    pod = _pod(ds)
    assert violations(pod, "baseline") == ["volume cache: hostPath"]  # and nothing else: no root, no privilege
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/cache/tritonops"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": NODE_POOL_LABEL, "operator": "In",
                                            "values": [cfg.model_services[0].node_pool]}]}]
    svc = objs[("Service", ns, node_cache.NAME)]
    assert svc["spec"]["internalTrafficPolicy"] == "Local" and svc["spec"]["ports"][0]["port"] == 8470
    args = agent_parser().parse_args(pod["containers"][0]["command"][2:])
    assert (args.cmd, args.cache_cmd, args.quota, args.max_rate) == ("cache", "serve", 50 << 30, 200 << 20)
    assert args.channel == ["dev", "dev-canary"]
    assert objs[("ConfigMap", ns, "tritonops-agent")]["binaryData"]  # the agent zipapp, copied into the cache's namespace
    assert {o["metadata"]["name"] for o in triton.namespace_objects(_cfg()) if o["kind"] == "NetworkPolicy"} >= {
        "node-cache-egress", "tritonops-node-cache"}


def test_no_node_cache_no_daemon() -> None:
    cfg = parse_config("triton", copy.deepcopy(read_stack_file("triton", "dev")[0]))
    assert isinstance(cfg, TritonStackConfig)
    assert node_cache.node_cache_objects(cfg) == []


def _local(argv: list[str], **values: str | None) -> list[str]:
    """The rendered argv with flags' values replaced (``--store`` as ``store``); a None value drops the flag."""
    out, i = [], 0
    while i < len(argv):
        key = argv[i][2:].replace("-", "_") if argv[i].startswith("--") else None
        if key in values and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            if values[key] is not None:
                out += [argv[i], str(values[key])]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def test_the_rendered_daemon_serves_the_rendered_pods_sync(tmp_path: Path) -> None:
    """The DaemonSet's and the pod's rendered argv, with this machine's store, paths and port: the daemon
    prefetches the channel, the pod's release-sync reads every file from it, none from the store."""
    cfg = _cfg()
    key, pubkey = signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")
    pub.publish(SAMPLE, str(tmp_path / "store"), "dev", key, target="cpu", version="r1")
    with counting_store(tmp_path / "store") as (store, handler):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        daemon_argv = _pod(node_cache.daemon_set(cfg))["containers"][0]["command"][2:]
        daemon = subprocess.Popen([sys.executable, "-m", "tritonops.agent", *_local(
            daemon_argv, store=store, cache=str(tmp_path / "cache"), listen=f"127.0.0.1:{port}", trusted_key=str(pubkey),
            store_name=None)], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not (tmp_path / "cache" / "warm" / "dev.json").exists():  # prefetched: warm before any pod asks
                assert daemon.poll() is None and time.monotonic() < deadline, daemon.stderr.read() if daemon.stderr else ""
                time.sleep(0.1)
            prefetched = sum(handler.counts.values())
            assert prefetched == len(set(manifest.tree_files(SAMPLE).values()))
            status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5).read())
            assert [c["warm"] for c in status["channels"] if c["channel"] == "dev"] == [True]
            dep = workload.deployment(cfg, cfg.model_services[0])
            sync_argv = _pod(dep)["initContainers"][0]["command"][2:]
            r = subprocess.run([sys.executable, "-m", "tritonops.agent", *_local(
                sync_argv, store=store, cache_url=f"http://127.0.0.1:{port}", link=str(tmp_path / "pod" / "models"),
                releases=str(tmp_path / "pod" / "releases"), trusted_key=str(pubkey), store_name=None)],
                capture_output=True, text=True, timeout=60, check=False)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            assert (out["downloaded"], out["mirrored"]) == (0, len(manifest.tree_files(SAMPLE)) - out["reused"])
            assert sum(handler.counts.values()) == prefetched  # the pod read no file from the store
        finally:
            daemon.terminate()
            daemon.wait(timeout=10)


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_the_checker_refuses_what_the_standard_refuses(level: str) -> None:
    cfg = _cfg()
    pod = copy.deepcopy(_pod(workload.deployment(cfg, cfg.model_services[0])))
    pod["hostNetwork"] = True
    pod["containers"][0]["securityContext"]["privileged"] = True
    assert {"hostNetwork", "containers triton: privileged"} <= set(violations(pod, level))
