"""tritonops: infrastructure for running NVIDIA Triton Inference Server in production."""

__version__ = "0.1.0"
