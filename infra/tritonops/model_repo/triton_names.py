"""The names the pinned Triton knows (the backends it ships), and did-you-mean for a misspelt name.

Facts, with their source, for Triton ``SHIPPED_WITH`` (``tritonops.versions.TRITON_SERVER_VERSION``; a unit
test fails when the pin moves, so the tables are read again for the new release):

* ``NGC_BACKENDS``: ``/opt/tritonserver/backends`` of NGC's full image ``nvcr.io/nvidia/tritonserver:24.10-py3``
  (``versions.TRITON_IMAGE``), as Triton's 24.10 release notes and its container list them. ``dali``,
  ``identity``, ``repeat`` and ``square`` are in it as well as the framework backends; ``VARIANT_BACKENDS``:
  those NGC ships in the release's other images (vLLM, TensorRT-LLM).
* ``JETSON_BACKENDS``: what Triton's Jetson builds ship (the ``-py3-igpu`` image ``versions.TRITON_IMAGE_IGPU``
  and the release's ``tritonserver<version>-igpu.tar``, ``versions.TRITON_JETSON_TARBALLS``): the "Jetson JetPack"
  table of Triton's Backend-Platform Support Matrix (``triton-inference-server/backend``,
  ``docs/backend_platform_support_matrix.md``: TensorRT, ONNX Runtime, TensorFlow, PyTorch, Python); the
  release notes since 2.41.0 say the -igpu image holds "all supported backends for Jetson devices". No
  OpenVINO (x86 only), DALI, FIL, vLLM or TensorRT-LLM there.
* ``CPU_BACKENDS``: what the CPU build tritonops installs ships (install method ``wheel``: the nvidia-pytriton
  wheel's tritonserver, ``roles/triton_server/tasks/install-wheel.yml``; the same build is the local image
  ``localhost/tritonops-tritonserver-cpu``, ``tools/devkit/triton_image.py``): the Python backend only.

Platforms are Triton's own constants and live with the rules that use them
(:data:`tritonops.model_repo.config_rules.PLATFORM_BACKEND`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from tritonops.core.errors import ReleaseError
from tritonops.core.names import check_name

SHIPPED_WITH = "2.51.0"
NGC_BACKENDS = frozenset({"dali", "fil", "identity", "onnxruntime", "openvino", "python", "pytorch", "repeat",
                          "square", "tensorflow", "tensorrt"})
CPU_BACKENDS = frozenset({"python"})
JETSON_BACKENDS = frozenset({"onnxruntime", "python", "pytorch", "tensorflow", "tensorrt"})
JETSON_SOURCE = ("the Jetson JetPack table of Triton's Backend-Platform Support Matrix "
                 "(github.com/triton-inference-server/backend, docs/backend_platform_support_matrix.md)")
# Backends NGC ships in the release's other images rather than the full one (Triton's container list for
# 24.10: the -vllm-python-py3 and -trtllm-python-py3 images): a model for them is a model for that image.
VARIANT_BACKENDS = {"vllm": "nvcr.io/nvidia/tritonserver:24.10-vllm-python-py3",
                    "tensorrtllm": "nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3"}
KNOWN_BACKENDS = NGC_BACKENDS | frozenset(VARIANT_BACKENDS)
# numpy/PyTorch spellings of Triton's data types (config.pbtxt's DataType enum), for did-you-mean
DATATYPE_ALIASES = {"TYPE_FLOAT": "TYPE_FP32", "TYPE_FLOAT32": "TYPE_FP32", "TYPE_FLOAT16": "TYPE_FP16",
                    "TYPE_HALF": "TYPE_FP16", "TYPE_DOUBLE": "TYPE_FP64", "TYPE_FLOAT64": "TYPE_FP64",
                    "TYPE_BFLOAT16": "TYPE_BF16", "TYPE_INT": "TYPE_INT32", "TYPE_LONG": "TYPE_INT64",
                    "TYPE_BYTES": "TYPE_STRING", "TYPE_STR": "TYPE_STRING", "TYPE_OBJECT": "TYPE_STRING"}


def declared_backends(names: Iterable[str], directory: Path | str | None,
                      error: type[Exception]) -> frozenset[str]:
    """Custom backends a target's Triton has besides the ones it ships: by name, and as the folders of its
    backend directory (tritonserver ``--backend-directory`` loads backend NAME from ``<dir>/NAME/``);
    ``error`` on a name that is no folder name or a directory that cannot be read."""
    found = set(names)
    for name in found:
        try:
            check_name(name, "--backend", "backend name")
        except ReleaseError as e:
            raise error(str(e)) from None
    if directory is not None:
        if not Path(directory).is_dir():
            raise error(f"--backend-directory {directory}: not a directory (Triton's backend folder, e.g. "
                        "/opt/tritonserver/backends: one folder per backend)")
        try:
            found |= {p.name for p in Path(directory).iterdir() if p.is_dir() and not p.name.startswith(".")}
        except OSError as e:
            raise error(f"--backend-directory {directory}: cannot read it ({e.strerror or e})") from None
    return frozenset(found)


def close_matches(word: str, candidates: Iterable[str], n: int = 2) -> list[str]:
    """The candidates ``word`` is most likely a misspelling or a shortening of, best first."""
    pool = sorted(set(candidates) - {word})
    lower = word.lower()
    # "onnx" for "onnxruntime": a shortening is too short for difflib's ratio, so it comes first
    found = [c for c in pool if lower in c.lower()] if len(lower) >= 3 else []
    found += [c for c in difflib.get_close_matches(word, pool, n=n, cutoff=0.6) if c not in found]
    return found[:n] or difflib.get_close_matches(word, pool, n=1, cutoff=0.5)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean "x"?)``, or "" when nothing is close."""
    found = close_matches(word, candidates)
    quoted = " or ".join(f'"{c}"' for c in found)
    return f" (did you mean {quoted}?)" if found else ""
