"""A day of traffic through the autoscaler, minute by minute: SLO minutes lost and GPU-hours.

Discrete time (``step_s``, default 15 s), pure and seeded. Each step:

- demand: the profile's hourly requests/s interpolated, a spike, and seeded noise;
- ready replicas serve ``replica_rps`` each; what they cannot serve piles up as a backlog;
- KEDA's metric (polled every ``polling_interval`` s): pending requests summed over the replicas,
  :func:`tritonops.capacity.plan.pending_per_replica` per replica plus the backlog, averaged over 1 min
  (the trigger's ``avg_over_time`` window);
- optionally a second trigger, the served requests/s summed over the replicas (``rate_target`` per
  replica, the same 1 min average); the HPA follows whichever trigger asks for more;
- the HPA: :func:`tritonops.observability.keda_trigger.desired_replicas` with its tolerance, scale-up limited as
  the HPA's default policy (the larger of +100 % and +4 pods per 15 s), scale-down only to the
  highest recommendation of the last ``stabilization_s`` (300 s by default, as Kubernetes documents);
  with ``min_replicas == 0`` KEDA drops to zero after ``cooldown_s`` without activity;
- a new pod goes on a node with a free GPU share, else a node is provisioned (ready after
  ``provisioning_s``); the pod is ready ``model_load_s`` after its node is; empty nodes go after
  ``consolidate_s`` (Karpenter's consolidateAfter).

A minute is an SLO minute lost when the ready capacity is below the demand in any of its steps.
GPU-hours count nodes from launch (billing starts then) times GPUs per node.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field, replace

from tritonops.capacity.plan import pending_per_replica
from tritonops.observability.keda_trigger import ScalingPolicy, desired_replicas

DAY_S = 86400


@dataclass(frozen=True)
class Spike:
    start_s: float = 14 * 3600
    duration_s: float = 20 * 60
    factor: float = 1.6  # demand x factor while it lasts


@dataclass(frozen=True)
class SimParams:
    replica_rps: float
    pods_per_node: int = 1
    gpus_per_node: int = 1
    step_s: int = 15
    polling_interval: int = 15  # KEDA's pollingInterval
    cooldown_s: int = 300  # KEDA's cooldownPeriod (to zero replicas only)
    stabilization_s: int = 300  # HPA scale-down stabilisation window
    metric_window_s: int = 60  # avg_over_time window of the trigger query
    provisioning_s: float = 120.0  # launch to Ready of a GPU node (Karpenter)
    model_load_s: float = 60.0  # pod scheduled on a ready node -> models loaded, Ready
    consolidate_s: float = 60.0  # an empty node is removed after this
    noise: float = 0.03  # relative standard deviation of the demand
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("replica_rps", "provisioning_s", "model_load_s", "consolidate_s", "noise"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0 or (name == "replica_rps" and v == 0):
                raise ValueError(f"{name}: must be a finite number {'> 0' if name == 'replica_rps' else '>= 0'}, "
                                 f"got {v}")
        if self.step_s <= 0 or self.polling_interval % self.step_s or self.pods_per_node < 1:
            raise ValueError("step_s must divide polling_interval; pods_per_node >= 1")


@dataclass
class Run:
    """One provisioning strategy's day: per-step series and the totals."""

    name: str
    capacity_rps: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    slo_minutes_lost: int = 0
    gpu_hours: float = 0.0


