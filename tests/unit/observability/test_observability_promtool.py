"""``promtool check rules`` and ``promtool test rules`` on the generated rule file.

Every alert gets a firing scenario and a quiet one (same series, below the threshold). The rule file
comes from ``rule_groups()`` with the shipped defaults (production ``for:`` durations and windows).
``promtool test rules`` compares annotations exactly; the scenarios compare labels, so they run on
a copy whose alert annotations are dropped, and one scenario checks the full annotations
(runbook included) of TritonDown, whose templates only read labels.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tritonops.observability import rules as r
from tritonops.observability.export import rules_yaml
from tritonops.release_format import node_drift

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: `make apt` installs prometheus")

T = 'job="triton",instance="10.0.0.1:8002"'
M = f'model="resnet",version="1",{T}'
BASE = {"job": "triton", "instance": "10.0.0.1:8002"}
STEPS = 200  # 15s steps: 50 minutes of samples
# The node's drift check, through node-exporter's textfile collector.
NODE = 'job="node",instance="edge-1:9100"'
NODE_BASE = {"job": "node", "instance": "edge-1:9100"}
DRIFT, SUCCESS, LAST_RUN = r.m.DRIFT_METRIC, node_drift.SUCCESS_METRIC, node_drift.LAST_RUN_METRIC


@dataclass(frozen=True)
class Scenario:
    alert: str
    firing: dict[str, str]  # series -> values
    quiet: dict[str, str]
    eval_time: str
    labels: dict[str, str]  # labels of the firing alert, besides alertname/severity/team


def _scaler_series(pending_each: int) -> dict[str, str]:
    max_r = r.RuleSettings().scaling.max_replicas
    out = {}
    for i in range(max_r):
        inst = f'job="triton",instance="10.0.0.{i}:8002"'
        out[f"up{{{inst}}}"] = f"1x{STEPS}"
        pending = f'nv_inference_pending_request_count{{model="resnet",version="1",{inst}}}'
        out[pending] = f"{pending_each}x{STEPS}"
    return out


SCENARIOS = [
    Scenario("TritonDown", {f"up{{{T}}}": f"0x{STEPS}"}, {f"up{{{T}}}": f"1x{STEPS}"}, "5m", BASE),
    Scenario(
        "TritonModelNotReady",
        {f"up{{{T}}}": f"1x{STEPS}", f"nv_inference_request_success{{{M}}}": "0+10x40 stale"},
        {f"up{{{T}}}": f"1x{STEPS}", f"nv_inference_request_success{{{M}}}": f"0+10x{STEPS}"},
        "20m",
        {**BASE, "model": "resnet", "version": "1"},
    ),
    Scenario(
        "TritonFailureRatioHigh",
        {f"nv_inference_request_success{{{M}}}": f"0+10x{STEPS}",
         f'nv_inference_request_failure{{reason="BACKEND",{M}}}': f"0+5x{STEPS}"},
        {f"nv_inference_request_success{{{M}}}": f"0+10x{STEPS}",
         f'nv_inference_request_failure{{reason="BACKEND",{M}}}': f"0x{STEPS}"},
        "15m",
        {"model": "resnet"},
    ),
    Scenario(
        "TritonQueueTimeHigh",  # 100 requests per step; 0.2 s vs 0.05 s queue time each
        {f"nv_inference_request_success{{{M}}}": f"0+100x{STEPS}",
         f"nv_inference_queue_duration_us{{{M}}}": f"0+20000000x{STEPS}"},
        {f"nv_inference_request_success{{{M}}}": f"0+100x{STEPS}",
         f"nv_inference_queue_duration_us{{{M}}}": f"0+5000000x{STEPS}"},
        "15m",
        {"model": "resnet"},
    ),
    Scenario(
        "TritonPendingRequestsSaturating",
        {f"nv_inference_pending_request_count{{{M}}}": f"25x{STEPS}"},
        {f"nv_inference_pending_request_count{{{M}}}": f"4x{STEPS}"},
        "15m",
        {"model": "resnet"},
    ),
    Scenario(
        "TritonGpuUtilizationLowWhileQueueing",
        {f'nv_gpu_utilization{{gpu_uuid="GPU-1",{T}}}': f"0.1x{STEPS}",
         f"nv_inference_pending_request_count{{{M}}}": f"6x{STEPS}"},
        {f'nv_gpu_utilization{{gpu_uuid="GPU-1",{T}}}': f"0.1x{STEPS}",
         f"nv_inference_pending_request_count{{{M}}}": f"0x{STEPS}"},
        "20m",
        {"instance": BASE["instance"]},
    ),
    Scenario(
        "TritonGpuUtilizationHigh",
        {f'nv_gpu_utilization{{gpu_uuid="GPU-1",{T}}}': f"0.97x{STEPS}"},
        {f'nv_gpu_utilization{{gpu_uuid="GPU-1",{T}}}': f"0.6x{STEPS}"},
        "25m",
        {"instance": BASE["instance"], "gpu_uuid": "GPU-1"},
    ),
    Scenario(
        "TritonGpuMemoryHigh",
        {f'nv_gpu_memory_used_bytes{{gpu_uuid="GPU-1",{T}}}': f"70e9x{STEPS}",
         f'nv_gpu_memory_total_bytes{{gpu_uuid="GPU-1",{T}}}': f"80e9x{STEPS}"},
        {f'nv_gpu_memory_used_bytes{{gpu_uuid="GPU-1",{T}}}': f"40e9x{STEPS}",
         f'nv_gpu_memory_total_bytes{{gpu_uuid="GPU-1",{T}}}': f"80e9x{STEPS}"},
        "15m",
        {**BASE, "gpu_uuid": "GPU-1"},
    ),
    Scenario(
        "TritonScalerAtMaxReplicas",  # 10 replicas, 6 pending each: ceil(60/5) = 12 > max 10
        _scaler_series(6),
        _scaler_series(1),  # ceil(10/5) = 2
        "20m",
        {"job": "triton"},
    ),
    Scenario(
        "TritonopsConfigurationDrift",
        {'tritonops_drift_resources{source="ansible",host="edge-1"}': f"3x{STEPS}"},
        {'tritonops_drift_resources{source="ansible",host="edge-1"}': f"0x{STEPS}"},
        "25m",
        {"source": "ansible", "host": "edge-1"},
    ),
    Scenario(
        "TritonopsDriftCheckFailed",  # the 15-minute timer's check fails twice in a row
        {f'{SUCCESS}{{source="models",{NODE}}}': f"1x40 0x{STEPS - 40}"},
        {f'{SUCCESS}{{source="models",{NODE}}}': f"1x40 0x60 1x{STEPS - 100}"},  # one failed run: quiet
        "35m",
        {"source": "models", "instance": NODE_BASE["instance"]},
    ),
    Scenario(
        "TritonopsDriftCheckStale",  # the last run at 10 minutes; the timer stopped there
        {f"{LAST_RUN}{{{NODE}}}": f"0+15x40 600x{2 * STEPS}"},
        {f"{LAST_RUN}{{{NODE}}}": f"0+15x{3 * STEPS}"},
        "80m",
        {"instance": NODE_BASE["instance"]},
    ),
    Scenario(
        "TritonopsReleaseBehindChannel",
        {'tritonops_release_up_to_date{channel="stable",instance="edge-1:9105",job="release-agent"}': f"0x{STEPS}"},
        {'tritonops_release_up_to_date{channel="stable",instance="edge-1:9105",job="release-agent"}':
         f"0x60 1x{STEPS - 60}"},  # behind for 15 minutes while a release downloads: quiet
        "45m",
        {"channel": "stable", "instance": "edge-1:9105"},
    ),
    Scenario(
        "TritonopsReleaseFailed",  # refused at the gate fires; a full disk at mark, retried, does not
        {'tritonops_release_failures_total{channel="stable",class="refused",step="golden",instance="edge-1:9105",'
         'job="release-agent"}': f"0x100 1x{STEPS - 100}"},
        {'tritonops_release_failures_total{channel="stable",class="retry",step="mark",instance="edge-1:9105",'
         'job="release-agent"}': f"0x100 1x{STEPS - 100}"},
        "26m",
        {"channel": "stable", "instance": "edge-1:9105", "step": "golden"},
    ),
    Scenario(
        "TritonopsReleaseCredentialsFailing",  # STS refuses every poll from minute 25; one failed poll: quiet
        {'tritonops_release_credentials_errors_total{source="web_identity",instance="pod-1:9105",'
         'job="release-agent"}': f"0x100 1+1x{STEPS - 100}"},
        {'tritonops_release_credentials_errors_total{source="web_identity",instance="pod-1:9105",'
         'job="release-agent"}': f"0x100 1x{STEPS - 100}"},
        "60m",
        {"source": "web_identity", "instance": "pod-1:9105"},
    ),
    Scenario(
        "TritonopsReleaseMetadataExpired",  # the pointer expired at minute 25; 5 minutes expired: quiet
        {'tritonops_release_metadata_expired{channel="stable",instance="edge-1:9105",job="release-agent"}':
         f"0x100 1x{STEPS - 100}"},
        {'tritonops_release_metadata_expired{channel="stable",instance="edge-1:9105",job="release-agent"}':
         f"0x100 1x20 0x{STEPS - 120}"},
        "45m",
        {"channel": "stable", "instance": "edge-1:9105"},
    ),
]


def test_scenarios_cover_every_alert() -> None:
    assert sorted(s.alert for s in SCENARIOS) == sorted(r.ALERTS)


def _severity(alert: str) -> str:
    rule = next(x for g in r.rule_groups() for x in g["rules"] if x.get("alert") == alert)
    return str(rule["labels"]["severity"])


def _run(tmp_path: Path, groups: list[dict], tests: list[dict]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": tests})
    )
    assert PROMTOOL
    return subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


def _without_annotations() -> list[dict]:
    groups = copy.deepcopy(r.rule_groups())
    for g in groups:
        for rule in g["rules"]:
            rule.pop("annotations", None)
    return groups


def _case(series: dict[str, str], alert: str, eval_time: str, exp: list[dict]) -> dict:
    return {
        "interval": "15s",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "alert_rule_test": [{"eval_time": eval_time, "alertname": alert, "exp_alerts": exp}],
    }


def test_promtool_check_rules(tmp_path: Path) -> None:
    path = tmp_path / "tritonops-rules.yml"
    path.write_text(rules_yaml())
    assert PROMTOOL
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    n = sum(len(g["rules"]) for g in r.rule_groups())
    assert f"SUCCESS: {n} rules found" in out.stdout


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.alert)
def test_alert_fires(tmp_path: Path, scenario: Scenario) -> None:
    labels = {**scenario.labels, "severity": _severity(scenario.alert), "team": "tritonops"}
    case = _case(scenario.firing, scenario.alert, scenario.eval_time, [{"exp_labels": labels}])
    out = _run(tmp_path, _without_annotations(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.alert)
def test_alert_stays_quiet(tmp_path: Path, scenario: Scenario) -> None:
    case = _case(scenario.quiet, scenario.alert, scenario.eval_time, [])
    out = _run(tmp_path, _without_annotations(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


def _drift_case(drift_values: str, success_values: str, eval_time: str, firing: bool) -> dict:
    series = {f'{DRIFT}{{source="models",host="edge-1",{NODE}}}': drift_values,
              f'{SUCCESS}{{source="models",{NODE}}}': success_values}
    labels = {"source": "models", "host": "edge-1", "severity": "warning", "team": "tritonops"}
    return _case(series, "TritonopsConfigurationDrift", eval_time, [{"exp_labels": labels}] if firing else [])


def test_drift_alert_keeps_firing_while_the_check_fails(tmp_path: Path) -> None:
    """Drift found for 25 minutes, then the check fails and writes no count: still firing 25 minutes later."""
    case = _drift_case("3x100 stale", f"1x100 0x{STEPS - 100}", "45m", firing=True)
    out = _run(tmp_path, _without_annotations(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


def test_drift_alert_resolves_when_the_check_succeeds_clean(tmp_path: Path) -> None:
    """The same drift, then a check that ran to the end and found none: resolved."""
    case = _drift_case(f"3x100 0x{STEPS - 100}", f"1x{STEPS}", "45m", firing=False)
    out = _run(tmp_path, _without_annotations(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


def test_alert_waits_for_its_for_duration(tmp_path: Path) -> None:
    # TritonDown has for: 1m: nothing at 45s, firing at 2m.
    s = SCENARIOS[0]
    early = _case(s.firing, s.alert, "45s", [])
    out = _run(tmp_path, _without_annotations(), [early])
    assert out.returncode == 0, out.stdout + out.stderr


def test_runbook_annotations_render(tmp_path: Path) -> None:
    rule = next(x for g in r.rule_groups() for x in g["rules"] if x.get("alert") == "TritonDown")
    ann = rule["annotations"]
    exp = {
        "exp_labels": {**BASE, "severity": "critical", "team": "tritonops"},
        "exp_annotations": {
            "summary": ann["summary"].replace("{{ $labels.instance }}", BASE["instance"]),
            "description": ann["description"].replace("{{ $labels.instance }}", BASE["instance"])
            .replace("{{ $labels.job }}", BASE["job"]),
            "runbook": ann["runbook"],
        },
    }
    out = _run(tmp_path, r.rule_groups(), [_case(SCENARIOS[0].firing, "TritonDown", "5m", [exp])])
    assert out.returncode == 0, out.stdout + out.stderr


def test_recording_rules_compute_the_documented_ratios(tmp_path: Path) -> None:
    # Per 15s: 100 ok + 100 rejected requests, 400 inferences in 50 executions, 2 s queue time, 6 pending.
    series = {
        f"nv_inference_request_success{{{M}}}": f"0+100x{STEPS}",
        f"nv_inference_count{{{M}}}": f"0+400x{STEPS}",
        f"nv_inference_exec_count{{{M}}}": f"0+50x{STEPS}",
        f"nv_inference_queue_duration_us{{{M}}}": f"0+2000000x{STEPS}",
        f"nv_inference_pending_request_count{{{M}}}": f"6x{STEPS}",
        f'nv_inference_request_failure{{reason="REJECTED",{M}}}': f"0+100x{STEPS}",
    }
    case = {
        "interval": "15s",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [
            {"expr": r.BATCH_EFFICIENCY, "eval_time": "10m",
             "exp_samples": [{"labels": f'{r.BATCH_EFFICIENCY}{{model="resnet"}}', "value": 8}]},
            {"expr": r.QUEUE_SECONDS, "eval_time": "10m",
             "exp_samples": [{"labels": f'{r.QUEUE_SECONDS}{{model="resnet"}}', "value": 0.02}]},
            {"expr": r.FAILURE_RATIO_BY_REASON, "eval_time": "10m",
             "exp_samples": [{"labels": f'{r.FAILURE_RATIO_BY_REASON}{{model="resnet",reason="REJECTED"}}',
                              "value": 0.5}]},
            {"expr": r.DESIRED_REPLICAS, "eval_time": "10m",  # ceil(6 / 5)
             "exp_samples": [{"labels": f'{r.DESIRED_REPLICAS}{{model="resnet"}}', "value": 2}]},
            {"expr": r.JOB_DESIRED_REPLICAS, "eval_time": "10m",
             "exp_samples": [{"labels": f'{r.JOB_DESIRED_REPLICAS}{{job="triton"}}', "value": 2}]},
        ],
    }
    out = _run(tmp_path, r.rule_groups(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


# --- per-track rules (canary vs stable) ----------------------------------------------------------

SUMMARY = "nv_inference_request_summary_us"
NAN = " ".join(["NaN"] * STEPS)  # a summary quantile with no observation in its window


def _pod(track: str, i: int) -> str:
    return f'model="resnet",version="1",job="triton",instance="10.0.{i}.1:8002",track="{track}"'


def test_track_rules_compare_canary_with_stable(tmp_path: Path) -> None:
    """Per 15 s: stable pods A (100 ok, p95 2 ms) and B (300 ok, p95 4 ms); canary pod C (10 ok,
    10 BACKEND failures, p95 10 ms) and pod D (no request in its summary window: p95 NaN)."""
    a, b, c, d = _pod("stable", 1), _pod("stable", 2), _pod("canary", 3), _pod("canary", 4)
    series = {
        f"nv_inference_request_success{{{a}}}": f"0+100x{STEPS}",
        f"nv_inference_request_success{{{b}}}": f"0+300x{STEPS}",
        f"nv_inference_request_success{{{c}}}": f"0+10x{STEPS}",
        f"nv_inference_request_success{{{d}}}": f"0x{STEPS}",
        f'nv_inference_request_failure{{reason="BACKEND",{c}}}': f"0+10x{STEPS}",
        f"nv_inference_request_duration_us{{{a}}}": f"0+150000x{STEPS}",  # 1.5 ms each
        f"nv_inference_request_duration_us{{{b}}}": f"0+450000x{STEPS}",
        f"nv_inference_request_duration_us{{{c}}}": f"0+80000x{STEPS}",  # 8 ms each
        f'{SUMMARY}{{quantile="0.95",{a}}}': f"2000x{STEPS}",
        f'{SUMMARY}{{quantile="0.5",{a}}}': f"1000x{STEPS}",
        f'{SUMMARY}{{quantile="0.95",{b}}}': f"4000x{STEPS}",
        f'{SUMMARY}{{quantile="0.95",{c}}}': f"10000x{STEPS}",
        f'{SUMMARY}{{quantile="0.95",{d}}}': NAN,
        f"{SUMMARY}_count{{{a}}}": f"0+100x{STEPS}",
        f"{SUMMARY}_count{{{b}}}": f"0+300x{STEPS}",
        f"{SUMMARY}_count{{{c}}}": f"0+10x{STEPS}",
        f"{SUMMARY}_count{{{d}}}": f"0x{STEPS}",
    }

    def samples(rule: str, stable: float, canary: float) -> dict:
        return {"expr": rule, "eval_time": "10m", "exp_samples": [
            {"labels": f'{rule}{{model="resnet",track="canary"}}', "value": canary},
            {"labels": f'{rule}{{model="resnet",track="stable"}}', "value": stable},
        ]}

    case = {
        "interval": "15s",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [
            samples(r.TRACK_REQUESTS_RATE, 400 / 15, 20 / 15),
            samples(r.TRACK_SUCCESS_RATE, 400 / 15, 10 / 15),
            samples(r.TRACK_FAILURE_RATIO, 0, 0.5),
            samples(r.TRACK_REQUEST_SECONDS, 0.0015, 0.008),
            # request-weighted p95 of the pods, in microseconds (promtool compares exactly):
            # (2000 x 100 + 4000 x 300) / 400 = 3500; the canary's NaN pod is left out
            {"expr": f"round({r.TRACK_REQUEST_SECONDS_P95} * 1e6)", "eval_time": "10m", "exp_samples": [
                {"labels": '{model="resnet",track="canary"}', "value": 10000},
                {"labels": '{model="resnet",track="stable"}', "value": 3500}]},
            # the model-level rules the alerts read still see every pod of both tracks: 10 failed of 420
            {"expr": f"round({r.FAILURE_RATIO} * 420)", "eval_time": "10m",
             "exp_samples": [{"labels": '{model="resnet"}', "value": 10}]},
        ],
    }
    out = _run(tmp_path, r.rule_groups(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


def test_track_p95_absent_without_requests_or_summaries(tmp_path: Path) -> None:
    """No request in the window (or Triton without summaries): no p95 sample, not NaN or 0."""
    c = _pod("canary", 3)
    series = {
        f"nv_inference_request_success{{{c}}}": f"5x{STEPS}",
        f'{SUMMARY}{{quantile="0.95",{c}}}': NAN,
        f"{SUMMARY}_count{{{c}}}": f"5x{STEPS}",
        f"nv_inference_request_success{{{_pod('stable', 1)}}}": f"0+10x{STEPS}",  # no summary at all
    }
    case = {
        "interval": "15s",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [
            {"expr": r.TRACK_REQUEST_SECONDS_P95, "eval_time": "10m", "exp_samples": []},
            {"expr": r.TRACK_REQUESTS_RATE, "eval_time": "10m", "exp_samples": [  # the gate's "not enough data"
                {"labels": f'{r.TRACK_REQUESTS_RATE}{{model="resnet",track="canary"}}', "value": 0},
                {"labels": f'{r.TRACK_REQUESTS_RATE}{{model="resnet",track="stable"}}', "value": 10 / 15}]},
        ],
    }
    out = _run(tmp_path, r.rule_groups(), [case])
    assert out.returncode == 0, out.stdout + out.stderr


def test_track_rules_reuse_the_alerts_expressions() -> None:
    """model_track:* are the model:* expressions with `by (model, track)`, not a second copy."""
    exprs = {rule["record"]: rule["expr"] for rule in r.recording_rules()}
    pairs = [(r.REQUESTS_RATE, r.TRACK_REQUESTS_RATE), (r.SUCCESS_RATE, r.TRACK_SUCCESS_RATE),
             (r.FAILURE_RATIO, r.TRACK_FAILURE_RATIO), (r.REQUEST_SECONDS, r.TRACK_REQUEST_SECONDS)]
    for model_rule, track_rule in pairs:
        assert exprs[track_rule] == exprs[model_rule].replace("by (model)", "by (model, track)").replace(
            r.REQUESTS_RATE, r.TRACK_REQUESTS_RATE)
