"""Metric names: Triton's own (from its metrics documentation), and this project's.

Triton's duration metrics are cumulative microsecond *counters*, not histograms: averages are
rate ratios (``rate(duration_us) / rate(request_success)``).
"""

from __future__ import annotations

import re

# Written by the drift checks as a node-exporter textfile: how many resources differ from what the code
# says (labels: source, host; 0 = no drift), whether the check could run, and when it last ran.
# Defined once, in the agent that writes them on nodes.
from tritonops.release_format.node_drift import DRIFT_METRIC as DRIFT_METRIC
from tritonops.release_format.node_drift import LAST_RUN_METRIC, SUCCESS_METRIC

DRIFT_METRICS = frozenset({DRIFT_METRIC, SUCCESS_METRIC, LAST_RUN_METRIC})

# --- Triton counters / gauges (labels: model, version) -----------------------------------------
REQUEST_SUCCESS = "nv_inference_request_success"
REQUEST_FAILURE = "nv_inference_request_failure"  # label reason=REJECTED|CANCELED|BACKEND|OTHER
INFERENCE_COUNT = "nv_inference_count"
EXEC_COUNT = "nv_inference_exec_count"
PENDING = "nv_inference_pending_request_count"
REQUEST_DURATION_US = "nv_inference_request_duration_us"
QUEUE_DURATION_US = "nv_inference_queue_duration_us"
COMPUTE_INPUT_US = "nv_inference_compute_input_duration_us"
COMPUTE_INFER_US = "nv_inference_compute_infer_duration_us"
COMPUTE_OUTPUT_US = "nv_inference_compute_output_duration_us"
# Summary (quantiles over a sliding window, labels model, version, quantile; plus _count and _sum):
# only with ``--metrics-config summary_latencies=true``. Successful requests only, like the duration
# counter; Triton leaves it out for models with the response cache enabled.
REQUEST_SUMMARY_US = "nv_inference_request_summary_us"
REQUEST_SUMMARY_COUNT = f"{REQUEST_SUMMARY_US}_count"
# --- Triton host metrics ----------------------------------------------------------------------
GPU_UTILIZATION = "nv_gpu_utilization"  # 0..1, label gpu_uuid
GPU_MEMORY_USED = "nv_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "nv_gpu_memory_total_bytes"
GPU_POWER = "nv_gpu_power_usage"
CPU_UTILIZATION = "nv_cpu_utilization"
CPU_MEMORY_USED = "nv_cpu_memory_used_bytes"

TRITON_METRICS = frozenset(
    {
        REQUEST_SUCCESS, REQUEST_FAILURE, INFERENCE_COUNT, EXEC_COUNT, PENDING, REQUEST_DURATION_US,
        QUEUE_DURATION_US, COMPUTE_INPUT_US, COMPUTE_INFER_US, COMPUTE_OUTPUT_US, GPU_UTILIZATION,
        GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_POWER, CPU_UTILIZATION, CPU_MEMORY_USED, REQUEST_SUMMARY_US,
        REQUEST_SUMMARY_COUNT,
    }
)
# Triton exports these only where NVML/DCGM sees a GPU: absent on CPU-only servers and on Jetson.
GPU_METRICS = frozenset({GPU_UTILIZATION, GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_POWER})

# Triton exports these only when started with --metrics-config summary_latencies=true.
SUMMARY_METRICS = frozenset({REQUEST_SUMMARY_US, REQUEST_SUMMARY_COUNT})

# Prometheus' own per-target health series.
UP = "up"

# Canary releases: the pods of a model service carry the pod label ``track`` (stable or canary); the
# ServiceMonitor copies it onto every series it scrapes (podTargetLabels), so rules can compare them.
TRACK = "track"
STABLE, CANARY = "stable", "canary"


_PROMQL_WORDS = frozenset(
    {
        "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
        "offset", "inf", "nan",
    }
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?!\w)\s*(\()?")


def metric_names(expr: str) -> set[str]:
    """The metric (series) names a PromQL expression reads: functions, labels, keywords removed."""
    s = _STRINGS.sub('""', expr)
    s = _MATCHERS.sub("", s)
    s = _RANGES.sub("", s)
    s = _GROUPING.sub(" ", s)
    names = set()
    for m in _IDENT.finditer(s):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names
