"""Prometheus recording rules and alerts for Triton, one source for Kubernetes and edge.

:func:`rule_groups` returns plain ``{"name", "rules"}`` groups: the Kubernetes side wraps them in a
``PrometheusRule``'s ``spec.groups``; the edge side writes them as a rule file
(:mod:`tritonops.observability.export`). Every alert carries ``summary``, ``description`` and
``runbook`` annotations and a ``severity`` label.

Triton's durations are cumulative microsecond counters: averages are ``rate(x_us) / rate(success)``.

Canary releases: the traffic rules (request and success rates, failure ratio, mean request time)
are recorded twice from one helper, :func:`traffic_exprs`: ``by (model)`` for the alerts and
dashboards (``model:...``), and ``by (model, track)`` for the canary gate (``model_track:...``),
which compares a model's ``track="canary"`` pods with its ``track="stable"`` pods
(:mod:`tritonops.release.canary`). The p95 request time comes from Triton's request-duration summary
(``--metrics-config summary_latencies=true``): a summary's quantiles cannot be merged across pods,
so :data:`TRACK_REQUEST_SECONDS_P95` is each pod's p95 weighted by that pod's request rate, the
same estimate for both tracks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tritonops.core import metric_names as release_metrics
from tritonops.core.triton_cli import HTTP_PORT, METRICS_PORT
from tritonops.observability import metrics as m
from tritonops.observability.keda_trigger import ScalingPolicy
from tritonops.release_format.node_drift import LAST_RUN_METRIC, SUCCESS_METRIC

RECORDING_GROUP = "tritonops.triton.recording"
ALERT_GROUP = "tritonops.triton.alerts"
DRIFT_GROUP = "tritonops.drift.alerts"
RELEASE_GROUP = "tritonops.release.alerts"

# Recording-rule names (level:metric:operations).
REQUESTS_RATE = "model:tritonops_requests:rate"
SUCCESS_RATE = "model:tritonops_request_success:rate"
FAILURES_RATE = "model_reason:tritonops_request_failures:rate"
FAILURE_RATIO_BY_REASON = "model_reason:tritonops_request_failure_ratio:rate"
FAILURE_RATIO = "model:tritonops_request_failure_ratio:rate"
REQUEST_SECONDS = "model:tritonops_request_seconds:mean"
QUEUE_SECONDS = "model:tritonops_queue_seconds:mean"
COMPUTE_INPUT_SECONDS = "model:tritonops_compute_input_seconds:mean"
COMPUTE_INFER_SECONDS = "model:tritonops_compute_infer_seconds:mean"
COMPUTE_OUTPUT_SECONDS = "model:tritonops_compute_output_seconds:mean"
INFERENCES_RATE = "model:tritonops_inferences:rate"
EXECUTIONS_RATE = "model:tritonops_executions:rate"
BATCH_EFFICIENCY = "model:tritonops_batch_efficiency:ratio"  # inferences per model execution
PENDING_PER_REPLICA = "model:tritonops_pending_requests:per_replica"
PENDING_TOTAL = "model:tritonops_pending_requests:sum"
DESIRED_REPLICAS = "model:tritonops_desired_replicas:unbounded"
JOB_DESIRED_REPLICAS = "job:tritonops_desired_replicas:unbounded"  # one scaler per Triton deployment
REPLICAS_UP = "job:tritonops_replicas_up:count"
# The same traffic figures per (model, track): canary vs stable (tritonops.release.canary reads them).
TRACK_REQUESTS_RATE = "model_track:tritonops_requests:rate"
TRACK_SUCCESS_RATE = "model_track:tritonops_request_success:rate"
TRACK_FAILURE_RATIO = "model_track:tritonops_request_failure_ratio:rate"
TRACK_REQUEST_SECONDS = "model_track:tritonops_request_seconds:mean"
TRACK_REQUEST_SECONDS_P95 = "model_track:tritonops_request_seconds:p95"
P95 = "0.95"  # one of Triton's default summary quantiles (0.5, 0.9, 0.95, 0.99, 0.999)

RECORDING_RULES = (
    REQUESTS_RATE, SUCCESS_RATE, FAILURES_RATE, FAILURE_RATIO_BY_REASON, FAILURE_RATIO, REQUEST_SECONDS,
    QUEUE_SECONDS, COMPUTE_INPUT_SECONDS, COMPUTE_INFER_SECONDS, COMPUTE_OUTPUT_SECONDS, INFERENCES_RATE,
    EXECUTIONS_RATE, BATCH_EFFICIENCY, PENDING_PER_REPLICA, PENDING_TOTAL, DESIRED_REPLICAS,
    JOB_DESIRED_REPLICAS, REPLICAS_UP, TRACK_REQUESTS_RATE, TRACK_SUCCESS_RATE, TRACK_FAILURE_RATIO,
    TRACK_REQUEST_SECONDS, TRACK_REQUEST_SECONDS_P95,
)

ALERTS = (
    "TritonDown",
    "TritonModelNotReady",
    "TritonFailureRatioHigh",
    "TritonQueueTimeHigh",
    "TritonPendingRequestsSaturating",
    "TritonGpuUtilizationLowWhileQueueing",
    "TritonGpuUtilizationHigh",
    "TritonGpuMemoryHigh",
    "TritonScalerAtMaxReplicas",
    "TritonopsConfigurationDrift",
    "TritonopsDriftCheckFailed",
    "TritonopsDriftCheckStale",
    "TritonopsReleaseBehindChannel",
    "TritonopsReleaseFailed",
    "TritonopsReleaseCredentialsFailing",
    "TritonopsReleaseMetadataExpired",
)


JOB_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


def check_job(value: str) -> str:
    """The job is written into PromQL selectors (job="..."): a plain scrape job name only (ValueError)."""
    if not isinstance(value, str) or not JOB_NAME.match(value):
        raise ValueError(f"{value!r}: use letters, digits and '_.:/-' (a Prometheus scrape job name)")
    return value


@dataclass(frozen=True)
class RuleSettings:
    """Thresholds, windows and durations. Defaults suit production; tests shorten the windows."""

    job: str = "triton"  # the scrape job (ServiceMonitor/edge scrape config) of Triton's metrics port
    rate_window: str = "1m"
    for_override: str | None = None  # replace every alert's `for:` (tests)
    failure_ratio: float = 0.05
    queue_seconds: float = 0.1
    pending_saturation: float = 10.0  # pending requests per replica
    gpu_low_utilization: float = 0.3
    gpu_high_utilization: float = 0.9
    gpu_memory_ratio: float = 0.8
    model_lookback: str = "30m"  # a model seen serving within this window and gone now is "not ready"
    # While a drift check fails, its last drift counts stand (within this window): the alert does not resolve.
    drift_memory: str = "1d"
    drift_max_age_seconds: int = 3600  # four runs of the drift_check role's 15-minute timer
    scaling: ScalingPolicy = field(default_factory=ScalingPolicy)

    def for_(self, default: str) -> str:
        return self.for_override if self.for_override is not None else default


def _sum_rate(metric: str, w: str, by: str = "model") -> str:
    return f"sum by ({by}) (rate({metric}[{w}]))"


def _per_request_seconds(metric: str, w: str, by: str = "model") -> str:
    return f"{_sum_rate(metric, w, by)} / {_sum_rate(m.REQUEST_SUCCESS, w, by)} / 1e6"


@dataclass(frozen=True)
class TrafficRecords:
    """The names the traffic figures are recorded under at one aggregation level (``by``)."""

    by: str
    success_rate: str
    requests_rate: str
    failure_ratio: str
    request_seconds: str


MODEL_TRAFFIC = TrafficRecords("model", SUCCESS_RATE, REQUESTS_RATE, FAILURE_RATIO, REQUEST_SECONDS)
TRACK_TRAFFIC = TrafficRecords(
    f"model, {m.TRACK}", TRACK_SUCCESS_RATE, TRACK_REQUESTS_RATE, TRACK_FAILURE_RATIO, TRACK_REQUEST_SECONDS
)


def traffic_exprs(level: TrafficRecords, w: str) -> dict[str, str]:
    """Success and request rates, failure ratio and mean request seconds, aggregated ``by (level.by)``.

    A model that never failed has no failure series: ``or ... * 0`` makes its failures 0, not absent.
    """
    by = level.by
    failures_or_zero = f"({_sum_rate(m.REQUEST_FAILURE, w, by)} or {_sum_rate(m.REQUEST_SUCCESS, w, by)} * 0)"
    return {
        level.success_rate: _sum_rate(m.REQUEST_SUCCESS, w, by),
        level.requests_rate: f"{_sum_rate(m.REQUEST_SUCCESS, w, by)} + {failures_or_zero}",
        level.failure_ratio: f"{failures_or_zero} / {level.requests_rate}",
        level.request_seconds: _per_request_seconds(m.REQUEST_DURATION_US, w, by),
    }


def p95_seconds_expr(w: str, by: str = TRACK_TRAFFIC.by) -> str:
    """Request seconds at p95 from Triton's summary: each pod's p95 weighted by its request rate.

    A pod whose summary saw no request in its sliding window reports NaN; ``>= 0`` drops it (and its
    weight), and a group without requests yields no sample rather than NaN.
    """
    quantile = f'(max without (quantile) ({m.REQUEST_SUMMARY_US}{{quantile="{P95}"}}) >= 0)'
    weight = f"rate({m.REQUEST_SUMMARY_COUNT}[{w}])"
    return (
        f"sum by ({by}) ({quantile} * {weight}) / (sum by ({by}) ({weight} and {quantile}) > 0) / 1e6"
    )


def recording_rules(s: RuleSettings | None = None) -> list[dict[str, Any]]:
    s = s or RuleSettings()
    w = s.rate_window
    exprs = {
        **traffic_exprs(MODEL_TRAFFIC, w),
        FAILURES_RATE: _sum_rate(m.REQUEST_FAILURE, w, by="model, reason"),
        FAILURE_RATIO_BY_REASON: f"{FAILURES_RATE} / on (model) group_left {REQUESTS_RATE}",
        QUEUE_SECONDS: _per_request_seconds(m.QUEUE_DURATION_US, w),
        COMPUTE_INPUT_SECONDS: _per_request_seconds(m.COMPUTE_INPUT_US, w),
        COMPUTE_INFER_SECONDS: _per_request_seconds(m.COMPUTE_INFER_US, w),
        COMPUTE_OUTPUT_SECONDS: _per_request_seconds(m.COMPUTE_OUTPUT_US, w),
        INFERENCES_RATE: _sum_rate(m.INFERENCE_COUNT, w),
        EXECUTIONS_RATE: _sum_rate(m.EXEC_COUNT, w),
        BATCH_EFFICIENCY: f"{INFERENCES_RATE} / {EXECUTIONS_RATE}",
        PENDING_TOTAL: f"sum by (model) ({m.PENDING})",
        PENDING_PER_REPLICA: f"avg by (model) (sum by (model, instance) ({m.PENDING}))",
        DESIRED_REPLICAS: (
            f"ceil(sum by (model) (avg_over_time({m.PENDING}[{s.scaling.window}])) / {s.scaling.threshold})"
        ),
        JOB_DESIRED_REPLICAS: (
            f'ceil(sum by (job) (avg_over_time({m.PENDING}{{job="{s.job}"}}[{s.scaling.window}]))'
            f" / {s.scaling.threshold})"
        ),
        REPLICAS_UP: f'count by (job) ({m.UP}{{job="{s.job}"}} == 1)',
        **traffic_exprs(TRACK_TRAFFIC, w),
        TRACK_REQUEST_SECONDS_P95: p95_seconds_expr(w),
    }
    # Order matters: a rule reading another's output comes after it in the group.
    return [{"record": name, "expr": exprs[name]} for name in RECORDING_RULES]


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str,
           runbook: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "team": "tritonops"},
        "annotations": {"summary": summary, "description": description, "runbook": runbook.strip()},
    }


def alert_rules(s: RuleSettings | None = None) -> list[dict[str, Any]]:
    s = s or RuleSettings()
    return [*_availability_alerts(s), *_request_alerts(s), *_gpu_alerts(s), *_scaling_alerts(s)]


def _availability_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """Triton or one of its models stopped serving."""
    job = f'job="{s.job}"'
    return [
        _alert(
            "TritonDown",
            f"{m.UP}{{{job}}} == 0",
            s.for_("1m"), "critical",
            "Triton metrics endpoint {{ $labels.instance }} is down",
            "Prometheus cannot scrape Triton at {{ $labels.instance }} (job {{ $labels.job }}).",
            f"""
