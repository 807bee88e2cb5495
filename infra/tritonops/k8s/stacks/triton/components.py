"""The triton stack's Pulumi components over the builders of ``objects``: the namespace all model
services share, and one model service. Imported by :func:`program.program` only: ``tritonops
render`` needs no Pulumi."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from tritonops.k8s.component import apply_objects, k8s_object
from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import name_of
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


@dataclass
class TritonServiceArgs:
    config: TritonStackConfig
    service: ModelService
    # IRSA role of service.model_reader (the cluster-aws stack's modelReaders output, through a StackReference)
    role_arn: pulumi.Input[str] | None = None

    def __post_init__(self) -> None:
        if (self.role_arn is None) != (self.service.model_reader is None):
            raise ValueError(
                f"role_arn: model service {self.service.name!r} needs the ARN of its modelReader, and only then"
            )
        if self.service not in self.config.model_services:
            raise ValueError(f"service: {self.service.name!r} is not one of config.model_services")
        if not self.service.models:
            raise ValueError(f"service.models: model service {self.service.name!r} has no models")


class TritonService(pulumi.ComponentResource):
    """One Triton model service: Deployment, Service, PDB, NetworkPolicy, monitoring, ScaledObject, routes."""

    def __init__(
        self,
        name: str,
        args: TritonServiceArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:triton:TritonService", name, None, opts)
        svc = args.service
        self.objects = apply_objects(
            self,
            triton.service_objects(args.config, svc, args.role_arn),
            depends_on,
            ignore_replicas=svc.autoscaling.enabled,
        )
        self.register_outputs({"deployment": name_of(svc), "namespace": args.config.namespace})
