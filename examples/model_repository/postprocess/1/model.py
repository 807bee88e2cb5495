"""Logits -> softmax probabilities and the arg-max label."""

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