1. Is the process up? systemd: `systemctl status tritonserver`, `journalctl -u tritonserver -n 200`;
   Kubernetes: `kubectl -n triton get pods`, `kubectl describe pod`, look for OOMKilled / CrashLoopBackOff.
2. A model that fails to load with --exit-on-error=true stops the server: the log names it.
3. Check the metrics port ({METRICS_PORT}) is reachable from Prometheus (NetworkPolicy, firewall).
4. `tritonops smoke` against the host once it is back; it runs a golden inference per model.
""",
        ),
        _alert(
            "TritonModelNotReady",
            f"(max_over_time({m.REQUEST_SUCCESS}[{s.model_lookback}]) "
            f"unless on (instance, model, version) {m.REQUEST_SUCCESS}) "
            f"and on (instance) ({m.UP}{{{job}}} == 1)",
            s.for_("2m"), "critical",
            "Model {{ $labels.model }} v{{ $labels.version }} stopped serving on {{ $labels.instance }}",
            "Triton at {{ $labels.instance }} is up but no longer exports metrics for a model it served "
            "within the last " + s.model_lookback + ": the model was unloaded or failed to (re)load.",
            f"""
1. `curl -s -XPOST http://HOST:{HTTP_PORT}/v2/repository/index` shows each model's state and reason.
2. Read the server log for the model's load error (bad config.pbtxt, missing file, backend error).
3. Validate the repository: `tritonops validate REPO`; roll back to the last good version.
4. In explicit mode, reload: `curl -XPOST http://HOST:{HTTP_PORT}/v2/repository/models/MODEL/load`.
""",
        ),
    ]


def _request_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """Requests fail, wait in the queue, or pile up per replica."""
    return [
        _alert(
            "TritonFailureRatioHigh",
            f"{FAILURE_RATIO} > {s.failure_ratio}",
            s.for_("5m"), "warning",
            "{{ $labels.model }}: {{ $value | humanizePercentage }} of requests fail",
            f"More than {s.failure_ratio:.0%} of inference requests to {{{{ $labels.model }}}} failed "
            f"over {s.rate_window}. See {FAILURE_RATIO_BY_REASON} for the reason "
            "(REJECTED, CANCELED, BACKEND, OTHER).",
            """
