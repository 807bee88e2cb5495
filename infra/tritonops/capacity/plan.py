"""Capacity plan of a Triton model service: replicas, nodes, GPU memory fit and cost over a day of traffic.

Inputs are what the project already has: the stack config (node pool, autoscaling bounds and KEDA's
target pending requests per replica), one replica's measured throughput and p95 (the JSON of
``tritonops bench --json`` or ``tritonops tune --json``), a traffic profile (peak requests/s and a
24-value hourly curve) and a price file (``prices.json``, data with its date and source).

Replicas follow the scaler, not a rule of thumb: KEDA's metric is the pending requests summed over
the replicas, and the HPA settles on the smallest replica count ``n`` for which
:func:`tritonops.observability.keda_trigger.desired_replicas` asks for no more than ``n``. The pending count of
one replica at utilisation ``rho`` is taken from an M/M/1 queue, ``rho**2 / (1 - rho)``
(:func:`pending_per_replica`): an approximation (Triton's dynamic batcher drains queues in batches),
used the same way by the simulation (:mod:`tritonops.capacity.sim`) so both agree.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tritonops.capacity import PROFILES
from tritonops.core.errors import UsageError
from tritonops.core.fsio import read_bounded
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stacks.triton.budget import service_budget
from tritonops.observability.keda_trigger import ScalingPolicy, desired_replicas

INPUT_MAX_BYTES = 1 << 20
HOURS = 24
MAX_RHO = 0.99  # beyond this the M/M/1 queue is unbounded: the backlog (simulation) takes over


class InputError(ValueError):
    """An unusable input file or value; the message names the file and the field."""


Finite = Annotated[float, Field(allow_inf_nan=False)]


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Throughput(_In):
    """One replica's measured figures (the fields of a bench report or a tune trial the plan needs)."""

    throughput_rps: Finite = Field(gt=0)
    inferences_per_s: Finite = Field(gt=0)
    p95_ms: Finite | None = Field(default=None, ge=0)

    @property
    def batch(self) -> float:
        """Inferences per request (the bench's batch size)."""
        return self.inferences_per_s / self.throughput_rps


class TrafficProfile(_In):
    """Peak requests/s and the day's shape: 24 hourly values relative to the busiest hour."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "custom"
    peak_rps: Finite = Field(gt=0)
    hourly: list[Annotated[Finite, Field(ge=0)]] = Field(min_length=HOURS, max_length=HOURS)

    def rps(self) -> list[float]:
        """Requests/s of each hour (the largest hourly value is the peak)."""
        top = max(self.hourly)
        if top <= 0:
            raise ValueError("hourly: at least one hour needs traffic")
        return [self.peak_rps * h / top for h in self.hourly]


class InstancePrice(_In):
    gpus: int = Field(ge=1)
    on_demand: Finite = Field(gt=0)
    spot: Finite = Field(gt=0)


class RegionPrices(_In):
    as_of: str
    source: str
    instances: dict[str, InstancePrice]


class PriceList(_In):
    regions: dict[str, RegionPrices] = Field(min_length=1)


def _read_doc(path: Path, what: str) -> Any:
    try:
        text = read_bounded(path, INPUT_MAX_BYTES, UsageError).decode("utf-8")
    except UsageError as e:
        raise InputError(f"{what}: {e}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{what}: {path}: not UTF-8 text (byte {e.start})") from None
    try:
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{what}: {path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(f"{what}: {path}: {line}not valid YAML ({getattr(e, 'problem', None) or e})") from None


def _parse(model: type[_In], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(f"{where}: {field}: {first['msg']}") from None


def load_throughput(path: Path) -> Throughput:
    """A replica's figures from ``tritonops bench --json`` or ``tritonops tune --json`` (its recommendation)."""
    data = _read_doc(path, "--bench")
    if isinstance(data, dict) and "recommended" in data:  # a tune result
        if data["recommended"] is None:
            raise InputError(f"--bench: {path}: recommended: the tune run found no setting within its budget")
        return _parse(Throughput, data["recommended"], f"--bench: {path}: recommended")
    return _parse(Throughput, data, f"--bench: {path}")


