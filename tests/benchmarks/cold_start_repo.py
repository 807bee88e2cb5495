"""A model repository of about ``mb`` MiB for the cold-start benchmark, made locally (never committed).

One model, ``embed``: an ONNX Gather whose table (the initialiser) is ``mb`` MiB of FP32, served by
onnxruntime through Triton's Python backend as the sample's ``mlp`` is (the CPU wheel's tritonserver
has no onnxruntime backend), with a golden.json computed from the table. Seeded: the same bytes, so
the same blob in a store, every time. Kept under .cache/cold_start/ and made again only when missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

DIM = 64  # floats per row
IDS = 8  # ids per sample
MODEL_PY = '''"""Serve this version's model.onnx (an embedding table) with onnxruntime (CPU) through the Python backend."""

import os

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        out = []
        for r in requests:
            ids = pb_utils.get_input_tensor_by_name(r, "ids").as_numpy()
            rows = self.session.run(None, {"ids": ids})[0]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("embeddings", rows)]))
        return out
'''
CONFIG = f'''name: "embed"
backend: "python"
max_batch_size: 8
input {{ name: "ids" data_type: TYPE_INT64 dims: {IDS} }}
output {{ name: "embeddings" data_type: TYPE_FP32 dims: [{IDS}, {DIM}] }}
instance_group {{ count: 1 kind: KIND_CPU }}
'''


def large_repository(root: Path, mb: int) -> Path:
    """``root/large-<mb>``: the repository, made once (a ``.done`` stamp beside it marks it complete)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tritonops.model_repo.golden import Golden, GoldenCase, Tensor

    repo = root / f"large-{mb}"
    stamp = root / f"large-{mb}.done"
    if stamp.is_file() and repo.is_dir():
        return repo
    shutil.rmtree(repo, ignore_errors=True)
    model = repo / "embed"
    (model / "1").mkdir(parents=True)
    rows = mb * (1 << 20) // (DIM * 4)
    table = np.random.default_rng(46).standard_normal((rows, DIM), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["embeddings"], axis=0)], "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", IDS])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", IDS, DIM])],
        initializer=[numpy_helper.from_array(table, "table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8),
              str(model / "1" / "model.onnx"))
    (model / "1" / "model.py").write_text(MODEL_PY)
    (model / "config.pbtxt").write_text(CONFIG)
    cases = []
    for name, batch in (("batch1", 1), ("batch4", 4)):
        ids = (np.arange(batch * IDS, dtype=np.int64).reshape(batch, IDS) * 7919) % rows
        cases.append(GoldenCase(name=name, inputs={"ids": Tensor.of(ids, "INT64")},
                                outputs={"embeddings": Tensor.of(table[ids], "FP32")}))
    Golden(cases=cases).dump(model / "golden.json")
    stamp.write_text("")
    return repo
