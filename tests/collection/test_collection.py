"""The collection tritonops.triton as a user gets it: built from the checkout with ``ansible-galaxy collection
build``, installed with ``ansible-galaxy collection install`` into an empty folder, and used from there.

- the tarball holds the roles, the playbooks, the plugins, meta/, changelogs/, LICENSE and requirements.txt,
  and nothing of the Python package, the tests, the stacks or the checkout's wrappers;
- ``ansible-test sanity`` passes on the installed copy (slow: about 20 s with ansible-test's tool venvs
  cached, 3 min on a first run, which installs them);
- a consumer playbook that names only FQCNs runs against a Podman node: the gpu_facts module and role
  agree, and a model release goes through the release module (status, install, activate in check mode
  with diff, activate, mark), the agent pushed from the controller by the module's action.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SAMPLE = REPO / "examples" / "model_repository"
NODE = "collection-1"
VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]


def _run(cmd: list[str], timeout: int = 600, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tarball built from the checkout, installed into an empty collections folder."""
    tmp = tmp_path_factory.mktemp("collection")
    res = _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp / "dist"), str(REPO)])
    assert res.returncode == 0, res.stdout + res.stderr
    tarball = tmp / "dist" / f"tritonops-triton-{VERSION}.tar.gz"
    assert tarball.is_file(), res.stdout
    # --force: this venv's Ansible also sees the checkout (make venv links it); install the tarball anyway.
    res = _run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "--no-deps",
                "-p", str(tmp / "collections"), str(tarball)])
    assert res.returncode == 0, res.stdout + res.stderr
    root = tmp / "collections" / "ansible_collections" / "tritonops" / "triton"
    assert (root / "MANIFEST.json").is_file(), res.stdout
    return {"tmp": tmp, "tarball": tarball, "collections": tmp / "collections", "root": root}


def _env(installed: dict[str, Path], **extra: str) -> dict[str, str]:
    """Ansible that finds tritonops.triton in the install folder first (before the checkout's link)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return env | {"ANSIBLE_COLLECTIONS_PATH": str(installed["collections"]), "ANSIBLE_FORCE_COLOR": "0",
                  "ANSIBLE_HOST_KEY_CHECKING": "0"} | extra


@pytest.mark.integration
def test_the_tarball_holds_the_collection_and_nothing_else(installed: dict[str, Path]) -> None:
    with tarfile.open(installed["tarball"]) as tf:
        names = set(tf.getnames())
    for want in ("MANIFEST.json", "meta/runtime.yml", "playbooks/edge.yml", "playbooks/baremetal.yml",
                 "playbooks/drift_probe.yml", "plugins/modules/release.py", "plugins/modules/triton_model.py",
                 "plugins/modules/gpu_facts.py", "plugins/action/release.py", "plugins/module_utils/gpu.py",
                 "plugins/filter/systemd.py", "plugins/filter/systemd_quote.yml",
                 "roles/model_repository/tasks/main.yml", "roles/gpu_facts/templates/gpu.fact.j2",
                 "tests/sanity/ignore-2.19.txt", "LICENSE", "requirements.txt", "meta/execution-environment.yml",
                 "changelogs/config.yaml", "changelogs/changelog.yaml"):
        assert want in names, want
    tops = {n.split("/")[0] for n in names}
    readme = yaml.safe_load((REPO / "galaxy.yml").read_text())["readme"]  # the Galaxy page
    assert readme in names, readme
    assert tops <= {"MANIFEST.json", "FILES.json", readme, "LICENSE", "requirements.txt", "meta", "playbooks",
                    "plugins", "roles", "tests", "changelogs"}, tops
    assert not [n for n in names if n.startswith("tests/") and not n.startswith("tests/sanity")]
    assert not [n for n in names if "/molecule/" in n or n.endswith((".env.yml", ".pyc"))]


def _ansible_test_home() -> Path:
    """A HOME for ansible-test under .cache/ (its tool venvs persist there between runs) whose pip
    bootstrap script is the offline stand-in, get_pip_offline.py, for the pip version ansible-test pins."""
    import ansible_test

    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    found = re.search(r"\bpip='([0-9.]+)'", source)
    assert found, "ansible-test no longer pins pip in get_venv_packages: update _ansible_test_home"
    home = REPO / ".cache" / "ansible-test-home"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("get_pip_offline.py"),
                    cache / f"get_pip_{found.group(1).replace('.', '_')}.py")
    return home


@pytest.mark.integration
@pytest.mark.slow
def test_ansible_test_sanity_passes_on_the_installed_collection(installed: dict[str, Path]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    env["HOME"] = str(_ansible_test_home())
    res = _run([str(BIN / "ansible-test"), "sanity", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}"],
               timeout=1200, cwd=installed["root"], env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert out.count('Running sanity test "') >= 20, out[-3000:]


# --- a consumer project against a Podman node -------------------------------------------------------

@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    if shutil.which("podman") is None or os.geteuid() != 0:
        pytest.skip("needs root and Podman (make apt installs it)")
    from devkit.hosts.images import ImageSpec, build_image
    from devkit.hosts.nodes import node_down, node_up

    os.environ.setdefault("CONTAINERS_CONF", str(REPO / "tools" / "devkit" / "hosts" / "containers.conf"))
    build_image(ImageSpec(arch="amd64"))
    node_down(NODE)
    node_up(NODE)
    try:
        yield NODE
    finally:
        node_down(NODE)


CONSUMER_PLAY = """
- name: A project that uses the installed collection by FQCN only
  hosts: node
  gather_facts: false
  vars:
    rel: "{{ lookup('ansible.builtin.file', release_json) | from_json }}"
    link: /srv/triton/models
    releases: /srv/triton/releases
  tasks:
    - name: GPU facts (module)
      tritonops.triton.gpu_facts:
      register: gpu_module

    - name: GPU facts (role; its local fact is the same probe)
      ansible.builtin.include_role:
        name: tritonops.triton.gpu_facts

    - name: Show both
      ansible.builtin.debug:
        msg: {module: "{{ ansible_facts.gpu }}", role: "{{ ansible_local.gpu }}"}

    - name: Create the releases folder
      ansible.builtin.file:
        path: "{{ releases }}"
        state: directory
        mode: "0750"

    - name: Status before
      tritonops.triton.release: &status
        command: status
        agent_src: "{{ agent }}"
        link: "{{ link }}"
        releases: "{{ releases }}"
        release: "{{ rel.release }}"
        digest: "{{ rel.digest }}"

    - name: Push the release tarball
      ansible.builtin.copy:
        src: "{{ rel.tarball }}"
        dest: "{{ releases }}/.staging-{{ rel.release }}.tar"
        mode: "0600"

    - name: Install (check mode)
      tritonops.triton.release: &install
        command: install
        agent_src: "{{ agent }}"
        link: "{{ link }}"
        releases: "{{ releases }}"
        staging: "{{ releases }}/.staging-{{ rel.release }}"
        tarball: "{{ releases }}/.staging-{{ rel.release }}.tar"
        release: "{{ rel.release }}"
        digest: "{{ rel.digest }}"
      check_mode: true

    - name: Install
      tritonops.triton.release: *install

    - name: Activate (check mode, diff)
      tritonops.triton.release: &activate
        command: activate
        agent_src: "{{ agent }}"
        link: "{{ link }}"
        releases: "{{ releases }}"
        release: "{{ rel.release }}"
      check_mode: true
      diff: true

    - name: Status after the check
      tritonops.triton.release: *status

    - name: Activate
      tritonops.triton.release: *activate
      diff: true

    - name: Activate again
      tritonops.triton.release: *activate

    - name: Mark
      tritonops.triton.release:
        command: mark
        agent_src: "{{ agent }}"
        link: "{{ link }}"
        releases: "{{ releases }}"
        release: "{{ rel.release }}"

    - name: Status at the end
      tritonops.triton.release: *status
