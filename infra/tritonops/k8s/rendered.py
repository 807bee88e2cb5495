"""What a stack creates, as data (:class:`RenderSet`): the objects ``tritonops render`` writes and the
stack programs register, built by each stack's ``program.render`` (tritonops.k8s.stacks.*.program)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonops.k8s.helm import HelmRelease

Obj = dict[str, Any]


@dataclass
class RenderSet:
    """What a stack creates, as data: Kubernetes objects, Helm releases, AWS resources, secrets to supply."""

    stack: str
    env: str
    objects: list[Obj] = field(default_factory=list)
    releases: list[HelmRelease] = field(default_factory=list)
    aws: list[Obj] = field(default_factory=list)
    secrets: list[Obj] = field(default_factory=list)  # Secrets whose values only the Pulumi engine holds ...
    # ... and (with `command`) the Secrets/ConfigMaps the user creates (tritonops.k8s.stacks.triton.required)
    prerequisites: list[Obj] = field(default_factory=list)  # what the cluster must already run
    outputs: Obj = field(default_factory=dict)  # what the stack exports that its config alone decides
    # release name -> releases it waits for (the program's depends_on between charts)
    release_deps: dict[str, list[str]] = field(default_factory=dict)


def secret_ref(obj: Obj, config_key: str) -> Obj:
    """A Secret whose values the Pulumi engine holds, as render lists it: name, keys and config key."""
    meta = obj["metadata"]
    return {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "keys": sorted(obj["stringData"]),
        "pulumiConfig": config_key,
    }
