"""Host checks for the drift_check role: the timer, the unit's exit code, the textfile metric.

Run by the role's molecule verify step, or against any inventory::

    pytest tests/infra/drift_check --hosts=ansible://edge --ansible-inventory=ansible/inventories/local
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from typing import Any

import pytest
from gpuhost_helpers import role_defaults
from node_helpers import assert_hardened, journal
from testinfra.utils.ansible_runner import AnsibleRunner
from tritonops import agent_bundle as bundle
from tritonops.agent.drift_probe import TEXTFILE_NAME
from tritonops.observability.metrics import DRIFT_METRIC

DEFAULTS = role_defaults("drift_check")
SERVICE = DEFAULTS["drift_check_service_name"]
AGENT = f"{DEFAULTS['drift_check_install_dir']}/tritonops-agent.pyz"
_LINE = re.compile(rf'^{DRIFT_METRIC}{{source="models",host="(?P<host>(?:[^"\\]|\\.)*)"}} (?P<n>\d+)$', re.M)


def _unescape(label: str) -> str:
    """A Prometheus label value as written in the text format (\\\\, \\" and \\n escaped)."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), label)


@pytest.fixture(scope="module")
def host_label(host: Any) -> str | None:
    """drift_check_host_label as the inventory sets it (None when it is templated or not set)."""
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        return None
    backend = host.backend
    name = str(getattr(backend, "name", None) or getattr(backend, "host", None) or backend.get_hostname())
    value = AnsibleRunner(inventory).get_variables(name).get("drift_check_host_label")
    return None if value is None or "{{" in str(value) else str(value)


@pytest.fixture(scope="module")
def textfile_dir(host_vars: dict[str, Any]) -> str:
    value = host_vars.get("drift_check_textfile_dir", "/var/lib/prometheus/node-exporter")
    return str(value) if "{{" not in str(value) else "/var/lib/prometheus/node-exporter"


@pytest.fixture(scope="module")
def ran(host: Any) -> Any:
    """Start the check once now (the timer would run it within 15 minutes)."""
    return host.run(f"systemctl start {SERVICE}.service")


def test_timer_enabled_and_waiting(host: Any) -> None:
    timer = host.service(f"{SERVICE}.timer")
    assert timer.is_enabled, journal(host, f"{SERVICE}.timer")
    assert timer.is_running, journal(host, f"{SERVICE}.timer")


def test_timer_schedule(host: Any) -> None:
    out = host.check_output(f"systemctl show {SERVICE}.timer -p TimersCalendar")
    assert "OnCalendar=" in out, out


def test_agent_is_the_projects_zipapp(host: Any) -> None:
    f = host.file(AGENT)
    assert f.user == "root" and f.mode == 0o755
    assert f.sha256sum == hashlib.sha256(bundle.build_bytes()).hexdigest()
    assert not host.file(f"{DEFAULTS['drift_check_install_dir']}/node_check.py").exists


def test_secret_file_is_root_only(host: Any) -> None:
    f = host.file(f"/etc/default/{SERVICE}")
    assert f.user == "root" and f.mode == 0o600
    assert "TRITONOPS_ADMIN_SECRET=" in f.content_string


def test_unit_does_not_carry_the_secret(host: Any) -> None:
    unit = host.file(f"/etc/systemd/system/{SERVICE}.service").content_string
    assert "TRITONOPS_ADMIN_SECRET" not in unit and "EnvironmentFile=" in unit


def test_unit_exposure(host: Any) -> None:
    assert_hardened(host, f"{SERVICE}.service")


def test_runs_as_root_without_capabilities(host: Any) -> None:
    """uid 0 only as the owner of the folders it reads and writes: no capability, read-only system."""
    show = host.check_output(f"systemctl show {SERVICE}.service -p CapabilityBoundingSet -p ProtectSystem "
                             "-p ReadWritePaths")
    props = dict(line.split("=", 1) for line in show.splitlines())
    assert props["CapabilityBoundingSet"] == "" and props["ProtectSystem"] == "strict", props


def test_run_succeeds_with_drift_not_a_unit_failure(host: Any, ran: Any) -> None:
    assert ran.rc == 0, ran.stderr + journal(host, SERVICE)
    show = host.check_output(f"systemctl show {SERVICE}.service -p Result -p ExecMainStatus")
    props = dict(line.split("=", 1) for line in show.splitlines())
    assert props["Result"] == "success", show + journal(host, SERVICE)
    assert props["ExecMainStatus"] in ("0", "1"), show + journal(host, SERVICE)


def test_textfile_counts_what_the_check_finds(host: Any, ran: Any, textfile_dir: str) -> None:
    text = host.file(f"{textfile_dir}/{TEXTFILE_NAME}").content_string
    lines = _LINE.findall(text)
    assert len(lines) == 1, text
    assert 'tritonops_drift_check_success{source="models"} 1' in text, text
    # The same check by hand (JSON on stdout) finds as many resources as the metric says.
    label = _unescape(lines[0][0])
    out = host.run(f"set -a; . /etc/default/{SERVICE}; python3 {AGENT} check --host {shlex.quote(label)}")
    assert out.rc in (0, 1), out.stdout + out.stderr
    findings = json.loads(out.stdout)["findings"]
    assert int(lines[0][1]) == len(findings), (text, findings)
    assert (out.rc == 1) == bool(findings)


def test_host_label_reaches_the_metric_unchanged(host: Any, ran: Any, textfile_dir: str,
                                                 host_label: str | None) -> None:
    """The unit passes the label as one argument, with nothing expanded by systemd (the molecule scenario
    sets one with spaces, quotes, '$' and '%')."""
    if host_label is None:
        pytest.skip("drift_check_host_label is not set to a plain value in this inventory")
    labels = [_unescape(h) for h, _ in _LINE.findall(host.file(f"{textfile_dir}/{TEXTFILE_NAME}").content_string)]
    assert labels == [host_label]
