"""`ansible-playbook --check --diff` on a converged host reports no changes (run from molecule's
verify step, where the scenario's converge playbook and inventory are known; for a real fleet the
same question is `tritonops drift`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY")
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE")


@pytest.mark.skipif(not (SCENARIO and INVENTORY), reason="needs molecule's scenario (verify step)")
def test_check_diff_reports_no_changes(tmp_path: Path) -> None:
    assert SCENARIO and INVENTORY
    playbook = Path(SCENARIO) / "converge.yml"
    # JSON on stdout; replace molecule's extra callbacks (profile_tasks would print into the JSON) with
    # one that only writes files.
    env = os.environ | {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
                        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree",
                        "ANSIBLE_CALLBACK_TREE_DIR": str(tmp_path / "tree")}
    exe = Path(sys.executable).with_name("ansible-playbook")
    res = subprocess.run(
        [str(exe), "--check", "--diff", "--skip-tags", "molecule-notest,notest",
         "-i", str(Path(INVENTORY).parent), str(playbook)],
        capture_output=True, text=True, env=env, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    out = json.loads(res.stdout)
    changed = [
        f"{host}: {task['task']['name']}"
        for play in out["plays"] for task in play["tasks"]
        for host, result in task["hosts"].items() if result.get("changed")
    ]
    assert changed == [], "check mode would change: " + "; ".join(changed)
    assert all(s["failures"] == 0 and s["changed"] == 0 for s in out["stats"].values()), out["stats"]
