"""Rollout under load: publish a new release, then broken ones, while requests keep flowing.

A background thread sends a bounded stream of inferences (``RATE`` per second, HTTP, to the mlp model
and the pipeline ensemble) to the node and counts every failed request. Meanwhile the test runs the
model_repository role (ansible-playbook) against the same node:

1. a new release (mlp with two instances and a changed model.py, golden-compatible): the play
   succeeds, the node serves the new release, zero failed requests;
2. a release whose mlp raises in ``initialize``: the load fails, the play fails naming the model,
   the node is rolled back and still serves the previous release, zero failed requests;
3. a release whose mlp answers wrongly: it loads, the golden gate fails, the node is rolled back to
   the previous release (the old answers again), zero failed requests;
4. other content under the release id the node serves: the agent refuses to install it, the play
   fails naming the release folder before anything is switched.

It needs a node where the role has converged: molecule's verify step provides one (the inventory in
MOLECULE_INVENTORY_FILE), or give one with ``--hosts=ansible://NODE --ansible-inventory=INVENTORY``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from devkit.hosts.podman import CONTAINERS_CONF
from mr_nodeinfo import REPO, host_name, node_address, node_vars, repository_api
from node_helpers import inventory_for_playbook
from tritonops.core.names import MANIFEST_FILE, STATE_FILE
from tritonops.model_repo.golden import Golden
from tritonops.release import push as rel

SAMPLE = REPO / "examples" / "model_repository"
RATE = 20.0  # requests per second, split between mlp and pipeline
PLAY_TIMEOUT = 900


class Load:
    """A bounded request stream in a thread: counts successes, failures and wrong answers."""

    def __init__(self, url: str, rate: float = RATE) -> None:
        self.url, self.period = url, 1.0 / rate
        self.ok = 0
        self.failed: list[str] = []
        self.stop = threading.Event()
        cases = {m: Golden.load(SAMPLE / m / "golden.json").cases[0] for m in ("mlp", "pipeline")}
        self.requests = []
        for model, case in cases.items():
            inputs = []
            for name, tensor in case.inputs.items():
                arr = tensor.array()
                inp = httpclient.InferInput(name, list(arr.shape), tensor.datatype)
                inp.set_data_from_numpy(arr)
                inputs.append(inp)
            self.requests.append((model, inputs, list(case.outputs)[0]))
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(self.url, network_timeout=30.0, connection_timeout=10.0)
        i, deadline = 0, time.monotonic() + PLAY_TIMEOUT * 3
        nxt = time.monotonic()
        while not self.stop.is_set() and time.monotonic() < deadline:
            model, inputs, output = self.requests[i % len(self.requests)]
            i += 1
            try:
                result = client.infer(model, inputs)
                if result.as_numpy(output) is None:
                    raise RuntimeError(f"{model}: no {output} in the response")
                self.ok += 1
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                self.failed.append(f"{time.strftime('%T')} {model}: {type(e).__name__}: {str(e)[:200]}")
            nxt += self.period
            time.sleep(max(0.0, nxt - time.monotonic()))

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def _inventory(config: Any) -> str:
    inventory = inventory_for_playbook(config)
    if not inventory:
        pytest.skip("needs a converged node: run through molecule (roles/model_repository) or give "
                    "--hosts=ansible://NODE --ansible-inventory=INVENTORY")
    return inventory


def publish(host: Any, config: Any, repository: Path, tmp: Path,
            extra: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the model_repository role against the node with ``repository`` as its local source."""
    playbook = tmp / "publish.yml"
    playbook.write_text(
        "- hosts: all\n  become: true\n  gather_facts: true\n  roles: [model_repository]\n"
    )
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO / "roles"), ANSIBLE_FORCE_COLOR="0",
               CONTAINERS_CONF=str(CONTAINERS_CONF),
               ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
    cmd = [str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "ansible-playbook"), str(playbook),
           "-i", _inventory(config), "--limit", host_name(host),
           "-e", json.dumps({"model_repository_local_path": str(repository), "model_repository_source": "local",
                             **(extra or {})})]
    if not Path(cmd[0]).exists():
        cmd[0] = "ansible-playbook"
    log = tmp / f"publish-{repository.name}.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            rc = proc.wait(timeout=PLAY_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"ansible-playbook ran past {PLAY_TIMEOUT}s; log {log}:\n{log.read_text()[-4000:]}")
    print(f"  ansible-playbook log: {log}")
    return subprocess.CompletedProcess(cmd, rc, log.read_text(), "")


