"""The deadman of push mode: the node reverts an un-gated release by itself, with no controller.

A controller that dies between the switch (the agent's ``activate``) and the ``mark`` leaves an un-gated
release active. The test leaves exactly that on the converged node: a release that differs from the gated
one by a parameter in postprocess's config (what Triton reports tells which release it serves) is
installed and activated by the agent, never marked. Then:

1. Triton restarts (a crash, a reboot): the role's drop-in (ExecStartPre ``recover``) points the link back
   at the gated release first, and Triton serves the gated release (every model READY, no marker, golden);
2. on the running node, with the un-gated release loaded into Triton: the timer leaves a fresh switch alone
   (its gate may still pass); once the switch is older than ``model_repository_recover_after`` (the link's
   time set back), the timer reverts it and restarts Triton on the gated release.

The node is left on the gated release, the un-gated one removed. Needs the converged molecule node:
``cd roles/model_repository && molecule test``, or ``--hosts=ansible://NODE --ansible-inventory=INVENTORY``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import journal
from mr_nodeinfo import REPO, node_address, node_vars, push_file, run_agent
from node_helpers import assert_hardened
from tritonops.agent.errors import ReleaseError
from tritonops.agent.releases import STATE_FILE
from tritonops.agent.triton import Triton
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

    def switch_ungated(self) -> None:
        """What a controller that died before the gate leaves: the link on the un-gated release."""
        out = run_agent(self.host, "activate", *self.layout(), "--release", UNGATED)
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
    n = Node(host, mr, url, Triton(url, mr["header"], mr["secret"]), gated, models)
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


def test_timer_reverts_a_stale_ungated_release_on_a_running_node(host: Any, node: Node) -> None:
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
    say(f"timer: stale un-gated release reverted, Triton serving {node.gated} again after {seconds:.1f}s "
        f"(timer every {node.mr['recover_interval']}s)")
    assert f'"reverted": "{UNGATED}"' in journal(host, TIMER, 100)
