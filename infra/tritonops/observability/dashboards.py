"""Grafana dashboards for Triton, built with grafana-foundation-sdk.

:func:`dashboards` returns ``{file name: dashboard JSON}``: the Kubernetes side puts them in a
ConfigMap labelled for Grafana's sidecar, the edge side writes the files
(:mod:`tritonops.observability.export`). Queries read this project's recording rules where one exists
(so a dashboard shows exactly what the alerts evaluate) and Triton's raw metrics otherwise.

Every dashboard has a ``datasource`` variable (Prometheus) and a ``model`` variable (regex, All = ``.*``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DataSourceRef

from tritonops.observability import metrics as m
from tritonops.observability import rules as r
from tritonops.observability.keda_trigger import ScalingPolicy

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
MODEL = 'model=~"$model"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    stacked: bool = False


def _panels(policy: ScalingPolicy, job: str) -> dict[str, tuple[str, list[PanelSpec]]]:
    """Each dashboard's file name, title and panels."""
    return {
        "triton-traffic.json": ("Triton / Traffic", _traffic_panels()),
        "triton-latency.json": ("Triton / Latency breakdown", _latency_panels()),
        "triton-batching.json": ("Triton / Batching", _batching_panels()),
        "triton-failures.json": ("Triton / Failures", _failure_panels()),
        "triton-gpu-cpu.json": ("Triton / GPU and CPU", _gpu_cpu_panels()),
        "triton-replicas.json": ("Triton / Replicas", _replica_panels(policy, job)),
    }


def _traffic_panels() -> list[PanelSpec]:
    """Requests, inferences, pending requests and request time."""
    return [
        PanelSpec("Requests per second", "reqps", (
            Query(f"{r.SUCCESS_RATE}{{{MODEL}}}", "{{model}} success"),
            Query(f"sum by (model) ({r.FAILURES_RATE}{{{MODEL}}})", "{{model}} failed"),
        ), "Successful and failed inference requests per second (each request may carry a batch)."),
        PanelSpec("Inferences per second", "ops", (
            Query(f"{r.INFERENCES_RATE}{{{MODEL}}}", "{{model}}"),
        ), "Inferences (batch items) per second: nv_inference_count."),
        PanelSpec("Pending requests", "short", (
            Query(f"sum by (model) ({m.PENDING}{{{MODEL}}})", "{{model}}"),
        ), "Requests waiting for a backend (nv_inference_pending_request_count), all replicas."),
        PanelSpec("End-to-end request time (server)", "s", (
            Query(f"{r.REQUEST_SECONDS}{{{MODEL}}}", "{{model}}"),
        ), "Average request duration inside Triton: rate(request_duration_us) / rate(request_success)."),
    ]


def _latency_panels() -> list[PanelSpec]:
    """Where a request's time goes: queue and compute phases."""
    return [
        PanelSpec("Average time per request, by phase", "s", (
            Query(f"{r.QUEUE_SECONDS}{{{MODEL}}}", "{{model}} queue"),
            Query(f"{r.COMPUTE_INPUT_SECONDS}{{{MODEL}}}", "{{model}} compute input"),
            Query(f"{r.COMPUTE_INFER_SECONDS}{{{MODEL}}}", "{{model}} compute infer"),
            Query(f"{r.COMPUTE_OUTPUT_SECONDS}{{{MODEL}}}", "{{model}} compute output"),
        ), "Queue and compute phases per successful request (counter rate ratios).", True),
        PanelSpec("Queue share of server time", "percentunit", (
            Query(f"{r.QUEUE_SECONDS}{{{MODEL}}} / {r.REQUEST_SECONDS}{{{MODEL}}}", "{{model}}"),
        ), "Fraction of server-side time spent waiting in the scheduler queue."),
        PanelSpec("End-to-end request time (server)", "s", (
            Query(f"{r.REQUEST_SECONDS}{{{MODEL}}}", "{{model}}"),
        )),
    ]


def _batching_panels() -> list[PanelSpec]:
    """How well the dynamic batcher merges requests into executions."""
    w = "$__rate_interval"
    return [
        PanelSpec("Batch efficiency (inferences per execution)", "short", (
            Query(f"{r.BATCH_EFFICIENCY}{{{MODEL}}}", "{{model}}"),
        ), "nv_inference_count / nv_inference_exec_count: 1 means no batching happens."),
        PanelSpec("Inferences and executions per second", "ops", (
            Query(f"{r.INFERENCES_RATE}{{{MODEL}}}", "{{model}} inferences"),
            Query(f"{r.EXECUTIONS_RATE}{{{MODEL}}}", "{{model}} executions"),
        )),
        PanelSpec("Requests per execution", "short", (
            Query(
                f"sum by (model) (rate({m.REQUEST_SUCCESS}{{{MODEL}}}[{w}])) "
                f"/ sum by (model) (rate({m.EXEC_COUNT}{{{MODEL}}}[{w}]))",
                "{{model}}",
            ),
        ), "How many client requests the dynamic batcher merges into one model execution."),
    ]


