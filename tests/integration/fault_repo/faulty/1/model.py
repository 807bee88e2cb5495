"""Fault-injection model: y = 2 * x, with latency and failures switched at run time.

Each execute() reads ``fault_control.json`` from the model repository root (if present):

    {"delay_ms": 0, "fail": false}

``delay_ms`` sleeps that long per execution (a slow model); ``fail`` answers every request with an
error (counted by Triton as a failed request). A missing or unreadable file means no fault.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.control = os.path.join(args["model_repository"], "..", "fault_control.json")

    def _faults(self):
        try:
            with open(self.control) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return 0.0, False
        return float(data.get("delay_ms", 0)) / 1000.0, bool(data.get("fail", False))

    def execute(self, requests):
        delay, fail = self._faults()
        if delay > 0:
            time.sleep(delay)
        if fail:
            # Raised from execute(), the error fails every request in the batch and Triton counts
            # them under nv_inference_request_failure (an error *response* would count as success).
            raise pb_utils.TritonModelException("injected failure")
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            y = (x * 2).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("y", y)]))
        return responses