"""


@pytest.mark.host
@pytest.mark.slow
def test_a_consumer_playbook_with_fqcns_only_runs_against_a_podman_node(installed: dict[str, Path],
                                                                        node: str) -> None:
    tmp = installed["tmp"]
    env = _env(installed)
    # The collection Ansible uses is the installed copy, not the checkout.
    res = _run([str(BIN / "ansible-doc"), "--json", "tritonops.triton.release"], env=env, cwd=tmp)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["tritonops.triton.release"]["doc"]["filename"].startswith(
        str(installed["collections"])), res.stdout[:500]
    # The controller side (the tritonops package, as the roles use it): the agent and a staged release.
    agent = tmp / "agent" / "tritonops-agent.pyz"
    res = _run([sys.executable, "-m", "tritonops.agent_bundle", str(agent)])
    assert res.returncode == 0, res.stderr
    res = _run([sys.executable, "-m", "tritonops.release.push", "prepare", str(SAMPLE), "--cache",
                str(tmp / "stage"), "--target", "cpu", "--version", "r1"], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp / "release.json").write_text(res.stdout)
    project = tmp / "consumer"
    project.mkdir()
    (project / "play.yml").write_text(CONSUMER_PLAY)
    (project / "hosts.yml").write_text(json.dumps({"node": {"hosts": {node: {
        "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    res = _run([str(BIN / "ansible-playbook"), "-i", "hosts.yml", "play.yml", "-e", f"agent={agent}",
                "-e", f"release_json={tmp / 'release.json'}"],
               env=_env(installed, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"), cwd=project, timeout=600)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    doc = json.loads(res.stdout)
    r = {t["task"]["name"]: t["hosts"][node] for p in doc["plays"] for t in p["tasks"] if node in t["hosts"]}

    both = r["Show both"]["msg"]
    assert both["module"] == both["role"] and both["module"]["platform"] == "cpu", both
    before = r["Status before"]
    assert (before["changed"], before["active"], before["agent"]["release_present"]) == (False, None, False), before
    assert r["Install (check mode)"]["changed"] is True
    assert r["Install"]["changed"] is True and r["Install"]["agent"]["release"] == "r1", r["Install"]
    check = r["Activate (check mode, diff)"]
    assert check["changed"] is True and check["active"] == "r1", check
    assert check["diff"]["before"]["active"] is None and check["diff"]["after"]["active"] == "r1", check["diff"]
    assert r["Status after the check"]["active"] is None  # check mode changed nothing
    assert r["Activate"]["changed"] is True and r["Activate"]["diff"]["after"]["active"] == "r1"
    assert r["Activate again"]["changed"] is False
    assert r["Mark"]["changed"] is True
    end = r["Status at the end"]
    assert (end["active"], end["current"], end["agent"]["releases"]) == ("r1", "r1", ["r1"]), end


# --- triton_model against a real Triton (explicit mode, repository API behind the admin header) ---------

SECRET = "collection-test-admin-secret-5b1f"
MODEL_PLAY = """
- name: triton_model against a real Triton
  hosts: localhost
  gather_facts: false
  module_defaults:
    tritonops.triton.triton_model:
      url: "{{ triton_url }}"
      admin_secret: "{{ admin_secret }}"
  tasks:
    - name: Index
      tritonops.triton.triton_model:
    - name: Load (check mode)
      tritonops.triton.triton_model: {name: mlp}
      check_mode: true
      diff: true
    - name: Index after the check
      tritonops.triton.triton_model:
    - name: Load
      tritonops.triton.triton_model: {name: mlp}
    - name: Load again
      tritonops.triton.triton_model: {name: mlp}
    - name: Reload
      tritonops.triton.triton_model: {name: mlp, reload: true}
    - name: Unload (check mode)
      tritonops.triton.triton_model: {name: mlp, state: unloaded}
      check_mode: true
    - name: Unload
      tritonops.triton.triton_model: {name: mlp, state: unloaded}
      diff: true
    - name: Load a model the repository does not have
      tritonops.triton.triton_model: {name: no_such_model}
      ignore_errors: true
    - name: Load with a wrong secret
      tritonops.triton.triton_model: {name: mlp, admin_secret: not-the-secret}
      ignore_errors: true
