"""The simulated scaler (HPA tolerance, bounds, stabilisation, KEDA cooldown) and properties of a simulated day."""

from __future__ import annotations

import pytest
from tritonops.capacity import sim
from tritonops.capacity.plan import PROFILES, steady_replicas
from tritonops.observability.keda_trigger import ScalingPolicy

POLICY = ScalingPolicy(threshold=4, min_replicas=2, max_replicas=10)
PARAMS = sim.SimParams(replica_rps=1000.0)


def test_scale_up_is_immediate_but_rate_limited() -> None:
    s = sim.Scaler(POLICY, PARAMS, 2)
    assert s.poll(0, 100.0) == 6  # wants 25 (max 10): +4 pods or +100 % per 15 s, whichever is more
    assert s.poll(15, 100.0) == 10  # bounded by max_replicas


def test_tolerance_keeps_the_count() -> None:
    s = sim.Scaler(POLICY, PARAMS, 5)
    assert s.poll(0, 5 * 4 * 1.09) == 5  # 9 % above target: within the HPA's 0.1 tolerance
    assert s.poll(15, 5 * 4 * 1.11) == 6


def test_scale_down_waits_for_the_stabilisation_window() -> None:
    s = sim.Scaler(POLICY, PARAMS, 5)
    assert s.poll(0, 20.0) == 5
    downs = [s.poll(t, 0.0) for t in range(15, 301, 15)]
    assert downs[:-1] == [5] * (len(downs) - 1)  # the 5 recommended at t=0 holds until it is 300 s old
    assert downs[-1] == 2  # then down to min_replicas


def test_scale_to_zero_after_cooldown_and_back() -> None:
    s = sim.Scaler(ScalingPolicy(threshold=4, min_replicas=0, max_replicas=10), PARAMS, 1)
    assert s.poll(0, 1.0) == 1
    assert s.poll(285, 0.0) == 1  # KEDA's cooldownPeriod (300 s) since the last activity
    assert s.poll(300, 0.0) == 0
    assert s.poll(315, 3.0) == 1


@pytest.fixture(scope="module")
def day() -> list[float]:
    return sim.demand([5000 * h for h in PROFILES["consumer"]], PARAMS, sim.Spike())


def _fixed_replicas(day: list[float]) -> int:
    return steady_replicas(max(day), PARAMS.replica_rps, ScalingPolicy(threshold=4, min_replicas=1,
                                                                     max_replicas=1000))[0]


def test_demand_is_seeded_and_has_the_spike(day: list[float]) -> None:
    assert sim.demand([5000 * h for h in PROFILES["consumer"]], PARAMS, sim.Spike()) == day
    at = int(14.1 * 3600) // PARAMS.step_s
    assert day[at] > 1.4 * day[at - 20 * 60 // PARAMS.step_s]


def test_fixed_at_peak_loses_no_slo_minute(day: list[float]) -> None:
    assert sim.fixed(day, _fixed_replicas(day), PARAMS).slo_minutes_lost == 0
    assert sim.fixed(day, 3, PARAMS).slo_minutes_lost > 0


def test_autoscaled_uses_fewer_gpu_hours_than_fixed(day: list[float]) -> None:
    auto = sim.autoscaled(day, POLICY, PARAMS)
    assert auto.gpu_hours < sim.fixed(day, _fixed_replicas(day), PARAMS).gpu_hours
    assert max(auto.replicas) <= POLICY.max_replicas and min(auto.replicas) >= POLICY.min_replicas


def test_a_longer_provisioning_delay_never_loses_fewer_slo_minutes(day: list[float]) -> None:
    lost = [sim.autoscaled(day, POLICY, sim.SimParams(replica_rps=1000.0, provisioning_s=d)).slo_minutes_lost
            for d in (0, 90, 180, 600)]
    assert lost == sorted(lost) and lost[-1] > lost[0]


@pytest.mark.parametrize(("field", "value"), [("replica_rps", 0.0), ("provisioning_s", float("nan")),
                                              ("model_load_s", -1.0)])
def test_bad_parameters_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        sim.SimParams(**{"replica_rps": 1.0, field: value})


def test_scale_to_zero_holds_no_node_through_the_empty_night() -> None:
    office = sim.demand([2000 * h for h in PROFILES["business"]], PARAMS)
    zero = sim.autoscaled(office, ScalingPolicy(threshold=4, min_replicas=0, max_replicas=10), PARAMS)
    kept = sim.autoscaled(office, POLICY, PARAMS)
    night = slice(21 * 3600 // PARAMS.step_s, None)  # demand ends at 20:30: cooldown, then no node
    assert set(zero.nodes[night]) == {0} and set(kept.nodes[night]) == {POLICY.min_replicas}


def _scale_downs(run: sim.Run) -> int:
    return sum(1 for a, b in zip(run.replicas, run.replicas[1:], strict=False) if b < a)


def test_the_served_rate_trigger_stops_the_pending_trigger_flapping(day: list[float]) -> None:
    """Pending requests vanish on over-provisioned replicas, so that trigger alone scales them away and
    back all day; with the served-rate trigger beside it the replicas follow the demand."""
    pending = sim.autoscaled(day, POLICY, PARAMS)
    both = sim.autoscaled(day, POLICY, PARAMS, rate_target=0.8 * PARAMS.replica_rps)
    assert both.name == "autoscaled + rate"
    assert _scale_downs(pending) > 10 * max(1, _scale_downs(both))
    assert both.slo_minutes_lost < pending.slo_minutes_lost / 10
    assert both.gpu_hours < pending.gpu_hours


def test_the_rate_trigger_holds_the_replicas_the_rate_needs() -> None:
    s = sim.Scaler(POLICY, PARAMS, 5)
    assert s.poll(0, 0.0, rate=4000.0, rate_target=800.0) == 5  # empty queues, but 4000/800 = 5 replicas
    assert s.poll(15, 0.0, rate=6000.0, rate_target=800.0) == 8  # the rate grows: ceil(7.5)
