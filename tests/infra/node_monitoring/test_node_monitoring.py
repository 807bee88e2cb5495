"""Checks for roles/node_monitoring: node_exporter and the local Prometheus answer, Prometheus scrapes
its targets (asked through its own HTTP API from inside the node), and it loaded the project's rules.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import pytest
import yaml
from gpuhost_helpers import defaults, journal
from node_helpers import assert_hardened
from tritonops.observability.rules import RuleSettings, rule_groups

DEFAULTS = defaults("node_monitoring")


def _var(host_vars: dict[str, Any], name: str) -> Any:
    return host_vars.get(name, DEFAULTS[name])


def http_get(host: Any, url: str) -> str:
    """GET from inside the node (python3 is on every node; curl may not be)."""
    script = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
    out = host.run("python3 -c %s %s", script, url)  # testinfra quotes the arguments
    assert out.rc == 0, f"GET {url} failed: {out.stderr}"
    return str(out.stdout)


@pytest.fixture(scope="module")
def prom_url(host_vars: dict[str, Any]) -> str:
    return f"http://{_var(host_vars, 'node_monitoring_prometheus_address')}:{_var(host_vars, 'node_monitoring_prometheus_port')}"


@pytest.fixture(scope="module")
def gpu(host: Any) -> dict[str, Any]:
    return dict(json.loads(host.check_output("/etc/ansible/facts.d/gpu.fact")))


@pytest.mark.parametrize("service", ["prometheus-node-exporter", "prometheus"])
def test_service_running(host: Any, service: str) -> None:
    svc = host.service(service)
    assert svc.is_enabled
    assert svc.is_running, journal(host, service)


def test_node_exporter_serves_textfile_metric(host: Any, host_vars: dict[str, Any], gpu: dict[str, Any]) -> None:
    body = http_get(host, f"http://127.0.0.1:{_var(host_vars, 'node_monitoring_node_exporter_port')}/metrics")
    info = [line for line in body.splitlines() if line.startswith("tritonops_node_info{")]
    assert len(info) == 1, body[-2000:]
    assert f'platform="{gpu["platform"]}"' in info[0] and f'gpu_count="{gpu["gpu_count"]}"' in info[0]
    # The textfile collector read the directory without errors.
    assert "node_textfile_scrape_error 0" in body


def test_prometheus_ready(host: Any, prom_url: str) -> None:
    assert "Ready" in http_get(host, f"{prom_url}/-/ready")


def test_prometheus_config_passes_promtool(host: Any) -> None:
    out = host.run("promtool check config /etc/prometheus/prometheus.yml")
    assert out.rc == 0, out.stdout + out.stderr


def _targets(host: Any, prom_url: str) -> dict[str, dict[str, Any]]:
    doc = json.loads(http_get(host, f"{prom_url}/api/v1/targets?state=active"))
    assert doc["status"] == "success"
    return {t["labels"]["job"]: t for t in doc["data"]["activeTargets"]}


@pytest.fixture(scope="module")
def scraped_targets(host: Any, prom_url: str) -> dict[str, dict[str, Any]]:
    """Active targets once each has been scraped at least once (bounded wait: 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        targets = _targets(host, prom_url)
        if targets and all(t["health"] != "unknown" for t in targets.values()) or time.monotonic() > deadline:
            return targets
        time.sleep(1)


@pytest.mark.parametrize("job", ["node", "prometheus"])
def test_local_targets_up(scraped_targets: dict[str, dict[str, Any]], job: str) -> None:
    t = scraped_targets[job]
    assert t["health"] == "up", t


def test_triton_target_configured(scraped_targets: dict[str, dict[str, Any]], host_vars: dict[str, Any], host: Any) -> None:
    job = _var(host_vars, "node_monitoring_triton_job")
    assert job in scraped_targets, sorted(scraped_targets)
    configured = yaml.safe_load(host.file("/etc/prometheus/prometheus.yml").content_string)
    triton = next(s for s in configured["scrape_configs"] if s["job_name"] == job)
    assert scraped_targets[job]["scrapeUrl"] == f"http://{triton['static_configs'][0]['targets'][0]}/metrics"
    if not host.service("tritonserver").is_running:
        # No Triton in this node: Prometheus tried, and says why it is down.
        assert scraped_targets[job]["health"] == "down" and scraped_targets[job]["lastError"]
    else:
        assert scraped_targets[job]["health"] == "up", scraped_targets[job]


def test_node_series_queryable(host: Any, prom_url: str, scraped_targets: dict[str, dict[str, Any]]) -> None:
    # Select the configured target: the package's first start (its stock config, before the role's)
    # may leave a series under another instance name for the 5-minute lookback.
    instance = scraped_targets["node"]["labels"]["instance"]
    query = urllib.parse.quote(f'tritonops_node_info{{job="node",instance="{instance}"}}')
    doc = json.loads(http_get(host, f"{prom_url}/api/v1/query?query={query}"))
    assert doc["status"] == "success" and len(doc["data"]["result"]) == 1, doc
    assert doc["data"]["result"][0]["value"][1] == "1"


def test_project_rules_loaded(host: Any, prom_url: str, host_vars: dict[str, Any]) -> None:
    if _var(host_vars, "node_monitoring_prometheus_mode") != "server" or not _var(host_vars, "node_monitoring_rules"):
        pytest.skip("no rules in agent mode")
    doc = json.loads(http_get(host, f"{prom_url}/api/v1/rules"))
    loaded = {g["name"]: sorted(r["name"] for r in g["rules"]) for g in doc["data"]["groups"]}
    expected_groups = rule_groups(RuleSettings(job=_var(host_vars, "node_monitoring_triton_job")))
    expected = {g["name"]: sorted(r.get("record") or r["alert"] for r in g["rules"]) for g in expected_groups}
    assert loaded == expected
    assert all(g["file"] == "/etc/prometheus/rules/tritonops-rules.yml" for g in doc["data"]["groups"])


def test_dcgm_exporter_on_gpu_hosts(host: Any, gpu: dict[str, Any], host_vars: dict[str, Any],
                                    scraped_targets: dict[str, dict[str, Any]]) -> None:
    setting = str(_var(host_vars, "node_monitoring_dcgm_exporter")).lower()
    wanted = (gpu["platform"] == "nvidia_gpu" and gpu["arch"] == "x86_64") if setting == "auto" else setting == "true"
    if not wanted:
        assert "dcgm" not in scraped_targets
        pytest.skip("no DCGM exporter on this host")
    assert scraped_targets["dcgm"]["health"] == "up", journal(host, "dcgm-exporter")
    assert_hardened(host, "dcgm-exporter")
