"""The platform stack's NVIDIA GPU Operator component."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from tritonops.k8s.components.base import install_chart, require_enabled
from tritonops.k8s.config import PlatformConfig
from tritonops.k8s.stacks.platform import charts as platform


@dataclass
class GpuOperatorArgs:
    config: PlatformConfig

    def __post_init__(self) -> None:
        require_enabled(self.config.gpu_operator.enabled, "gpu_operator", "GpuOperator")


class GpuOperator(pulumi.ComponentResource):
    """NVIDIA GPU Operator (pinned chart): device plugin, DCGM exporter + ServiceMonitor, time-slicing/MIG."""

    def __init__(
        self,
        name: str,
        args: GpuOperatorArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:platform:GpuOperator", name, None, opts)
        self.release = install_chart(self, platform.gpu_operator_objects(args.config),
                                     platform.gpu_operator_release(args.config), depends_on)
