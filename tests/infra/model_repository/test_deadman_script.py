"""The deadman timer's script (roles/model_repository/templates/recover-ungated.sh.j2), rendered by Ansible
from the role's template and run on this machine against a real tritonserver (the venv's wheel, explicit
mode, the repository API behind the admin header) and the real release agent zipapp.

What the molecule node cannot show without breaking its Triton: every branch after the revert.

- the reload passes: the release pointed back at is reloaded in the running Triton, gated, and recorded
  served; Triton is not restarted (``systemctl`` is never called);
- the gated release fails its gate with Triton live (a real refusal): exit 1 and ``REFUSED`` on stderr,
  no restart; the next look does not reload the same link again (no loop) until the refusal file is
  removed, and then it gates again;
- Triton does not answer: the look that reverted the link falls back to restarting Triton; the next
  look (nothing reverted) leaves it alone and tries again later, exit 0;
- model control mode poll (and none): no reload; Triton restarts after a revert, and a later look, once
  Triton started after the link last moved, gates what Triton serves without loading (``--no-load``) and
  records it served; a look while Triton has not restarted gates nothing.

systemd does not run here: ``systemctl`` is a stand-in on PATH that records its arguments and answers
``show`` with ``$TRITON_STARTED`` (Triton's start time; the molecule node runs the real unit:
tests/infra/model_repository/test_deadman.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tritonops import agent_bundle as bundle
from tritonops.agent import releases
from tritonops.core.triton_http import Triton
from tritonops.release import push as rel
from tritonops.triton import server

# A real tritonserver (about 20 s to start with the sample) and Ansible renders: integration, slow.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "model_repository"
SAMPLE = REPO / "examples" / "model_repository"
SECRET = "deadman-script-test-secret"
HEADER = "triton-admin-key"
GRACE = 60
MARKED = "postprocess"


def render(tmp: Path, overrides: dict[str, Any]) -> Path:
    """The role's script, rendered by Ansible with the role's defaults and vars (overrides on top)."""
    play = tmp / "render.yml"
    out = tmp / "recover-ungated"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
        "tasks": [{"ansible.builtin.template": {"src": str(ROLE / "templates" / "recover-ungated.sh.j2"),
                                                 "dest": str(out), "mode": "0755"}}]}]))
    (tmp / "extra.json").write_text(json.dumps({"ansible_python": {"executable": sys.executable}, **overrides}))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ANSIBLE_LOCALHOST_WARNING": "false",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false", "HOME": str(tmp)}
    run = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "localhost,", "-e",
                          f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp / 'extra.json'}", str(play)],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp)
    assert run.returncode == 0 and out.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    return out


@dataclass
class Node:
    tmp: Path
    link: Path
    releases: Path
    install: Path
    srv: server.TritonServer | None = None
    script: Path | None = None

    def switch_ungated(self) -> None:
        """What a controller that died before the gate leaves, switched long enough ago to be reverted."""
        releases.activate(self.link, self.releases, "ungated", touch=[MARKED])
        assert releases.active_release(self.link, self.releases) == "ungated"
        old = time.time() - GRACE - 60
        os.utime(self.link, (old, old), follow_symlinks=False)

    def run(self, script: Path | None = None, triton_started: str = "") -> subprocess.CompletedProcess[str]:
        """One look of the timer: the script as its unit runs it (secret from the environment)."""
        env = {**os.environ, "PATH": f"{self.tmp / 'bin'}:{os.environ['PATH']}",
               "TRITONOPS_ADMIN_SECRET": SECRET, "RUNTIME_DIRECTORY": str(self.tmp / "run"),
               "SYSTEMCTL_LOG": str(self.tmp / "systemctl.log"), "TRITON_STARTED": triton_started}
        return subprocess.run(["/bin/sh", str(script or self.script)], capture_output=True, text=True, env=env,
                              timeout=600)

    def restarts(self) -> list[str]:
        log = self.tmp / "systemctl.log"
        return log.read_text().splitlines() if log.exists() else []

    def served(self) -> bool:
        return releases.served(self.link, self.releases)


def _install(tmp: Path, rdir: Path, name: str, source: Path) -> None:
    staged = rel.prepare(source, tmp / f"staged-{name}", "cpu", version=name)
    shutil.copytree(staged["path"], rdir / f".staging-{name}")
    releases.install(rdir, rdir / f".staging-{name}", name)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    tmp = tmp_path_factory.mktemp("deadman-script")
    rdir, link, install = tmp / "node" / "releases", tmp / "node" / "models", tmp / "lib"
    rdir.mkdir(parents=True)
    bundle.build(install / "tritonops-agent.pyz")
    (tmp / "bin").mkdir()
    (tmp / "run").mkdir(mode=0o700)
    stub = tmp / "bin" / "systemctl"
    stub.write_text('#!/bin/sh\n[ "$1" = show ] && { printf \'%s\\n\' "$TRITON_STARTED"; exit 0; }\n'
                    'printf \'%s\\n\' "$*" >> "$SYSTEMCTL_LOG"\n')
    stub.chmod(0o755)
    _install(tmp, rdir, "gated", SAMPLE)
    ungated = tmp / "ungated-src"
    shutil.copytree(SAMPLE, ungated, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = ungated / MARKED / "config.pbtxt"
    cfg.write_text(cfg.read_text() + 'parameters { key: "deadman_test" value { string_value: "ungated" } }\n')
    _install(tmp, rdir, "ungated", ungated)
    releases.activate(link, rdir, "gated")
    releases.mark(rdir, "gated", link=link)
    n = Node(tmp, link, rdir, install)
    n.srv = server.start(link, model_control_mode="explicit", load_models=["*"],
                         extra_args=[f"--http-restricted-api=model-repository:{HEADER}={SECRET}"],
                         workdir=tmp / "triton")
    try:
        n.script = render(tmp, {
            "model_repository_link": str(link), "model_repository_releases_dir": str(rdir),
            "model_repository_install_dir": str(install), "model_repository_http_port": n.srv.http_port,
            "model_repository_admin_header": HEADER, "model_repository_model_control_mode": "explicit",
            "model_repository_recover_after": GRACE, "model_repository_golden_timeout": 60,
            "model_repository_load_timeout": 120})
        yield n
    finally:
        if n.srv.process.poll() is None:
            n.srv.stop()


def _marker(node: Node) -> str | None:
    """The marker parameter of the model Triton serves (None: the gated release's config)."""
    assert node.srv is not None
    with urllib.request.urlopen(f"http://{node.srv.http_url}/v2/models/{MARKED}/config", timeout=10) as r:  # noqa: S310
        params = json.load(r).get("parameters") or {}
    value = params.get("deadman_test", {}).get("string_value")
    return str(value) if value is not None else None


def test_script_reloads_and_gates_without_restarting_triton(node: Node) -> None:
    node.switch_ungated()
    assert node.srv is not None
    # The dead controller had loaded the un-gated model: Triton serves it.
    Triton(f"http://{node.srv.http_url}", HEADER, SECRET).load(MARKED, timeout=120)
    assert _marker(node) == "ungated" and not node.served()
    out = node.run()
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"reverted": "ungated"' in out.stdout and '"served": {' in out.stdout, out.stdout
    assert releases.active_release(node.link, node.releases) == "gated"
    assert node.served() and _marker(node) is None  # reloaded in place, gated, recorded
    assert node.restarts() == [], "Triton was restarted"
    # A look with nothing to do changes nothing.
    again = node.run()
    assert again.returncode == 0 and node.served() and node.restarts() == [], again.stdout + again.stderr


def test_script_refuses_a_gated_release_that_fails_its_gate_once(node: Node) -> None:
    golden = node.releases / "gated" / MARKED / "golden.json"
    kept = golden.read_bytes()
    doc = json.loads(kept)
    doc["cases"][0]["outputs"]["label"]["data"] = [0]  # the gated release no longer answers what it says
    golden.chmod(0o644)
    golden.write_text(json.dumps(doc))
    refused = node.tmp / "run" / "refused"
    try:
        node.switch_ungated()
        out = node.run()
        assert out.returncode == 1, out.stdout + out.stderr
        assert "REFUSED: the gated release failed its golden gate" in out.stderr, out.stderr
        assert "golden case 'batch1'" in out.stdout, out.stdout
        assert releases.active_release(node.link, node.releases) == "gated" and not node.served()
        assert node.restarts() == [] and refused.is_file()
        # The next look does not reload the same link again: the model files keep their time.
        model = node.releases / "gated" / MARKED / "config.pbtxt"
        before = model.stat().st_mtime_ns
        out = node.run()
        assert out.returncode == 1 and "not reloaded again until the link moves" in out.stderr, out.stderr
        assert model.stat().st_mtime_ns == before and node.restarts() == [] and not node.served()
    finally:
        golden.write_bytes(kept)
    # Once the refusal is cleared (the operator fixed the cause), the next look gates it again.
    refused.unlink()
    out = node.run()
    assert out.returncode == 0 and node.served() and node.restarts() == [], out.stdout + out.stderr


def test_script_restarts_triton_only_when_it_does_not_answer_after_a_revert(node: Node) -> None:
    node.switch_ungated()
    assert node.srv is not None
    node.srv.stop()
    out = node.run()
    assert out.returncode == 0, out.stdout + out.stderr
    assert releases.active_release(node.link, node.releases) == "gated" and not node.served()
    assert node.restarts() == ["restart --no-block tritonserver.service"], out.stderr
    # Nothing reverted in this look: no second restart, the next look tries again.
    out = node.run()
    assert out.returncode == 0 and "the next look tries again" in out.stderr, out.stdout + out.stderr
    assert node.restarts() == ["restart --no-block tritonserver.service"] and not node.served()


@pytest.mark.parametrize("mode", ["poll", "none"])
def test_poll_and_none_mode_scripts_restart_then_gate_without_loading(node: Node, tmp_path: Path, mode: str) -> None:
    assert node.srv is not None
    if node.srv.process.poll() is not None:  # stopped by the test before: Triton runs again, on the gated release
        node.srv = server.start(node.link, model_control_mode="explicit", load_models=["*"],
                                extra_args=[f"--http-restricted-api=model-repository:{HEADER}={SECRET}"],
                                workdir=node.tmp / f"triton-{mode}")
    script = render(tmp_path, {
        "model_repository_link": str(node.link), "model_repository_releases_dir": str(node.releases),
        "model_repository_install_dir": str(node.install), "model_repository_model_control_mode": mode,
        "model_repository_http_port": node.srv.http_port, "model_repository_admin_header": HEADER,
        "model_repository_recover_after": GRACE, "model_repository_golden_timeout": 60})
    assert "--no-load" in script.read_text()
    log = node.tmp / "systemctl.log"
    log.unlink(missing_ok=True)
    node.switch_ungated()
    out = node.run(script)
    assert out.returncode == 0, out.stdout + out.stderr
    assert releases.active_release(node.link, node.releases) == "gated" and not node.served()
    assert node.restarts() == ["restart --no-block tritonserver.service"]
    # Triton has not restarted since the revert moved the link: nothing is gated, and nothing loaded.
    model = node.releases / "gated" / MARKED / "config.pbtxt"
    before = model.stat().st_mtime_ns
    out = node.run(script, triton_started=time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(time.time() - 3600)))
    assert out.returncode == 0 and "has not restarted since the link last moved" in out.stderr, out.stdout + out.stderr
    assert not node.served()
    # Once Triton runs on the link (started after it moved), the look gates what it serves: recorded served,
    # no load (the model files keep their time), no second restart.
    time.sleep(1.1)
    out = node.run(script, triton_started=time.strftime("%a %Y-%m-%d %H:%M:%S %Z"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"served": {' in out.stdout and '"reloaded": []' in out.stdout, out.stdout
    assert node.served() and model.stat().st_mtime_ns == before
    assert node.restarts() == ["restart --no-block tritonserver.service"]
    # Served: the next look does nothing more.
    again = node.run(script, triton_started=time.strftime("%a %Y-%m-%d %H:%M:%S %Z"))
    assert again.returncode == 0 and node.served() and again.stdout.count('"changed"') == 1, again.stdout + again.stderr