def variant(tmp: Path, name: str, base: Path, edit: dict[str, tuple[str, str]]) -> Path:
    """A copy of ``base`` with text replacements per file (each replacement must apply)."""
    out = tmp / name
    shutil.copytree(base, out, ignore=shutil.ignore_patterns("__pycache__", MANIFEST_FILE))
    for rel_path, (old, new) in edit.items():
        f = out / rel_path
        text = f.read_text()
        assert old in text, f"{f}: {old!r} not found"
        f.write_text(text.replace(old, new, 1))
    return out


def state(host: Any, mr: dict[str, Any]) -> tuple[str, str]:
    """(release the symlink points at, release marked current)."""
    active = Path(host.file(mr["link"]).linked_to).name
    current = json.loads(host.file(f"{mr['releases']}/{STATE_FILE}").content_string)["current"]
    return active, current


def mlp_instances(host: Any, mr: dict[str, Any]) -> int:
    cfg = repository_api(host, mr, "index")  # index first: proves the API answers with the header
    assert any(m["name"] == "mlp" and m.get("state") == "READY" for m in cfg), cfg
    code = (
        "import json, urllib.request\n"
        f"req = urllib.request.Request('http://127.0.0.1:{mr['port']}/v2/models/mlp/config',"
        f" headers={{{mr['header']!r}: {mr['secret']!r}}})\n"
        "print(json.load(urllib.request.urlopen(req, timeout=30))['instance_group'][0]['count'])\n"
    )
    return int(host.check_output("python3 -c " + shlex.quote(code)))


@pytest.fixture(scope="module")
def mr(host: Any, request: pytest.FixtureRequest) -> dict[str, Any]:
    _inventory(request.config)
    return node_vars(host, request.config)


@pytest.fixture(scope="module")
def url(host: Any, mr: dict[str, Any]) -> str:
    return f"{node_address(host)}:{mr['port']}"