def load_traffic(spec: str, peak_rps: float | None = None) -> TrafficProfile:
    """A built-in profile by name (``--peak-rps`` required) or a YAML/JSON file (``--peak-rps`` overrides)."""
    if spec in PROFILES:
        if peak_rps is None:
            raise InputError(f"--traffic {spec}: a built-in profile needs --peak-rps")
        return _parse(TrafficProfile, {"name": spec, "peak_rps": peak_rps, "hourly": PROFILES[spec]}, "--traffic")
    path = Path(spec)
    data = _read_doc(path, "--traffic")
    if isinstance(data, dict) and peak_rps is not None:
        data = {**data, "peak_rps": peak_rps}
    profile = _parse(TrafficProfile, data, f"--traffic: {path}")
    if max(profile.hourly) <= 0:
        raise InputError(f"--traffic: {path}: hourly: at least one hour needs traffic")
    return profile


def load_prices(path: Path | None = None) -> PriceList:
    """The price file (default: the one shipped in this package)."""
    if path is None:
        text = resources.files("tritonops.capacity").joinpath("prices.json").read_text("utf-8")
        return _parse(PriceList, json.loads(text), "prices.json")
    return _parse(PriceList, _read_doc(path, "--prices"), f"--prices: {path}")


# --- the scaler's steady state -------------------------------------------------------------------


def policy_of(autoscaling: Any, scale_to_zero: bool = False) -> ScalingPolicy:
    """The ScaledObject's policy from a model service's ``autoscaling`` config: with ``scale_to_zero``
    minReplicas 0, otherwise at least one replica (a service configured for zero is planned both ways)."""
    return ScalingPolicy(threshold=autoscaling.pending_per_replica,
                         min_replicas=0 if scale_to_zero else max(1, autoscaling.min_replicas),
                         max_replicas=autoscaling.max_replicas)


def pending_per_replica(rho: float) -> float:
    """Requests waiting in one replica's queue at utilisation ``rho`` (M/M/1, capped at MAX_RHO)."""
    r = min(max(rho, 0.0), MAX_RHO)
    return r * r / (1.0 - r)


def steady_replicas(rps: float, replica_rps: float, policy: ScalingPolicy,
                    rate_target: float | None = None) -> tuple[int, bool]:
    """(replicas the HPA settles on for ``rps``, whether they carry it): the smallest ``n`` in
    [min, max] for which the scaler asks for no more than ``n`` (with ``rate_target``, the served-rate
    trigger's requests/s per replica, neither trigger does); ``(max, False)`` when even max is
    overloaded."""
    if rps <= policy.activation_threshold and policy.min_replicas == 0:
        return 0, True
    by_rate = replace(policy, threshold=rate_target) if rate_target else None
    for n in range(max(policy.min_replicas, 1), policy.max_replicas + 1):
        rho = rps / (n * replica_rps)
        if (rho < MAX_RHO and desired_replicas(n * pending_per_replica(rho), policy, current_replicas=n) <= n
                and (by_rate is None or desired_replicas(rps, by_rate, current_replicas=n) <= n)):
            return n, True
    return policy.max_replicas, False


# --- the plan ------------------------------------------------------------------------------------


class Strategy(BaseModel):
    name: str
    node_hours: float  # per day
    cost_per_day: float
    cost_per_hour: float  # day average
    cost_per_million: float  # per million inferences


class Plan(BaseModel):
    service: str
    node_pool: str
    instance_type: str
    region: str
    prices_as_of: str
    prices_source: str
    gpu: str
    gpu_memory_need_mib: int
    gpu_memory_share_mib: int
    fits: bool
    replica_rps: float
    replica_p95_ms: float | None
    peak_rps: float
    traffic: str
    min_replicas: int
    max_replicas: int
    replicas_peak: int
    peak_carried: bool
    utilisation_peak: float
    pods_per_node: int
    nodes_peak: int
    hourly_replicas: list[int]
    inferences_per_day: float
    strategies: list[Strategy]

    @property
    def findings(self) -> list[str]:
        out = []
        if not self.fits:
            out.append(f"models need {self.gpu_memory_need_mib} MiB of GPU memory, one share offers "
                       f"{self.gpu_memory_share_mib} MiB")
        if not self.peak_carried:
            out.append(f"peak {self.peak_rps:g} req/s needs more than maxReplicas={self.max_replicas} "
                       f"({self.replica_rps:g} req/s each)")
        return out


