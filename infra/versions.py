"""Every pinned version in the project, in one place.

Role defaults, stack code, Helm releases and the test harness read their pins from here (or are
checked against it by ``tests/unit/test_versions.py``), so two copies of a pin cannot drift apart.
"""

from __future__ import annotations

# --- Triton Inference Server -------------------------------------------------------------------
# Server release shipped as NGC containers and Jetson tarballs, and the matching client library.
TRITON_RELEASE = "24.10"  # NGC container tag line; Triton server 2.51.0
TRITON_SERVER_VERSION = "2.51.0"
TRITON_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-py3"
TRITON_IMAGE_IGPU = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-py3-igpu"  # Jetson Orin line

# CPU-only install method: the nvidia-pytriton wheel bundles tritonserver 2.51 with the Python backend.
PYTRITON_VERSION = "0.7.0"
ONNXRUNTIME_VERSION = "1.32.0"
NUMPY_VERSION = "1.26.4"

# Python backend stub shipped in the wheel, by the node's Python minor version.
PYTHON_BACKEND_STUB_PYTHON = "3.11"
