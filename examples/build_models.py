"""Build the sample model repository: a small ONNX MLP, Python-backend wrappers, an ensemble, goldens.

    python examples/build_models.py [OUT_DIR]   (default: examples/model_repository)

Everything is deterministic (seeded weights, fixed golden inputs), so rebuilding gives identical
files; a unit test checks that the committed repository matches this script.

Models:
  mlp           16 -> 32 -> 4 MLP in ONNX, served on CPU by the Python backend through onnxruntime;
                configs/gpu.pbtxt serves the same model.onnx with onnxruntime on a GPU
                (select it with tritonserver --model-config-name=gpu)
  preprocess    UINT8 raw features -> standardised FP32 features (Python backend)
  postprocess   logits -> softmax probabilities and the arg-max label (Python backend)
  pipeline      ensemble: preprocess -> mlp -> postprocess
  mlp_batched   the same ONNX model, dynamic batching tuned for throughput
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))

from tritonops.model_repo.golden import Golden, GoldenCase, Tensor  # noqa: E402
from tritonops.model_repo.pbtxt import render  # noqa: E402
from tritonops.model_repo.spec import ModelSpec  # noqa: E402

FEATURES, HIDDEN, CLASSES = 16, 32, 4
MEAN, SCALE = 0.5, 0.25

# The Python-backend wrapper that serves model.onnx with onnxruntime (written into mlp and mlp_batched).
ONNX_RUNNER = '''"""Serve this version's model.onnx with onnxruntime (CPU) through Triton's Python backend."""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.output = config["output"][0]["name"]
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        # Requests Triton batched together run as one onnxruntime call.
        arrays = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
        result = self.session.run(None, {"features": np.concatenate(arrays)})[0]
        responses, start = [], 0
        for a in arrays:
            out = result[start : start + len(a)]
            start += len(a)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.output, out)]))
        return responses
'''

PREPROCESS = f'''"""UINT8 raw features -> standardised FP32 features."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "raw").as_numpy()
            features = ((raw.astype(np.float32) / 255.0 - {MEAN}) / {SCALE}).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("features", features)]))
        return responses
