"""Rules, dashboards, KEDA trigger and the export writer: pure checks (no servers)."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from tritonops.agent import exporter as agent_metrics
from tritonops.cli import app
from tritonops.observability import dashboards as d
from tritonops.observability import keda_trigger as keda
from tritonops.observability import metrics as m
from tritonops.observability import rules as r
from tritonops.observability.export import DASHBOARDS_DIR, RULES_FILE, export
from tritonops.release_format import node_drift
from typer.testing import CliRunner

ALLOWED_NAMES = set(m.TRITON_METRICS) | set(r.RECORDING_RULES) | {m.UP} | m.DRIFT_METRICS | set(agent_metrics.HELP)


def _alerts() -> dict[str, dict]:
    return {rule["alert"]: rule for g in r.rule_groups() for rule in g["rules"] if "alert" in rule}


def test_every_listed_alert_is_defined_once() -> None:
    names = [rule["alert"] for g in r.rule_groups() for rule in g["rules"] if "alert" in rule]
    assert sorted(names) == sorted(r.ALERTS)


@pytest.mark.parametrize("alert", r.ALERTS)
def test_alert_has_runbook_summary_and_severity(alert: str) -> None:
    rule = _alerts()[alert]
    assert rule["labels"]["severity"] in {"critical", "warning"}
    assert rule["annotations"]["summary"]
    assert rule["annotations"]["description"]
    assert len(rule["annotations"]["runbook"].splitlines()) >= 3


def test_recording_rules_cover_the_issue() -> None:
    recorded = [rule["record"] for rule in r.rule_groups()[0]["rules"]]
    assert recorded == list(r.RECORDING_RULES)
    exprs = {rule["record"]: rule["expr"] for rule in r.rule_groups()[0]["rules"]}
    assert "nv_inference_count" in exprs[r.INFERENCES_RATE]
    assert "nv_inference_exec_count" in exprs[r.EXECUTIONS_RATE]
    assert exprs[r.BATCH_EFFICIENCY] == f"{r.INFERENCES_RATE} / {r.EXECUTIONS_RATE}"
    assert "nv_inference_queue_duration_us" in exprs[r.QUEUE_SECONDS]
    assert "by (model, reason)" in exprs[r.FAILURES_RATE]


def test_a_recording_rule_is_defined_before_it_is_read() -> None:
    seen: set[str] = set()
    for rule in r.rule_groups()[0]["rules"]:
        used = m.metric_names(rule["expr"]) & set(r.RECORDING_RULES)
        assert used <= seen, f"{rule['record']} reads {used - seen} before it is recorded"
        seen.add(rule["record"])


def test_no_histogram_or_invented_metric_names() -> None:
    exprs = r.all_exprs(r.rule_groups())
    exprs += [q for dash in d.dashboards().values() for _t, q in d.panel_queries(dash)]
    exprs.append(keda.query("mlp"))
    used = set().union(*(m.metric_names(e) for e in exprs))
    assert used <= ALLOWED_NAMES, used - ALLOWED_NAMES
    assert not any("histogram_quantile" in e or "_bucket" in e for e in exprs)  # Triton has counters
    # and the names that matter are there
    assert {m.REQUEST_SUCCESS, m.REQUEST_FAILURE, m.QUEUE_DURATION_US, m.PENDING, m.DRIFT_METRIC} <= used


def test_metric_names_parser() -> None:
    expr = ('sum by (model, reason) (rate(nv_inference_request_failure{reason="BACKEND",model=~"a.*"}[1m])) '
            '/ on (model) group_left model:tritonops_requests:rate > 1e6 and up{job="x"} == 1')
    assert m.metric_names(expr) == {"nv_inference_request_failure", "model:tritonops_requests:rate", "up"}


def test_for_override_and_thresholds_apply() -> None:
    s = r.RuleSettings(for_override="3s", failure_ratio=0.2, job="edge",
                       scaling=keda.ScalingPolicy(max_replicas=3))
    alerts = {rule["alert"]: rule for g in r.rule_groups(s) for rule in g["rules"] if "alert" in rule}
    assert {a["for"] for a in alerts.values()} == {"3s"}
    assert alerts["TritonFailureRatioHigh"]["expr"].endswith("> 0.2")
    assert alerts["TritonDown"]["expr"] == 'up{job="edge"} == 0'
    assert alerts["TritonScalerAtMaxReplicas"]["expr"] == f"{r.JOB_DESIRED_REPLICAS} > 3"


def test_drift_alert_reads_the_drift_gauge_by_source_and_host() -> None:
    expr = _alerts()["TritonopsConfigurationDrift"]["expr"]
    # The gauge, or while the source's check fails (it writes no count), the last count it wrote
    # (tests/unit/observability/test_observability_promtool.py runs both cases).
    assert expr.startswith(f"max by (source, host) ({m.DRIFT_METRIC} > 0 or (last_over_time({m.DRIFT_METRIC}[")
    assert expr.endswith(f"and on (instance, job, source) {node_drift.SUCCESS_METRIC} == 0))")
    assert m.DRIFT_METRIC == "tritonops_drift_resources"


# --- KEDA -------------------------------------------------------------------------------------


def test_prometheus_trigger_shape() -> None:
    t = keda.prometheus_trigger("mlp_batched", "http://prometheus.monitoring:9090",
                                policy=keda.ScalingPolicy(threshold=4, activation_threshold=1))
    assert t["type"] == "prometheus"
    assert t["metricType"] == "AverageValue"
    md = t["metadata"]
    assert md["serverAddress"] == "http://prometheus.monitoring:9090"
    assert md["query"] == 'sum(avg_over_time(nv_inference_pending_request_count{model="mlp_batched",track!="canary"}[1m]))'
    assert md["threshold"] == "4"
    assert md["activationThreshold"] == "1"
    assert all(isinstance(v, str) for v in md.values())  # KEDA metadata values are strings


def test_trigger_rejects_a_non_url_server_address() -> None:
    with pytest.raises(ValueError, match="server_address"):
        keda.prometheus_trigger("mlp", "prometheus:9090")


@pytest.mark.parametrize(
    ("total", "policy", "expected"),
    [
        (0.0, keda.ScalingPolicy(threshold=5, min_replicas=1, max_replicas=10), 1),
        (5.0, keda.ScalingPolicy(threshold=5, min_replicas=1, max_replicas=10), 1),
        (5.1, keda.ScalingPolicy(threshold=5, min_replicas=1, max_replicas=10), 2),
        (23.0, keda.ScalingPolicy(threshold=5, min_replicas=1, max_replicas=10), 5),
        (500.0, keda.ScalingPolicy(threshold=5, min_replicas=1, max_replicas=10), 10),
        (3.0, keda.ScalingPolicy(threshold=5, min_replicas=2, max_replicas=10), 2),
        (0.0, keda.ScalingPolicy(threshold=5, min_replicas=0, max_replicas=10), 0),
        (0.5, keda.ScalingPolicy(threshold=5, min_replicas=0, max_replicas=10), 1),
    ],
)
def test_desired_replicas_formula(total: float, policy: keda.ScalingPolicy, expected: int) -> None:
    assert keda.desired_replicas(total, policy) == expected


def test_desired_replicas_hpa_tolerance_keeps_current() -> None:
    policy = keda.ScalingPolicy(threshold=5, max_replicas=10)
    assert keda.desired_replicas(21.0, policy, current_replicas=4) == 4  # 21/(5*4) = 1.05, within 10%
    assert keda.desired_replicas(23.0, policy, current_replicas=4) == 5  # 1.15: scale
    assert keda.desired_replicas(21.0, policy) == math.ceil(21 / 5)


def test_policy_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="threshold"):
        keda.ScalingPolicy(threshold=0)
    with pytest.raises(ValueError, match="max_replicas"):
        keda.ScalingPolicy(min_replicas=3, max_replicas=2)


# --- dashboards ----------------------------------------------------------------------------------


def test_six_dashboards_with_panels_and_queries() -> None:
    dashes = d.dashboards()
    assert set(dashes) == {"triton-traffic.json", "triton-latency.json", "triton-batching.json",
                           "triton-failures.json", "triton-gpu-cpu.json", "triton-replicas.json"}
    uids = set()
    for name, dash in dashes.items():
        uids.add(dash["uid"])
        assert dash["panels"], name
        for panel in dash["panels"]:
            assert panel["type"] == "timeseries"
            assert panel["options"]["legend"]["showLegend"] is True
            assert panel["targets"], (name, panel["title"])
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["model"]["allValue"] == ".*"
    assert len(uids) == len(dashes)


def test_failures_dashboard_splits_by_reason() -> None:
    queries = [q for _t, q in d.panel_queries(d.dashboards()["triton-failures.json"])]
    assert any(r.FAILURE_RATIO_BY_REASON in q for q in queries)


# --- export ----------------------------------------------------------------------------------------


def test_export_writes_rule_file_and_dashboards(tmp_path) -> None:
    files = export(tmp_path)
    assert tmp_path / RULES_FILE in files
    groups = yaml.safe_load((tmp_path / RULES_FILE).read_text())["groups"]
    assert groups == r.rule_groups()
    written = sorted(p.name for p in (tmp_path / DASHBOARDS_DIR).iterdir())
    assert written == sorted(d.dashboards())
    for p in (tmp_path / DASHBOARDS_DIR).iterdir():
        assert json.loads(p.read_text())["title"].startswith("Triton / ")


def test_cli_export(tmp_path) -> None:
    args = ["observability", "export", str(tmp_path), "--max-replicas", "4", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert str(tmp_path / RULES_FILE) in json.loads(result.output)["files"]
    assert f"{r.JOB_DESIRED_REPLICAS} > 4" in (tmp_path / RULES_FILE).read_text()


def test_track_rules_for_the_canary_gate() -> None:
    """model_track:* keep the pods' track label; p95 reads Triton's summary at quantile 0.95."""
    exprs = {rule["record"]: rule["expr"] for rule in r.recording_rules()}
    for name in (r.TRACK_REQUESTS_RATE, r.TRACK_FAILURE_RATIO, r.TRACK_REQUEST_SECONDS, r.TRACK_REQUEST_SECONDS_P95):
        assert name.startswith("model_track:") and "by (model, track)" in exprs[name]
    p95 = exprs[r.TRACK_REQUEST_SECONDS_P95]
    assert m.metric_names(p95) == {m.REQUEST_SUMMARY_US, m.REQUEST_SUMMARY_COUNT}
    assert 'quantile="0.95"' in p95 and "/ 1e6" in p95
    assert {m.REQUEST_SUMMARY_US, m.REQUEST_SUMMARY_COUNT} <= m.TRITON_METRICS
