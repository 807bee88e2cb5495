"""Run a role against a node from inside a host check, to prove that bad input stops in preflight.

Used by the preflight-failure checks of the nvidia_driver and jetson roles: they run
``ansible-playbook`` (JSON callback) against the node molecule converged, with bad variables, and
assert that the run failed in the named preflight task with a clear message and changed nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from devkit.hosts.podman import CONTAINERS_CONF
from node_helpers import podman_container

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


@dataclass
class PlaybookRun:
    rc: int
    stats: dict[str, Any]
    failed: list[dict[str, Any]] = field(default_factory=list)  # {"task": name, "msg": msg}
    changed_tasks: list[str] = field(default_factory=list)
    output: str = ""


def podman_node(host: Any) -> str:
    """The Podman container behind a testinfra host: molecule's nodes come through the Ansible backend
    (inventory connection containers.podman.podman), `--hosts=podman://NAME` through the podman one."""
    if host.backend.NAME == "podman":
        return str(host.backend.name)
    if host.backend.NAME == "ansible":
        container = podman_container(host.ansible.get_variables())
        if container:
            return container
    raise RuntimeError(f"preflight runs need a Podman node, got backend {host.backend.NAME}")


def run_roles(node: str, roles: list[str], extra_vars: dict[str, Any], timeout: int = 600) -> PlaybookRun:
    """ansible-playbook with ``roles`` on ``node`` over the Podman connection; parse the JSON callback."""
    play = [{"name": "preflight check", "hosts": "all", "gather_facts": True,
             "roles": [{"role": r} for r in roles]}]
    with tempfile.TemporaryDirectory(prefix="tritonops-preflight-") as tmp:
        pb = Path(tmp) / "play.yml"
        pb.write_text(yaml.safe_dump(play))
        ev = Path(tmp) / "vars.json"
        ev.write_text(json.dumps(extra_vars))
        # Not molecule's ansible.cfg or callbacks: only the JSON callback may write to stdout.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update({
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_HOST_KEY_CHECKING": "0",
            "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
            "CONTAINERS_CONF": env.get("CONTAINERS_CONF", str(CONTAINERS_CONF)),
        })
        proc = subprocess.run(
            [str(ANSIBLE_PLAYBOOK), "-i", f"{node},", "-c", "containers.podman.podman",
             "-e", f"@{ev}", str(pb)],
            capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"ansible-playbook did not print JSON: {e}\n{proc.stdout}\n{proc.stderr}") from e
    run = PlaybookRun(rc=proc.returncode, stats=doc.get("stats", {}).get(node, {}),
                      output=proc.stdout[-4000:] + proc.stderr[-2000:])
    for play_doc in doc.get("plays", []):
        for task in play_doc.get("tasks", []):
            res = task.get("hosts", {}).get(node, {})
            name = task["task"]["name"].split(" : ", 1)[-1]  # without the "role : " prefix
            if res.get("failed"):
                run.failed.append({"task": name, "msg": str(res.get("msg", ""))})
            if res.get("changed"):
                run.changed_tasks.append(name)
    return run


def snapshot(host: Any, paths: list[str]) -> str:
    """Checksums and modes of every file under ``paths`` (missing paths included), to compare before/after."""
    cmd = ("for p in " + " ".join(paths) + "; do if [ -e \"$p\" ]; then "
           "find \"$p\" -xdev -type f -exec stat -c '%n %a %s %Y' {} + 2>/dev/null | sort; "
           "else echo \"$p absent\"; fi; done")
    return str(host.check_output(cmd))
