"""GPU memory budget: do a node pool's Triton models fit its GPUs?

Per GPU a Triton pod needs, in MiB::

    sum over its models of (instance_count x size)      model weights + workspace, per GPU
  + cuda_context                                        CUDA context, cuDNN/cuBLAS handles
  + cuda_pool                                           --cuda-memory-pool-byte-size (I/O buffers)
  + io_headroom                                         activations beyond the pool

and it may use GPU memory / gpu_slices (time-slicing shares a GPU between ``gpu_slices`` pods, so
``gpu_slices`` pods of any services on one GPU still fit together). A plan that does not fit fails
before anything is deployed, naming the model service. Triton's own guard,
``--model-load-gpu-limit``, is derived from the same figures: loading stops once the device's used
memory would eat into the I/O headroom of this pod's share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tritonops.k8s.catalog import gpu_family
from tritonops.k8s.config import ModelService, TritonStackConfig

MIB = 1024 * 1024


class BudgetError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


@dataclass(frozen=True)
class ServiceBudget:
    service: str
    node_pool: str
    gpu: str
    gpu_memory_mib: int  # whole GPU
    capacity_mib: int  # this pod's share of one GPU (memory / gpu_slices)
    models_mib: int
    overhead_mib: int  # context + pool + headroom
    io_headroom_mib: int

    @property
    def need_mib(self) -> int:
        return self.models_mib + self.overhead_mib

    @property
    def fits(self) -> bool:
        return self.need_mib <= self.capacity_mib

    @property
    def load_limit_fraction(self) -> float:
        """--model-load-gpu-limit fraction: the device share models may fill, less the I/O headroom."""
        frac = (self.capacity_mib - self.io_headroom_mib) / self.gpu_memory_mib
        return math.floor(frac * 1000) / 1000


def service_budget(svc: ModelService, cfg: TritonStackConfig) -> ServiceBudget:
    pool = cfg.node_pools[svc.node_pool]
    fam = gpu_family(pool.instance_type)
    mem = svc.memory
    return ServiceBudget(
        service=svc.name,
        node_pool=svc.node_pool,
        gpu=fam.gpu,
        gpu_memory_mib=fam.memory_mib,
        capacity_mib=fam.memory_mib // pool.gpu_slices,
        models_mib=sum(m.instance_count * m.size_mib for m in svc.models),
        overhead_mib=mem.cuda_context_mib + mem.cuda_pool_mib + mem.io_headroom_mib,
        io_headroom_mib=mem.io_headroom_mib,
    )


def budgets(cfg: TritonStackConfig) -> dict[str, list[ServiceBudget]]:
    """Node pool -> the budget of each model service placed on it."""
    out: dict[str, list[ServiceBudget]] = {name: [] for name in cfg.node_pools}
    for svc in cfg.model_services:
        out[svc.node_pool].append(service_budget(svc, cfg))
    return out


def check_budget(cfg: TritonStackConfig) -> dict[str, list[ServiceBudget]]:
    """Raise BudgetError naming the first model service whose models do not fit its GPU share."""
    plan = budgets(cfg)
    for i, svc in enumerate(cfg.model_services):
        b = next(b for b in plan[svc.node_pool] if b.service == svc.name)
        if not b.fits:
            detail = " + ".join(f"{m.instance_count}x{m.name}({m.size_mib} MiB)" for m in svc.models)
            raise BudgetError(
                f"tritonops-triton:modelServices[{i}].models",
                f"model service {svc.name!r} does not fit node pool {svc.node_pool!r}: "
                f"needs {b.need_mib} MiB "
                f"per GPU ({detail} + {b.overhead_mib} MiB CUDA context/pool/I/O headroom) but one "
                f"{b.gpu} share offers {b.capacity_mib} MiB",
            )
    return plan
