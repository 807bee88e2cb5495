"""Pull mode (tritonops.k8s.stacks.triton.release_agent): the release agent's init container, sidecar, volumes and
ConfigMap in the Triton pod, and the agent's own argv."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ROOT, container_args, direct_config, triton_config
from tritonops.agent import releases
from tritonops.agent.cli import parser as agent_parser
from tritonops.agent_bundle import build_bytes
from tritonops.k8s import labels as k8s_labels
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import exposure, monitoring, release_agent, workload
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.k8s.stacks.triton.required import user_secrets
from tritonops.release_format import manifest, signing
from tritonops.triton.args import RESTRICTED

# --- pull mode: the release agent in the pod -----------------------------------------------------


def _pod(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def _release_cfg(**release: Any) -> TritonStackConfig:
    """dev (vision pulls the `dev` channel), with release fields overridden."""
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0]["release"].update(release)
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def test_release_pod_runs_sync_then_triton_and_the_agent() -> None:
    cfg = triton_config("dev")
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    assert [c["name"] for c in pod["initContainers"]] == ["release-sync"]
    assert [c["name"] for c in pod["containers"]] == ["triton", "release-agent"]
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert c["image"] == cfg.model_services[0].image  # the Triton image: nothing more to pull
        assert c["securityContext"] == k8s_labels.container_security_context()
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert "nvidia.com/gpu" not in pod["containers"][1]["resources"]["requests"]


def test_release_triton_args_serve_the_agents_link_in_explicit_mode() -> None:
    cfg = triton_config("dev")
    args = container_args(workload.deployment(cfg, cfg.model_services[0]))
    assert args["--model-repository"] == [release_agent.RELEASE_LINK]
    assert args["--model-control-mode"] == ["explicit"]
    assert args["--load-model"] == ["*"]
    assert args["--http-restricted-api"] == [f"{RESTRICTED}:triton-admin-key=$({workload.ADMIN_ENV})"]


def test_release_volume_shared_triton_reads_only() -> None:
    cfg = triton_config("dev")
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    vols = _by_name(pod["volumes"])
    assert vols["releases"] == {"name": "releases", "emptyDir": {"sizeLimit": "20Gi"}}
    assert vols["agent"]["configMap"] == {
        "name": release_agent.AGENT_CONFIG_MAP,
        "items": [{"key": release_agent.AGENT_KEY, "path": release_agent.AGENT_KEY}],
    }
    assert vols["trusted-keys"]["configMap"] == {
        "name": "tritonops-release-keys",
        "items": [{"key": "release.pub", "path": "release.pub"}],
    }
    sync, (server, agent) = pod["initContainers"][0], pod["containers"]
    for c in (sync, agent):
        mounts = _by_name(c["volumeMounts"])
        assert mounts["releases"] == {"name": "releases", "mountPath": release_agent.RELEASE_ROOT}  # writable
        assert mounts["agent"]["readOnly"] and mounts["trusted-keys"]["readOnly"]
        assert mounts["tmp"]["mountPath"] == "/tmp"  # openssl's temporary files; the root is read-only
    releases = _by_name(server["volumeMounts"])["releases"]
    assert releases == {"name": "releases", "mountPath": release_agent.RELEASE_ROOT, "readOnly": True}
    assert "hostPath" not in str(pod["volumes"])


def test_release_agent_argv_is_the_agents_own() -> None:
    """The pod's argv parses with the agent's own parser, into the pod's paths (no drift of flags)."""
    cfg = triton_config("dev")
    rel = cfg.model_services[0].release
    assert rel is not None
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    sync, agent = pod["initContainers"][0]["command"], pod["containers"][1]["command"]
    assert sync[:2] == agent[:2] == ["python3", release_agent.AGENT_PATH]
    keys = [f"{release_agent.TRUSTED_KEYS_DIR}/release.pub"]
    expected = release_agent.release_agent_args("sync", rel.store, rel.channel, release_agent.RELEASE_LINK, release_agent.RELEASES_DIR, keys)
    assert sync[2:] == expected
    a = agent_parser().parse_args(sync[2:])
    assert (a.cmd, a.store, a.channel, a.cache, a.s3_endpoint) == ("sync", rel.store, "dev", None, None)
    assert (str(a.link), str(a.releases), [str(k) for k in a.trusted_key]) == (
        release_agent.RELEASE_LINK,
        release_agent.RELEASES_DIR,
        keys,
    )
    a = agent_parser().parse_args(agent[2:])
    assert (a.cmd, a.triton, a.header, a.listen, a.interval) == (
        "pull",
        "http://127.0.0.1:8000",
        cfg.admin_api.header,
        f"0.0.0.0:{release_agent.AGENT_PORT}",
        30.0,
    )
    assert str(a.link) == release_agent.RELEASE_LINK and [str(k) for k in a.trusted_key] == keys
    # The sidecar's readiness threshold is sized from these: they are the agent's own defaults.
    assert (a.load_timeout, a.golden_timeout) == (release_agent.AGENT_LOAD_TIMEOUT_S, release_agent.AGENT_GOLDEN_TIMEOUT_S)


