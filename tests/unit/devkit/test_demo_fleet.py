"""`make demo-fleet`'s pieces that need no node (tools/devkit/demo_fleet.py): the fleet file binds every agent
to its own report key, the failing release differs only in its golden answers, and Ansible sees the three
nodes in pull mode with the local lab's settings. The demo itself runs in tests/infra/demo_fleet."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from devkit import demo_fleet as df
from devkit.demo import REPO, node_inventory
from rich.console import Console
from tritonops.core.errors import UsageError
from tritonops.release import rollout as ro


def test_the_fleet_file_binds_each_agent_to_its_own_report_key(tmp_path: Path) -> None:
    fleet = df.Fleet(tmp_path)
    df.make_keys(Console(file=io.StringIO()), fleet)
    parsed = ro.parse_fleet(fleet.fleet_file)
    assert [(agent, groups) for agent, groups, _ in parsed] == [
        ("tritonops-fleet-1", ["canary"]), ("tritonops-fleet-2", []), ("tritonops-fleet-3", [])]
    assert [pem for _, _, pem in parsed] == [fleet.key(f"{n}-report.pub").read_bytes() for n in df.NODES]
    report_keys = [fleet.key(f"{n}-report.pub") for n in df.NODES]
    ro.check_bindings(parsed, report_keys, "advance")  # bound: several report keys are accepted
    with pytest.raises(UsageError, match="any of those keys could sign any agent's report"):
        ro.check_bindings([(a, g, None) for a, g, _ in parsed], report_keys, "advance")


def test_the_failing_release_changes_only_its_golden_labels_and_still_validates(tmp_path: Path) -> None:
    from tritonops.model_repo.target import Target
    from tritonops.model_repo.validate import validate

    good, bad = df.release_source(tmp_path, "v2"), df.release_source(tmp_path, "v3", bad=True)
    differ = sorted(str(p.relative_to(bad)) for p in bad.rglob("*") if p.is_file()
                    and p.read_bytes() != (good / p.relative_to(bad)).read_bytes())
    assert differ == ["postprocess/1/model.py", "postprocess/golden.json"]
    labels = [c["outputs"]["label"]["data"] for c in json.loads((bad / "postprocess/golden.json").read_text())["cases"]]
    want = [c["outputs"]["label"]["data"] for c in json.loads((good / "postprocess/golden.json").read_text())["cases"]]
    assert all(x != y for got, ok in zip(labels, want, strict=True) for x, y in zip(got, ok, strict=True))
    assert validate(bad, target=Target.cpu).ok  # publish takes it: only the gate on a node can refuse it


def test_ansible_sees_the_fleet_in_pull_mode_with_the_local_lab_settings(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONOPS_HOSTS_CACHE", str(tmp_path))
    fleet = df.Fleet(tmp_path, endpoint="http://10.88.0.1:18790")
    hosts = {n: {"release_agent_group_labels": ["canary"] if n == df.CANARY else []} for n in df.NODES}
    inventory = node_inventory("demo-fleet", hosts, df.inventory_vars(fleet))
    exe = Path(sys.executable).with_name("ansible-inventory")
    for node in df.NODES:
        out = subprocess.run([str(exe), "-i", str(REPO / "ansible/inventories/local"), "-i", str(inventory),
                              "--host", node], capture_output=True, text=True, check=True, cwd=REPO)
        got = json.loads(out.stdout)
        assert got["release_agent_enabled"] is True and got["release_agent_store_name"] == df.STORE_NAME
        assert got["release_agent_report"] is True and got["release_agent_production"] is True
        assert got["triton_server_admin_secret"]  # ansible/inventories/local's group_vars apply too
        assert got["release_agent_group_labels"] == (["canary"] if node == df.CANARY else [])
    groups = subprocess.run([str(exe), "-i", str(REPO / "ansible/inventories/local"), "-i", str(inventory),
                             "--graph", "edge"], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert all(n in groups for n in df.NODES)
