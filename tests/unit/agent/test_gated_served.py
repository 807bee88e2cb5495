"""'Gated' means what Triton serves, and failures are classed by cause (issue 21 items 3-4).

A node reports a release gated (``gated()``, ``/ready``, ``tritonops_release_info``) only after a
golden gate passed against what Triton answers since the link last moved: a kill after Triton loaded
a release that then would fail its gate, the channel moved back, and the rerun must reload the old
release's models and gate them; ``recover`` must too. A kill between an install's two renames is
finished or undone by the next run. A full disk at ``mark`` is retried and passes once space returns;
a full disk under ``--textfile`` is counted and the loop goes on; a release that cannot be laid out is
refused once, not retried for ever.

Triton here is a fake on 127.0.0.1 (``FakeTriton``), as the unit tier allows: the existing pull tests
of this tier run without Triton, and the real one takes most of a minute to start. It keeps what the
project relies on of Triton's explicit model control: a load re-reads a model only when its folder
is newer than what it loaded (releases.touch_models), and its answers are those of the files it
loaded (a model whose model.py says ``broken`` answers off by 10, so its golden gate fails). One test
(marked integration and slow) plays the first case against tritonserver itself, which shows the
fake's rule is Triton's. Kills are real: a subprocess of the agent killed (SIGKILL) at the named point.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agent_harness import agent_cmd, release_source
from tritonops.agent import pull, releases
from tritonops.agent.cli import main
from tritonops.agent.pull import Agent
from tritonops.core import fsio
from tritonops.core.triton_http import Triton
from tritonops.release import publish as pub
from tritonops.release_format import manifest
from tritonops.release_format.golden_gate import golden_gate
from tritonops.stores import open_store

TIMEOUTS = ["--load-timeout", "5", "--golden-timeout", "5"]


class FakeTriton:
    """Triton's HTTP API as the agent uses it, over the models folder ``repo`` (the link)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.loaded: dict[str, dict[str, Any]] = {}  # model -> {"mtime", "broken", "answers", "from"}
        self.loads: list[str] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path in ("/v2/health/live", "/v2/health/ready"):
                    return self._send(200)
                if self.path.startswith("/v2/models/") and self.path.endswith("/ready"):
                    return self._send(200 if self.path.split("/")[3] in fake.loaded else 400)
                self._send(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                parts = self.path.split("/")
                if self.path == "/v2/repository/index":
                    return self._send(200, [{"name": m, "version": "1", "state": "READY"} for m in sorted(fake.loaded)])
                if self.path.startswith("/v2/repository/models/") and parts[-1] in ("load", "unload"):
                    model = parts[4]
                    if parts[-1] == "unload":
                        fake.loaded.pop(model, None)
                        return self._send(200)
                    error = fake.load(model)
                    return self._send(400 if error else 200, {"error": error} if error else None)
                if self.path.startswith("/v2/models/") and parts[-1] == "infer":
                    return self._send(*fake.infer(parts[3], body))
                self._send(404, {"error": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def load(self, model: str) -> str | None:
        folder = Path(os.path.realpath(self.repo / model))
        if not folder.is_dir():
            return f"failed to load '{model}': no model folder"
        mtime = max(os.stat(p).st_mtime_ns for p in [folder, *folder.rglob("*")])
        with self.lock:
            self.loads.append(model)
            have = self.loaded.get(model)
            if have is not None and mtime <= have["mtime"]:
                return None  # Triton: unchanged since it was loaded, nothing re-read
            answers = {}
            golden = folder / "golden.json"
            if golden.is_file():
                for case in json.loads(golden.read_text())["cases"]:
                    answers[_key(case["inputs"])] = case["outputs"]
            broken = any("broken" in p.read_text(errors="replace") for p in folder.rglob("*.py"))
            self.loaded[model] = {"mtime": mtime, "broken": broken, "answers": answers, "from": folder.parent.name}
        return None

    def infer(self, model: str, body: dict[str, Any]) -> tuple[int, Any]:
        have = self.loaded.get(model)
        if have is None:
            return 400, {"error": f"model '{model}' is not loaded"}
        inputs = {i["name"]: {k: i[k] for k in ("datatype", "shape", "data")} for i in body["inputs"]}
        outputs = have["answers"].get(_key(inputs))
        if outputs is None:
            return 400, {"error": "no answer for these inputs"}
        out = []
        for name, t in outputs.items():
            data = list(t["data"])
            if have["broken"] and data and isinstance(data[0], float):
                data[0] += 10.0
            out.append({"name": name, "datatype": t["datatype"], "shape": t["shape"], "data": data})
        return 200, {"model_name": model, "outputs": out}

    def serves(self) -> dict[str, str]:
        """model -> the release folder Triton holds it from, and whether it is the broken one."""
        return {m: f"{v['from']}{' (broken)' if v['broken'] else ''}" for m, v in sorted(self.loaded.items())}


def _key(inputs: dict[str, Any]) -> str:
    return json.dumps({n: [t["datatype"], t["shape"], t["data"]] for n, t in sorted(inputs.items())})


@pytest.fixture
def node(tmp_path: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path / "node"
    (root / "releases").mkdir(parents=True)
    fake = FakeTriton(root / "models")
    yield {"link": root / "models", "releases": root / "releases", "triton": fake, "store": str(tmp_path / "store")}
    fake.server.shutdown()


def _agent(node: dict[str, Any], keys: dict[str, Path], triton: bool = True) -> Agent:
    return Agent(open_store(node["store"]), "stable", node["link"], node["releases"], [keys["pub"]],
                 triton=Triton(node["triton"].url) if triton else None, log=lambda m: None,
                 load_timeout=5, golden_timeout=5)


def _layout(node: dict[str, Any]) -> list[str]:
    return ["--link", str(node["link"]), "--releases", str(node["releases"])]


def _pull_once(node: dict[str, Any], keys: dict[str, Path], crash: str | None = None,
               timeouts: list[str] = TIMEOUTS) -> subprocess.CompletedProcess:
    return agent_cmd("pull", "--once", "--store", node["store"], "--channel", "stable", *_layout(node),
                      "--trusted-key", str(keys["pub"]), "--triton", node["triton"].url, *timeouts, crash=crash)


def _publish(tmp_path: Path, node: dict[str, Any], keys: dict[str, Path], name: str, note: str = "") -> dict[str, Any]:
    return pub.publish(release_source(tmp_path, name, note), node["store"], "stable", keys["key"], target="cpu",
                       version=name)


def _fetch(agent: Agent, release: str) -> None:
    """Fetch and install the channel's release without switching to it."""
    p = pub.read_pointer(agent.store, "stable")
    assert p is not None and p["release"] == release
    agent.fetch(release, p["digest"], p["length"])


def test_a_kill_after_a_failed_load_then_the_channel_moved_back_reloads_and_gates_the_old_release(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path]) -> None:
    fake: FakeTriton = node["triton"]
    _publish(tmp_path, node, keys, "r1")
    assert _agent(node, keys).poll()["result"] == "applied"
    assert set(fake.serves().values()) == {"r1"}
    _publish(tmp_path, node, keys, "r2", "broken")  # its golden gate would fail...
    killed = _pull_once(node, keys, crash="apply-loaded")  # ...but the agent dies once Triton loaded it
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert fake.serves()["mlp"] == "r2 (broken)" and releases.active_release(node["link"], node["releases"]) == "r2"
    pub.rollback(node["store"], "stable", release="r1", keys=keys["key"])  # the channel moves back
    rerun = _pull_once(node, keys)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert fake.serves()["mlp"] == "r1", fake.serves()  # r1's model again, not the refused one kept in memory
    assert json.loads(rerun.stdout)["result"] in ("not_modified", "unchanged")  # gated at start: nothing re-applied
    assert releases.state(node["releases"])["digest"] == pub.read_pointer(open_store(node["store"]), "stable")["digest"]  # type: ignore[index]
    st = releases.status(node["link"], node["releases"])
    assert (st["active"], st["current"], st["served"]) == ("r1", "r1", True)
    assert golden_gate(Triton(fake.url), node["releases"] / "r1", ["mlp"], timeout=5)["ok"]


def _dead_controller_left_r2_loaded(tmp_path: Path, node: dict[str, Any], keys: dict[str, Path]) -> Agent:
    """r1 gated and served; then a controller switched to the broken r2 and loaded it, and died before its
    gate. Returns the agent that gated r1."""
    fake: FakeTriton = node["triton"]
    _publish(tmp_path, node, keys, "r1")
    agent = _agent(node, keys)
    assert agent.poll()["result"] == "applied" and agent.gated()
    _publish(tmp_path, node, keys, "r2", "broken")
    _fetch(agent, "r2")
    releases.activate(node["link"], node["releases"], "r2", touch=["mlp"])
    assert fake.load("mlp") is None and fake.serves()["mlp"] == "r2 (broken)"
    return agent


def test_recover_reloads_every_model_and_only_a_passing_gate_reports_served(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path]) -> None:
    fake: FakeTriton = node["triton"]
    agent = _dead_controller_left_r2_loaded(tmp_path, node, keys)
    # recover without Triton (at boot, before Triton starts) re-points the link: not served until gated again
    assert main(["recover", *_layout(node)]) == 0
    assert releases.active_release(node["link"], node["releases"]) == "r1"
    agent._export()
    assert not agent.gated() and not agent.ready() and "tritonops_release_info{" not in agent.metrics.render()
    # recover --triton on a running node: every model reloaded from r1's files, gated, then served
    assert main(["recover", *_layout(node), "--triton", fake.url, *TIMEOUTS]) == 0
    assert set(fake.serves().values()) == {"r1"}, fake.serves()
    assert releases.status(node["link"], node["releases"])["served"] is True
    agent._export()
    assert agent.gated() and 'tritonops_release_info{channel="stable"' in agent.metrics.render()


def test_recover_no_load_gates_only_what_triton_serves_loading_nothing(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Model control mode poll/none (the deadman timer's second look): ``recover --triton --no-load`` loads
    nothing; the gate judges the models Triton holds. Triton still holding the refused r2 after the revert
    fails it (which is why the timer restarts Triton first); once Triton re-read the link, it passes and
    records served. A model not READY yet is a retry (exit 3), and --no-load needs --triton (exit 2)."""
    fake: FakeTriton = node["triton"]
    _dead_controller_left_r2_loaded(tmp_path, node, keys)
    assert main(["recover", *_layout(node)]) == 0 and releases.active_release(node["link"], node["releases"]) == "r1"
    loads = list(fake.loads)
    assert main(["recover", *_layout(node), "--triton", fake.url, "--no-load", *TIMEOUTS]) == 1
    assert "golden" in capsys.readouterr().out
    assert fake.loads == loads and fake.serves()["mlp"] == "r2 (broken)" and not releases.served(node["link"], node["releases"])
    # Triton restarted on the link: it loaded r1 itself, except one model still loading.
    fake.loaded.clear()
    models = sorted(p.name for p in (node["releases"] / "r1").iterdir() if (p / "config.pbtxt").is_file())
    for m in models[1:]:
        assert fake.load(m) is None
    loads = list(fake.loads)
    assert main(["recover", *_layout(node), "--triton", fake.url, "--no-load", *TIMEOUTS]) == 3
    assert f"not READY in Triton (it loads the repository itself): {models[0]}" in capsys.readouterr().out
    assert fake.load(models[0]) is None
    loads = list(fake.loads)
    assert main(["recover", *_layout(node), "--triton", fake.url, "--no-load", *TIMEOUTS]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["served"]["reloaded"] == [] and out["served"]["cases"] > 0, out
    assert fake.loads == loads and set(fake.serves().values()) == {"r1"}
    assert releases.status(node["link"], node["releases"])["served"] is True
    assert main(["recover", *_layout(node), "--no-load"]) == 2
    assert "--no-load: gates what a running Triton serves; give --triton URL" in capsys.readouterr().out


def test_the_agent_at_start_reloads_and_gates_a_release_pointed_back_at(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path]) -> None:
    fake: FakeTriton = node["triton"]
    _publish(tmp_path, node, keys, "r1")
    assert _agent(node, keys).poll()["result"] == "applied"
    _publish(tmp_path, node, keys, "r2", "broken")
    agent = _agent(node, keys)
    _fetch(agent, "r2")
    releases.activate(node["link"], node["releases"], "r2", touch=["mlp"])
    fake.load("mlp")
    out = _agent(node, keys).gate_active()  # the agent restarted after a kill between switch and gate
    assert set(fake.serves().values()) == {"r1"}, fake.serves()
    assert out["gated"] is True and out["reverted"] == "r2" and "mlp" in out["reloaded"], out


@pytest.mark.parametrize("step", releases.INSTALL_STEPS)
def test_a_kill_between_the_renames_of_an_install_is_finished_or_undone_by_the_next_run(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path], step: str) -> None:
    _publish(tmp_path, node, keys, "r1")
    assert _agent(node, keys).poll()["result"] == "applied"
    good = manifest.read(node["releases"] / "r1")
    (node["releases"] / "r1" / "mlp" / "1" / "model.py").write_text("damaged on the node\n")
    sync = agent_cmd("sync", "--store", node["store"], "--channel", "stable", *_layout(node),
                      "--trusted-key", str(keys["pub"]), crash=step)  # the repair of the linked release...
    assert sync.returncode == -signal.SIGKILL, sync.stdout + sync.stderr  # ...killed at this step
    rerun = _pull_once(node, keys)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    st = releases.status(node["link"], node["releases"])
    assert (st["active"], st["current"], st["releases"], st["served"]) == ("r1", "r1", ["r1"], True), st
    assert "journal" not in st and not [p for p in node["releases"].glob(".staging-*") if p.is_dir()]
    assert node["link"].resolve().is_dir()
    if step != "install-journal":  # the verified copy was renamed aside: it or the fetched one is in place
        assert manifest.verify(node["link"]) == good


def _full_disk_for(monkeypatch: pytest.MonkeyPatch, module: Any, when: Any) -> dict[str, bool]:
    """``module.write_atomic`` raises OSError(ENOSPC) while ``full`` is set and ``when(path, text)`` holds."""
    real = fsio.write_atomic
    state = {"full": True}

    def write(path: Path, content: str, mode: int = 0o644) -> Path:
        if state["full"] and when(Path(path), content):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, content, mode)

    monkeypatch.setattr(module, "write_atomic", write)
    return state


def test_a_full_disk_at_mark_is_retried_and_passes_once_space_returns(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _publish(tmp_path, node, keys, "r1")
    agent = _agent(node, keys)
    assert agent.poll()["result"] == "applied"
    _publish(tmp_path, node, keys, "r2", "two")
    disk = _full_disk_for(monkeypatch, releases, lambda p, text: p.name == releases.STATE_FILE
                          and json.loads(text)["current"] == "r2")
    out = agent.poll()
    assert (out["result"], out["step"], out["class"], out["cause"]) == ("failed", "mark", "retry", "disk"), out
    assert agent.refused == {} and agent.gated()  # rolled back: r1 served and gated again
    failure = agent.status()["failure"]
    assert (failure["class"], failure["cause"]) == ("retry", "disk") and failure["next_retry"] is not None
    assert 'tritonops_release_failures_total{channel="stable",class="retry",step="mark"} 1' in agent.metrics.render()
    assert agent.poll()["step"] == "mark"  # still full: tried again, not refused
    disk["full"] = False
    out = agent.poll()
    assert (out["result"], out["release"]) == ("applied", "r2"), out
    assert releases.state(node["releases"])["current"] == "r2" and agent.gated() and agent.status()["failure"] is None


def test_a_full_disk_under_the_textfile_is_counted_and_the_loop_goes_on(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _publish(tmp_path, node, keys, "r1")
    agent = _agent(node, keys, triton=False)
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    disk = _full_disk_for(monkeypatch, pull, lambda p, text: p.parent == textfile)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(0.05,), kwargs={"jitter": 0.0, "stop": stop,
                                                                      "textfile": textfile}, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while agent.metrics.get("tritonops_release_textfile_errors_total", reason="ENOSPC") < 3:
            assert runner.is_alive() and time.monotonic() < deadline, "the loop died on a full disk"
            time.sleep(0.02)
        assert runner.is_alive() and agent.gated()  # polls went on: r1 applied meanwhile
        disk["full"] = False
        prom = textfile / "tritonops_release.prom"
        while not prom.is_file():
            assert runner.is_alive() and time.monotonic() < deadline, "no textfile once space returned"
            time.sleep(0.02)
        assert 'tritonops_release_textfile_errors_total{reason="ENOSPC"}' in prom.read_text()
    finally:
        stop.set()
        runner.join(timeout=10)
    assert not runner.is_alive()


@pytest.mark.parametrize("extra", [
    "mlp/1/model.py/extra",  # a file/folder clash: model.py is a file
    "mlp/" + "/".join(["p" * 250] * 17) + "/extra",  # a path over PATH_MAX (4096)
], ids=["file-folder-clash", "path-over-path-max"])
def test_a_release_that_cannot_be_laid_out_is_refused_once_not_retried(
        tmp_path: Path, node: dict[str, Any], keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
        extra: str) -> None:
    _publish(tmp_path, node, keys, "r1")
    agent = _agent(node, keys, triton=False)
    assert agent.poll()["result"] == "applied"
    # A signed release naming a path no file system can hold next to the others (the same content as
    # mlp/1/model.py, so no blob of its own is uploaded): what a hostile or broken publisher can sign.
    real_check = pub.check_repository
    real_lengths = manifest.tree_lengths

    def check(source: Path, *a: Any, **kw: Any) -> Any:
        files, warnings = real_check(source, *a, **kw)
        return {**files, extra: files["mlp/1/model.py"]}, warnings

    def lengths(root: Path, files: dict[str, str]) -> dict[str, int]:
        return {**real_lengths(root, {k: v for k, v in files.items() if k != extra}),
                extra: (Path(root) / "mlp" / "1" / "model.py").stat().st_size}

    monkeypatch.setattr(pub, "check_repository", check)
    monkeypatch.setattr(manifest, "tree_lengths", lengths)
    _publish(tmp_path, node, keys, "r2", "two")
    monkeypatch.undo()
    out = agent.poll()
    assert (out["result"], out["class"]) == ("failed", "refused"), out
    assert out["cause"] in ("layout", "metadata"), out  # refused before or while laying it out
    for _ in range(3):
        assert agent.poll()["result"] in ("not_modified", "unchanged")  # not tried again
    render = agent.metrics.render()
    assert f'tritonops_release_failures_total{{channel="stable",class="refused",step="{out["step"]}"}} 1' in render
    assert "class=\"retry\"" not in render
    assert releases.active_release(node["link"], node["releases"]) == "r1" and agent.gated()
    assert not (node["releases"] / "r2").exists() and not list(node["releases"].glob(".staging-*"))


BROKEN_MLP = '''

# A release whose model answers off by 10: its golden gate fails.
_initialize = TritonPythonModel.initialize


def _broken_initialize(self, args):
    _initialize(self, args)
    run = self.session.run
    self.session = type("Off", (), {"run": lambda s, names, feeds: [run(names, feeds)[0] + 10.0]})()


TritonPythonModel.initialize = _broken_initialize
'''


@pytest.mark.integration
@pytest.mark.slow
def test_with_a_real_triton_the_rerun_after_a_kill_serves_the_old_release_again(
        tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first test's case against tritonserver itself (explicit model control): what it keeps in
    memory after a load is what the fake models."""
    from tritonops.triton import server

    secret = "gated-served-test-secret"
    monkeypatch.setenv("TRITONOPS_ADMIN_SECRET", secret)
    root = tmp_path / "node"
    (root / "releases").mkdir(parents=True)
    (root / "models").mkdir()
    store = str(tmp_path / "store")
    pub.publish(release_source(tmp_path, "r1"), store, "stable", keys["key"], target="cpu", version="r1")
    srv = server.start(root / "models", model_control_mode="explicit", workdir=tmp_path / "w",
                       extra_args=[f"--http-restricted-api=model-repository:triton-admin-key={secret}"])
    try:
        url = f"http://{srv.http_url}"
        node = {"link": root / "models", "releases": root / "releases", "store": store,
                "triton": type("T", (), {"url": url})()}
        agent = Agent(open_store(store), "stable", root / "models", root / "releases", [keys["pub"]],
                      triton=Triton(url), log=lambda m: None, load_timeout=120, golden_timeout=60)
        assert agent.poll()["result"] == "applied"
        src = release_source(tmp_path, "r2")
        with (src / "mlp" / "1" / "model.py").open("a") as f:
            f.write(BROKEN_MLP)
        pub.publish(src, store, "stable", keys["key"], target="cpu", version="r2")
        real = ["--load-timeout", "120", "--golden-timeout", "60"]  # a loaded machine: Python backend stubs
        killed = _pull_once(node, keys, crash="apply-loaded", timeouts=real)
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        assert not golden_gate(Triton(url), root / "releases" / "r1", ["mlp"], timeout=30)["ok"]  # r2's in memory
        pub.rollback(store, "stable", release="r1", keys=keys["key"])
        rerun = _pull_once(node, keys, timeouts=real)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        gate = golden_gate(Triton(url), root / "releases" / "r1", ["mlp"], timeout=30)
        assert gate["ok"], gate  # Triton answers as r1 again
        assert releases.status(root / "models", root / "releases")["served"] is True
    finally:
        srv.stop()