def test_release_agent_args_options_and_refusals() -> None:
    args = release_agent.release_agent_args(
        "pull",
        "s3://b/p",
        "prod",
        Path("/l"),
        Path("/r"),
        [Path("/k/a.pem"), "/k/b.pem"],
        triton_url="http://127.0.0.1:8000",
        header="h",
        listen="127.0.0.1:9",
        interval=2.5,
        cache=Path("/c"),
        s3_endpoint="http://127.0.0.1:5000",
    )
    assert args == [
        "pull", "--store", "s3://b/p", "--channel", "prod", "--link", "/l", "--releases", "/r",
        "--trusted-key", "/k/a.pem", "--trusted-key", "/k/b.pem", "--cache", "/c",
        "--s3-endpoint", "http://127.0.0.1:5000", "--triton", "http://127.0.0.1:8000", "--header", "h",
        "--listen", "127.0.0.1:9", "--interval", "2.5",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="interval, listen: only for pull"):
        release_agent.release_agent_args("sync", "s3://b", "c", "/l", "/r", ["/k"], listen=":1", interval=1)
    with pytest.raises(ValueError, match="groups, report: only for pull"):
        release_agent.release_agent_args("sync", "s3://b", "c", "/l", "/r", ["/k"], groups=["g"], report=True)
    with pytest.raises(ValueError, match="report_key: signs status reports"):
        release_agent.release_agent_args("pull", "s3://b", "c", "/l", "/r", ["/k"], report_key="/k/r.key")
    with pytest.raises(ValueError, match="trusted_keys"):
        release_agent.release_agent_args("sync", "s3://b", "c", "/l", "/r", [])
    with pytest.raises(ValueError, match="command"):
        release_agent.release_agent_args("install", "s3://b", "c", "/l", "/r", ["/k"])


def test_release_sidecar_metrics_port_readiness_and_admin_secret() -> None:
    cfg = triton_config("dev")
    agent = _pod(workload.deployment(cfg, cfg.model_services[0]))["containers"][1]
    assert agent["ports"] == [{"name": "agent-metrics", "containerPort": release_agent.AGENT_PORT, "protocol": "TCP"}]
    probe = agent["readinessProbe"]
    assert probe["httpGet"] == {"path": "/ready", "port": "agent-metrics"}
    # The agent answers /ready during a switch (tests/unit/agent), so a short threshold is safe.
    assert (probe["failureThreshold"], probe["periodSeconds"]) == (3, release_agent.AGENT_PROBE_PERIOD_S)
    env = _by_name(agent["env"])
    assert env["TRITONOPS_ADMIN_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-api", "key": "token"}
    sync = _pod(workload.deployment(cfg, cfg.model_services[0]))["initContainers"][0]
    assert "TRITONOPS_ADMIN_SECRET" not in _by_name(sync["env"])  # sync never talks to Triton