1. Which reason? Dashboard "Triton / Failures", or query model_reason:tritonops_request_failure_ratio:rate.
2. REJECTED: queue full or timeouts (dynamic_batching.default_queue_policy): scale out or raise limits.
3. BACKEND: the model itself errors: read the server log, check inputs (shape/dtype) of recent clients.
4. CANCELED: clients give up: compare client timeouts with queue time.
5. A new model version? Roll back to the previous version in the repository.
""",
        ),
        _alert(
            "TritonQueueTimeHigh",
            f"{QUEUE_SECONDS} > {s.queue_seconds}",
            s.for_("5m"), "warning",
            "{{ $labels.model }}: requests wait {{ $value | humanizeDuration }} in the queue",
            f"Average queue time per request for {{{{ $labels.model }}}} is above {s.queue_seconds}s.",
            """
1. Compare with compute time (dashboard "Triton / Latency breakdown"): queueing means not enough capacity.
2. Add instances (instance_group count) or enable dynamic batching: `tritonops tune MODEL`.
3. Scale out: check the KEDA ScaledObject is not at max replicas (TritonScalerAtMaxReplicas).
4. A max_queue_delay_microseconds set too high adds this delay on purpose: check the config.
""",
        ),
        _alert(
            "TritonPendingRequestsSaturating",
            f"{PENDING_PER_REPLICA} > {s.pending_saturation}",
            s.for_("5m"), "warning",
            "{{ $labels.model }}: {{ $value }} pending requests per replica",
            f"More than {s.pending_saturation:g} requests per replica wait for a backend on "
            "{{ $labels.model }}: the replicas cannot keep up with arrivals.",
            """