'''

POSTPROCESS = '''"""Logits -> softmax probabilities and the arg-max label."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            probabilities = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
            label = probabilities.argmax(axis=1).astype(np.int64).reshape(-1, 1)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("probabilities", probabilities),
                pb_utils.Tensor("label", label),
            ]))
        return responses
'''


def build_onnx() -> onnx.ModelProto:
    rng = np.random.default_rng(20261130)
    w1 = rng.normal(0, 0.5, (FEATURES, HIDDEN)).astype(np.float32)
    b1 = rng.normal(0, 0.1, (HIDDEN,)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (HIDDEN, CLASSES)).astype(np.float32)
    b2 = rng.normal(0, 0.1, (CLASSES,)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "w1"], ["h0"]),
            helper.make_node("Add", ["h0", "b1"], ["h1"]),
            helper.make_node("Relu", ["h1"], ["h2"]),
            helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
            helper.make_node("Add", ["h3", "b2"], ["logits"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])],
        initializer=[numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2")]],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tritonops")
    model.ir_version = 8  # readable by every onnxruntime the Triton 24.x line ships
    onnx.checker.check_model(model)
    return model


def tensor(name: str, dtype: str, dims: list[int]) -> dict[str, object]:
    return {"name": name, "data_type": dtype, "dims": dims}


def specs() -> dict[str, ModelSpec]:
    features = tensor("features", "TYPE_FP32", [FEATURES])
    logits = tensor("logits", "TYPE_FP32", [CLASSES])
    cpu = [{"kind": "KIND_CPU", "count": 1}]
    return {
        "mlp": ModelSpec.model_validate(
            {"name": "mlp", "backend": "python", "max_batch_size": 8, "input": [features],
             "output": [logits], "instance_group": cpu}
        ),
        "mlp_batched": ModelSpec.model_validate(
            {"name": "mlp_batched", "backend": "python", "max_batch_size": 64, "input": [features],
             "output": [logits], "instance_group": [{"kind": "KIND_CPU", "count": 2}],
             "dynamic_batching": {"preferred_batch_size": [32, 64], "max_queue_delay_microseconds": 2000}}
        ),
        "preprocess": ModelSpec.model_validate(
            {"name": "preprocess", "backend": "python", "max_batch_size": 8,
             "input": [tensor("raw", "TYPE_UINT8", [FEATURES])], "output": [features], "instance_group": cpu}
        ),
        "postprocess": ModelSpec.model_validate(
            {"name": "postprocess", "backend": "python", "max_batch_size": 8, "input": [logits],
             "output": [tensor("probabilities", "TYPE_FP32", [CLASSES]), tensor("label", "TYPE_INT64", [1])],
             "instance_group": cpu}
        ),
        "pipeline": ModelSpec.model_validate(
            {"name": "pipeline", "platform": "ensemble", "max_batch_size": 8,
             "input": [tensor("raw", "TYPE_UINT8", [FEATURES])],
             "output": [tensor("probabilities", "TYPE_FP32", [CLASSES]), tensor("label", "TYPE_INT64", [1])],
             "ensemble_scheduling": {"step": [
                 {"model_name": "preprocess", "model_version": -1,
                  "input_map": {"raw": "raw"}, "output_map": {"features": "features_t"}},
                 {"model_name": "mlp", "model_version": -1,
                  "input_map": {"features": "features_t"}, "output_map": {"logits": "logits_t"}},
                 {"model_name": "postprocess", "model_version": -1,
                  "input_map": {"logits": "logits_t"},
                  "output_map": {"probabilities": "probabilities", "label": "label"}},
             ]}}
        ),
    }


def gpu_variant() -> ModelSpec:
    """The same model.onnx served by the onnxruntime backend on a GPU, with TensorRT acceleration."""
    return ModelSpec.model_validate(
        {"name": "mlp", "platform": "onnxruntime_onnx", "max_batch_size": 8,
         "input": [tensor("features", "TYPE_FP32", [FEATURES])],
         "output": [tensor("logits", "TYPE_FP32", [CLASSES])],
         "instance_group": [{"kind": "KIND_GPU", "count": 1, "gpus": [0]}],
         "dynamic_batching": {"max_queue_delay_microseconds": 100},
         "optimization": {"execution_accelerators": {"gpu_execution_accelerator": [
             {"name": "tensorrt", "parameters": {"precision_mode": "FP16", "max_workspace_size_bytes": "1073741824"}}
         ]}}}
    )


def goldens(model: onnx.ModelProto) -> dict[str, Golden]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    raw = {n: rng.integers(0, 256, (n, FEATURES), dtype=np.uint8) for n in (1, 4)}
    features = {n: ((r.astype(np.float32) / 255.0 - MEAN) / SCALE).astype(np.float32) for n, r in raw.items()}
    logits = {n: session.run(None, {"features": f})[0] for n, f in features.items()}

    def post(lg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = np.exp(lg - lg.max(axis=1, keepdims=True))
        p = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        return p, p.argmax(axis=1).astype(np.int64).reshape(-1, 1)

    def cases(make: object) -> list[GoldenCase]:
        return [GoldenCase(name=f"batch{n}", **make(n)) for n in (1, 4)]  # type: ignore[operator]

    def probs_label(n: int) -> dict[str, Tensor]:
        p, lbl = post(logits[n])
        return {"probabilities": Tensor.of(p, "FP32"), "label": Tensor.of(lbl, "INT64")}

    mlp = cases(lambda n: {"inputs": {"features": Tensor.of(features[n], "FP32")},
                           "outputs": {"logits": Tensor.of(logits[n], "FP32")}})
    return {
        "mlp": Golden(cases=mlp),
        "mlp_batched": Golden(cases=mlp),
        "preprocess": Golden(cases=cases(lambda n: {"inputs": {"raw": Tensor.of(raw[n], "UINT8")},
                                                    "outputs": {"features": Tensor.of(features[n], "FP32")}})),
        "postprocess": Golden(cases=cases(lambda n: {"inputs": {"logits": Tensor.of(logits[n], "FP32")},
                                                     "outputs": probs_label(n)})),
        "pipeline": Golden(cases=cases(lambda n: {"inputs": {"raw": Tensor.of(raw[n], "UINT8")},
                                                  "outputs": probs_label(n)})),
    }


def build(out: Path) -> None:
    model = build_onnx()
    code = {"mlp": ONNX_RUNNER, "mlp_batched": ONNX_RUNNER, "preprocess": PREPROCESS, "postprocess": POSTPROCESS}
    gold = goldens(model)
    for name, spec in specs().items():
        folder = out / name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(render(spec))
        gold[name].dump(folder / "golden.json")
        if spec.is_ensemble:  # an ensemble's version folder is empty; keep it in git
            (folder / "1" / ".gitkeep").touch()
        if name in code:
            (folder / "1" / "model.py").write_text(code[name])
        if name in ("mlp", "mlp_batched"):
            (folder / "1" / "model.onnx").write_bytes(model.SerializeToString())
    (out / "mlp" / "configs").mkdir(exist_ok=True)
    (out / "mlp" / "configs" / "gpu.pbtxt").write_text(render(gpu_variant()))


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "model_repository")
