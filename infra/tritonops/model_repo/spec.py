"""Typed model specs that mirror Triton's ``ModelConfig`` protobuf.

Field names are the protobuf's own, so a spec converts to and from Triton's ``model_config_pb2``
with ``google.protobuf.json_format`` and nothing is renamed by hand. Messages that production
configs tune are typed in full; rarer corners (CUDA graphs, sequence-batching state, repository
agents, ...) are carried as plain dicts, which still round-trip losslessly through the protobuf.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DataType = Literal[
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
]
Kind = Literal["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"]


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=True)


class Reshape(_Msg):
    shape: list[int] = []


class Tensor(_Msg):
    """What inputs and outputs share."""

    name: str
    data_type: DataType
    dims: list[int] = []
    reshape: Reshape | None = None
    is_shape_tensor: bool | None = None
    is_non_linear_format_io: bool | None = None


class ModelInput(Tensor):
    format: Literal["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"] | None = None
    allow_ragged_batch: bool | None = None
    optional: bool | None = None


class ModelOutput(Tensor):
    label_filename: str | None = None


class RateLimiterResource(_Msg):
    name: str
    global_: bool | None = Field(default=None, alias="global")
    count: int | None = None


class RateLimiter(_Msg):
    resources: list[RateLimiterResource] = []
    priority: int | None = None


class InstanceGroup(_Msg):
    name: str | None = None
    kind: Kind | None = None
    count: int | None = None
    gpus: list[int] = []
    rate_limiter: RateLimiter | None = None
    secondary_devices: list[dict[str, Any]] = []
    profile: list[str] = []
    passive: bool | None = None
    host_policy: str | None = None


class QueuePolicy(_Msg):
    timeout_action: Literal["REJECT", "DELAY"] | None = None
    default_timeout_microseconds: int | None = None
    allow_timeout_override: bool | None = None
    max_queue_size: int | None = None


class DynamicBatching(_Msg):
    preferred_batch_size: list[int] = []
    max_queue_delay_microseconds: int | None = None
    preserve_ordering: bool | None = None
    priority_levels: int | None = None
    default_priority_level: int | None = None
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] = {}


class SequenceStrategyDirect(_Msg):
    max_queue_delay_microseconds: int | None = None
    minimum_slot_utilization: float | None = None


class SequenceStrategyOldest(_Msg):
    max_candidate_sequences: int | None = None
    preferred_batch_size: list[int] = []
    max_queue_delay_microseconds: int | None = None
    preserve_ordering: bool | None = None


ControlKind = Literal["CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_END",
                      "CONTROL_SEQUENCE_CORRID"]


class SequenceControl(_Msg):
    kind: ControlKind = "CONTROL_SEQUENCE_START"  # the protobuf's 0 value: absent from the parsed dict
    int32_false_true: list[int] = []
    fp32_false_true: list[float] = []
    bool_false_true: list[bool] = []
    data_type: DataType | None = None


class SequenceControlInput(_Msg):
    name: str = ""
    control: list[SequenceControl] = []


class SequenceBatching(_Msg):
    direct: SequenceStrategyDirect | None = None
    oldest: SequenceStrategyOldest | None = None
    max_sequence_idle_microseconds: int | None = None
    control_input: list[SequenceControlInput] = []
    state: list[dict[str, Any]] = []
    iterative_sequence: bool | None = None


class BatchInput(_Msg):
    kind: Literal["BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT",
                  "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
                  "BATCH_ITEM_SHAPE", "BATCH_ITEM_SHAPE_FLATTEN"] = "BATCH_ELEMENT_COUNT"
    target_name: list[str] = []
    data_type: DataType | None = None  # Triton accepts TYPE_INT32 or TYPE_FP32 only
    source_input: list[str] = []


class BatchOutput(_Msg):
    target_name: list[str] = []
    kind: Literal["BATCH_SCATTER_WITH_INPUT_SHAPE"] = "BATCH_SCATTER_WITH_INPUT_SHAPE"
    source_input: list[str] = []


class EnsembleStep(_Msg):
    model_name: str = ""
    model_version: int | None = None
    input_map: dict[str, str] = {}  # the step model's input name -> ensemble tensor name
    output_map: dict[str, str] = {}  # the step model's output name -> ensemble tensor name
    model_namespace: str | None = None


class EnsembleScheduling(_Msg):
    step: list[EnsembleStep] = []


class Accelerator(_Msg):
    name: str  # "tensorrt", "openvino", "cuda", ...
    parameters: dict[str, str] = {}  # e.g. precision_mode: FP16, max_workspace_size_bytes


class ExecutionAccelerators(_Msg):
    gpu_execution_accelerator: list[Accelerator] = []
    cpu_execution_accelerator: list[Accelerator] = []


class Optimization(_Msg):
    graph: dict[str, Any] | None = None
    priority: Literal["PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN"] | None = None
    cuda: dict[str, Any] | None = None
    execution_accelerators: ExecutionAccelerators | None = None
    input_pinned_memory: dict[str, Any] | None = None
    output_pinned_memory: dict[str, Any] | None = None
    gather_kernel_buffer_threshold: int | None = None
    eager_batching: bool | None = None


class VersionPolicy(_Msg):
    latest: dict[str, int] | None = None  # {"num_versions": 2}
    all: dict[str, Any] | None = None
    specific: dict[str, list[int]] | None = None  # {"versions": [1, 3]}


class WarmupInput(_Msg):
    data_type: DataType
    dims: list[int] = []
    zero_data: bool | None = None
    random_data: bool | None = None
    input_data_file: str | None = None


class ModelWarmup(_Msg):
    name: str
    batch_size: int | None = None
    inputs: dict[str, WarmupInput] = {}
    count: int | None = None


class ResponseCache(_Msg):
    enable: bool | None = None


class ModelSpec(_Msg):
    """One model's configuration: what ``config.pbtxt`` says, typed."""

    name: str = ""  # Triton names an unnamed model after its folder
    platform: str | None = None  # onnxruntime_onnx, tensorrt_plan, pytorch_libtorch, ensemble, ...
    backend: str | None = None  # python, onnxruntime, tensorrt, pytorch, ...
    runtime: str | None = None
    version_policy: VersionPolicy | None = None
    max_batch_size: int | None = None
    input: list[ModelInput] = []
    output: list[ModelOutput] = []
    batch_input: list[BatchInput] = []
    batch_output: list[BatchOutput] = []
    optimization: Optimization | None = None
    dynamic_batching: DynamicBatching | None = None
    sequence_batching: SequenceBatching | None = None
    ensemble_scheduling: EnsembleScheduling | None = None
    instance_group: list[InstanceGroup] = []
    default_model_filename: str | None = None
    cc_model_filenames: dict[str, str] = {}
    metric_tags: dict[str, str] = {}
    parameters: dict[str, dict[str, str]] = {}  # {"KEY": {"string_value": "..."}}
    model_warmup: list[ModelWarmup] = []
    model_operations: dict[str, Any] | None = None
    model_transaction_policy: dict[str, Any] | None = None
    model_repository_agents: dict[str, Any] | None = None
    response_cache: ResponseCache | None = None
    model_metrics: dict[str, Any] | None = None

    @property
    def batching(self) -> bool:
        return bool(self.max_batch_size)

    @property
    def is_ensemble(self) -> bool:
        return self.platform == "ensemble"