1. Is the scaler adding replicas? `kubectl -n triton get hpa,scaledobject`; on edge hosts, add a host.
2. Check GPU/CPU saturation (dashboard "Triton / GPU and CPU").
3. Raise throughput per replica: `tritonops tune MODEL` (dynamic batching, instance count).
4. Shed load at the client or gateway before queues time out (REJECTED failures follow).
""",
        ),
    ]


def _gpu_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """A GPU idle while requests queue, or with no headroom left (utilisation, memory)."""
    return [
        _alert(
            "TritonGpuUtilizationLowWhileQueueing",
            f"avg by (instance) ({m.GPU_UTILIZATION}) < {s.gpu_low_utilization} "
            f"and on (instance) sum by (instance) ({m.PENDING}) > 0",
            s.for_("10m"), "warning",
            "{{ $labels.instance }}: GPU mostly idle while requests queue",
            f"GPU utilisation on {{{{ $labels.instance }}}} is below {s.gpu_low_utilization:.0%} while "
            "requests are pending: the bottleneck is not the GPU.",
            """
1. Too few model instances or batching off: requests wait while the GPU idles. `tritonops tune MODEL`.
2. CPU-bound pre/post-processing (Python backend, ensembles): check nv_cpu_utilization.
3. Rate limiter or a slow upstream step in an ensemble: see the latency breakdown per model.
""",
        ),
        _alert(
            "TritonGpuUtilizationHigh",
            f"avg by (instance, gpu_uuid) ({m.GPU_UTILIZATION}) > {s.gpu_high_utilization}",
            s.for_("15m"), "warning",
            "{{ $labels.instance }}: GPU {{ $labels.gpu_uuid }} at {{ $value | humanizePercentage }}",
            f"GPU utilisation above {s.gpu_high_utilization:.0%} for a sustained period: no headroom left.",
            """
