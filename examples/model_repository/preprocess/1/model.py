"""UINT8 raw features -> standardised FP32 features."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "raw").as_numpy()
            features = ((raw.astype(np.float32) / 255.0 - 0.5) / 0.25).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("features", features)]))
        return responses
