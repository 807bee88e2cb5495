"""What the release_agent checks read from a node: the agent's own argv, its textfile metrics, and
Triton's repository API (called from the controller, the admin header's value from the inventory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from devkit.hosts.podman import CONTAINERS_CONF
from node_helpers import host_name, inventory_for_playbook, inventory_vars, node_address  # noqa: F401 - re-exported
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[3]
DEFAULTS = dict(yaml.safe_load((REPO / "roles" / "release_agent" / "defaults" / "main.yml").read_text()))
SERVICE = DEFAULTS["release_agent_service_name"]
PYZ = f"{DEFAULTS['release_agent_install_dir']}/tritonops-agent.pyz"
TEXTFILE_NAME = "tritonops_release.prom"








# playbooks/edge.yml as a mode switch runs it: the facts and the two modes (each with the other's off.yml);
# Triton, monitoring and the drift timer are as converged, and their tags are left out.
EDGE_PLAYBOOK = REPO / "playbooks" / "edge.yml"
SWITCH_TAGS = ",".join(f"{role}_{part}" for role in ("gpu_facts", "model_repository", "release_agent")
                       for part in ("install", "configure", "run"))
PLAY_TIMEOUT = 600


def molecule_inventory(config: Any) -> str:
    """The node's inventory (--ansible-inventory, else molecule's) as ansible-playbook takes it; skips without one."""
    inventory = inventory_for_playbook(config)
    if not inventory:
        pytest.skip("needs the converged molecule node (roles/release_agent: molecule test)")
    return inventory


def edge_play(host: Any, config: Any, log: Path, extra: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook playbooks/edge.yml against the node (molecule's inventory), limited to SWITCH_TAGS;
    the output goes to ``log`` and comes back in stdout."""
    inventory = molecule_inventory(config)
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), str(EDGE_PLAYBOOK), "-i", inventory,
           "--limit", host_name(host), "--tags", SWITCH_TAGS, "-e", json.dumps(extra), *flags]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", CONTAINERS_CONF=str(CONTAINERS_CONF))
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env, timeout=PLAY_TIMEOUT,
                            check=False).returncode
    print(f"  ansible-playbook {' '.join(flags)} log: {log}")  # noqa: T201 - where to look, shown with -s
    return subprocess.CompletedProcess(cmd, rc, log.read_text(), "")


def recap(out: str, host: str) -> dict[str, int]:
    """The PLAY RECAP counts of ``host`` (ok, changed, failed, ...)."""
    line = next(line for line in out.splitlines() if line.startswith(host + " ") and "changed=" in line)
    return {k: int(v) for k, v in (word.split("=") for word in line.split()[2:])}


def changed_tasks(out: str) -> list[str]:
    """The names of the tasks an ansible-playbook output reports changed (would change, with --check)."""
    tasks, task = [], ""
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].split("]", 1)[0]
        elif line.startswith("changed: [") and task and task not in tasks:
            tasks.append(task)
    return tasks


def unit_state(host: Any, unit: str) -> tuple[str, str]:
    """(systemctl is-enabled, is-active) of a unit; is-enabled says "absent" where its file is gone."""
    enabled = host.run(f"systemctl is-enabled {unit}").stdout.strip() or "absent"
    return enabled, host.run(f"systemctl is-active {unit}").stdout.strip()


def main_pid(host: Any, unit: str) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {unit}") or 0)


def agent_argv(host: Any) -> list[str]:
    """The running agent's argv exactly as systemd parsed the unit's ExecStart (quoting undone)."""
    pid = main_pid(host, SERVICE)
    assert pid > 0, f"{SERVICE} has no main process"
    raw = host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/cmdline")
    return raw.split("\n")


def options(argv: list[str]) -> dict[str, list[str]]:
    """--name VALUE and --name=VALUE pairs of an argv (a list per name: --trusted-key repeats)."""
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            if "=" in word:
                name, value = word[2:].split("=", 1)
            else:
                name, value = word[2:], argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
            out.setdefault(name, []).append(value)
        i += 1
    return out


def metrics(host: Any, textfile_dir: str) -> list[tuple[str, dict[str, str], float]]:
    """The agent's textfile as (name, labels, value) samples; [] while it is absent."""
    f = host.file(f"{textfile_dir}/{TEXTFILE_NAME}")
    if not f.exists:
        return []
    return [(s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(f.content_string) for s in fam.samples]


def sample(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float | None:
    for n, lab, v in samples:
        if n == name and all(lab.get(k) == want for k, want in labels.items()):
            return v
    return None


def info_release(samples: list[tuple[str, dict[str, str], float]], name: str) -> str | None:
    """The release label of an info metric (tritonops_release_info, tritonops_release_channel_info)."""
    for n, lab, v in samples:
        if n == name and v == 1:
            return lab.get("release")
    return None


class TritonAPI:
    """Triton's HTTP API on the node, from the controller; restricted calls carry the admin header."""

    def __init__(self, url: str, header: str, secret: str) -> None:
        self.url, self.header, self.secret = url.rstrip("/"), header, secret

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        headers = {"Content-Type": "application/json", self.header: self.secret}
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the test node
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    def ready(self) -> bool:
        try:
            self.call("GET", "/v2/health/ready", timeout=5)
            return True
        except OSError:
            return False

    def ready_models(self) -> dict[str, str]:
        """READY model -> version, from the repository index."""
        return {m["name"]: str(m.get("version", "")) for m in self.call("POST", "/v2/repository/index", {})
                if m.get("state") == "READY"}

    def parameters(self, model: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v2/models/{model}/config").get("parameters") or {})


def wait_for(what: str, check: Callable[[], Any], timeout: float, explain: Callable[[], str],
             period: float = 1.0) -> tuple[Any, float]:
    """Poll ``check`` until it returns something truthy; (its value, seconds taken). Fails after ``timeout``."""
    start = time.monotonic()
    while True:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f}s{explain()}")
        time.sleep(period)
