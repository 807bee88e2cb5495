"""The hardware a model repository is meant for (``tritonops validate --target``, ``release publish --target``).

Apart from :mod:`tritonops.model_repo.validate` so that the commands' ``--help`` lists the choices without
loading the validator (pydantic models, Triton's protobuf).
"""

from __future__ import annotations

from enum import StrEnum


class Target(StrEnum):
    """The hardware a repository is meant for."""

    cpu = "cpu"  # CPU-only gateways: no KIND_GPU
    gpu = "gpu"  # x86 servers with NVIDIA GPUs
    jetson = "jetson"  # Jetson (integrated GPU)

    @property
    def has_gpu(self) -> bool:
        return self is not Target.cpu

    @property
    def gpu_count(self) -> int | None:
        """GPUs the target has, where the profile says (a Jetson has one integrated GPU, id 0)."""
        return {Target.cpu: 0, Target.jetson: 1}.get(self)
