"""The triton stack's model service component: one per ``modelServices`` entry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from tritonops.k8s.components.base import apply_objects
from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import name_of
from tritonops.k8s.stacks.triton import objects as triton


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
