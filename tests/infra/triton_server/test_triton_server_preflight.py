"""Bad inventory for roles/triton_server stops the play before the host changes, with a message that
names the variable. Runs the real role with ansible-playbook against localhost in --check mode (so
even a wrongly passing preflight could not touch this machine) and no fact gathering.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
GOOD_SECRET = "unit-test.admin-secret-0123456789"

CASES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown method", {"triton_server_install_method": "rpm"}, "triton_server_install_method"),
    ("port not an int", {"triton_server_http_port": "eighty"}, "triton_server_http_port"),
    ("list not a list", {"triton_server_startup_models": {"mlp": 1}}, "triton_server_startup_models"),
    ("port out of range", {"triton_server_grpc_port": 70000}, "triton_server_grpc_port"),
    ("ports collide", {"triton_server_grpc_port": 8000}, "must differ"),
    ("empty secret", {"triton_server_admin_secret": ""}, "triton_server_admin_secret"),
    ("weak secret", {"triton_server_admin_secret": "changeme"}, "triton_server_admin_secret"),
    ("secret breaks the flag", {"triton_server_admin_secret": "abc:def=ghi,jkl-0123456"}, "triton_server_admin_secret"),
    ("unknown api", {"triton_server_restricted_apis": ["model-repository", "admin"]}, "triton_server_restricted_apis"),
    ("tls without cert", {"triton_server_grpc_tls_enabled": True}, "triton_server_grpc_tls_cert"),
    ("mutual without tls", {"triton_server_grpc_tls_mutual": True}, "triton_server_grpc_tls_mutual"),
    ("startup models need explicit", {"triton_server_model_control_mode": "none",
                                      "triton_server_startup_models": ["mlp"]}, "triton_server_startup_models"),
    ("relative repository", {"triton_server_model_repository": "models"}, "triton_server_model_repository"),
    ("numpy 2 for the 2.51 python backend", {"triton_server_wheels": {"x86_64": {
        "nvidia-pytriton==0.7.0": "0" * 64, "numpy==2.1.0": "1" * 64}}},
     "triton_server_wheels: pins numpy==2.1.0, but the wheel's Triton 2.51 Python backend serves empty outputs"),
]


@pytest.fixture(scope="module")
def playbook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("preflight")
    (d / "play.yml").write_text(yaml.safe_dump([{
        "name": "Preflight only", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [{"role": "triton_server"}],
    }]))
    return d / "play.yml"


def _ansible_playbook() -> str:
    exe = Path(sys.executable).with_name("ansible-playbook")
    if exe.exists():
        return str(exe)
    found = shutil.which("ansible-playbook")
    if not found:
        pytest.skip("ansible-playbook is not installed (make venv)")
    return found


@pytest.mark.parametrize(("overrides", "needle"), [(o, n) for _, o, n in CASES], ids=[c[0] for c in CASES])
def test_bad_input_stops_before_changes(playbook: Path, tmp_path: Path, overrides: dict[str, Any],
                                        needle: str) -> None:
    extra = {"triton_server_admin_secret": GOOD_SECRET} | overrides
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = os.environ | {
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    res = subprocess.run([_ansible_playbook(), "--check", "-e", f"@{tmp_path / 'vars.json'}", str(playbook)],
                         capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert res.returncode != 0, res.stdout[-2000:]
    out = json.loads(res.stdout)
    stats = out["stats"]["localhost"]
    assert stats["failures"] == 1 and stats["changed"] == 0, stats
    tasks = [t for play in out["plays"] for t in play["tasks"]]
    failed = [t for t in tasks if t["hosts"]["localhost"].get("failed")]
    assert len(failed) == 1
    result = failed[0]["hosts"]["localhost"]
    msg = json.dumps([result.get("msg", "")] + [r.get("msg", "") for r in result.get("results", [])
                                                if r.get("failed")])
    assert needle in msg, msg
    # Nothing but validation ran: no task of another role, no install step.
    ran = [t["task"]["name"] for t in tasks]
    assert not any(name.startswith(("gpu_facts", "Install", "Create", "Write")) for name in ran), ran