def demand(hourly_rps: list[float], params: SimParams, spike: Spike | None = None) -> list[float]:
    """Requests/s at each step: hourly values interpolated at mid-hour, the spike, seeded noise."""
    rng = random.Random(params.seed)
    out = []
    for k in range(DAY_S // params.step_s):
        t = k * params.step_s
        h = t / 3600 - 0.5
        i = math.floor(h)
        frac = h - i
        base = hourly_rps[i % 24] * (1 - frac) + hourly_rps[(i + 1) % 24] * frac
        if spike and spike.start_s <= t < spike.start_s + spike.duration_s:
            base *= spike.factor
        out.append(max(0.0, base * (1 + rng.gauss(0, params.noise))) if base > 0 else 0.0)
    return out


def _lost_minutes(dem: list[float], cap: list[float], step_s: int) -> int:
    per_min = 60 // step_s
    return sum(1 for m in range(0, len(dem), per_min)
               if any(c < d for d, c in zip(dem[m:m + per_min], cap[m:m + per_min], strict=True)))


def fixed(dem: list[float], replicas: int, params: SimParams) -> Run:
    """Provisioned for the peak all day: ``replicas`` ready from the start."""
    nodes = math.ceil(replicas / params.pods_per_node)
    run = Run(f"fixed ({replicas} replicas)", [replicas * params.replica_rps] * len(dem), [replicas] * len(dem),
              [nodes] * len(dem))
    run.slo_minutes_lost = _lost_minutes(dem, run.capacity_rps, params.step_s)
    run.gpu_hours = nodes * params.gpus_per_node * len(dem) * params.step_s / 3600
    return run


class Scaler:
    """KEDA + HPA: the Deployment's replicas after each poll of the trigger's metric."""

    def __init__(self, policy: ScalingPolicy, params: SimParams, replicas: int) -> None:
        self.policy = policy
        self.params = params
        self.replicas = replicas
        self.recs: deque[tuple[float, int]] = deque()  # (time, recommendation) within the window
        self.last_active = 0.0

    def poll(self, t: float, metric: float, rate: float | None = None, rate_target: float | None = None) -> int:
        """Replicas after a poll of the pending trigger's ``metric`` and, with ``rate_target``, of the
        served-rate trigger's ``rate`` (the HPA takes the larger recommendation)."""
        policy = self.policy
        if metric > policy.activation_threshold or (rate or 0.0) > policy.activation_threshold:
            self.last_active = t
        rec = desired_replicas(metric, policy, current_replicas=self.replicas or None)
        if rate is not None and rate_target is not None:
            by_rate = replace(policy, threshold=rate_target)
            rec = max(rec, desired_replicas(rate, by_rate, current_replicas=self.replicas or None))
        if rec == 0 and t - self.last_active < self.params.cooldown_s:
            rec = min(self.replicas, 1)  # KEDA keeps the workload active until its cooldown ends
        self.recs.append((t, rec))
        while self.recs[0][0] <= t - self.params.stabilization_s:
            self.recs.popleft()
        spec = self.replicas
        if rec > spec:
            spec = min(rec, max(2 * spec, spec + 4))  # the HPA's default scale-up policy
        elif rec == 0:
            spec = 0  # KEDA deactivates the workload itself, past the HPA
        else:
            spec = min(spec, max(r for _, r in self.recs))  # down only to the window's highest
        self.replicas = spec
        return spec


def autoscaled(dem: list[float], policy: ScalingPolicy, params: SimParams, rate_target: float | None = None) -> Run:
    """KEDA + HPA + node provisioning over the day, starting settled at ``min_replicas``; with
    ``rate_target`` (requests/s per replica) the served-rate trigger scales beside the pending one."""
    p = params
    run = Run(("autoscaled" if policy.min_replicas else "scale-to-zero") + (" + rate" if rate_target else ""))
    start = max(policy.min_replicas, 0)
    pods: list[float] = [0.0] * start  # ready time of each pod
    nodes: list[float] = [0.0] * math.ceil(start / p.pods_per_node)  # ready time of each node
    empty_since: float | None = None
    scaler = Scaler(policy, p, start)
    spec = start  # the Deployment's replicas
    backlog = 0.0
    window: deque[float] = deque(maxlen=max(1, p.metric_window_s // p.step_s))
    served: deque[float] = deque(maxlen=window.maxlen)
    for k, d in enumerate(dem):
        t = k * p.step_s
        ready = sum(1 for r in pods if r <= t)
        cap = ready * p.replica_rps
        served.append(min(cap, d + backlog / p.step_s))
        backlog = max(0.0, backlog + (d - cap) * p.step_s)
        window.append(ready * pending_per_replica(d / cap) + backlog if cap else backlog + d * p.step_s)
        if t % p.polling_interval == 0:
            spec = scaler.poll(t, sum(window) / len(window), sum(served) / len(served), rate_target)
        # reconcile pods and nodes
        while len(pods) > spec:  # remove the least ready pod first
            pods.remove(max(pods))
        while len(pods) < spec:
            if len(pods) >= len(nodes) * p.pods_per_node:
                nodes.append(t + p.provisioning_s)
            node_ready = sorted(nodes)[len(pods) // p.pods_per_node]
            pods.append(max(t, node_ready) + p.model_load_s)
        needed = math.ceil(len(pods) / p.pods_per_node)
        if len(nodes) > needed:
            empty_since = t if empty_since is None else empty_since
            if t - empty_since >= p.consolidate_s:
                nodes = sorted(nodes)[:needed]
                empty_since = None
        else:
            empty_since = None
        run.capacity_rps.append(sum(1 for r in pods if r <= t) * p.replica_rps)
        run.replicas.append(len(pods))
        run.nodes.append(len(nodes))
    run.slo_minutes_lost = _lost_minutes(dem, run.capacity_rps, p.step_s)
    run.gpu_hours = sum(run.nodes) * p.gpus_per_node * p.step_s / 3600
    return run
