"""`make demo-fleet`: three local edge nodes in pull mode, a release rolled out in waves, a bad one halted.

``python -m devkit demo-fleet`` boots the Podman nodes ``tritonops-fleet-1..3`` (the image ``make demo``
builds), starts a stand-in S3 bucket on the controller at Podman's gateway (moto_server: in memory, gone
when the demo ends), makes the keys, and signs a root that names the store (``release root init --name``).
It publishes the sample repository on channel ``stable``, then converges ``ansible/edge.yml`` on the
three nodes in pull mode (``release_agent_enabled``; each agent runs with ``--store-name``, writes status
reports signed with its own key, and the fleet file binds each agent to that key). Then:

* release ``v2`` rolls out in waves: the canary group (one node), then every node; ``rollout advance``
  moves on only when the wave's agents reported it gated (applied, and its golden gate passed);
* release ``v3`` (its golden answers changed: the gate fails on the node) halts at its first wave,
  and ``rollout advance --rollback-on-halt`` moves the channel back to ``v2``.

Each step prints the command it ran and its seconds; ``release status`` shows the channel, what each agent
serves, and the rollout's targeted / gated / failed agents per wave and per node. The nodes stay up:
``make demo-fleet-down`` removes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from devkit.demo import REPO, SAMPLE, DemoError, node_inventory, run_playbook
from devkit.hosts.images import ImageSpec, build_image, cache_dir
from devkit.hosts.nodes import node_down, node_up
from devkit.hosts.podman import podman

NODES = ("tritonops-fleet-1", "tritonops-fleet-2", "tritonops-fleet-3")
CANARY = NODES[0]
STORE_NAME = "tritonops-demo-fleet"
BUCKET = "tritonops-fleet"
STORE = f"s3://{BUCKET}/store"
CHANNEL = "stable"
S3_PORT = 18790  # moto_server on the gateway (molecule's release_agent store uses 18765)
AGENT_PORT = 9109  # each agent's /metrics, /ready and /status (release_agent_listen)
# moto_server takes any credentials: fixed ones, so a user's real AWS keys never go to the stand-in.
S3_ENV = {"AWS_ACCESS_KEY_ID": "demo-fleet", "AWS_SECRET_ACCESS_KEY": "demo-fleet-secret",
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
WAIT = 300.0  # seconds one step may wait for the agents (a release loads and passes its golden gate)


@dataclass
class Fleet:
    """What the demo made: its folder, the store's endpoint, the nodes' addresses, and each step's seconds."""

    work: Path
    endpoint: str = ""
    addresses: dict[str, str] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def agent_urls(self) -> list[str]:
        return [f"http://{self.addresses[n]}:{AGENT_PORT}/metrics" for n in NODES]

    @property
    def fleet_file(self) -> Path:
        return self.work / "fleet.txt"

    def key(self, name: str) -> Path:
        return self.work / "keys" / name


