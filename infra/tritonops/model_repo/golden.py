"""Golden input/output pairs that travel with each model (``<model>/golden.json``).

Triton ignores extra files in a model folder, so the golden data ships inside every release and the
smoke check can prove a model answers correctly wherever it is deployed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from tritonops.agent.manifest import read_bounded
from tritonops.agent.triton import GOLDEN_MAX_BYTES

GOLDEN_FILE = "golden.json"

# Triton wire datatypes <-> numpy
NUMPY_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


def wire_datatype(config_type: str) -> str:
    """``TYPE_FP32`` (config.pbtxt) -> ``FP32`` (inference protocol); TYPE_STRING is BYTES."""
    t = config_type.removeprefix("TYPE_")
    return "BYTES" if t == "STRING" else t


class Tensor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    datatype: str
    shape: list[int]
    data: list[Any]

    @model_validator(mode="after")
    def _check(self) -> Tensor:
        if self.datatype not in NUMPY_DTYPES:
            raise ValueError(f"unknown datatype {self.datatype!r}; expected one of {sorted(NUMPY_DTYPES)}")
        if int(np.prod(self.shape)) != len(self.data):
            raise ValueError(f"shape {self.shape} needs {int(np.prod(self.shape))} values, got {len(self.data)}")
        return self

    def array(self) -> np.ndarray:
        return np.array(self.data, dtype=NUMPY_DTYPES[self.datatype]).reshape(self.shape)

    @classmethod
    def of(cls, array: np.ndarray, datatype: str) -> Tensor:
        return cls(datatype=datatype, shape=list(array.shape), data=array.flatten().tolist())


class GoldenCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]


class Golden(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rtol: float = 1e-4
    atol: float = 1e-5
    cases: list[GoldenCase]

    @classmethod
    def load(cls, path: Path) -> Golden:
        """Read as the agent's golden gate reads it: a FIFO, a device, a link or an oversized file is
        refused (ReleaseError naming the file), never waited on or read without bound."""
        return cls.model_validate_json(read_bounded(path, GOLDEN_MAX_BYTES, follow=False))

    def dump(self, path: Path) -> None:
        path.write_text(self.model_dump_json() + "\n")


def compare(expected: Tensor, actual: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected`` within tolerance, else a one-line reason."""
    want = expected.array()
    if list(actual.shape) != list(want.shape):
        return f"shape {list(actual.shape)} != expected {list(want.shape)}"
    if want.dtype.kind in "fc":
        if not np.allclose(actual.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol):
            worst = float(np.max(np.abs(actual.astype(np.float64) - want.astype(np.float64))))
            return f"values differ (max abs error {worst:.3g}, rtol={rtol}, atol={atol})"
        return None
    if not np.array_equal(actual, want):
        return "values differ"
    return None