def test_rollout_under_load(host: Any, mr: dict[str, Any], url: str, request: pytest.FixtureRequest,
                            tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("rollout")
    before, _ = state(host, mr)
    good = variant(tmp, "v2", SAMPLE, {
        "mlp/config.pbtxt": ("count: 1", "count: 2"),
        # A unique line, so every run publishes a new release (re-runnable against a long-lived node).
        "mlp/1/model.py": ("class TritonPythonModel:", f"# rollout test {time.time_ns()}\nclass TritonPythonModel:"),
    })
    v2 = rel.prepare(good, tmp / "staged", "cpu")["release"]
    assert v2 != before

    # 1. a good release under load
    with Load(url) as load:
        time.sleep(2)
        start = time.monotonic()
        res = publish(host, request.config, good, tmp)
        publish_s = time.monotonic() - start
        time.sleep(2)
    print(f"\nnew release {v2}: published in {publish_s:.1f}s, {load.ok} requests ok, {len(load.failed)} failed")
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert load.failed == [], load.failed[:10]
    assert load.ok > 0
    assert state(host, mr) == (v2, v2)
    assert mlp_instances(host, mr) == 2
    assert rel.golden(f"http://{url}", good, timeout=30)["ok"]

    # 2. a release whose model cannot initialise: the load fails, rolled back, still serving v2
    broken_init = variant(tmp, "broken-init", good, {
        "mlp/1/model.py": ("    def initialize(self, args):\n",
                           "    def initialize(self, args):\n"
                           "        raise RuntimeError('broken release: initialize fails on purpose')\n"),
    })
    # 3. a release that loads but answers wrongly: the golden gate fails, rolled back
    broken_golden = variant(tmp, "broken-golden", good, {
        "mlp/1/model.py": ('{"features": np.concatenate(arrays)})[0]', '{"features": np.concatenate(arrays)})[0] * 2.0'),
    })
    for name, repo, reason in (("broken-init", broken_init, "broken release: initialize fails on purpose"),
                               ("broken-golden", broken_golden, "golden")):
        with Load(url) as load:
            time.sleep(2)
            res = publish(host, request.config, repo, tmp)
            time.sleep(2)
        out = res.stdout + res.stderr
        print(f"{name}: play rc {res.returncode}, {load.ok} requests ok, {len(load.failed)} failed")
        assert res.returncode != 0, out[-4000:]
        assert "Rolled back" in out and reason in out, out[-6000:]
        assert load.failed == [], load.failed[:10]
        assert load.ok > 0
        assert state(host, mr) == (v2, v2)
        assert mlp_instances(host, mr) == 2
        assert rel.golden(f"http://{url}", good, timeout=30)["ok"], f"{name}: v2 no longer answers as before"

    # 4. other content under v2's release id (staged by another controller, its own cache): the node's agent
    #    refuses the install, the play fails naming the release folder, nothing is switched
    reused = variant(tmp, "reused-id", good, {"mlp/golden.json": ("{", "{ ")})
    res = publish(host, request.config, reused, tmp, {"model_repository_version": v2,
                                                       "model_repository_controller_cache": str(tmp / "other")})
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    assert f"{mr['releases']}/{v2}" in out and "already installed with other content" in out, out[-6000:]
    assert "Point the model repository at the release" not in out, out[-6000:]
    assert state(host, mr) == (v2, v2)
    assert rel.golden(f"http://{url}", good, timeout=30)["ok"]


def test_outputs_unchanged_after_rollbacks(url: str) -> None:
    """The old answers are back: mlp's golden case matches exactly what the sample release gives."""
    case = Golden.load(SAMPLE / "mlp" / "golden.json").cases[0]
    arr = case.inputs["features"].array()
    inp = httpclient.InferInput("features", list(arr.shape), "FP32")
    inp.set_data_from_numpy(arr)
    got = httpclient.InferenceServerClient(url).infer("mlp", [inp]).as_numpy("logits")
    np.testing.assert_allclose(got, case.outputs["logits"].array(), rtol=1e-4, atol=1e-5)


def test_model_control_mode_none_switch_is_not_reverted_by_the_deadman(host: Any, mr: dict[str, Any], url: str,
                                                                        request: pytest.FixtureRequest,
                                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Mode none: the role restarts Triton onto the new release before its gate. Triton's deadman runs at
    that start and must leave the role's own switch alone (it is in progress, not abandoned): the release
    is gated, marked and served, and nothing is left in /run to weaken the next start."""
    tmp = tmp_path_factory.mktemp("mode-none")
    marker = f"mode-none-{time.time_ns()}"
    repo = variant(tmp, "mode-none", SAMPLE, {"postprocess/config.pbtxt": (
        'name: "postprocess"\n', f'name: "postprocess"\nparameters {{ key: "tritonops_test" value {{ string_value: "{marker}" }} }}\n')})
    new = rel.prepare(repo, tmp / "staged", "cpu")["release"]
    res = publish(host, request.config, repo, tmp, {"model_repository_model_control_mode": "none"})
    assert res.returncode == 0, res.stdout[-6000:]
    assert state(host, mr) == (new, new), res.stdout[-3000:]
    cfg = json.loads(host.check_output("python3 -c " + shlex.quote(
        "import urllib.request\n"
        f"req = urllib.request.Request('http://127.0.0.1:{mr['port']}/v2/models/postprocess/config',"
        f" headers={{{mr['header']!r}: {mr['secret']!r}}})\n"
        "print(urllib.request.urlopen(req, timeout=30).read().decode())\n")))
    assert cfg["parameters"]["tritonops_test"]["string_value"] == marker
    assert not host.file("/run/tritonops-model-repository.switch").exists
    assert rel.golden(f"http://{url}", SAMPLE, timeout=30)["ok"]
