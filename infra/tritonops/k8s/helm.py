"""A Helm chart release as data: what every stack installs with a chart, the same for ``pulumi up``
(``kubernetes:helm.sh/v3:Release``, tritonops.k8s.components.base.helm_release) and ``tritonops render``
(Flux objects, tritonops.k8s.gitops)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class HelmRelease:
    name: str
    chart: str
    version: str
    repo: str
    namespace: str
    values: Obj = field(default_factory=dict)
