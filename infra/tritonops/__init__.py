"""tritonops: infrastructure for running NVIDIA Triton Inference Server in production.

The version is the installed distribution's (pyproject.toml is its one source); a source tree that was
never installed reports ``0+unknown``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tritonops")
except PackageNotFoundError:  # pragma: no cover - only outside any install
    __version__ = "0+unknown"
