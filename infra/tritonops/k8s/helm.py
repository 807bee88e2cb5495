"""A Helm chart release as data: what every stack installs with a chart, the same for ``pulumi up``
(``kubernetes:helm.sh/v3:Release``, tritonops.k8s.component.helm_release) and ``tritonops render``
(Flux objects, tritonops.k8s.gitops).

Helm installs a chart's ``crds/`` only on the first install and never upgrades them, so a chart bump would
run the new controller against the old CRDs. Each release says how its CRDs follow the chart
(``crd_upgrade``): ``templates`` (the chart renders them as templates: Helm upgrades them), ``hook`` (the
chart's own pre-upgrade Job applies them, turned on in its values), ``crd-chart`` (a separate chart of
CRDs, installed first and upgraded as a chart, ``skip_crds`` on the main one), or ``none`` (no CRDs).
Flux upgrades ``crds/`` itself (``upgrade.crds: CreateReplace``)."""

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
    crd_upgrade: str = "none"  # templates | hook | crd-chart | none
    skip_crds: bool = False  # the CRDs come from a crd-chart release installed first
    # Helm's client-side check of the rendered objects against the cluster's schemas before its
    # pre-upgrade hook ran: off where the hook brings the new CRDs (the GPU Operator's upgrade guide).
    openapi_validation: bool = True
