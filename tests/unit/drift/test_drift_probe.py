"""ansible/drift_probe.yml for real against localhost: the role's controller steps, the agent's ``probe``
on the "node" (a temporary release layout), Triton's index read with the admin header (a stand-in HTTP
server that refuses requests without it), parsed and compared by ``tritonops.drift.models.check``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tritonops.core.names import STATE_FILE
from tritonops.drift import ansible_check, models
from tritonops.release import push as rel
from tritonops.release_format import manifest, node_drift

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "model_repository"
HEADER, SECRET = "triton-admin-key", "unit-test.admin-secret-5b8e21"


class FakeTriton(BaseHTTPRequestHandler):
    """POST /v2/repository/index: the READY models of ``index``, or 403 without the admin header;
    GET /v2/models/stats: ``loaded`` (every loaded model, also those the index omits)."""

    index: list[dict[str, Any]] = []
    loaded: list[dict[str, Any]] = []
    seen_headers: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ok = self.path == "/v2/models/stats" and self.headers.get(HEADER) == SECRET
        body = json.dumps({"model_stats": self.loaded} if ok else {"error": "restricted"})
        self.send_response(200 if ok else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen_headers.append(self.headers.get(HEADER))
        ok = self.path == "/v2/repository/index" and self.headers.get(HEADER) == SECRET
        body = json.dumps(self.index if ok else {"error": f"This API is restricted, expecting header '{HEADER}'"})
        self.send_response(200 if ok else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def serve_triton(want: dict[str, list[str]]) -> ThreadingHTTPServer:
    """A FakeTriton on a free loopback port serving ``want`` (model -> versions) READY and loaded."""
    FakeTriton.index = [{"name": m, "version": v, "state": "READY"} for m, vs in want.items() for v in vs]
    FakeTriton.loaded = [{"name": m, "version": v} for m, vs in want.items() for v in vs]
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeTriton)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def local_inventory(tmp: Path) -> Path:
    """An inventory of localhost over the local connection, with this interpreter."""
    inventory = tmp / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    return inventory


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(sys.executable).with_name("ansible-playbook").exists() and shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed (make venv)")
    tmp = tmp_path_factory.mktemp("probe")
    staged = rel.prepare(SAMPLE, tmp / "stage", "cpu")
    releases = tmp / "node" / "releases"
    shutil.copytree(staged["path"], releases / staged["release"])
    (releases / STATE_FILE).write_text(json.dumps({"current": staged["release"], "history": []}))
    (tmp / "node" / "models").symlink_to(f"releases/{staged['release']}")
    files = manifest.read(releases / staged["release"])
    want = node_drift.expected_versions(files, node_drift.release_configs(releases / staged["release"], files))
    server, inventory = serve_triton(want), local_inventory(tmp)
    extra = {"drift_hosts": "localhost", "model_repository_source": "local",
             "model_repository_local_path": str(SAMPLE), "model_repository_target": "cpu",
             "model_repository_controller_cache": str(tmp / "cache"),
             "model_repository_link": str(tmp / "node" / "models"), "model_repository_releases_dir": str(releases),
             "model_repository_http_port": server.server_address[1], "model_repository_admin_header": HEADER,
             "model_repository_admin_secret": SECRET,
             # No systemd unit here: the unit, process and posture checks have their own tests.
             "drift_expected_state": ""}
    try:
        yield {"tmp": tmp, "inventory": inventory, "extra": extra, "release": staged["release"],
               "releases": releases}
    finally:
        server.shutdown()


def test_clean_node_then_a_tampered_file_an_unloaded_model_and_one_loaded_by_hand(node: dict[str, Any]) -> None:
    result = models.check([node["inventory"]], extra_vars=node["extra"])
    assert (result.error, result.hosts, result.findings) == (None, ["localhost"], [])
    # The index was read with the header (the agent's probe itself asks without one: it gets no secret).
    assert SECRET in FakeTriton.seen_headers

    release = node["releases"] / node["release"]
    config = release / "mlp" / "config.pbtxt"
    original, index, loaded = config.read_text(), list(FakeTriton.index), list(FakeTriton.loaded)
    try:
        config.write_text(original + "\n# edited on the node\n")
        FakeTriton.index = [m for m in index if m["name"] != "postprocess"]
        # Loaded through the API with its own files: Triton's statistics list it, its index does not.
        FakeTriton.loaded = [*loaded, {"name": "by_hand", "version": "1"}]
        result = models.check([node["inventory"]], extra_vars=node["extra"])
    finally:
        config.write_text(original)
        FakeTriton.index, FakeTriton.loaded = index, loaded
    assert result.error is None
    assert {(f.host, f.resource, f.detail.split(" ")[0]) for f in result.findings} == {
        ("localhost", "file:mlp/config.pbtxt", "sha256"), ("localhost", "model:postprocess", "version"),
        ("localhost", "model:by_hand", "version")}


def test_wrong_secret_is_one_finding_and_no_secret_reaches_a_command_line(node: dict[str, Any]) -> None:
    """ansible-playbook -vvv prints every command it runs on the host: the secret is not in any of them."""
    extra = node["extra"] | {"model_repository_admin_secret": SECRET + "-wrong"}
    (node["tmp"] / "vars.json").write_text(json.dumps(extra))
    cmd = ansible_check.playbook_cmd(models.PROBE_PLAYBOOK, [node["inventory"]], check=False)
    res = subprocess.run([*cmd, "-vvv", "-e", f"@{node['tmp'] / 'vars.json'}"], capture_output=True, text=True,
                         env=ansible_check.ansible_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}),
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "<localhost> EXEC" in res.stdout  # -vvv did print the commands
    assert SECRET not in res.stdout + res.stderr
    result = models.check([node["inventory"]], extra_vars=extra)
    assert [(f.resource, "403" in f.detail and HEADER in f.detail) for f in result.findings] == [("triton", True)]
