"""The deadman of push mode: the node reverts an un-gated release by itself, with no controller.

A controller that dies between the switch (the agent's ``activate``) and the ``mark`` leaves an un-gated
release active. The test leaves exactly that on the converged node: a release that differs from the gated
one by a parameter in postprocess's config (what Triton reports tells which release it serves) is
installed and activated by the agent, never marked. Then:

1. Triton restarts (a crash, a reboot): the role's drop-in (ExecStartPre ``recover``) points the link back
   at the gated release first, and Triton serves the gated release (every model READY, no marker, golden);
   the link moved, so the release is not reported served until the timer's look (``recover --triton``)
   has gated it again against what Triton answers; then the agent's ``status`` says it is;
2. on the running node, with the un-gated release loaded into Triton: the timer leaves a fresh switch alone
   (its gate may still pass); once the switch is older than ``model_repository_recover_after`` (the link's
   time set back), the timer reverts it, reloads the gated release's models in the running Triton and
   gates them: Triton serves the gated release again WITHOUT a restart (the same main process, started at
   the same time), and the agent's ``status`` reports the release served and gated.

The node is left on the gated release, the un-gated one removed. Needs the converged molecule node:
``cd roles/model_repository && molecule test``, or ``--hosts=ansible://NODE --ansible-inventory=INVENTORY``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mr_nodeinfo import REPO, node_address, node_vars, push_file, run_agent
from node_helpers import assert_hardened, journal
from tritonops.core.errors import ReleaseError
from tritonops.core.names import STATE_FILE
from tritonops.core.triton_http import Triton
from tritonops.release import push as rel

SAMPLE = REPO / "examples" / "model_repository"
UNGATED = "deadman-ungated"
MARKED_MODEL = "postprocess"
MARKER = "tritonops_deadman_test"
TIMER = "tritonops-model-recover"
SERVE_TIMEOUT = 180.0


@dataclass
class Node:
    host: Any
    mr: dict[str, Any]
    url: str
    triton: Triton
    gated: str
    models: list[str]
    agent: list[str]  # the node's own agent, as Triton's drop-in runs it (python, zipapp)

    def layout(self) -> list[str]:
        return ["--link", self.mr["link"], "--releases", self.mr["releases"]]

    def link_target(self) -> str:
        return os.path.basename(self.host.check_output(f"readlink {self.mr['link']}"))

    def marker(self) -> str | None:
        """The marker parameter of the postprocess model Triton serves (None: the gated release's config)."""
        req = urllib.request.Request(f"{self.url}/v2/models/{MARKED_MODEL}/config",
                                     headers={self.mr["header"]: self.mr["secret"]})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the test node
            params = json.load(resp).get("parameters") or {}
        return params.get(MARKER, {}).get("string_value")

    def serves_gated(self) -> bool:
        try:
            return set(self.models) <= set(self.triton.ready_models()) and self.marker() is None
        except (OSError, ReleaseError):
            return False  # Triton is restarting

    def explain(self) -> str:
        return journal(self.host, self.mr["triton_service"], 40) + journal(self.host, TIMER, 20)

    def wait_serving_gated(self, timeout: float = SERVE_TIMEOUT) -> float:
        start = time.monotonic()
        while not self.serves_gated():
            assert time.monotonic() - start < timeout, f"Triton does not serve {self.gated}{self.explain()}"
            time.sleep(1)
        return time.monotonic() - start

    def status(self) -> dict[str, Any]:
        """The node agent's ``status`` (read only), run as the deadman runs it."""
        out = self.host.run(" ".join(shlex.quote(a) for a in [*self.agent, "status", *self.layout()]))
        assert out.rc == 0, out.stdout + out.stderr
        return dict(json.loads(out.stdout))

    def wait_served(self, timeout: float) -> dict[str, Any]:
        """Wait for the agent to report the gated release served (a gate passed since the link last moved)."""
        start = time.monotonic()
        while True:
            st = self.status()
            if st["served"]:
                assert st["current"] == st["active"] == self.gated, st
                return st
            assert time.monotonic() - start < timeout, f"never reported served: {st}{self.explain()}"
            time.sleep(1)

    def triton_process(self) -> tuple[str, str]:
        """Triton's main process and when it started: both change at every restart."""
        out = self.host.check_output(f"systemctl show {self.mr['triton_service']} "
                                     "-p MainPID -p ExecMainStartTimestampMonotonic")
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        assert props.get("MainPID", "0") != "0", out
        return props["MainPID"], props["ExecMainStartTimestampMonotonic"]

    def switch_ungated(self) -> None:
        """What a controller that died before the gate leaves: the link on the un-gated release (the model
        it was about to load touched, as the role's switch does, so that Triton re-reads it)."""
        out = run_agent(self.host, "activate", *self.layout(), "--release", UNGATED, "--touch", MARKED_MODEL)
        assert out.rc == 0, out.stdout + out.stderr
        assert self.link_target() == UNGATED


def say(msg: str) -> None:
    print(f"\n[model_repository deadman] {msg}", flush=True)  # noqa: T201 - the measured times, shown with -s


@pytest.fixture(scope="module")
def node(host: Any, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    mr = node_vars(host, request.config)
    state = json.loads(host.file(f"{mr['releases']}/{STATE_FILE}").content_string)
    gated = os.path.basename(host.check_output(f"readlink {mr['link']}"))
    assert state["current"] == gated, f"the node is not on a gated release: {state}"
    models = sorted(json.loads(run_agent(host, "status", "--link", mr["link"], "--releases", mr["releases"])
                               .stdout)["active_models"])
    url = f"http://{node_address(host)}:{mr['port']}"
    # ExecStartPreEx={ path=PYTHON ; argv[]=PYTHON AGENT recover --link ... ; flags=privileged ... } (one per line)
    dropin = host.check_output(f"systemctl show {mr['triton_service']} -p ExecStartPreEx")
    argvs = [part.split(" ; ", 1)[0].split() for part in dropin.split("argv[]=")[1:]]
    agent = next((a[:2] for a in argvs if a[2:4] == ["recover", "--link"]), None)
    assert agent, f"no deadman drop-in in Triton's unit: {dropin}"
    n = Node(host, mr, url, Triton(url, mr["header"], mr["secret"]), gated, models, agent)
    # The un-gated release: the sample with a marker parameter, staged like the role stages it, installed
    # (verified) by the agent beside the gated one.
    tmp = tmp_path_factory.mktemp("deadman")
    repo = tmp / "repo"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = repo / MARKED_MODEL / "config.pbtxt"
    cfg.write_text(cfg.read_text() + f'parameters {{ key: "{MARKER}" value {{ string_value: "ungated" }} }}\n')
    staged = rel.prepare(repo, tmp / "staged", "cpu", version=UNGATED)
    staging = f"{mr['releases']}/.staging-{UNGATED}"
    push_file(host, Path(staged["tarball"]), f"{staging}.tar")
    out = run_agent(host, "install", *n.layout(), "--staging", staging, "--tarball", f"{staging}.tar",
                    "--release", UNGATED, "--owner", "root", "--group", mr["group"])
    assert out.rc == 0, out.stdout + out.stderr
    n.wait_serving_gated()  # (a Triton still starting is waited for)
    yield n
    if n.link_target() == UNGATED:  # a test failed with the un-gated release active: what the deadman does
        run_agent(host, "recover", *n.layout())
        host.run(f"systemctl restart {mr['triton_service']}")
    host.run(f"rm -rf {mr['releases']}/{UNGATED} {staging} {staging}.tar")


def test_deadman_units_are_installed(host: Any, node: Node) -> None:
    dropin = host.check_output(f"systemctl show {node.mr['triton_service']} -p ExecStartPreEx")
    assert "recover --link" in dropin and "flags=privileged" in dropin, dropin
    timer = host.service(f"{TIMER}.timer")
    assert timer.is_enabled and timer.is_running
    assert_hardened(host, f"{TIMER}.service")
    # The timer's reload reaches Triton over loopback only, with the admin header's value from a root-only
    # file: never in the world-readable unit or script (nor, so, on a command line).
    props = host.check_output(f"systemctl show {TIMER}.service -p PrivateNetwork -p IPAddressAllow "
                              "-p IPAddressDeny -p RestrictAddressFamilies -p EnvironmentFiles")
    prop = dict(line.split("=", 1) for line in props.splitlines() if "=" in line)
    assert prop["PrivateNetwork"] == "no", props
    assert set(prop["IPAddressDeny"].split()) == {"0.0.0.0/0", "::/0"}, props
    assert set(prop["IPAddressAllow"].split()) == {"127.0.0.0/8", "::1/128"}, props
    assert set(prop["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}, props
    secret = node.mr["secret"]
    assert secret, "the scenario restricts Triton's repository API (triton_server_admin_secret)"
    env = host.file(f"/etc/default/{TIMER}")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600), (env.user, env.group, oct(env.mode))
    assert f"/etc/default/{TIMER}" in props, props
    assert "TRITONOPS_ADMIN_SECRET=" in env.content_string
    unit = host.check_output(f"systemctl cat {TIMER}.service")
    script = host.check_output("cat " + shlex.quote(host.check_output(
        f"systemctl show {TIMER}.service -p ExecStart").split("path=", 1)[1].split(" ;", 1)[0]))
    assert "recover" in script and "--triton" in script, script
    assert secret not in unit and secret not in script


def test_triton_restarts_on_the_gated_release(host: Any, node: Node) -> None:
    node.switch_ungated()
    start = time.monotonic()
    restarted = host.run(f"systemctl restart {node.mr['triton_service']}")
    assert restarted.rc == 0, restarted.stderr + node.explain()
    assert node.link_target() == node.gated, f"Triton started on the un-gated release{node.explain()}"
    node.wait_serving_gated()
    say(f"Triton restarted on the gated release {node.gated} in {time.monotonic() - start:.1f}s")
    assert f'"reverted": "{UNGATED}"' in journal(host, node.mr["triton_service"], 300)
    result = rel.golden(node.url, SAMPLE, timeout=60)
    assert result["ok"], result["failed"]
    # The drop-in only moved the link: the timer's next look gates what Triton serves, and only then is
    # the release reported served.
    st = node.wait_served(timeout=2 * node.mr["recover_interval"] + SERVE_TIMEOUT)
    say(f"timer: {st['current']} gated again after Triton's start, {time.monotonic() - start:.1f}s after the restart")


def test_timer_reverts_a_stale_ungated_release_on_a_running_node(host: Any, node: Node) -> None:
    before = node.triton_process()
    node.switch_ungated()
    node.triton.load(MARKED_MODEL, timeout=120)  # the dead controller had loaded it: Triton serves it
    assert node.marker() == "ungated"
    # Fresh: its gate may still pass, so two looks of the timer leave it alone.
    time.sleep(2 * node.mr["recover_interval"] + 2)
    assert node.link_target() == UNGATED, node.explain()
    assert node.marker() == "ungated"
    # Stale: switched longer ago than model_repository_recover_after.
    host.check_output(f"touch -h -d @{int(time.time()) - node.mr['recover_after'] - 60} {node.mr['link']}")
    seconds = node.wait_serving_gated(timeout=2 * node.mr["recover_interval"] + SERVE_TIMEOUT)
    assert node.link_target() == node.gated
    st = node.wait_served(timeout=2 * node.mr["recover_interval"] + SERVE_TIMEOUT)
    say(f"timer: stale un-gated release reverted and gated again in the running Triton, serving {node.gated} "
        f"after {seconds:.1f}s (timer every {node.mr['recover_interval']}s)")
    # Reloaded in place, not restarted: the same main process, started at the same time.
    assert node.triton_process() == before, f"Triton was restarted{node.explain()}"
    assert node.serves_gated() and node.marker() is None
    log = journal(host, TIMER, 200)
    assert f'"reverted": "{UNGATED}"' in log, log
    assert st["current"] == node.gated and st["served"], st
