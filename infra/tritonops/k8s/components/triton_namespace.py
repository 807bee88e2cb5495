"""The triton stack's namespace component: what all model services share."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from tritonops.k8s.components.base import apply_objects, k8s_object
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stacks.triton import objects as triton


@dataclass
class TritonNamespaceArgs:
    config: TritonStackConfig
    admin_token: pulumi.Input[str]  # Pulumi secret: the header value guarding Triton's admin APIs


class TritonNamespace(pulumi.ComponentResource):
    """What all model services share: Namespace, PriorityClass, PrometheusRule, dashboards, admin Secret."""

    def __init__(self, name: str, args: TritonNamespaceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:triton:TritonNamespace", name, None, opts)
        cfg = args.config
        self.objects = apply_objects(self, triton.namespace_objects(cfg))
        ns = [r for r in self.objects if isinstance(r, k8s.core.v1.Namespace)]
        token = pulumi.Output.secret(args.admin_token)
        self.admin_secret = k8s_object(
            triton.admin_secret(cfg, token),
            pulumi.ResourceOptions(parent=self, depends_on=ns, additional_secret_outputs=["stringData", "data"]),
        )
        self.register_outputs({"namespace": cfg.namespace})