"""


@pytest.mark.integration
@pytest.mark.slow
def test_triton_model_loads_and_unloads_through_the_repository_api(installed: dict[str, Path]) -> None:
    from tritonops.triton import server

    tmp = installed["tmp"] / "triton-model"
    tmp.mkdir()
    shutil.copytree(SAMPLE, tmp / "models", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "play.yml").write_text(MODEL_PLAY)
    (tmp / "vars.json").write_text(json.dumps({"admin_secret": SECRET}))
    (tmp / "vars.json").chmod(0o600)
    srv = server.start(tmp / "models", model_control_mode="explicit", workdir=tmp / "w",
                       extra_args=[f"--http-restricted-api=model-repository:triton-admin-key={SECRET}"])
    try:
        env = _env(installed, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        res = _run([str(BIN / "ansible-playbook"), "-c", "local", "-i", "localhost,", "play.yml",
                    "-e", "@vars.json", "-e", f"triton_url=http://{srv.http_url}"], env=env, cwd=tmp)
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
        ready = [e["name"] for e in srv_index(srv) if e.get("state") == "READY"]
    finally:
        srv.stop()
    assert SECRET not in res.stdout + res.stderr
    r = {t["task"]["name"]: t["hosts"]["localhost"] for p in json.loads(res.stdout)["plays"] for t in p["tasks"]}
    assert "mlp" in [e["name"] for e in r["Index"]["index"]] and r["Index"]["changed"] is False
    check = r["Load (check mode)"]
    assert (check["changed"], check["state"]) == (True, "READY"), check
    assert check["diff"]["before"]["mlp"] != "READY" and check["diff"]["after"]["mlp"] == "READY"
    assert "READY" not in [e.get("state") for e in r["Index after the check"]["index"] if e["name"] == "mlp"]
    assert r["Load"]["changed"] is True and r["Load again"]["changed"] is False and r["Reload"]["changed"] is True
    assert r["Unload (check mode)"]["changed"] is True
    assert r["Unload"]["changed"] is True and r["Unload"]["diff"]["before"]["mlp"] == "READY"
    assert "mlp" not in ready  # unloaded for real; the check-mode unload before it changed nothing
    missing = r["Load a model the repository does not have"]
    # Triton's own message (from the error body), with the URL it answered on.
    assert missing["failed"] and "failed to load 'no_such_model'" in missing["msg"], missing
    assert f"{srv.http_url}/v2/repository/models/no_such_model/load" in missing["msg"], missing
    wrong = r["Load with a wrong secret"]
    assert wrong["failed"] and wrong["status"] in (400, 401, 403) and "triton-admin-key" in wrong["msg"], wrong


def srv_index(srv: Any) -> list[dict[str, Any]]:
    """Triton's repository index, read directly (not through the module)."""
    import urllib.request

    req = urllib.request.Request(f"http://{srv.http_url}/v2/repository/index", data=b"{}", method="POST",
                                 headers={"triton-admin-key": SECRET})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return list(json.loads(resp.read()))