1. Expect queue time to rise next; check TritonQueueTimeHigh and pending requests.
2. Scale out (more replicas/GPUs), or move models to other GPUs (instance_group gpus).
3. Cheaper inference: TensorRT / FP16 (optimization.execution_accelerators).
""",
        ),
        _alert(
            "TritonGpuMemoryHigh",
            f"{m.GPU_MEMORY_USED} / {m.GPU_MEMORY_TOTAL} > {s.gpu_memory_ratio}",
            s.for_("5m"), "warning",
            "{{ $labels.instance }}: GPU {{ $labels.gpu_uuid }} memory "
            "{{ $value | humanizePercentage }} used",
            f"GPU memory use above {s.gpu_memory_ratio:.0%}: loading another model or version may fail.",
            f"""
1. Which models are loaded? `curl -s -XPOST http://HOST:{HTTP_PORT}/v2/repository/index`.
2. Unload unused versions (version_policy latest {{ num_versions: 1 }}).
3. Fewer instances per GPU, smaller max_batch_size, or move a model to another GPU/node.
""",
        ),
    ]


def _scaling_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """The autoscaler held at its maximum replicas."""
    max_r = s.scaling.max_replicas
    return [
        _alert(
            "TritonScalerAtMaxReplicas",
            f"{JOB_DESIRED_REPLICAS} > {max_r}",
            s.for_("10m"), "warning",
            "Triton job {{ $labels.job }} is held at its maximum of " + str(max_r) + " replicas",
            f"The autoscaler's formula asks for {{{{ $value }}}} replicas, more than max_replicas ({max_r}): "
            "the scaler is capped and pending requests keep growing.",
            """
