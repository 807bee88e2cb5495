"""Host checks for the drift_check role: the timer, the unit's exit code, the textfile metric.

Run by the role's molecule verify step, or against any inventory::

    pytest tests/infra/drift_check --hosts=ansible://edge --ansible-inventory=ansible/inventories/local
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import journal, role_defaults

from infra.drift import node_check
from infra.observability.metrics import DRIFT_METRIC

DEFAULTS = role_defaults("drift_check")
SERVICE = DEFAULTS["drift_check_service_name"]
SCRIPT = f"{DEFAULTS['drift_check_install_dir']}/node_check.py"
_LINE = re.compile(rf'^{DRIFT_METRIC}{{source="models",host="(?P<host>[^"]+)"}} (?P<n>\d+)$', re.M)


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


def test_script_is_the_projects_node_check(host: Any) -> None:
    f = host.file(SCRIPT)
    assert f.user == "root" and f.mode == 0o755
    assert f.content_string == Path(node_check.__file__).read_text()


def test_secret_file_is_root_only(host: Any) -> None:
    f = host.file(f"/etc/default/{SERVICE}")
    assert f.user == "root" and f.mode == 0o600
    assert "TRITONOPS_ADMIN_SECRET=" in f.content_string


def test_unit_does_not_carry_the_secret(host: Any) -> None:
    unit = host.file(f"/etc/systemd/system/{SERVICE}.service").content_string
    assert "TRITONOPS_ADMIN_SECRET" not in unit and "EnvironmentFile=" in unit


def test_run_succeeds_with_drift_not_a_unit_failure(host: Any, ran: Any) -> None:
    assert ran.rc == 0, ran.stderr + journal(host, SERVICE)
    show = host.check_output(f"systemctl show {SERVICE}.service -p Result -p ExecMainStatus")
    props = dict(line.split("=", 1) for line in show.splitlines())
    assert props["Result"] == "success", show + journal(host, SERVICE)
    assert props["ExecMainStatus"] in ("0", "2"), show + journal(host, SERVICE)


def test_textfile_counts_what_the_check_finds(host: Any, ran: Any, textfile_dir: str) -> None:
    text = host.file(f"{textfile_dir}/{node_check.TEXTFILE_NAME}").content_string
    lines = _LINE.findall(text)
    assert len(lines) == 1, text
    assert 'tritonops_drift_check_success{source="models"} 1' in text, text
    # The same check by hand (JSON on stdout) finds as many resources as the metric says.
    out = host.run(f"set -a; . /etc/default/{SERVICE}; python3 {SCRIPT} check --host {lines[0][0]}")
    assert out.rc in (0, 2), out.stdout + out.stderr
    findings = json.loads(out.stdout)["findings"]
    assert int(lines[0][1]) == len(findings), (text, findings)
    assert (out.rc == 2) == bool(findings)
