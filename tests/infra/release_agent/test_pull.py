"""Pull mode end to end: releases published to the store arrive on the node with no Ansible run.

The test publishes into a folder on the controller and serves it with an HTTP server at the address
and path the node's agent polls (read from the agent's own argv), then only watches the node:

1. the sample repository, signed with the scenario's key: the node serves it (textfile metric
   ``tritonops_release_info`` names it, Triton has every model READY, golden answers hold);
2. a second release that changes one file (a parameter in postprocess/config.pbtxt): it arrives, Triton
   reports the new parameter, and only the changed file was downloaded;
3. a third release signed by a key the node does not trust: refused at ``verify`` (failures metric),
   nothing of it reaches the node or Triton, the second release keeps serving;
4. the deadman: the link left on an un-gated release (an agent killed between switch and gate), then
   Triton restarted: its ExecStartPre puts the link back on the gated release before Triton loads it;
5. the switch to push mode and back with playbooks/edge.yml (release_agent_enabled false, then true),
   each first in check mode (it reports the change and makes none): to push, the agent is stopped and
   disabled before the push release is switched, and it no longer moves the link; back to pull, push
   mode's recovery timer and Triton's drop-in are gone, the agent serves the channel's next release, and
   neither mode's release is pruned by the other.

It needs the converged molecule node and the scenario's signing key (MOLECULE_EPHEMERAL_DIRECTORY):
``cd roles/release_agent && molecule test``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from node_helpers import journal
from ra_node import (
    REPO,
    SERVICE,
    TritonAPI,
    agent_argv,
    changed_tasks,
    edge_play,
    host_name,
    info_release,
    metrics,
    node_address,
    options,
    recap,
    sample,
    unit_state,
    wait_for,
)
from tritonops.core.triton_http import Triton
from tritonops.release.publish import publish
from tritonops.release_format.golden_gate import golden_gate
from tritonops.release_format.signing import keygen

SAMPLE = REPO / "examples" / "model_repository"
ARRIVAL_TIMEOUT = 180.0
REFUSAL_TIMEOUT = 60.0
MARKED_MODEL = "postprocess"
MARKER = "tritonops_test_release"
TRITON_SERVICE = "tritonserver"


@dataclass
class Node:
    host: Any
    channel: str
    store_url: str
    link: str
    releases: str
    textfile: str
    triton: TritonAPI

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        return metrics(self.host, self.textfile)

    def explain(self) -> str:
        prom = self.host.file(f"{self.textfile}/tritonops_release.prom")
        return (journal(self.host, SERVICE, 30) + "\n--- textfile ---\n"
                + (prom.content_string if prom.exists else "(absent)"))

    def link_target(self) -> str:
        return os.path.basename(self.host.check_output(f"readlink {self.link}"))

    def current(self) -> str:
        return str(json.loads(self.host.file(f"{self.releases}/current.json").content_string)["current"])


def say(msg: str) -> None:
    print(f"\n[release_agent] {msg}", flush=True)  # noqa: T201 - the scenario's timings, shown with -s


@pytest.fixture(scope="module")
def signing_key() -> Path:
    eph = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    key = Path(eph or "/nonexistent") / "release-keys" / "release.key"
    if not key.is_file():
        pytest.skip("needs the molecule scenario's signing key (roles/release_agent: molecule test)")
    return key


@pytest.fixture(scope="module")
def node(host: Any) -> Node:
    opts = options(agent_argv(host))
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    environ = host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
    secret = next(line.split("=", 1)[1] for line in environ if line.startswith("TRITONOPS_ADMIN_SECRET="))
    port = urllib.parse.urlsplit(opts["triton"][0]).port or 80
    return Node(host=host, channel=opts["channel"][0], store_url=opts["store"][0], link=opts["link"][0],
                releases=opts["releases"][0], textfile=opts["textfile"][0],
                triton=TritonAPI(f"http://{node_address(host)}:{port}", opts["header"][0], secret))


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def store(node: Node, signing_key: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A static HTTP store at exactly the address and path the agent polls; yields the folder to publish to.

    In the scenario (its signing key exists) a store that cannot be served here fails the test: a skip
    would let the end-to-end check pass without running.
    """
    parts = urllib.parse.urlsplit(node.store_url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        pytest.fail(f"the node follows {node.store_url}: the scenario needs http://ADDRESS:PORT/PATH on this machine")
    root = tmp_path_factory.mktemp("store")
    folder = root / urllib.parse.unquote(parts.path).strip("/")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        server = ThreadingHTTPServer((parts.hostname, parts.port), functools.partial(_Quiet, directory=str(root)))
    except OSError as e:
        pytest.fail(f"cannot serve the node's store {node.store_url} from this machine: {e}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder
    server.shutdown()
    server.server_close()


def variant(tmp: Path, marker: str) -> Path:
    """The sample repository with one file changed: a parameter in postprocess's config."""
    repo = tmp / f"repo-{marker}"
    shutil.copytree(SAMPLE, repo)
    cfg = repo / MARKED_MODEL / "config.pbtxt"
    cfg.write_text(cfg.read_text() + f'parameters {{ key: "{MARKER}" value {{ string_value: "{marker}" }} }}\n')
    return repo


def wait_serving(node: Node, release: dict[str, Any], marker: str | None) -> float:
    """Seconds until the node serves ``release``: the gated-release metric names it, Triton has every
    model READY (and the marker parameter when given)."""
    def check() -> bool:
        if info_release(node.metrics(), "tritonops_release_info") != release["release"]:
            return False
        if not set(release["models"]) <= set(node.triton.ready_models()):
            return False
        return marker is None or node.triton.parameters(MARKED_MODEL).get(MARKER, {}).get("string_value") == marker

    _, seconds = wait_for(f"release {release['release']} serving", check, ARRIVAL_TIMEOUT, node.explain)
    return seconds


@pytest.fixture(scope="module")
def first(node: Node, store: Path, signing_key: Path) -> dict[str, Any]:
    out = publish(SAMPLE, to=str(store), channel=node.channel, signing_key=signing_key, target="cpu")
    out["seconds"] = wait_serving(node, out, None)
    say(f"release 1 {out['release']} ({len(out['models'])} models) serving {out['seconds']:.1f}s after publish")
    return out


@pytest.fixture(scope="module")
def second(node: Node, store: Path, signing_key: Path, first: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    before = sample(node.metrics(), "tritonops_release_downloaded_bytes_total") or 0.0
    repo = variant(tmp_path_factory.mktemp("second"), "two")
    out = publish(repo, to=str(store), channel=node.channel, signing_key=signing_key, target="cpu")
    out["seconds"] = wait_serving(node, out, "two")
    out["downloaded"] = (sample(node.metrics(), "tritonops_release_downloaded_bytes_total") or 0.0) - before
    out["changed_bytes"] = (repo / MARKED_MODEL / "config.pbtxt").stat().st_size
    say(f"release 2 {out['release']} (one file changed) serving {out['seconds']:.1f}s after publish")
    return out


@pytest.fixture(scope="module")
def foreign(node: Node, store: Path, second: dict[str, Any], signing_key: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("foreign")
    key, _ = keygen(tmp / "foreign.key", tmp / "foreign.pub")
    # A manifest signed by a foreign key behind a validly signed pointer: refused at verify, nothing fetched.
    out = publish(variant(tmp, "three"), to=str(store), channel=node.channel, signing_key=key, target="cpu",
                  channel_keys=[signing_key])

    def refused() -> bool:
        s = node.metrics()
        return (info_release(s, "tritonops_release_channel_info") == out["release"]
                and (sample(s, "tritonops_release_failures_total", step="verify") or 0) >= 1)

    _, out["seconds"] = wait_for(f"release {out['release']} (foreign key) refused", refused, REFUSAL_TIMEOUT,
                                 node.explain)
    say(f"release 3 {out['release']} (foreign key) refused {out['seconds']:.1f}s after publish")
    return out


# --- 1. the first release ---------------------------------------------------------------------

def test_first_release_arrives_without_ansible(node: Node, first: dict[str, Any]) -> None:
    assert info_release(node.metrics(), "tritonops_release_info") == first["release"]
    assert node.current() == first["release"]


def test_first_release_answers_its_golden_cases(node: Node, first: dict[str, Any]) -> None:
    triton = Triton(node.triton.url, node.triton.header, node.triton.secret)
    gate = golden_gate(triton, SAMPLE, sorted(first["models"]), timeout=30)
    assert gate["ok"] and gate["cases"] > 0, gate


# --- 2. a second release, one file changed ----------------------------------------------------

def test_second_release_arrives_and_triton_loaded_the_change(node: Node, second: dict[str, Any]) -> None:
    assert info_release(node.metrics(), "tritonops_release_info") == second["release"]
    assert node.link_target() == second["release"]
    assert node.current() == second["release"]
    assert node.triton.parameters(MARKED_MODEL)[MARKER]["string_value"] == "two"


def test_second_release_downloads_only_the_changed_file(second: dict[str, Any]) -> None:
    assert second["downloaded"] == second["changed_bytes"], second


def test_node_reports_itself_up_to_date(node: Node, second: dict[str, Any]) -> None:
    assert sample(node.metrics(), "tritonops_release_up_to_date", channel=node.channel) == 1


# --- 3. a release signed by a key the node does not trust ----------------------------------------

def test_foreign_signed_release_is_refused_at_verify(node: Node, second: dict[str, Any],
                                                     foreign: dict[str, Any]) -> None:
    s = node.metrics()
    assert (sample(s, "tritonops_release_failures_total", step="verify") or 0) >= 1
    assert info_release(s, "tritonops_release_info") == second["release"]
    assert "refused at verify" in journal(node.host, SERVICE, 200)


def test_refused_release_never_reaches_the_node(node: Node, second: dict[str, Any], foreign: dict[str, Any]) -> None:
    listing = node.host.check_output(f"ls -A {node.releases}").split()
    assert foreign["release"] not in listing and not [n for n in listing if n.startswith(".staging")], listing
    assert node.link_target() == second["release"]
    assert node.current() == second["release"]
    assert node.triton.parameters(MARKED_MODEL)[MARKER]["string_value"] == "two"


# --- 4. the deadman at Triton's start ---------------------------------------------------------

def test_deadman_puts_triton_back_on_the_gated_release(node: Node, first: dict[str, Any], second: dict[str, Any],
                                                       foreign: dict[str, Any]) -> None:
    host = node.host
    link_dir = os.path.dirname(node.link)
    rel = os.path.relpath(f"{node.releases}/{first['release']}", link_dir)
    host.check_output(f"systemctl stop {SERVICE}")
    try:
        # What an agent killed between the switch and the golden gate leaves behind.
        host.check_output(f"ln -sfn {rel} {link_dir}/.deadman-test && mv -Tf {link_dir}/.deadman-test {node.link}")
        assert node.link_target() == first["release"]
        start = time.monotonic()
        restarted = host.run(f"systemctl restart {TRITON_SERVICE}")
        assert restarted.rc == 0, restarted.stderr + journal(host, TRITON_SERVICE)
        assert node.link_target() == second["release"], journal(host, TRITON_SERVICE)
        assert f'"reverted": "{first["release"]}"' in journal(host, TRITON_SERVICE, 200)
        wait_serving(node, second, "two")
        say(f"deadman: Triton back on release {second['release']} after {time.monotonic() - start:.1f}s")
    finally:
        host.run(f"systemctl start {SERVICE}")
    assert host.service(SERVICE).is_running, journal(host, SERVICE)


# --- 5. push mode and back, with playbooks/edge.yml ------------------------------------------------

PUSH_TIMER = "tritonops-model-recover.timer"
PUSH_DROPIN = f"/etc/systemd/system/{TRITON_SERVICE}.service.d/tritonops-model-repository.conf"
AGENT_DROPIN = f"/etc/systemd/system/{TRITON_SERVICE}.service.d/{SERVICE}.conf"


def modes(node: Node) -> dict[str, Any]:
    """Each mode's units and Triton's drop-ins, and where the model link points."""
    host = node.host
    return {"agent": unit_state(host, SERVICE), "push timer": unit_state(host, PUSH_TIMER),
            "drop-ins": sorted(p for p in (PUSH_DROPIN, AGENT_DROPIN) if host.file(p).exists),
            "link": node.link_target()}


def test_switch_to_push_and_back(node: Node, store: Path, signing_key: Path, second: dict[str, Any],
                                 foreign: dict[str, Any], request: pytest.FixtureRequest,
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("switch")
    name = host_name(node.host)
    began = time.monotonic()
    pull = {"agent": ("enabled", "active"), "push timer": ("absent", "inactive"), "drop-ins": [AGENT_DROPIN],
            "link": second["release"]}
    assert modes(node) == pull
    push_repo = variant(tmp, "push")
    to_push = {"release_agent_enabled": False, "model_repository_source": "local",
               "model_repository_local_path": str(push_repo)}

    # To push, in check mode: the change is reported, nothing changes.
    res = edge_play(node.host, request.config, tmp / "to-push-check.log", to_push, "--check")
    assert res.returncode == 0, res.stdout[-6000:]
    assert {"tritonops.triton.release_agent : Stop and disable the release agent",
            "tritonops.triton.model_repository : Push the release tarball"} <= set(changed_tasks(res.stdout)), changed_tasks(res.stdout)
    assert modes(node) == pull

    start = time.monotonic()
    res = edge_play(node.host, request.config, tmp / "to-push.log", to_push)
    assert res.returncode == 0, res.stdout[-6000:]
    say(f"pull -> push: {time.monotonic() - start:.1f}s (edge.yml, {recap(res.stdout, name)['changed']} changed)")
    pushed = node.link_target()
    assert modes(node) == {"agent": ("absent", "inactive"), "push timer": ("enabled", "active"),
                           "drop-ins": [PUSH_DROPIN], "link": pushed}
    assert pushed != second["release"] and node.current() == pushed
    # The agent was stopped before the push release was switched.
    tasks = [line for line in res.stdout.splitlines() if line.startswith("TASK [")]
    stop = next(i for i, t in enumerate(tasks) if "Stop and disable the release agent" in t)
    assert stop < next(i for i, t in enumerate(tasks) if "Point the model repository at the release" in t), tasks
    # No agent left to point the link back at its channel's release and prune the pushed one (it polled every 2 s).
    time.sleep(6)
    assert (node.link_target(), node.current()) == (pushed, pushed)
    listing = node.host.check_output(f"ls -A {node.releases}").split()
    assert second["release"] in listing and pushed in listing, listing

    # Back to pull, in check mode first.
    res = edge_play(node.host, request.config, tmp / "to-pull-check.log", {"release_agent_enabled": True}, "--check")
    assert res.returncode == 0, res.stdout[-6000:]
    assert {"tritonops.triton.model_repository : Stop and disable push mode's recovery timer, then its service",
            "tritonops.triton.model_repository : Remove push mode's deadman (units, script, secret, agent copy, "
            "Triton's drop-in)"} <= set(changed_tasks(res.stdout)), changed_tasks(res.stdout)
    assert modes(node)["push timer"] == ("enabled", "active") and node.link_target() == pushed

    start = time.monotonic()
    res = edge_play(node.host, request.config, tmp / "to-pull.log", {"release_agent_enabled": True})
    assert res.returncode == 0, res.stdout[-6000:]
    say(f"push -> pull: {time.monotonic() - start:.1f}s (edge.yml, {recap(res.stdout, name)['changed']} changed)")
    # The channel still names the refused foreign-signed release: the agent keeps serving the pushed one.
    assert modes(node) == {**pull, "link": pushed}
    assert not node.host.file("/usr/local/lib/tritonops-model-repository").exists
    nxt = publish(variant(tmp, "after-push"), to=str(store), channel=node.channel, signing_key=signing_key,
                  target="cpu")
    wait_serving(node, nxt, "after-push")
    listing = node.host.check_output(f"ls -A {node.releases}").split()
    assert pushed in listing, listing
    assert modes(node) == {**pull, "link": nxt["release"]}
    say(f"switch test: {time.monotonic() - began:.1f}s in all (two checks, two switches, one release)")