def tritonops(console: Console, fleet: Fleet, *args: str, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """Run ``tritonops release ARGS --json`` as a user would (the command is printed); its JSON answer."""
    shown = " ".join(escape(a) for a in args).replace(str(fleet.work) + "/", "")
    console.print(f"  $ tritonops release {shown}", highlight=False, soft_wrap=True)
    exe = Path(sys.executable).with_name("tritonops")
    res = subprocess.run([str(exe), "release", *args, "--json"], capture_output=True, text=True,
                         env={**os.environ, **S3_ENV}, cwd=fleet.work)
    if res.returncode not in ok:
        raise DemoError(f"tritonops release {' '.join(args)} exited {res.returncode}: "
                        f"{(res.stderr or res.stdout).strip()[-1500:]}")
    return json.loads(res.stdout) if res.stdout.strip() else {}


def gateway() -> str:
    """Podman's bridge gateway: the nodes' default route, where the controller serves them the store."""
    nets = json.loads(podman(["network", "inspect", "podman"]).stdout)
    return str(nets[0]["subnets"][0]["gateway"])


@contextlib.contextmanager
def s3_store(work: Path, host: str) -> Iterator[str]:
    """moto_server (a plainly named stand-in for S3) on ``host``, with the demo's bucket; its endpoint."""
    import boto3

    endpoint = f"http://{host}:{S3_PORT}"
    log = (work / "moto_server.log").open("w")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", host, "-p", str(S3_PORT)],
                            stdout=log, stderr=subprocess.STDOUT)
    saved = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)  # the in-process reads (release status, rollout summary) use boto3's chain
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
                break
            except Exception as e:  # not listening yet
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise DemoError(f"moto_server did not start on {endpoint} (log {log.name}): {e}") from None
                time.sleep(0.3)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def release_source(work: Path, version: str, bad: bool = False) -> Path:
    """The sample repository as release ``version`` (a comment marks it, so its digest is its own); ``bad``:
    postprocess's golden labels are off by one, so the gate on the node fails."""
    dest = work / "repos" / version
    shutil.copytree(SAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    model = dest / "postprocess" / "1" / "model.py"
    model.write_text(model.read_text() + f"\n# release {version}\n")
    if bad:
        golden_file = dest / "postprocess" / "golden.json"
        golden = json.loads(golden_file.read_text())
        for case in golden["cases"]:
            label = case["outputs"]["label"]
            label["data"] = [(int(x) + 1) % 4 for x in label["data"]]
        golden_file.write_text(json.dumps(golden))
    return dest


def make_keys(console: Console, fleet: Fleet) -> None:
    """The root key, the release key (manifests and channel pointers: what the nodes trust) and one report
    key per agent; the fleet file binds each agent to its report key (``key=``)."""
    (fleet.work / "keys").mkdir(parents=True)
    for name in ("root", "release", *(f"{n}-report" for n in NODES)):
        tritonops(console, fleet, "keygen", str(fleet.key(f"{name}.key")), str(fleet.key(f"{name}.pub")))
    lines = [f"{n}{' canary' if n == CANARY else ''} key=keys/{n}-report.pub" for n in NODES]
    fleet.fleet_file.write_text("# AGENT-ID [GROUPS] key=REPORT-PUBLIC-KEY (tritonops release rollout --fleet)\n"
                                + "\n".join(lines) + "\n")


def inventory_vars(fleet: Fleet) -> dict[str, Any]:
    """Pull mode for the fleet's nodes (ansible/edge.yml picks release_agent): the named root, the reports."""
    return {
        "release_agent_enabled": True,
        "release_agent_production": True,
        "release_agent_store_url": STORE,
        "release_agent_store_name": STORE_NAME,
        "release_agent_s3_endpoint": fleet.endpoint,
        "release_agent_s3_region": S3_ENV["AWS_REGION"],
        "release_agent_s3_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"],
        "release_agent_s3_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"],
        "release_agent_channel": CHANNEL,
        "release_agent_interval": 2,
        "release_agent_listen": f"0.0.0.0:{AGENT_PORT}",
        "release_agent_report": True,
        "release_agent_trusted_keys": [{"name": "fleet-release", "src": str(fleet.key("release.pub"))}],
        # Explicit model control: the agent loads each release through Triton's repository API.
        "triton_server_model_control_mode": "explicit",
        "triton_server_startup_models": ["*"],
    }


