"""Drift on a pull node (issue 44 item 3), on the converged molecule node: the node's own check (the command
the drift_check role's timer runs, with ``--channel``) and the controller's ``tritonops drift`` (the host's
mode from ``-e release_agent_enabled=true``) give the same verdict:

1. the node serves its channel's release: both exit 0, no finding;
2. the model link re-pointed by hand at another folder (the agent stopped, so that it does not switch it
   back first): both exit 1 with the same ``release`` finding; the link put back, the agent gates it again.

It runs after test_pull.py (file order), whose store is gone by then: it serves its own store at the
address the agent polls and publishes the sample repository there, re-signing the pointer until its version
passes the one the node trusts (a lower version is refused as a rollback). It leaves the node in pull mode,
serving that release, the agent running (tests/infra/release_agent: later files publish above that version).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from devkit.hosts.podman import CONTAINERS_CONF
from node_helpers import journal
from ra_node import PYZ, SERVICE, host_name, molecule_inventory
from test_pull import SAMPLE, Node, node, say, signing_key, store, wait_serving  # noqa: F401 - fixtures, per module
from tritonops.core.exitcodes import ExitCode
from tritonops.core.names import TRUSTED_FILE
from tritonops.release.publish import publish, refresh

BY_HAND = "drift-by-hand"


@pytest.fixture(scope="module")
def synced(node: Node, store: Path, signing_key: Path) -> dict[str, Any]:  # noqa: F811 - fixtures of test_pull
    """The sample repository published on the node's channel and served by it."""
    trusted = node.host.file(f"{node.releases}/{TRUSTED_FILE}")
    doc = json.loads(trusted.content_string) if trusted.exists else {}
    have = int(doc.get("channels", {}).get(node.channel, {}).get("version", 0))
    out = publish(SAMPLE, to=str(store), channel=node.channel, signing_key=signing_key, target="cpu")
    version = 1
    while version <= have:
        version = int(refresh(str(store), node.channel, keys=signing_key)["version"])
    seconds = wait_serving(node, out, None)
    say(f"drift: release {out['release']} (pointer version {version}) serving {seconds:.1f}s after publish")
    return out


def node_check(node: Node) -> tuple[int, list[dict[str, str]]]:  # noqa: F811
    """The drift_check timer's command on the node (roles/drift_check/templates/drift-check.service.j2),
    the admin header's value in its environment."""
    port = urllib.parse.urlsplit(node.triton.url).port or 80
    argv = ["/usr/bin/python3", PYZ, "check", "--host", host_name(node.host), "--link", node.link, "--releases",
            node.releases, "--port", str(port), "--header", node.triton.header, "--channel", node.channel]
    res = node.host.run(f"TRITONOPS_ADMIN_SECRET={shlex.quote(node.triton.secret)} {shlex.join(argv)}")
    assert res.rc in (ExitCode.OK, ExitCode.FINDINGS), res.stdout + res.stderr
    return res.rc, json.loads(res.stdout)["findings"]


def controller(node: Node, config: Any) -> tuple[int, list[dict[str, str]], str]:  # noqa: F811
    """``tritonops drift --source models`` from the controller, the node's mode given with -e."""
    cmd = [str(Path(sys.executable).with_name("tritonops")), "drift", "-i", molecule_inventory(config), "--limit",
           host_name(node.host), "--source", "models", "--json", "-e", "release_agent_enabled=true"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                         env=dict(os.environ, CONTAINERS_CONF=str(CONTAINERS_CONF)))
    doc = json.loads(res.stdout) if res.stdout.startswith("{") else {}
    results = doc.get("results", [])
    assert [r["hosts"] for r in results] == [[host_name(node.host)]], res.stdout[-3000:] + res.stderr[-3000:]
    found = [{"resource": f["resource"], "detail": f["detail"]} for r in results for f in r["findings"]]
    return res.returncode, found, res.stdout[-3000:] + res.stderr[-3000:]


def test_node_and_controller_agree_in_sync_and_after_the_link_is_re_pointed_by_hand(
        node: Node, synced: dict[str, Any], request: pytest.FixtureRequest) -> None:  # noqa: F811
    assert node_check(node) == (ExitCode.OK, [])
    rc, found, out = controller(node, request.config)
    assert (rc, found) == (ExitCode.OK, []), out

    host = node.host
    link_dir = os.path.dirname(node.link)
    host.check_output(f"systemctl stop {SERVICE}")
    try:
        host.check_output(f"cp -a {node.releases}/{synced['release']} {node.releases}/{BY_HAND}")
        rel = os.path.relpath(f"{node.releases}/{BY_HAND}", link_dir)
        host.check_output(f"ln -sfn {rel} {link_dir}/.drift-test && mv -Tf {link_dir}/.drift-test {node.link}")
        on_node = node_check(node)
        rc, on_controller, out = controller(node, request.config)
    finally:
        rel = os.path.relpath(f"{node.releases}/{synced['release']}", link_dir)
        host.run(f"ln -sfn {rel} {link_dir}/.drift-test && mv -Tf {link_dir}/.drift-test {node.link}")
        host.run(f"rm -rf {node.releases}/{BY_HAND}")
        host.run(f"systemctl start {SERVICE}")
    assert on_node[0] == rc == ExitCode.FINDINGS, out
    assert on_node[1] == on_controller, out
    release = [f["detail"] for f in on_controller if f["resource"] == "release"]
    assert len(release) == 1 and release[0].startswith(f"serving {BY_HAND} ("), on_controller
    assert f"channel {node.channel} points to {synced['release']} (" in release[0], release
    # The link put back: the agent gates the release again, and both say clean again.
    wait_serving(node, synced, None)
    assert host.service(SERVICE).is_running, journal(host, SERVICE)
    assert node_check(node) == (ExitCode.OK, [])
