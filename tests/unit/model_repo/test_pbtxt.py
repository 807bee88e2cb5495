"""config.pbtxt <-> ModelSpec through Triton's protobuf: lossless, with line-accurate errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonops.model_repo import pbtxt
from tritonops.model_repo.spec import ModelSpec

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"

# A config that exercises every typed part of the spec.
FULL = """
name: "full"
backend: "onnxruntime"
max_batch_size: 16
version_policy { specific { versions: [1, 3] } }
input [
  { name: "image" data_type: TYPE_UINT8 format: FORMAT_NHWC dims: [224, 224, 3] },
  { name: "mask" data_type: TYPE_BOOL dims: [-1] optional: true allow_ragged_batch: true },
  { name: "flat" data_type: TYPE_FP16 dims: [12] reshape { shape: [3, 4] } }
]
output [ { name: "scores" data_type: TYPE_FP32 dims: [1000] label_filename: "labels.txt" } ]
instance_group [
  { name: "gpu" kind: KIND_GPU count: 2 gpus: [0, 1]
    rate_limiter { resources [ { name: "R1" global: true count: 2 } ] priority: 1 } },
  { kind: KIND_CPU count: 1 }
]
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 500
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100000 max_queue_size: 64 }
  priority_queue_policy { key: 2 value { timeout_action: DELAY allow_timeout_override: true } }
}
optimization {
  priority: PRIORITY_MAX
  cuda { graphs: true }
  execution_accelerators {
    gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ]
  }
  input_pinned_memory { enable: false }
}
model_warmup [ { name: "w" batch_size: 4 inputs { key: "image" value { data_type: TYPE_UINT8 dims: [224, 224, 3] zero_data: true } } } ]
response_cache { enable: true }
parameters { key: "intra_op_thread_count" value { string_value: "2" } }
metric_tags { key: "team" value: "vision" }
"""

SEQUENCE = """
name: "seq"
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [1] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [1] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [2] max_queue_delay_microseconds: 100 }
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_FP32 dims: [1] } ]
}
"""


@pytest.mark.parametrize("text", [FULL, SEQUENCE], ids=["full", "sequence"])
def test_round_trip_is_lossless(text: str) -> None:
    original = pbtxt.parse_proto(text)
    spec = pbtxt.proto_to_spec(original)
    assert pbtxt.spec_to_proto(spec) == original
    assert pbtxt.parse_proto(pbtxt.render(spec)) == original


def test_spec_types_the_production_fields() -> None:
    spec = pbtxt.parse(FULL)
    assert spec.dynamic_batching is not None
    assert spec.dynamic_batching.preferred_batch_size == [4, 8]
    assert spec.dynamic_batching.max_queue_delay_microseconds == 500  # int64 arrives as a string
    assert spec.dynamic_batching.priority_queue_policy[2].timeout_action == "DELAY"
    assert spec.instance_group[0].rate_limiter is not None
    assert spec.instance_group[0].rate_limiter.resources[0].global_ is True
    assert spec.input[2].reshape is not None and spec.input[2].reshape.shape == [3, 4]
    acc = spec.optimization.execution_accelerators  # type: ignore[union-attr]
    assert acc is not None and acc.gpu_execution_accelerator[0].parameters["precision_mode"] == "FP16"
    assert spec.model_warmup[0].inputs["image"].zero_data is True


@pytest.mark.parametrize("config", sorted(SAMPLE.glob("*/config.pbtxt")) + sorted(SAMPLE.glob("*/configs/*.pbtxt")),
                         ids=lambda p: str(p.relative_to(SAMPLE)))
def test_sample_configs_round_trip(config: Path) -> None:
    text = config.read_text()
    assert pbtxt.render(pbtxt.parse(text, config)) == text


def test_spec_built_in_python_renders_to_triton_text() -> None:
    spec = ModelSpec(name="m", backend="python", max_batch_size=4,
                     input=[{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],  # type: ignore[list-item]
                     output=[{"name": "y", "data_type": "TYPE_FP32", "dims": [2]}])  # type: ignore[list-item]
    text = pbtxt.render(spec)
    assert 'backend: "python"' in text and "max_batch_size: 4" in text
    assert pbtxt.parse(text) == spec


def test_unknown_field_error_names_file_line_column_and_field() -> None:
    with pytest.raises(pbtxt.ModelConfigError) as e:
        pbtxt.parse('name: "m"\nbackend: "python"\nmax_batch: 4\n', "repo/m/config.pbtxt")
    assert (e.value.line, e.value.column, e.value.field) == (3, 1, "max_batch")
    assert str(e.value).startswith("repo/m/config.pbtxt:3:1: [max_batch]")


def test_bad_enum_error_names_the_field() -> None:
    with pytest.raises(pbtxt.ModelConfigError) as e:
        pbtxt.parse('name: "m"\ninput [ { name: "x"\n  data_type: TYPE_FLOAT32 dims: [1] } ]\n')
    assert e.value.line == 3 and e.value.field == "data_type"
    assert "TYPE_FLOAT32" in e.value.message


def test_oneof_conflict_is_a_parse_error() -> None:
    with pytest.raises(pbtxt.ModelConfigError, match="oneof"):
        pbtxt.parse('name: "m"\ndynamic_batching { }\nsequence_batching { }\n')


def test_field_lines_follow_the_spec_paths() -> None:
    lines = pbtxt.field_lines(FULL)
    assert lines["dynamic_batching.preferred_batch_size"] == 18
    assert lines["dynamic_batching.preferred_batch_size.1"] == 18
    assert lines["input.1.dims"] == 8
    assert lines["input.2.reshape"] == 9
    assert lines["dynamic_batching.priority_queue_policy.2"] == 24
    assert lines["optimization.execution_accelerators.gpu_execution_accelerator.0.parameters.precision_mode"] == 30
