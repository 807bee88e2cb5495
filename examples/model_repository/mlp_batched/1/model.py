"""Serve this version's model.onnx with onnxruntime (CPU) through Triton's Python backend."""

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