def _nodes(replicas: int, pods_per_node: int) -> int:
    return math.ceil(replicas / pods_per_node)


def plan(cfg: TritonStackConfig, service: str, replica: Throughput, traffic: TrafficProfile,
         prices: PriceList, region: str = "us-east-1") -> Plan:
    """The plan of one model service of a parsed triton stack config."""
    svc = next((s for s in cfg.model_services if s.name == service), None)
    if svc is None:
        known = ", ".join(s.name for s in cfg.model_services)
        raise InputError(f"service {service!r}: not in the stack's modelServices (known: {known})")
    pool = cfg.node_pools[svc.node_pool]
    if region not in prices.regions:
        raise InputError(f"--region {region!r}: not in the price file (known: {', '.join(prices.regions)})")
    rp = prices.regions[region]
    price = rp.instances.get(pool.instance_type)
    if price is None:
        raise InputError(f"price file: regions.{region}.instances: no price for {pool.instance_type!r} "
                         f"(node pool {svc.node_pool!r}): add it")
    pods_per_node = price.gpus * pool.gpu_slices // svc.gpus
    if pods_per_node < 1:
        raise InputError(f"service {service!r}: needs {svc.gpus} GPUs, {pool.instance_type} has {price.gpus}")
    budget = service_budget(svc, cfg)
    policy = policy_of(svc.autoscaling)
    zero = policy_of(svc.autoscaling, scale_to_zero=True)
    rps = traffic.rps()
    rate = svc.autoscaling.requests_per_replica
    hourly = [steady_replicas(r, replica.throughput_rps, policy, rate)[0] for r in rps]
    hourly_zero = [steady_replicas(r, replica.throughput_rps, zero, rate)[0] for r in rps]
    peak, carried = steady_replicas(traffic.peak_rps, replica.throughput_rps, policy, rate)
    inferences = sum(rps) * 3600 * replica.batch

    def strategy(name: str, node_hours: float, hourly_price: float) -> Strategy:
        day = node_hours * hourly_price
        return Strategy(name=name, node_hours=node_hours, cost_per_day=day, cost_per_hour=day / HOURS,
                        cost_per_million=day / (inferences / 1e6))

    fixed_nodes = _nodes(peak, pods_per_node)
    auto_hours = float(sum(_nodes(n, pods_per_node) for n in hourly))
    zero_hours = float(sum(_nodes(n, pods_per_node) for n in hourly_zero))
    return Plan(
        service=service, node_pool=svc.node_pool, instance_type=pool.instance_type, region=region,
        prices_as_of=rp.as_of, prices_source=rp.source, gpu=budget.gpu,
        gpu_memory_need_mib=budget.need_mib, gpu_memory_share_mib=budget.capacity_mib, fits=budget.fits,
        replica_rps=replica.throughput_rps, replica_p95_ms=replica.p95_ms, peak_rps=traffic.peak_rps,
        traffic=traffic.name, min_replicas=svc.autoscaling.min_replicas, max_replicas=policy.max_replicas,
        replicas_peak=peak, peak_carried=carried,
        utilisation_peak=traffic.peak_rps / (peak * replica.throughput_rps),
        pods_per_node=pods_per_node, nodes_peak=fixed_nodes, hourly_replicas=hourly, inferences_per_day=inferences,
        strategies=[
            strategy("fixed at peak, on-demand", fixed_nodes * float(HOURS), price.on_demand),
            strategy("autoscaled, on-demand", auto_hours, price.on_demand),
            strategy("autoscaled, spot", auto_hours, price.spot),
            strategy("scale-to-zero, on-demand", zero_hours, price.on_demand),
        ],
    )
