"""Does a pod fit a node of its pool? A pod's requests against what each instance type the pool allows
can allocate (tritonops.world: the kubelet's allocatable after its overhead, less the DaemonSets every
node runs).

Karpenter and cluster-autoscaler only start instance types a pod fits; when none of the pool's types
can hold it, the pod stays Pending and the Deployment fails at its deadline many minutes into a
``pulumi up``. :func:`misfits` finds that from the rendered Deployment and the cluster-aws stack file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tritonops import world
from tritonops.k8s.labels import GPU_RESOURCE
from tritonops.k8s.waits import quantity_mib

Obj = dict[str, Any]


@dataclass(frozen=True)
class Requests:
    cpu_m: int
    memory_mib: int
    gpus: int

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu_m + other.cpu_m, self.memory_mib + other.memory_mib, self.gpus + other.gpus)

    def covers(self, other: Requests) -> bool:
        return self.cpu_m >= other.cpu_m and self.memory_mib >= other.memory_mib and self.gpus >= other.gpus

    def __str__(self) -> str:
        gpu = f", {self.gpus} GPU" if self.gpus else ""
        return f"{self.cpu_m}m CPU, {self.memory_mib}Mi{gpu}"


NONE = Requests(0, 0, 0)


def cpu_millis(q: Any) -> int:
    s = str(q)
    return int(s[:-1]) if s.endswith("m") else round(float(s) * 1000)


def container_requests(c: Obj) -> Requests:
    """What the scheduler reserves for a container: its requests (a limit alone sets the request)."""
    res = c.get("resources") or {}
    req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return Requests(cpu_millis(req.get("cpu", 0)), round(quantity_mib(str(req.get("memory", 0)))),
                    int(req.get(GPU_RESOURCE, 0)))


def _max(a: Requests, b: Requests) -> Requests:
    return Requests(max(a.cpu_m, b.cpu_m), max(a.memory_mib, b.memory_mib), max(a.gpus, b.gpus))


def pod_requests(pod: Obj) -> Requests:
    """The pod's effective request as the scheduler counts it: its containers plus its sidecars (init
    containers with restartPolicy Always, which run beside them), or an init container with the sidecars
    started before it, whichever is larger (per resource)."""
    total, sidecars, inits = NONE, NONE, NONE
    for c in pod.get("initContainers") or []:
        r = container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars = sidecars + r
        else:
            inits = _max(inits, sidecars + r)
    for c in pod.get("containers") or []:
        total = total + container_requests(c)
    return _max(total + sidecars, inits)


def node_room(itype: world.InstanceType) -> Requests:
    """What our pods can request on one node of a type: allocatable less the DaemonSets' share."""
    ds = sum((Requests(d.cpu_m, d.memory_mib, 0) for d in world.NODE_DAEMONSETS), NONE)
    return Requests(itype.alloc_cpu_m - ds.cpu_m, itype.alloc_memory_mib - ds.memory_mib, itype.gpus)


def misfit(pod: Obj, instance_types: Iterable[str]) -> str | None:
    """None when the pod fits a node of at least one of the types, else why it fits none."""
    need = pod_requests(pod)
    rooms = []
    for name in instance_types:
        room = node_room(world.instance_type(name))
        if room.covers(need):
            return None
        rooms.append(f"{name} {room}")
    return (f"requests {need} (containers, sidecars and init containers as the scheduler counts them) but no "
            f"instance type of its pool can hold it after the kubelet's reserve and the node DaemonSets: "
            f"{'; '.join(rooms)} (tritonops.world, {world.INSTANCE_TYPES_SOURCE.url}); no node would ever start "
            "for it: lower the requests or allow a larger instance type in the pool")