def _failure_panels() -> list[PanelSpec]:
    """Failed requests, by reason."""
    return [
        PanelSpec("Failure ratio by reason", "percentunit", (
            Query(f"{r.FAILURE_RATIO_BY_REASON}{{{MODEL}}}", "{{model}} {{reason}}"),
        ), "REJECTED (queue full / timeout), CANCELED (client), BACKEND (model error), OTHER.", True),
        PanelSpec("Failures per second by reason", "reqps", (
            Query(f"{r.FAILURES_RATE}{{{MODEL}}}", "{{model}} {{reason}}"),
        ), stacked=True),
        PanelSpec("Failure ratio", "percentunit", (
            Query(f"{r.FAILURE_RATIO}{{{MODEL}}}", "{{model}}"),
        )),
    ]


def _gpu_cpu_panels() -> list[PanelSpec]:
    """GPU and CPU utilisation, memory and power."""
    return [
        PanelSpec("GPU utilisation", "percentunit", (
            Query(f"{m.GPU_UTILIZATION}", "{{instance}} {{gpu_uuid}}"),
        ), "Absent on CPU-only servers and on Jetson (use the tegrastats exporter there)."),
        PanelSpec("GPU memory used", "percentunit", (
            Query(f"{m.GPU_MEMORY_USED} / {m.GPU_MEMORY_TOTAL}", "{{instance}} {{gpu_uuid}}"),
        )),
        PanelSpec("GPU power", "watt", (
            Query(f"{m.GPU_POWER}", "{{instance}} {{gpu_uuid}}"),
        )),
        PanelSpec("CPU utilisation", "percentunit", (
            Query(f"{m.CPU_UTILIZATION}", "{{instance}}"),
        )),
        PanelSpec("CPU memory used", "bytes", (
            Query(f"{m.CPU_MEMORY_USED}", "{{instance}}"),
        )),
    ]


def _replica_panels(policy: ScalingPolicy, job: str) -> list[PanelSpec]:
    """Replicas serving and what the autoscaler's formula asks for."""
    return [
        PanelSpec("Replicas serving", "short", (
            Query(f"{r.REPLICAS_UP}{{job=\"{job}\"}}", "up"),
        ), "Triton replicas Prometheus scrapes successfully."),
        PanelSpec("Desired replicas (autoscaler formula, before bounds)", "short", (
            Query(f"{r.JOB_DESIRED_REPLICAS}{{job=\"{job}\"}}", "all models"),
            Query(f"{r.DESIRED_REPLICAS}{{{MODEL}}}", "{{model}}"),
        ), f"ceil(sum(avg_over_time(pending[{policy.window}])) / {policy.threshold:g}); the "
           f"ScaledObject bounds it to [{policy.min_replicas}, {policy.max_replicas}]."),
        PanelSpec("Pending requests per replica", "short", (
            Query(f"{r.PENDING_PER_REPLICA}{{{MODEL}}}", "{{model}}"),
        ), f"The autoscaler targets {policy.threshold:g} per replica."),
    ]


def panel_specs(policy: ScalingPolicy | None = None, job: str = "triton") -> dict[str, list[PanelSpec]]:
    """Panels per dashboard file, before rendering (tests run each query against Prometheus)."""
    return {f: panels for f, (_title, panels) in _panels(policy or ScalingPolicy(), job).items()}


def _dashboard(uid: str, title: str, panels: list[PanelSpec]) -> dict[str, Any]:
    builder = (
        gd.Dashboard(title)
        .uid(uid)
        .tags(["triton", "tritonops"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            gd.QueryVariable("model")
            .label("Model")
            .datasource(DATASOURCE)
            .query(f"label_values({m.REQUEST_SUCCESS}, model)")
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
    )
    for i, p in enumerate(panels):
        panel = (
            timeseries.Panel()
            .title(p.title)
            .description(p.description)
            .datasource(DATASOURCE)
            .unit(p.unit)
            .height(8)
            .span(12)
            .fill_opacity(30 if p.stacked else 10)
            .legend(gc.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
                    .placement(cm.LegendPlacement.BOTTOM).show_legend(True))
            .tooltip(gc.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.NONE))
        )
        for j, q in enumerate(p.queries):
            panel = panel.with_target(
                gp.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + j))
            )
        builder = builder.with_panel(panel.id(i + 1))
    # Through the SDK's encoder, then back to plain dicts: what Grafana stores.
    result: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return result


def dashboards(policy: ScalingPolicy | None = None, job: str = "triton") -> dict[str, dict[str, Any]]:
    """File name -> Grafana dashboard JSON model."""
    out = {}
    for fname, (title, panels) in _panels(policy or ScalingPolicy(), job).items():
        uid = "tritonops-" + fname.removeprefix("triton-").removesuffix(".json")
        out[fname] = _dashboard(uid, title, panels)
    return out


def panel_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every target of a rendered dashboard."""
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            yield panel.get("title", ""), target["expr"]
