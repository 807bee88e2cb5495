"""tritonops: infrastructure for running NVIDIA Triton Inference Server in production.

The version is the installed distribution's (pyproject.toml is its one source); a source tree that was
never installed reports ``0+unknown``. It is read when asked for (``importlib.metadata`` costs every
command's start some 30 ms otherwise).
"""


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'tritonops' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tritonops")
    except PackageNotFoundError:  # pragma: no cover - only outside any install
        return "0+unknown"