def wait_for(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise DemoError(f"{what}: not after {timeout:.0f}s")
        time.sleep(1)


def snapshot(fleet: Fleet) -> dict[str, Any]:
    """The channel's release and what each agent serves (its /metrics), as ``release status`` reads them."""
    from tritonops.release.status import status

    out = status(STORE, [CHANNEL], fleet.agent_urls, fleet.endpoint)
    return {"channel": out["channels"][CHANNEL]["release"],
            "serving": {n: t.get("release") for n, t in zip(NODES, out["targets"], strict=True)}}


def serving(fleet: Fleet) -> dict[str, str | None]:
    return dict(snapshot(fleet)["serving"])


def agent_status(fleet: Fleet, node: str) -> dict[str, Any]:
    """The agent's own view (its /status): what it serves, and the channel release's last failure."""
    with urllib.request.urlopen(f"http://{fleet.addresses[node]}:{AGENT_PORT}/status", timeout=10) as resp:
        return dict(json.loads(resp.read()))


def outcomes(fleet: Fleet) -> dict[str, str | None]:
    """Each agent's outcome for the channel's rollout, from its signed report (the fleet file's bindings)."""
    from tritonops.release import rollout as ro

    got = ro.summary(STORE, CHANNEL, [], fleet.endpoint, ro.parse_fleet(fleet.fleet_file)) or {"agents": []}
    return {r["agent"]: r["outcome"] for r in got["agents"]}


def status_table(console: Console, fleet: Fleet) -> dict[str, Any]:
    """``release status`` and ``rollout status``: per node, its wave, whether targeted, its outcome, what it serves."""
    rollout = tritonops(console, fleet, "rollout", "status", "--channel", CHANNEL, "--store", STORE,
                        "--fleet", str(fleet.fleet_file), "--s3-endpoint", fleet.endpoint)
    status = tritonops(console, fleet, "status", "--channel", CHANNEL, "--store", STORE, "--s3-endpoint",
                       fleet.endpoint, *(f"--agent-url={u}" for u in fleet.agent_urls), ok=(0, 1))
    serves = {n: t.get("release") for n, t in zip(NODES, status["targets"], strict=True)}
    ro = rollout["rollout"]
    table = Table(title=f"rollout {ro['id']} of {rollout['release']} on {CHANNEL}: wave {ro['wave']}"
                        f"{' (halted)' if ro['halted'] else ''}; channel now {status['channels'][CHANNEL]['release']}")
    for col in ("node", "wave", "targeted", "outcome (its signed report)", "serves"):
        table.add_column(col)
    rows = {r["agent"]: r for r in rollout["agents"]}
    for n in NODES:
        r = rows.get(n, {})
        wave = r.get("wave")
        table.add_row(n, "-" if wave is None else str(wave), "yes" if wave is not None and wave <= ro["wave"] else "no",
                      r.get("outcome") or "-", serves[n] or "-")
    console.print(table)
    return {"rollout": rollout, "status": status}


def rollout(console: Console, fleet: Fleet, version: str, bad: bool = False) -> dict[str, Any]:
    """Publish ``version`` (upload only), start its rollout (the canary, then every node) and advance it on
    the agents' reports; a bad release halts at the first wave and the channel rolls back."""
    step = time.monotonic()
    tritonops(console, fleet, "publish", str(release_source(fleet.work, version, bad).relative_to(fleet.work)),
              "--store", STORE, "--s3-endpoint", fleet.endpoint, "--release", version, "--for-channel", CHANNEL,
              "--target", "cpu", "--key", str(fleet.key("release.key")))
    tritonops(console, fleet, "rollout", "start", "--channel", CHANNEL, "--release", version, "--store", STORE,
              "--groups", "canary", "--waves", "100", "--max-failures", "0", "--s3-endpoint", fleet.endpoint,
              "--key", str(fleet.key("release.key")))
    advance = ("rollout", "advance", "--channel", CHANNEL, "--store", STORE, "--fleet", str(fleet.fleet_file),
               "--s3-endpoint", fleet.endpoint, "--key", str(fleet.key("release.key")))
    wait_for(f"{version}: the canary's report", lambda: outcomes(fleet).get(CANARY) is not None)
    if bad:
        shown = status_table(console, fleet)
        failure = agent_status(fleet, CANARY).get("failure") or {}
        console.print(f"  {CANARY} (its /status): {failure.get('step')} failed, {failure.get('class')}: "
                      f"{failure.get('reason')}", highlight=False, soft_wrap=True)
        halted_at = time.monotonic()
        out = tritonops(console, fleet, *advance, "--rollback-on-halt", ok=(1,))
        if out.get("result") != "halted" or not out.get("rollback"):
            raise DemoError(f"{version}: the rollout was not halted and rolled back: {out}")
        previous = out["rollback"]["release"]
        console.print(f"  halted: {out['reason']}; channel {CHANNEL} rolled back to {previous}", highlight=False)
        wait_for(f"every node serving {previous}", lambda: set(serving(fleet).values()) == {previous})
        done = time.monotonic()
        fleet.phases["halt_to_rollback"] = round(done - halted_at, 1)
        fleet.phases[f"{version}_publish_to_rollback"] = round(done - step, 1)
        return {**shown, "advance": out, "failure": failure, "after": snapshot(fleet)}
    out = tritonops(console, fleet, *advance)
    console.print(f"  canary {CANARY} reported {version} gated: {out['result']}, now wave {out['wave']}",
                  highlight=False)
    wait_for(f"{version}: every agent's report", lambda: None not in outcomes(fleet).values())
    out = tritonops(console, fleet, *advance)
    wait_for(f"every node serving {version}", lambda: set(serving(fleet).values()) == {version})
    fleet.phases[f"{version}_publish_to_all_serving"] = round(time.monotonic() - step, 1)
    console.print(f"  {out['result']}: {out['reason']}", highlight=False)
    return {**status_table(console, fleet), "advance": out}


def run_fleet(console: Console | None = None, work: Path | None = None) -> Fleet:
    """The whole demo; returns what it made and measured (``phases``, seconds) and saw (``results``)."""
    console = console or Console()
    started = time.monotonic()
    work = work or cache_dir() / "demo-fleet"
    shutil.rmtree(work, ignore_errors=True)  # new keys and store each run; the nodes are made anew too
    work.mkdir(parents=True)
    fleet = Fleet(work)
    with console.status("image: checking the cached Debian bookworm systemd image") as status:
        build_image(ImageSpec(arch="amd64"), step=lambda m: status.update(f"image: {m}"))
    step = time.monotonic()
    with console.status(f"nodes: booting {', '.join(NODES)}"):
        for n in NODES:
            fleet.addresses[n] = node_up(n, arch="amd64", replace=True).address
    fleet.phases["nodes"] = round(time.monotonic() - step, 1)
    console.print(f"[1/6] nodes {', '.join(f'{n} {a}' for n, a in fleet.addresses.items())}"
                  f" ({fleet.phases['nodes']:.0f}s)", highlight=False)
    with s3_store(work, gateway()) as fleet.endpoint:
        console.print(f"[2/6] store {STORE} on {fleet.endpoint} (moto_server, an S3 stand-in), keys, the signed root",
                      highlight=False)
        make_keys(console, fleet)
        tritonops(console, fleet, "root", "init", "--store", STORE, "--s3-endpoint", fleet.endpoint,
                  "--name", STORE_NAME, "--root-key", str(fleet.key("root.pub")),
                  "--release-key", str(fleet.key("release.pub")), "--channel-key", str(fleet.key("release.pub")),
                  *(f"--report-key={fleet.key(f'{n}-report.pub')}" for n in NODES),
                  "--sign-with", str(fleet.key("root.key")), "--sign-with", str(fleet.key("release.key")),
                  "--trusted-key", str(fleet.key("release.pub")))
        step = time.monotonic()
        tritonops(console, fleet, "publish", str(release_source(work, "v1").relative_to(work)), "--store", STORE,
                  "--s3-endpoint", fleet.endpoint, "--channel", CHANNEL, "--release", "v1", "--target", "cpu",
                  "--key", str(fleet.key("release.key")))
        fleet.phases["keys_root_publish"] = round(time.monotonic() - step, 1)
        log = cache_dir() / "logs" / "demo-fleet-ansible.log"
        console.print(f"[3/6] ansible-playbook ansible/edge.yml in pull mode on the three nodes (log: {log})",
                      highlight=False)
        host_vars = {n: {"release_agent_report_key": fleet.key(f"{n}-report.key").read_text(),
                         "release_agent_group_labels": ["canary"] if n == CANARY else []} for n in NODES}
        step = time.monotonic()
        recap = run_playbook(console, REPO / "ansible" / "edge.yml",
                             [REPO / "ansible" / "inventories" / "local",
                              node_inventory("demo-fleet", host_vars, inventory_vars(fleet))],
                             ",".join(NODES), log, extra_vars={"edge_serial": "100%"})
        wait_for("every node serving v1", lambda: set(serving(fleet).values()) == {"v1"})
        fleet.phases["converge_to_serving"] = round(time.monotonic() - step, 1)
        console.print(f"      converged: ok={recap['ok']} changed={recap['changed']} failed={recap['failed']}; every"
                      f" node serves v1 ({fleet.phases['converge_to_serving']:.0f}s)", highlight=False)
        console.print("[4/6] release v2 in waves: the canary group (1 node), then 100%", highlight=False)
        fleet.results["v2"] = rollout(console, fleet, "v2")
        console.print("[5/6] release v3, golden answers changed: halted at its first wave, rolled back",
                      highlight=False)
        fleet.results["v3"] = rollout(console, fleet, "v3", bad=True)
        console.print("[6/6] release status after the rollback", highlight=False)
        tritonops(console, fleet, "status", "--channel", CHANNEL, "--store", STORE, "--s3-endpoint", fleet.endpoint,
                  *(f"--agent-url={u}" for u in fleet.agent_urls))
        console.print(f"  every node serves {serving(fleet)[CANARY]}", highlight=False)
    fleet.phases["total"] = round(time.monotonic() - started, 1)
    console.print(summary(fleet), highlight=False, soft_wrap=True)
    return fleet


def summary(fleet: Fleet) -> str:
    p = fleet.phases
    return "\n".join([
        f"demo-fleet done in {p['total']:.0f}s: converge to 3 nodes serving v1 {p['converge_to_serving']:.0f}s;"
        f" v2 publish -> all nodes serving {p['v2_publish_to_all_serving']:.0f}s;"
        f" v3 halt -> rollback (every node on v2) {p['halt_to_rollback']:.0f}s.",
        f"Keys, root, fleet file and releases: {fleet.work}. The store (moto_server) is gone; the nodes keep serving:",
        f"  podman exec {CANARY} journalctl -u tritonops-release-agent --no-pager | tail",
        "  make demo-fleet-down         # removes the three nodes",
    ])


def fleet_down() -> list[str]:
    """Remove the demo's nodes; the names removed."""
    return [n for n in NODES if node_down(n)]
