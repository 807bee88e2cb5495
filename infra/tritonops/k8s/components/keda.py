"""The platform stack's KEDA component."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from tritonops.k8s.components.base import install_chart, require_enabled
from tritonops.k8s.config import PlatformConfig
from tritonops.k8s.stacks.platform import charts as platform


@dataclass
class KedaArgs:
    config: PlatformConfig

    def __post_init__(self) -> None:
        require_enabled(self.config.keda.enabled, "keda", "Keda")


class Keda(pulumi.ComponentResource):
    """KEDA (pinned chart): scales Triton Deployments on Prometheus queries."""

    def __init__(
        self,
        name: str,
        args: KedaArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:platform:Keda", name, None, opts)
        self.release = install_chart(self, platform.keda_objects(args.config), platform.keda_release(args.config),
                                     depends_on)