1. Is the demand real? Dashboard "Triton / Replicas" (desired vs serving) and "Traffic".
2. Raise maxReplicaCount in the ScaledObject (and check GPU node pool capacity).
3. Raise per-replica throughput (`tritonops tune MODEL`) so fewer replicas are needed.
""",
        ),
    ]


def drift_rules(s: RuleSettings | None = None) -> list[dict[str, Any]]:
    """Drift found, and a drift check that failed or stopped running.

    A failed check writes no drift count (it knows none): the drift alert then keeps the last counts its
    source reported (``drift_memory``) instead of resolving, and TritonopsDriftCheckFailed fires beside it.
    """
    s = s or RuleSettings()
    failed = f"{SUCCESS_METRIC} == 0"
    return [
        _alert(
            "TritonopsConfigurationDrift",
            f"max by (source, host) ({m.DRIFT_METRIC} > 0 or (last_over_time({m.DRIFT_METRIC}[{s.drift_memory}]) > 0 "
            f"and on (instance, job, source) {failed}))",
            s.for_("15m"), "warning",
            "Drift on {{ $labels.host }} ({{ $labels.source }}): {{ $value }} resources differ",
            "What runs on {{ $labels.host }} is no longer what the code says (drift check source "
            "{{ $labels.source }}).",
            """
1. Run the check by hand with details: `tritonops drift --json` (source named in the alert).
2. Ansible: `ansible-playbook ansible/edge.yml --check --diff --limit HOST` shows what differs.
3. Revert the manual change by re-applying the code, or commit the change so the code says it.
""",
        ),
        _alert(
            "TritonopsDriftCheckFailed",
            f"min by (instance, source) ({SUCCESS_METRIC}) == 0",
            s.for_("20m"), "warning",
            "The {{ $labels.source }} drift check on {{ $labels.instance }} fails",
            "The drift check (source {{ $labels.source }}) could not run to the end twice in a row: drift "
            "there goes unseen, and the last drift it reported stays firing.",
            """
1. Node timer: `journalctl -u tritonops-drift-check` shows the error (exit 3); run
   `systemctl start tritonops-drift-check` to retry.
2. Controller: `tritonops drift --json` names the failed source in `errors` (exit 3).
3. Common causes: Triton's admin secret changed without the drift check's, systemd not answering,
   an inventory host unreachable.
""",
        ),
        _alert(
            "TritonopsDriftCheckStale",
            f"time() - max by (instance) ({LAST_RUN_METRIC}) > {s.drift_max_age_seconds}",
            s.for_("5m"), "warning",
            "The drift check on {{ $labels.instance }} has not run for {{ $value | humanizeDuration }}",
            f"No drift check has written its metrics on {{{{ $labels.instance }}}} for more than "
            f"{s.drift_max_age_seconds} seconds: its timer (or CI schedule) stopped, so drift goes unseen.",
            """
