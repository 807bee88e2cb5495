"""Golden input/output pairs that travel with each model (``<model>/golden.json``), as a pydantic model.

Triton ignores extra files in a model folder, so the golden data ships inside every release and the
gate can prove a model answers correctly wherever it is deployed. The gate itself, and the file's
format, are the agent's (:mod:`tritonops.release_format.golden_gate`); this model is what ``validate`` reports with
(field and line) and what writes golden files, and it accepts and refuses exactly what the agent's
reader does (tests/unit/release/test_golden_parity.py).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tritonops.core.fsio import read_bounded
from tritonops.release_format.golden_gate import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    GOLDEN_MAX_BYTES,
    WIRE_DATATYPES,
    tensor_data_error,
)

if TYPE_CHECKING:
    import numpy as np


@functools.cache
def numpy_dtypes() -> dict[str, Any]:
    """Triton wire datatypes <-> numpy (numpy is imported when a tensor is made, not to validate a file)."""
    import numpy as np

    return {
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


_STRICT = ConfigDict(extra="forbid", strict=True)
Tolerance = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Tensor(BaseModel):
    model_config = _STRICT

    datatype: str
    shape: list[Annotated[int, Field(ge=0)]]
    data: list[Any]

    @model_validator(mode="after")
    def _check(self) -> Tensor:
        if self.datatype not in WIRE_DATATYPES:
            raise ValueError(f"unknown datatype {self.datatype!r}; expected one of {sorted(WIRE_DATATYPES)}")
        why = tensor_data_error(self.datatype, self.shape, self.data)
        if why:
            raise ValueError(why)
        return self

    def array(self) -> np.ndarray:
        import numpy as np

        return np.array(self.data, dtype=numpy_dtypes()[self.datatype]).reshape(self.shape)

    @classmethod
    def of(cls, array: np.ndarray, datatype: str) -> Tensor:
        return cls(datatype=datatype, shape=list(array.shape), data=array.flatten().tolist())


class GoldenCase(BaseModel):
    model_config = _STRICT

    name: str
    inputs: Annotated[dict[str, Tensor], Field(min_length=1)]
    outputs: Annotated[dict[str, Tensor], Field(min_length=1)]


class Golden(BaseModel):
    model_config = _STRICT

    rtol: Tolerance = DEFAULT_RTOL
    atol: Tolerance = DEFAULT_ATOL
    cases: Annotated[list[GoldenCase], Field(min_length=1)]

    @classmethod
    def load(cls, path: Path) -> Golden:
        """Read as the agent's golden gate reads it: a FIFO, a device, a link or an oversized file is
        refused (ReleaseError naming the file), never waited on or read without bound."""
        return cls.model_validate_json(read_bounded(path, GOLDEN_MAX_BYTES, follow=False))

    def dump(self, path: Path) -> None:
        path.write_text(self.model_dump_json() + "\n")


def compare(expected: Tensor, actual: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected`` within tolerance, else a one-line reason."""
    import numpy as np

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
