"""The collection's lookup ``tritonops.triton.prometheus_rules`` (plugins/lookup/prometheus_rules.py).

node_monitoring installs its text as the node's rule file, so it must be the very text that
``tritonops observability export`` writes, for the job asked, and refuse a job that is not a scrape job
name (it lands in PromQL selectors). Called directly, and through a real ansible-playbook run whose
output promtool checks as a rule file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleLookupError
from tritonops.observability.export import rules_yaml
from tritonops.observability.rules import RuleSettings

REPO = Path(__file__).resolve().parents[3]


def _plugin() -> ModuleType:
    path = REPO / "plugins" / "lookup" / "prometheus_rules.py"
    spec = importlib.util.spec_from_file_location("tritonops_prometheus_rules_lookup", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lookup_is_the_exported_rule_file_for_the_job() -> None:
    text = _plugin().LookupModule().run([], job="edge-triton")
    assert text == [rules_yaml(RuleSettings(job="edge-triton"))]
    assert 'job="edge-triton"' in text[0] and 'job="triton"' not in text[0]


@pytest.mark.parametrize("job", ['triton"} or vector(1) #', "", "a b", "x" * 129])
def test_a_job_that_is_not_a_scrape_job_name_is_refused(job: str) -> None:
    with pytest.raises(AnsibleLookupError, match=r"tritonops.triton.prometheus_rules: job .*scrape job name"):
        _plugin().LookupModule().run([], job=job)


def test_without_the_package_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tritonops.observability.rules", None)  # a Python without tritonops
    with pytest.raises(AnsibleLookupError, match=r"not importable by .*install the tritonops wheel"):
        _plugin().LookupModule().run([])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed")
def test_a_play_renders_rules_that_promtool_accepts(tmp_path: Path) -> None:
    collections = tmp_path / "collections" / "ansible_collections" / "tritonops"
    collections.mkdir(parents=True)
    (collections / "triton").symlink_to(REPO)
    out = tmp_path / "rules.yml"
    (tmp_path / "play.yml").write_text(json.dumps([{
        "name": "Render the rules", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Write them", "ansible.builtin.copy": {
            "dest": str(out), "mode": "0644", "validate": "promtool check rules %s",
            "content": "{{ lookup('tritonops.triton.prometheus_rules', job='triton') }}"}}]}]))
    env = os.environ | {"ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"), "ANSIBLE_LOCALHOST_WARNING": "false",
                        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    res = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "play.yml"],
                         capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert out.read_text() == rules_yaml(RuleSettings(job="triton"))
