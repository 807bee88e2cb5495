"""Triton ``model_warmup`` generated from each model's golden inputs (``tritonops warmup``, ``publish --warmup``).

Triton runs a model's ``model_warmup`` requests while it loads it, before the model is READY, so a
new replica's first real request does not pay the lazy initialisation (the first onnxruntime run, a
Python backend's first ``execute``). A model that declares no warmup gets one entry per golden case
(``golden.json``, the inputs the release gate sends anyway): the case's shape, and its first sample's
bytes in ``<model>/warmup/`` (Triton's ``input_data_file``: the raw tensor, row-major; BYTES as Triton's
length-prefixed strings). For a batching model the batch size is the case's first dimension (Triton
repeats the sample to fill it); a model without batching gets the whole tensor, batch size 1.

The entries are written into ``config.pbtxt`` through Triton's own protobuf (:mod:`pbtxt_edit`: only the
``model_warmup`` field changes, the operator's text and comments stay). Generated entries are named
``golden:<case>``: running again regenerates them (a changed golden.json, stale files removed); a model
whose warmup the operator wrote is left alone, and so are ensembles (Triton refuses warmup for them)
and models without golden.json. Generate before publishing: the release's manifest and signature
cover the config and the warmup files as any other file (``publish --warmup`` runs this first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from tritonops.core.errors import ReleaseError
from tritonops.core.names import GOLDEN_FILE
from tritonops.model_repo import pbtxt, pbtxt_edit
from tritonops.model_repo.golden import Golden, Tensor
from tritonops.model_repo.spec import ModelSpec, ModelWarmup, WarmupInput

WARMUP_DIR = "warmup"  # Triton reads input_data_file from this folder of the model
PREFIX = "golden:"  # the name of every entry generated here
_FILE = re.compile(r"^golden-\d+-\d+\.bin$")  # the files generated here (a case's index, an input's index)


@dataclass
class Result:
    model: str
    action: str  # generated | kept (the operator's own warmup) | skipped
    reason: str = ""
    files: list[str] = field(default_factory=list)  # paths under the model folder


def raw_bytes(tensor: Tensor, sample_only: bool) -> bytes:
    """The bytes Triton reads from an ``input_data_file``: little-endian row-major, BYTES length-prefixed."""
    import numpy as np

    array = tensor.array()
    if sample_only:
        array = array[:1]
    if tensor.datatype == "BYTES":
        from tritonclient.utils import serialize_byte_tensor

        out = serialize_byte_tensor(np.array([s.encode() if isinstance(s, str) else s for s in array.flatten()],
                                             dtype=np.object_))
        return bytes(out.item()) if out.size else b""
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def entries(spec: ModelSpec, golden: Golden) -> tuple[list[ModelWarmup], dict[str, bytes]]:
    """The warmup entries for ``golden``'s cases and the files they read ({name under warmup/: bytes})."""
    types = {i.name: i.data_type for i in spec.input}
    batching = spec.batching
    out: list[ModelWarmup] = []
    files: dict[str, bytes] = {}
    for ci, case in enumerate(golden.cases):
        inputs: dict[str, WarmupInput] = {}
        batch = 1
        for ii, (name, tensor) in enumerate(sorted(case.inputs.items())):
            if name not in types:
                raise ValueError(f"golden case {case.name!r} feeds {name!r}, which is not an input of the model")
            shape = list(tensor.shape)
            if batching:
                if not shape or shape[0] < 1:
                    raise ValueError(f"golden case {case.name!r} input {name!r}: shape {shape} has no batch "
                                     f"dimension (max_batch_size {spec.max_batch_size})")
                batch, shape = shape[0], shape[1:]
            fname = f"golden-{ci}-{ii}.bin"
            files[fname] = raw_bytes(tensor, sample_only=batching)
            inputs[name] = WarmupInput(data_type=types[name], dims=shape, input_data_file=fname)
        out.append(ModelWarmup(name=f"{PREFIX}{case.name}", batch_size=batch, inputs=inputs))
    return out, files


def generate_model(folder: Path) -> Result:
    """Generate (or regenerate) one model folder's warmup; see the module's docstring."""
    name = folder.name
    config_path = folder / "config.pbtxt"
    loaded = pbtxt.load(config_path)
    spec = loaded.spec
    if spec.is_ensemble:
        return Result(name, "skipped", "an ensemble (Triton warms its steps' models, not the ensemble)")
    if spec.model_warmup and not all(w.name.startswith(PREFIX) for w in spec.model_warmup):
        return Result(name, "kept", "config.pbtxt declares its own model_warmup")
    if not (folder / GOLDEN_FILE).is_file():
        return Result(name, "skipped", f"no {GOLDEN_FILE}")
    try:
        golden = Golden.load(folder / GOLDEN_FILE)
    except (ValidationError, ReleaseError) as e:
        raise pbtxt.ModelConfigError(folder / GOLDEN_FILE, f"not a usable golden file ({str(e).splitlines()[0]}); "
                                     "tritonops validate names the line") from None
    try:
        warm, files = entries(spec, golden)
    except ValueError as e:
        raise pbtxt.ModelConfigError(folder / GOLDEN_FILE, str(e), field="model_warmup") from None
    new = pbtxt.spec_to_proto(spec.model_copy(update={"model_warmup": warm}))
    text = pbtxt_edit.set_fields(loaded.text, new, ["model_warmup"], config_path)
    out_dir = folder / WARMUP_DIR
    out_dir.mkdir(exist_ok=True)
    for stale in out_dir.iterdir():
        if _FILE.match(stale.name) and stale.name not in files:
            stale.unlink()
    for fname, data in files.items():
        target = out_dir / fname
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
    if text != loaded.text:
        pbtxt_edit.write(config_path, text)
    return Result(name, "generated", files=[f"{WARMUP_DIR}/{f}" for f in sorted(files)])


def generate(repository: Path) -> list[Result]:
    """Every model folder of ``repository`` (a folder with config.pbtxt), in name order."""
    return [generate_model(d) for d in sorted(Path(repository).iterdir()) if (d / "config.pbtxt").is_file()]