def test_release_s3_credentials_only_from_the_secret() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    del raw["modelServices"][0]["modelReader"]  # static read keys instead of dev's IRSA role
    raw["modelServices"][0]["release"]["credentialsSecret"] = "tritonops-release-reader"
    cfg = parse_config("triton", raw)
    assert isinstance(cfg, TritonStackConfig)
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    for c in (pod["initContainers"][0], pod["containers"][1]):
        env = _by_name(c["env"])
        assert env["AWS_REGION"] == {"name": "AWS_REGION", "value": "us-west-2"}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("tritonops-release-reader", name)
            assert "value" not in env[name]
        assert env["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
        assert not any(a.startswith(("AKIA", "--secret", "--token")) or "token" in a for a in c["command"])
    anonymous = _release_cfg(store="https://mirror.example/releases", region=None, credentialsSecret=None)
    pod = _pod(workload.deployment(anonymous, anonymous.model_services[0]))
    assert not any(e["name"].startswith("AWS_") for e in pod["initContainers"][0]["env"])


def test_release_node_cache_is_read_over_the_network_with_no_host_path() -> None:
    cfg = _release_cfg(nodeCache=True, s3Endpoint="http://minio.storage.svc:9000")
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    assert "hostPath" not in str(pod["volumes"])
    for c in (pod["initContainers"][0], pod["containers"][1]):
        cmd = c["command"]
        assert cmd[cmd.index("--cache-url") + 1] == "http://tritonops-node-cache.tritonops-node-cache.svc:8470"
        assert cmd[cmd.index("--s3-endpoint") + 1] == "http://minio.storage.svc:9000"
    labels = triton.namespace(cfg)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_release_trusted_keys_from_a_secret_several_while_rotating() -> None:
    cfg = _release_cfg(trustedKeys={"secret": "release-keys", "keys": ["old.pem", "new.pem"]})
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    assert _by_name(pod["volumes"])["trusted-keys"]["secret"] == {
        "secretName": "release-keys",
        "items": [{"key": "old.pem", "path": "old.pem"}, {"key": "new.pem", "path": "new.pem"}],
    }
    cmd = pod["initContainers"][0]["command"]
    keys = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--trusted-key"]
    assert keys == [f"{release_agent.TRUSTED_KEYS_DIR}/old.pem", f"{release_agent.TRUSTED_KEYS_DIR}/new.pem"]


def test_release_sidecar_reports_and_groups_for_staged_rollouts() -> None:
    """reports/groups/reportKeySecret reach the sidecar's argv as the agent's own parser reads them; the
    private key is mounted into the sidecar only (0440, read by the pod's fsGroup), and listed as a
    Secret the user creates."""
    cfg = _release_cfg(reports=True, reportKeySecret="vision-report-key", groups=["eu-west", "gpu-a10"])
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    sync, agent = pod["initContainers"][0], pod["containers"][1]
    a = agent_parser().parse_args(agent["command"][2:])
    assert (a.report, str(a.report_key), a.group_label) == (True, release_agent.REPORT_KEY_PATH, ["eu-west", "gpu-a10"])
    assert _by_name(agent["volumeMounts"])["report-key"] == {
        "name": "report-key", "mountPath": release_agent.REPORT_KEY_DIR, "readOnly": True}
    assert _by_name(pod["volumes"])["report-key"]["secret"] == {
        "secretName": "vision-report-key", "items": [{"key": "report.key", "path": "report.key"}], "defaultMode": 0o440}
    assert pod["securityContext"]["fsGroup"] == k8s_labels.TRITON_UID  # the agent's uid reads the key
    for c in (sync, pod["containers"][0]):  # neither the init container nor Triton sees the private key
        assert "report-key" not in _by_name(c["volumeMounts"])
        assert not {"--report", "--report-key", "--group-label"} & set(c.get("command", []) + c.get("args", []))
    (entry,) = [e for e in user_secrets(cfg) if e["name"] == "vision-report-key"]
    assert entry["keys"] == ["report.key"] and "--from-file=report.key=" in entry["command"]
    # Off by default: no flag, no volume.
    plain = _pod(workload.deployment(triton_config("dev"), triton_config("dev").model_services[0]))
    assert "--report" not in plain["containers"][1]["command"] and "report-key" not in _by_name(plain["volumes"])


@pytest.mark.parametrize(
    ("release", "field", "message"),
    [
        ({"reportKeySecret": "k"}, "reportKeySecret", "set reports: true"),
        ({"reports": True, "reportKeySecret": "Bad_Name"}, "reportKeySecret", "not a valid Secret name"),
        ({"groups": ["ok", "-bad"]}, "groups[1]", "group label '-bad'"),
        ({"reports": True, "store": "https://mirror.example/r", "region": None, "credentialsSecret": None},
         "reports", "only for an s3:// store"),
    ],
)
def test_release_reports_refusals_name_the_field(release: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _release_cfg(**release)
    assert f"release.{field}" in str(err.value)


def test_release_metrics_reach_prometheus() -> None:
    """Service port, ServiceMonitor endpoint and NetworkPolicy all carry the agent's metrics port."""
    cfg = triton_config("dev")
    svc = cfg.model_services[0]
    ports = {p["name"]: p for p in workload.service(cfg, svc)["spec"]["ports"]}
    assert (
        ports["agent-metrics"]["port"] == release_agent.AGENT_PORT and ports["agent-metrics"]["targetPort"] == "agent-metrics"
    )
    endpoints = monitoring.service_monitor(cfg, svc)["spec"]["endpoints"]
    assert [(e["port"], e["path"]) for e in endpoints] == [("metrics", "/metrics"), ("agent-metrics", "/metrics")]
    inference, metrics = exposure.network_policy(cfg, svc)["spec"]["ingress"]
    assert {p["port"] for p in metrics["ports"]} == {k8s_labels.METRICS_PORT, release_agent.AGENT_PORT}
    assert release_agent.AGENT_PORT not in {p["port"] for p in inference["ports"]}  # apps cannot read it
    prod = direct_config()  # no release: nothing of the agent
    assert "agent-metrics" not in {p["name"] for p in workload.service(prod, prod.model_services[0])["spec"]["ports"]}
    assert len(monitoring.service_monitor(prod, prod.model_services[0])["spec"]["endpoints"]) == 1
    dep = workload.deployment(prod, prod.model_services[0])
    assert "initContainers" not in _pod(dep) and len(_pod(dep)["containers"]) == 1


def test_agent_config_map_holds_the_agent_zipapp() -> None:
    cfg = triton_config("dev")
    cm = release_agent.agent_config_map(cfg)
    assert cm in triton.namespace_objects(cfg)
    data = base64.b64decode(cm["binaryData"][release_agent.AGENT_KEY], validate=True)
    assert data == build_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert cm["metadata"]["annotations"][release_agent.AGENT_SHA_ANNOTATION] == sha
    # A new agent changes the pod template, so the Deployment rolls its pods onto it.
    pod_meta = workload.deployment(cfg, cfg.model_services[0])["spec"]["template"]["metadata"]
    assert pod_meta["annotations"][release_agent.AGENT_SHA_ANNOTATION] == sha


@pytest.mark.parametrize("command", [[], ["sync"], ["pull"], ["check"]])
def test_agent_zipapp_from_the_config_map_runs(command: list[str], tmp_path: Path) -> None:
    cm = release_agent.agent_config_map(triton_config("dev"))
    path = tmp_path / release_agent.AGENT_KEY
    path.write_bytes(base64.b64decode(cm["binaryData"][release_agent.AGENT_KEY]))
    out = subprocess.run(["python3", str(path), *command, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: tritonops-agent")


def _local_argv(command: list[str], swap: dict[str, str]) -> list[str]:
    """A container's command with the pod's paths (and store) swapped for local ones."""
    argv = []
    for a in command:
        for old, new in swap.items():
            a = a.replace(old, new) if a.startswith(old) else a
        argv.append(a)
    return argv


def test_init_container_syncs_a_signed_release_with_its_own_argv(tmp_path: Path) -> None:
    """The init container's command, run from the ConfigMap's zipapp with only the mounts swapped for
    local folders (the store for a folder `tritonops release publish` wrote): the release lands under
    the releases folder and the models link points at it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cfg = triton_config("dev")
    rel = cfg.model_services[0].release
    assert rel is not None
    (tmp_path / "trusted").mkdir()  # keygen makes the private key's folder only
    private, public = signing.keygen(tmp_path / "keys" / "release.key", tmp_path / "trusted" / "release.pub")
    store = tmp_path / "store"
    from tritonops.release.publish import publish  # the controller's half (boto3 for s3 stores)

    published = publish(ROOT / "examples" / "model_repository", str(store), rel.channel, private)
    agent = tmp_path / "agent" / release_agent.AGENT_KEY
    agent.parent.mkdir()
    agent.write_bytes(base64.b64decode(release_agent.agent_config_map(cfg)["binaryData"][release_agent.AGENT_KEY]))

    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    swap = {
        release_agent.AGENT_PATH: str(agent),
        rel.store: str(store),
        release_agent.RELEASE_ROOT: str(tmp_path / "var"),
        release_agent.TRUSTED_KEYS_DIR: str(public.parent),
    }
    argv = _local_argv(pod["initContainers"][0]["command"], swap)
    env = {"PATH": os.environ["PATH"]}  # no credentials: a folder store needs none
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["result"] == "synced"
    link, rels = tmp_path / "var" / "models", tmp_path / "var" / "releases"
    assert releases.active_release(link, rels) == published["release"]
    assert manifest.verify(rels / published["release"])  # every file's sha256 checked again

    # A release signed by another key never lands (the pod's trusted key is not that key).
    other, _ = signing.keygen(tmp_path / "other" / "k", tmp_path / "other" / "k.pub")
    store2 = tmp_path / "store2"
    publish(ROOT / "examples" / "model_repository", str(store2), rel.channel, other)
    argv2 = [a.replace(str(store), str(store2)) if a == str(store) else a for a in argv]
    argv2 = [a.replace(str(tmp_path / "var"), str(tmp_path / "var2")) for a in argv2]
    out = subprocess.run(argv2, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1 and "signature" in out.stdout + out.stderr
    assert not (tmp_path / "var2" / "models").exists()


# --- the store's name: required in tier production (issue 34) -----------------------------------------------


def test_production_refuses_the_implicit_trusted_key_root() -> None:
    """Tier production: a release source without storeName (agents trusting their trustedKeys alone, every key
    holding every role) is refused naming the field; non-production takes it, with a warning at every agent start."""
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    del raw["modelServices"][0]["release"]["storeName"]
    with pytest.raises(ConfigError, match="required in tier production") as err:
        parse_config("triton", raw)
    assert err.value.key == "tritonops-triton:modelServices[0].release.storeName"
    assert "root init --name" in str(err.value)
    raw["tier"] = "non-production"
    assert isinstance(parse_config("triton", raw), TritonStackConfig)


def test_both_agent_containers_get_the_store_name() -> None:
    cfg = triton_config("prod")
    pod = _pod(workload.deployment(cfg, cfg.model_services[0]))
    for command in (pod["initContainers"][0]["command"], pod["containers"][1]["command"]):
        assert agent_parser().parse_args(command[2:]).store_name == "vision-prod"
    dev = _pod(workload.deployment(triton_config("dev"), triton_config("dev").model_services[0]))
    assert "--store-name" not in dev["initContainers"][0]["command"] + dev["containers"][1]["command"]


@pytest.mark.parametrize(("name", "message"), [("", "at least 1 character"), ("x" * 129, "at most 128 characters"),
                                              ("fleet\nb", "should match pattern")])
def test_a_store_name_root_init_would_not_take_is_refused(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _release_cfg(storeName=name)
    assert "release.storeName" in str(err.value)


def test_the_production_init_container_takes_only_its_named_store(tmp_path: Path) -> None:
    """prod's init container command (--store-name vision-prod), run from the zipapp: a store whose signed root
    is named vision-prod syncs; the same release under the same key in a store with no signed root (the
    implicit --trusted-key root) is refused, exit 1."""
    from tritonops.release.publish import publish, write_root

    cfg = triton_config("prod")
    rel = cfg.model_services[0].release
    assert rel is not None and rel.store_name == "vision-prod"
    (tmp_path / "trusted").mkdir()
    private, public = signing.keygen(tmp_path / "keys" / "release.key", tmp_path / "trusted" / "release.pub")
    agent = tmp_path / "agent" / release_agent.AGENT_KEY
    agent.parent.mkdir()
    agent.write_bytes(base64.b64decode(release_agent.agent_config_map(cfg)["binaryData"][release_agent.AGENT_KEY]))
    command = _pod(workload.deployment(cfg, cfg.model_services[0]))["initContainers"][0]["command"]
    env = {"PATH": os.environ["PATH"]}
    results = {}
    for store in ("named", "unnamed"):
        if store == "named":
            write_root(str(tmp_path / store), {r: [public] for r in ("root", "release", "channel")}, [private],
                       name="vision-prod")
        publish(ROOT / "examples" / "model_repository", str(tmp_path / store), rel.channel, private)
        argv = _local_argv(command, {release_agent.AGENT_PATH: str(agent), rel.store: str(tmp_path / store),
                                     release_agent.RELEASE_ROOT: str(tmp_path / f"var-{store}"),
                                     release_agent.TRUSTED_KEYS_DIR: str(public.parent)})
        results[store] = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert results["named"].returncode == 0, results["named"].stdout + results["named"].stderr
    assert results["unnamed"].returncode == 1 and "metadata refused (store)" in results["unnamed"].stderr
    assert not (tmp_path / "var-unnamed" / "models").exists()
