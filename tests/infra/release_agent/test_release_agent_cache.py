"""The release_agent role's node cache (issue 46: the edge agent uses the same cache code as the pods):
``release_agent_cache_dir`` and ``release_agent_cache_quota`` reach the agent as its own parser reads them
(a size such as "20G" in bytes), the unit's sandbox lets the agent write the folder, the role creates it
root-only, and preflight refuses a quota without a folder, a folder inside the releases, or a size it cannot
read. Offline: the role's preflight and its unit template, rendered with ansible-playbook against localhost
(test_release_agent_preflight's harness for the argv), and the role's cache task run into a temporary folder.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_release_agent_preflight import GOOD, REPO, _argv, _failed_message, _run

pytestmark = pytest.mark.unit


def _play(tmp_path: Path, overrides: dict[str, Any], tasks: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.exists():
        pytest.skip("ansible-playbook is not installed (make venv)")
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"name": "Cache", "hosts": "localhost", "connection": "local",
                                                        "gather_facts": False, "tasks": tasks}]))
    (tmp_path / "vars.json").write_text(json.dumps(GOOD | overrides))
    env = os.environ | {"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_LOCALHOST_WARNING": "false",
                        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    return subprocess.run([str(exe), "-e", f"@{tmp_path / 'vars.json'}", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)


def test_cache_and_quota_reach_the_agent_and_its_sandbox(tmp_path: Path) -> None:
    from tritonops.agent.cli import parser

    code, out = _run(tmp_path, {"release_agent_cache_dir": "/var/cache/tritonops", "release_agent_cache_quota": "20G"})
    assert code == 0, out["stats"]
    args = parser().parse_args(_argv(out)[1:])
    assert (str(args.cache), args.cache_quota) == ("/var/cache/tritonops", 20 << 30)
    code, out = _run(tmp_path, {"release_agent_cache_dir": "/var/cache/tritonops", "release_agent_cache_quota": 5000})
    assert parser().parse_args(_argv(out)[1:]).cache_quota == 5000
    code, out = _run(tmp_path, {})
    args = parser().parse_args(_argv(out)[1:])
    assert code == 0 and (args.cache, args.cache_quota) == (None, None)

    unit = tmp_path / "agent.service"
    res = _play(tmp_path, {"release_agent_cache_dir": "/var/cache/tritonops", "release_agent_cache_quota": "512M"}, [
        {"name": "Preflight", "ansible.builtin.include_role": {"name": "release_agent", "tasks_from": "preflight",
                                                               "public": True}},
        {"name": "Render the unit", "ansible.builtin.template": {
            "src": str(REPO / "roles" / "release_agent" / "templates" / "release-agent.service.j2"),
            "dest": str(unit), "mode": "0644"}}])
    assert res.returncode == 0, res.stdout[-3000:]
    text = unit.read_text()
    lines = text.split("ExecStart=", 1)[1].splitlines()  # continued with a backslash at each line's end
    end = next(i for i, x in enumerate(lines) if not x.endswith("\\"))
    start = " ".join(x.removesuffix("\\") for x in lines[:end + 1])
    argv = [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(start)]
    args = parser().parse_args(argv[2:])
    assert (str(args.cache), args.cache_quota) == ("/var/cache/tritonops", 512 << 20)
    writable = shlex.split(next(x for x in text.splitlines() if x.startswith("ReadWritePaths=")).split("=", 1)[1])
    assert "/var/cache/tritonops" in writable and str(args.releases) in writable


def test_the_role_creates_the_cache_folder_root_only(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the folder is root's: run as root (CI's containers are)")
    cache = tmp_path / "node" / "cache"
    res = _play(tmp_path, {"release_agent_cache_dir": str(cache)}, [
        {"name": "Cache folder", "ansible.builtin.include_role": {"name": "release_agent", "tasks_from": "cache"}}])
    assert res.returncode == 0, res.stdout[-3000:]
    st = cache.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o700, 0, 0)


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"release_agent_cache_quota": "20G"}, "release_agent_cache_quota needs release_agent_cache_dir"),
    ({"release_agent_cache_dir": "/var/cache/x", "release_agent_cache_quota": "twenty"}, "got 'twenty'"),
    ({"release_agent_cache_dir": "/var/cache/x", "release_agent_cache_quota": "0"}, "at least 1 byte"),
    ({"release_agent_cache_dir": "/var/lib/triton/releases/cache"}, "under the releases folder"),
    ({"release_agent_cache_dir": "var/cache"}, "release_agent_cache_dir must be empty or an absolute folder"),
], ids=["quota-without-folder", "not-a-size", "zero", "inside-releases", "relative"])
def test_preflight_refuses_a_cache_the_agent_could_not_use(tmp_path: Path, overrides: dict[str, Any],
                                                           needle: str) -> None:
    if shutil.which("ansible-playbook") is None and not Path(sys.executable).with_name("ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed (make venv)")
    code, out = _run(tmp_path, overrides)
    assert code != 0 and needle in _failed_message(out)
    assert out["stats"]["localhost"]["changed"] == 0
