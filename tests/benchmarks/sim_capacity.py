"""Replay a day of traffic with a spike through KEDA/HPA and node provisioning; compare with fixed provisioning.

    .venv/bin/python tests/benchmarks/sim_capacity.py --bench examples/capacity/bench-mlp_batched-cpu.json \
        --service vision --env prod --traffic consumer --peak-rps 8000 --plot /tmp/capacity-day.png

The autoscaler uses the service's autoscaling config (pendingPerReplica, min/max replicas, polling
interval); fixed provisioning holds the replicas that carry the day's highest demand (spike included);
"autoscaled + rate" adds the served-rate trigger (requestsPerReplica, else --rate-utilisation x one
replica's throughput).
The model load time is a parameter (--model-load-s), not measured: a GPU pod's load depends on image
pull, model download and the models themselves.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from tritonops.capacity import plan as planner
from tritonops.capacity import sim
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, required=True)
    ap.add_argument("--service", default="vision")
    ap.add_argument("--env", default="prod")
    ap.add_argument("--traffic", default="consumer")
    ap.add_argument("--peak-rps", type=float, default=None)
    ap.add_argument("--provisioning-s", type=float, default=120.0)
    ap.add_argument("--model-load-s", type=float, default=60.0)
    ap.add_argument("--spike-factor", type=float, default=1.6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate-utilisation", type=float, default=0.8,
                    help="served-rate trigger target as a share of one replica's throughput, when the service's "
                         "autoscaling has no requestsPerReplica")
    ap.add_argument("--plot", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        cfg = load_stack_config("triton", a.env)
        assert isinstance(cfg, TritonStackConfig)
        replica = planner.load_throughput(a.bench)
        traffic = planner.load_traffic(a.traffic, a.peak_rps)
        prices = planner.load_prices()
        p = planner.plan(cfg, a.service, replica, traffic, prices)
    except (ConfigError, planner.InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    svc = next(s for s in cfg.model_services if s.name == a.service)
    price = prices.regions[p.region].instances[p.instance_type]
    params = sim.SimParams(replica_rps=replica.throughput_rps, pods_per_node=p.pods_per_node,
                           gpus_per_node=price.gpus, polling_interval=svc.autoscaling.polling_interval,
                           provisioning_s=a.provisioning_s, model_load_s=a.model_load_s, seed=a.seed)
    demand = sim.demand(traffic.rps(), params, sim.Spike(factor=a.spike_factor))
    policy = planner.policy_of(svc.autoscaling)
    unbounded = dataclasses.replace(policy, max_replicas=10_000)
    fixed_n = planner.steady_replicas(max(demand), replica.throughput_rps, unbounded)[0]
    rate_target = svc.autoscaling.requests_per_replica or a.rate_utilisation * replica.throughput_rps
    runs = [sim.fixed(demand, fixed_n, params), sim.autoscaled(demand, policy, params),
            sim.autoscaled(demand, policy, params, rate_target=rate_target)]
    gpu_price = price.on_demand / price.gpus
    print(f"{a.service} ({p.instance_type}), {traffic.name} day, peak {traffic.peak_rps:g} req/s, spike x"
          f"{a.spike_factor:g} at 14:00 for 20 min; node provisioning {a.provisioning_s:g} s, model load "
          f"{a.model_load_s:g} s (parameters); one replica {replica.throughput_rps:.0f} req/s; "
          f"+ rate: the served-rate trigger at {rate_target:.0f} req/s per replica beside pending requests")
    print(f"{'strategy':<24}{'SLO min lost':>13}{'GPU-hours':>11}{'$/day':>9}{'max replicas':>14}")
    for r in runs:
        print(f"{r.name:<24}{r.slo_minutes_lost:>13}{r.gpu_hours:>11.1f}{r.gpu_hours * gpu_price:>9.2f}"
              f"{max(r.replicas):>14}")
    plot(demand, runs, params.step_s, a.plot, f"{a.service}: {traffic.name} day with a x{a.spike_factor:g} spike")
    print(f"plot: {a.plot}")
    return 0


def plot(demand: list[float], runs: list[sim.Run], step_s: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [k * step_s / 3600 for k in range(len(demand))]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5), sharex=True, height_ratios=[3, 1])
    top.plot(hours, demand, color="black", lw=0.8, label="demand")
    for r, colour in zip(runs, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        top.plot(hours, r.capacity_rps, color=colour, lw=1.2,
                 label=f"{r.name}: {r.slo_minutes_lost} SLO min lost, {r.gpu_hours:.0f} GPU-h")
        bottom.step(hours, r.nodes, color=colour, lw=1.0, where="post")
    top.set_ylabel("requests/s")
    top.set_title(title)
    top.legend(loc="upper left", fontsize=8)
    bottom.set_ylabel("GPU nodes")
    bottom.set_xlabel("hour of day (UTC)")
    bottom.set_xticks(range(0, 25, 3))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=70)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