1. Node: `systemctl list-timers tritonops-drift-check.timer`; re-run the drift_check role to restore it.
2. Controller: the scheduled `tritonops drift --textfile-dir` job (CI, cron) stopped: look at its history.
3. Meanwhile run `tritonops drift -i INVENTORY --limit HOST` by hand: drift there is unknown until a check runs.
""",
        ),
    ]


def release_rules(s: RuleSettings | None = None) -> list[dict[str, Any]]:
    """Alerts on the release agents' metrics (pods' sidecars and edge nodes' pull agents)."""
    s = s or RuleSettings()
    return [
        _alert(
            "TritonopsReleaseBehindChannel",
            f"max by (instance, channel) ({release_metrics.UP_TO_DATE}) == 0",
            s.for_("30m"), "warning",
            "{{ $labels.instance }} does not serve the release of channel {{ $labels.channel }}",
            "The release agent on {{ $labels.instance }} has not reached the release its channel names "
            "(neither serving it nor having refused it) for 30 minutes: the store may be unreachable, the "
            "node's disk full, or Triton not answering.",
            """
1. `tritonops release status --store STORE --channel CHANNEL --agent-url http://INSTANCE/metrics` shows what it serves.
2. The agent's log (`journalctl -u tritonops-release-agent` on a node, the `release-agent` container in a pod)
   names the step that is failing; `curl INSTANCE/status` shows its state.
3. It keeps serving its last gated release meanwhile; nothing needs rolling back.
""",
        ),
        _alert(
            "TritonopsReleaseFailed",
            f"sum by (instance, channel, step) (increase({release_metrics.FAILURES}{{class=\"refused\"}}[30m])) > 0",
            s.for_("0m"), "warning",
            "A release was refused on {{ $labels.instance }} at step {{ $labels.step }}",
            "The release agent on {{ $labels.instance }} (channel {{ $labels.channel }}) refused a release at "
            "step {{ $labels.step }} and kept serving the last gated release.",
            """
1. verify: the release is not signed by a trusted key or its manifest does not match the channel: do not
   override; find out who published it.
2. fetch/install: a file in the store does not match its sha256, or the release cannot be laid out (a file
   and a folder of the same name, a path too long). A full disk, a store or Triton that does not answer is
   retried, not refused (class="retry"): TritonopsReleaseBehindChannel says when it lasts.
3. load/golden: the model does not load or answers differently from its golden.json: fix the model and publish
   a new release, or `tritonops release rollback CHANNEL --store STORE`.
""",
        ),
        # A credentials outage leaves tritonops_release_up_to_date at 1 (the agent compares with the last
        # pointer it could read), so TritonopsReleaseBehindChannel cannot see it: this alert does.
        _alert(
            "TritonopsReleaseCredentialsFailing",
            f"sum by (instance, source) (increase({release_metrics.CREDENTIALS_ERRORS}[15m])) > 0",
            s.for_("15m"), "warning",
            "The release agent on {{ $labels.instance }} cannot get S3 credentials ({{ $labels.source }})",
            "The release agent on {{ $labels.instance }} has failed to get S3 credentials from {{ $labels.source }} "
            "for 15 minutes: it keeps serving its release but sees no new ones until credentials work again.",
            """
1. web_identity (IRSA): the ServiceAccount's `eks.amazonaws.com/role-arn`, the role's trust policy (the
   cluster's OIDC provider, this namespace and ServiceAccount) and egress to the regional STS endpoint (443).
2. container (EKS Pod Identity): the pod identity association, and egress to 169.254.170.23:80.
3. The agent's log (the `release-agent` container) names the error code STS or the endpoint answered.
""",
        ),
        # Freeze: a mirror that keeps serving an old (validly signed) pointer. The agent keeps serving its
        # gated release and applies nothing new; up_to_date is 0 too, but this says why.
        _alert(
            "TritonopsReleaseMetadataExpired",
            f"max by (instance, channel) ({release_metrics.METADATA_EXPIRED}) == 1",
            s.for_("10m"), "warning",
            "The signed pointer of channel {{ $labels.channel }} has expired on {{ $labels.instance }}",
            "The release agent on {{ $labels.instance }} reads a channel pointer for {{ $labels.channel }} whose "
            "signed expiry has passed: it applies nothing new (a mirror may be replaying old metadata, or "
            "nobody refreshed the channel) and keeps serving its gated release.",
            """
1. `tritonops release status --store STORE --channel CHANNEL` shows the pointer; if the store's own
   pointer is current, the node reads a stale mirror or cache: fix the mirror.
2. If the store's pointer has expired, re-sign it: `tritonops release refresh --channel CHANNEL --store STORE
   --key KEY` (run it from a cron well within `--expires`, default 30 days).
""",
        ),
    ]


def rule_groups(settings: RuleSettings | None = None) -> list[dict[str, Any]]:
    """All rule groups: recording rules, Triton alerts, drift alerts, release alerts."""
    s = settings or RuleSettings()
    return [
        {"name": RECORDING_GROUP, "rules": recording_rules(s)},
        {"name": ALERT_GROUP, "rules": alert_rules(s)},
        {"name": DRIFT_GROUP, "rules": drift_rules(s)},
        {"name": RELEASE_GROUP, "rules": release_rules(s)},
    ]


def all_exprs(groups: list[dict[str, Any]]) -> list[str]:
    return [r["expr"] for g in groups for r in g["rules"]]
