"""Triton's rules for one model configuration, as Triton's source states them.

Each rule mirrors a check in triton-inference-server/core ``src/model_config_utils.cc``
(``ValidateModelConfig``, ``ValidateModelIOConfig`` with ``ValidateIOShape`` / ``ValidateModelInput`` /
``ValidateModelOutput`` / ``ValidateBatchIO``, ``ValidateInstanceGroup``,
``ValidateEnsembleSchedulingConfig`` and the sequence-control helpers) and reports with Triton's own
wording, a rule code and the field it is about. Rules that need other models (ensemble steps), the
files on disk or the target hardware live in :mod:`tritonops.model_repo.validate`.

Triton stops at the first failed check; these rules report every one they find.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tritonops.model_repo.spec import ModelSpec, QueuePolicy, SequenceBatching, Tensor
from tritonops.model_repo.triton_names import did_you_mean

# code, message, field (a dotted path into the config, e.g. "input.1.dims")
Emit = Callable[[str, str, str | None], None]

ENSEMBLE = "ensemble"
TENSORRT_PLAN = "tensorrt_plan"
# Backends Triton knows the platform of (GetBackendType / GetBackendTypeFromPlatform); any other backend
# (python, openvino, fil, custom ones) accepts any platform.
BACKEND_PLATFORMS: dict[str, set[str]] = {
    "tensorrt": {"tensorrt_plan"},
    "tensorflow": {"tensorflow_graphdef", "tensorflow_savedmodel"},
    "onnxruntime": {"onnxruntime_onnx"},
    "pytorch": {"pytorch_libtorch", "torch_aoti"},
}
# What Triton's AutoCompleteBackendFields fills in when only one of platform/backend is given.
PLATFORM_BACKEND = {p: b for b, ps in BACKEND_PLATFORMS.items() for p in ps}
BACKEND_DEFAULT_PLATFORM = {"tensorrt": "tensorrt_plan", "onnxruntime": "onnxruntime_onnx",
                            "pytorch": "pytorch_libtorch", "tensorflow": "tensorflow_savedmodel"}
BOOL_CONTROLS = ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY")
CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
TRT_PRECISIONS = {"FP32", "FP16", "INT8"}
# GPUs one node can have: the largest single servers hold 16 (HGX/DGX-2); an id from 64 up is a typo, not a GPU.
MAX_GPUS = 64
WILDCARD = -1


@dataclass(frozen=True)
class Resolved:
    """platform and backend after Triton's auto-completion (from the config, or the model files)."""

    platform: str
    backend: str


def resolve(spec: ModelSpec) -> Resolved:
    """platform/backend as Triton completes them from the config alone (before looking at files)."""
    platform, backend = spec.platform or "", spec.backend or ""
    if not backend:
        backend = PLATFORM_BACKEND.get(platform, "")
    if not platform:
        platform = BACKEND_DEFAULT_PLATFORM.get(backend, "")
    return Resolved(platform, backend)


def check(spec: ModelSpec, kind: Resolved, err: Emit, warn: Emit) -> None:
    """Every single-config rule; ``kind`` is the auto-completed platform/backend."""
    name = spec.name
    _check_platform(spec, kind, err)
    mbs = spec.max_batch_size or 0
    if mbs < 0:
        err("max_batch_size", f"'max_batch_size' must be non-negative value for {name}", "max_batch_size")
    _check_io(spec, kind, err, warn)
    _check_batch_io(spec, err)
    _check_dynamic_batching(spec, err, warn)
    if spec.sequence_batching is not None:
        _check_sequence_batching(spec, spec.sequence_batching, err)
    if spec.ensemble_scheduling is not None or spec.platform == ENSEMBLE:
        _check_ensemble_scheduling(spec, err)
    else:
        _check_instance_groups(spec, kind, err, warn)
    decoupled = bool((spec.model_transaction_policy or {}).get("decoupled"))
    if decoupled and spec.response_cache and spec.response_cache.enable:
        err("response_cache", f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache.", "response_cache")
    _check_model_metrics(spec, err)
    _check_warmup(spec, err)
    _check_accelerators(spec, err)


def _check_platform(spec: ModelSpec, kind: Resolved, err: Emit) -> None:
    name = spec.name
    if spec.platform == ENSEMBLE and spec.backend:
        err("platform", f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type",
            "backend")
    elif spec.platform and not kind.backend and spec.platform != ENSEMBLE:
        known = sorted([*PLATFORM_BACKEND, ENSEMBLE])
        err("platform", f"unexpected platform type '{spec.platform}' for {name}"
            f"{did_you_mean(spec.platform, known)} (known platforms: {', '.join(known)}; otherwise name a "
            "backend)", "platform")
    elif kind.backend in BACKEND_PLATFORMS and kind.platform not in BACKEND_PLATFORMS[kind.backend]:
        err("platform", f"unexpected 'platform' and 'backend' pair, got:{kind.platform}, {kind.backend}",
            "platform")


# --- inputs and outputs (ValidateIOShape, ValidateModelInput/Output) ----------------------------------

def _element_count(dims: Sequence[int]) -> int:
    """triton::common::GetElementCount: -1 when any dimension is variable, 0 for no dimensions."""
    return WILDCARD if WILDCARD in dims else (math.prod(dims) if dims else 0)


def _trunks(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs between variable-size dimensions: [2, 4, -1, 6] -> [8, 6]."""
    counts, current = [], 1
    for d in dims:
        if d == WILDCARD:
            counts.append(current)
            current = 1
        else:
            current *= d
    return [*counts, current]


def _check_io(spec: ModelSpec, kind: Resolved, err: Emit, warn: Emit) -> None:
    mbs = spec.max_batch_size or 0
    groups: tuple[tuple[str, Sequence[Tensor]], ...] = (("input", spec.input), ("output", spec.output))
    for side, tensors in groups:
        seen: dict[str, int] = {}
        for i, t in enumerate(tensors):
            fld = f"{side}.{i}"
            who = f"model {side} '{t.name}'"
            if t.name in seen:  # Triton loads it; a request can only address one of the two
                warn("tensor.duplicate", f"{side} name {t.name!r} is used twice ({side}[{seen[t.name]}] and "
                     f"{side}[{i}]): Triton loads the model, but a request can address only one of them",
                     f"{fld}.name")
            seen.setdefault(t.name, i)
            if not t.dims:
                err("tensor.dims", f"{who} must specify 'dims'", fld)
            if t.reshape is not None and not t.reshape.shape and mbs == 0:
                err("tensor.reshape", f"{who} cannot have empty reshape for non-batching model as scalar "
                    "tensors are not supported", f"{fld}.reshape")
            bad = [j for j, d in enumerate(t.dims) if d < 1 and d != WILDCARD]
            for j in bad:
                err("tensor.dims", f"{who} dimension must be integer >= 1, or -1 to indicate a variable-size "
                    f"dimension (got {t.dims[j]})", f"{fld}.dims.{j}")
            if t.reshape is not None and not bad:
                _check_reshape(t, who, fld, err)
            if mbs > 0 and t.dims and t.dims[0] == WILDCARD and spec.platform != ENSEMBLE:
                warn("tensor.batch_dim", f"{side} {t.name!r} starts with -1 while max_batch_size is {mbs}: "
                     "dims exclude the batch dimension, so this adds a second variable dim", f"{fld}.dims")
            if getattr(t, "format", None) in ("FORMAT_NHWC", "FORMAT_NCHW") and len(t.dims) != 3:
                err("tensor.format", "model input NHWC/NCHW require 3 dims", f"{fld}.format")
            if t.is_shape_tensor and kind.platform != TENSORRT_PLAN:
                err("tensor.shape_tensor", "shape tensors are only supported for TensorRT platform",
                    f"{fld}.is_shape_tensor")
            if t.is_non_linear_format_io:
                if kind.platform != TENSORRT_PLAN:
                    err("tensor.non_linear_format", "Non-linear IO format is only supported for the TensorRT "
                        "platform", f"{fld}.is_non_linear_format_io")
                elif len(t.dims) != 3:
                    err("tensor.non_linear_format", f"Non-linear IO format {side} requires 3 dims", f"{fld}.dims")


def _check_reshape(t: Tensor, who: str, fld: str, err: Emit) -> None:
    assert t.reshape is not None
    shape = t.reshape.shape
    for j, d in enumerate(shape):
        if d < 1 and d != WILDCARD:
            err("tensor.reshape", f"{who} reshape dimensions must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension (got {d})", f"{fld}.reshape.shape.{j}")
            return
    dims_size, reshape_size = _element_count(t.dims), _element_count(shape)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        err("tensor.reshape", f"{who} has different size for dims and reshape (dims {t.dims}: "
            f"{'variable' if dims_size == WILDCARD else dims_size} elements, reshape {shape}: "
            f"{'variable' if reshape_size == WILDCARD else reshape_size})", f"{fld}.reshape")
    elif dims_size == WILDCARD:
        a, b = _trunks(t.dims), _trunks(shape)
        if len(a) != len(b):
            err("tensor.reshape", f"{who} has different number of variable-size dimensions for dims and "
                f"reshape ({t.dims} and {shape})", f"{fld}.reshape")
        elif a != b:
            err("tensor.reshape", f"{who} has different size for dims and reshape (the parts between "
                f"variable-size dimensions hold {a} and {b} elements)", f"{fld}.reshape")


def _check_batch_io(spec: ModelSpec, err: Emit) -> None:
    inputs = {t.name for t in spec.input}
    outputs = {t.name for t in spec.output}
    for i, b in enumerate(spec.batch_input):
        fld = f"batch_input.{i}"
        if len(b.source_input) != 1:
            err("batch_input", f"batch input kind '{b.kind}' expects 1 source input, got {len(b.source_input)}",
                f"{fld}.source_input")
        if b.data_type not in ("TYPE_INT32", "TYPE_FP32"):
            err("batch_input", "batch input data type must be TYPE_INT32 or TYPE_FP32"
                f" (got {b.data_type or 'none'})", f"{fld}.data_type" if b.data_type else fld)
        for s in b.source_input:
            if s not in inputs:
                err("batch_input", f"unknown source input name '{s}' for {spec.name}", f"{fld}.source_input")
    for i, bo in enumerate(spec.batch_output):
        fld = f"batch_output.{i}"
        if len(bo.source_input) != 1:
            err("batch_output", f"batch output kind '{bo.kind}' expects 1 source input, got "
                f"{len(bo.source_input)}", f"{fld}.source_input")
        for s in bo.source_input:
            if s not in inputs:
                err("batch_output", f"unknown source input name '{s}' for {spec.name}", f"{fld}.source_input")
        targets: set[str] = set()
        for target in bo.target_name:
            if target not in outputs:
                err("batch_output", f"unknown target output name '{target}' for {spec.name}",
                    f"{fld}.target_name")
            elif target in targets:
                err("batch_output", f"target output name '{target}' can only be specified once",
                    f"{fld}.target_name")
            targets.add(target)


# --- schedulers -------------------------------------------------------------------------------------

def _delays(policy: QueuePolicy | None) -> bool:
    return bool(policy and policy.default_timeout_microseconds and policy.timeout_action == "DELAY")


def _check_dynamic_batching(spec: ModelSpec, err: Emit, warn: Emit) -> None:
    db, name, mbs = spec.dynamic_batching, spec.name, spec.max_batch_size or 0
    if db is None:
        return
    base = "dynamic_batching"
    if mbs == 0:
        warn("dynamic_batching", "dynamic_batching is set but max_batch_size is 0: requests are queued "
             "(priorities, timeouts) but never batched", base)
    for i, p in enumerate(db.preferred_batch_size):
        fld = f"{base}.preferred_batch_size.{i}"
        if p <= 0:
            err("dynamic_batching.preferred_batch_size", f"dynamic batching preferred size must be positive "
                f"for {name} (got {p})", fld)
        elif p > mbs:
            err("dynamic_batching.preferred_batch_size", f"dynamic batching preferred size must be <= max "
                f"batch size for {name} (preferred {p}, max_batch_size {mbs})", fld)
    levels = db.priority_levels or 0
    if levels:
        default = db.default_priority_level or 0
        if not 1 <= default <= levels:
            err("dynamic_batching.priority", f"default priority level must be in range [1, {levels}] for {name} "
                f"(got {default}{', unset' if not default else ''})",
                f"{base}.default_priority_level" if default else f"{base}.priority_levels")
        for level in db.priority_queue_policy:
            if not 1 <= int(level) <= levels:
                err("dynamic_batching.priority", f"priority queue policy must have priority level in range "
                    f"[1, {levels}] for {name} (got {level})", f"{base}.priority_queue_policy.{level}")
    elif db.default_priority_level or db.priority_queue_policy:
        warn("dynamic_batching.priority", "default_priority_level and priority_queue_policy are ignored "
             "without priority_levels", base)
    if db.preserve_ordering:
        if levels > 1:
            err("dynamic_batching.preserve_ordering", f"Only one priority level is allowed when "
                f"'preserve_ordering' is true for {name} (priority_levels {levels})", f"{base}.priority_levels")
        policies = [(f"{base}.default_queue_policy", db.default_queue_policy),
                    *((f"{base}.priority_queue_policy.{k}", v) for k, v in db.priority_queue_policy.items())]
        for fld, policy in policies:
            if _delays(policy):
                err("dynamic_batching.preserve_ordering", f"Queue policy can not have DELAY as timeout action "
                    f"when 'preserve_ordering' is true for {name}", fld)


def _check_sequence_batching(spec: ModelSpec, sb: SequenceBatching, err: Emit) -> None:
    name, mbs, base = spec.name, spec.max_batch_size or 0, "sequence_batching"
    if spec.response_cache and spec.response_cache.enable:
        err("sequence_batching", f"Response Cache does not currently support model {name} with sequence "
            "batching scheduler. Please disable the response cache.", "response_cache")
    seen_tensors: set[str] = set()
    seen_kinds: set[str] = set()
    for i, ci in enumerate(sb.control_input):
        fld = f"{base}.control_input.{i}"
        if not ci.name:
            err("sequence_batching.control", f"sequence batching control tensor must have a name for {name}", fld)
        elif ci.name in seen_tensors:
            err("sequence_batching.control", f"sequence batching control tensor '{ci.name}' is specified for "
                f"multiple control kinds for {name}", f"{fld}.name")
        seen_tensors.add(ci.name)
        for j, c in enumerate(ci.control):
            cfld = f"{fld}.control.{j}"
            if c.kind in seen_kinds:
                err("sequence_batching.control", f"sequence batching specifies multiple {c.kind} tensors for "
                    f"{name}", f"{cfld}.kind")
            seen_kinds.add(c.kind)
            given = [k for k, v in (("int32_false_true", c.int32_false_true), ("fp32_false_true", c.fp32_false_true),
                                    ("bool_false_true", c.bool_false_true)) if v]
            if c.kind == "CONTROL_SEQUENCE_CORRID":
                if given:
                    err("sequence_batching.control", "sequence batching must not specify either "
                        f"'int32_false_true', 'fp32_false_true' or 'bool_false_true' for {c.kind} for {name}",
                        f"{cfld}.{given[0]}")
                elif c.data_type not in CORRID_TYPES:
                    err("sequence_batching.control", f"unexpected data type for control {c.kind} for {name}. "
                        "Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                        f" (got {c.data_type or 'none'})", f"{cfld}.data_type" if c.data_type else cfld)
            elif not given:
                err("sequence_batching.control", "sequence batching must specify either 'int32_false_true', "
                    f"'fp32_false_true' or 'bool_false_true' for {c.kind} for {name}", cfld)
            elif len(given) > 1:
                err("sequence_batching.control", "sequence batching specifies more than one from "
                    f"'int32_false_true', 'fp32_false_true' and 'bool_false_true' for {c.kind} for {name}",
                    f"{cfld}.{given[1]}")
            elif len(getattr(c, given[0])) != 2:
                err("sequence_batching.control", f"sequence batching control '{given[0]}' must have exactly 2 "
                    f"entries for {c.kind} for {name}", f"{cfld}.{given[0]}")
    if sb.oldest is not None:
        for i, p in enumerate(sb.oldest.preferred_batch_size):
            fld = f"{base}.oldest.preferred_batch_size.{i}"
            if p <= 0:
                err("sequence_batching.preferred_batch_size", "sequence batching preferred batch size must be "
                    f"positive for {name} (got {p})", fld)
            elif p > mbs:
                err("sequence_batching.preferred_batch_size", "sequence batching preferred batch size must be "
                    f"<= max batch size for {name} (preferred {p}, max_batch_size {mbs})", fld)
    if sb.direct is not None and not 0.0 <= (sb.direct.minimum_slot_utilization or 0.0) <= 1.0:
        err("sequence_batching.direct", "sequence batching minimum slot utilization must be in range (0.0, 1.0] "
            f"for {name}", f"{base}.direct.minimum_slot_utilization")


# --- ensemble scheduling of one config (ValidateEnsembleSchedulingConfig, BuildEnsembleGraph) --------

def _check_ensemble_scheduling(spec: ModelSpec, err: Emit) -> None:
    name = spec.name
    if spec.platform != ENSEMBLE:
        err("ensemble.platform", f"ensemble scheduling cannot be set for model '{name}' whose platform is not "
            "ensemble", "ensemble_scheduling")
        return
    steps = spec.ensemble_scheduling.step if spec.ensemble_scheduling else []
    for fld, present, what in (("instance_group", bool(spec.instance_group), "instance group should not be specified"),
                               ("optimization", spec.optimization is not None, "optimization should not be specified"),
                               ("model_warmup", bool(spec.model_warmup), "model_warmup can not be specified")):
        if present:
            err("ensemble.config", f"{what} for ensemble '{name}'", fld)
    if spec.ensemble_scheduling is None:
        err("ensemble.steps", f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble",
            "platform")
        return
    if not steps:
        err("ensemble.steps", f"must specify 'step' for ensemble '{name}'", "ensemble_scheduling")
        return
    # The data-flow graph: a step's output tensors depend on all of its input tensors.
    produced: dict[str, int] = {}
    consumers: dict[str, list[str]] = {}  # tensor -> tensors produced from it
    needs: dict[str, set[str]] = {}  # tensor -> the tensors its step reads
    for s, step in enumerate(steps):
        base = f"ensemble_scheduling.step.{s}"
        for key, present in (("model_name", bool(step.model_name)), ("input_map", bool(step.input_map)),
                             ("output_map", bool(step.output_map))):
            if not present:
                err("ensemble.steps", f"must specify '{key}' in step {s} of ensemble '{name}'", f"{base}.{key}"
                    if key == "model_name" else base)
        for out_key, tensor in step.output_map.items():
            if tensor in produced:
                err("ensemble.output", f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {s} (also written by step {produced[tensor]})",
                    f"{base}.output_map.{out_key}")
            produced.setdefault(tensor, s)
            needs.setdefault(tensor, set()).update(step.input_map.values())
            for src in step.input_map.values():
                consumers.setdefault(src, []).append(tensor)
    inputs = {t.name for t in spec.input}
    dangling = False
    for s, step in enumerate(steps):
        for in_key, tensor in step.input_map.items():
            if tensor not in produced and tensor not in inputs:
                dangling = True
                err("ensemble.dangling", f"ensemble tensor '{tensor}' is not connected in ensemble '{name}': step "
                    f"{s} reads it, but no step writes it and it is not an ensemble input",
                    f"ensemble_scheduling.step.{s}.input_map.{in_key}")
    for i, t in enumerate(spec.input):
        if t.name not in consumers and t.name not in produced:
            err("ensemble.dangling", f"ensemble input '{t.name}' for ensemble '{name}' is not used", f"input.{i}.name")
    ready = set(inputs)
    queue = list(ready)
    while queue:
        for nxt in consumers.get(queue.pop(), []):
            if nxt not in ready and needs[nxt] <= ready:
                ready.add(nxt)
                queue.append(nxt)
    outputs = {t.name for t in spec.output}
    for i, o in enumerate(spec.output):
        if o.name not in produced:
            err("ensemble.dangling", f"output '{o.name}' for ensemble '{name}' is not written (no step maps an "
                "output to it)", f"output.{i}.name")
        elif o.name not in ready and all(n in produced or n in inputs for n in _upstream(o.name, needs)):
            err("ensemble.cycle", f"output '{o.name}' for ensemble '{name}' is not written: the steps it depends "
                "on read each other's outputs (a cycle)", f"output.{i}.name")
    for tensor, s in produced.items() if not dangling else ():  # a misspelt read also leaves a write unused
        if tensor not in outputs and tensor in ready and tensor not in consumers:
            out_key = next(k for k, v in steps[s].output_map.items() if v == tensor)
            err("ensemble.unused", f"ensemble tensor '{tensor}' is unused in ensemble '{name}' (step {s} writes "
                "it, no step reads it and it is not an ensemble output)",
                f"ensemble_scheduling.step.{s}.output_map.{out_key}")


def _upstream(tensor: str, needs: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        for src in needs.get(todo.pop(), set()):
            if src not in seen:
                seen.add(src)
                todo.append(src)
    return seen


# --- instances, metrics, warmup, accelerators -------------------------------------------------------

def _check_instance_groups(spec: ModelSpec, kind: Resolved, err: Emit, warn: Emit) -> None:
    for i, g in enumerate(spec.instance_group):
        fld = f"instance_group.{i}"
        who = f"instance group {g.name or f'{spec.name}_{i}'} of model {spec.name}"
        if g.count is not None and g.count < 1:
            warn("instance_group.count", f"{who} has count {g.count}: Triton replaces a count below 1 by its "
                 "default (1; 2 on CPU for onnxruntime and tensorflow)", f"{fld}.count")
        if g.gpus and g.kind in ("KIND_CPU", "KIND_MODEL"):
            err("instance_group.gpus", f"{who} has kind {g.kind} but specifies one or more GPUs", f"{fld}.gpus")
        else:
            for j, gid in enumerate(g.gpus):
                if not 0 <= gid < MAX_GPUS:
                    err("instance_group.gpus", f"{who} specifies gpu id {gid}, which no GPU has: CUDA numbers a "
                        f"node's GPUs 0..N-1 and no node has {MAX_GPUS} (ids 0..{MAX_GPUS - 1})", f"{fld}.gpus.{j}")
        if g.profile and kind.platform != TENSORRT_PLAN:
            err("instance_group.profile", f"{who} and platform {kind.platform} specifies profile field which is "
                "only supported for TensorRT models", f"{fld}.profile")
        for j, p in enumerate(g.profile if kind.platform == TENSORRT_PLAN else []):
            if not p.strip().lstrip("+-").isdigit() or int(p) < 0:
                err("instance_group.profile", f"{who} and platform {kind.platform} specifies invalid profile {p}. "
                    "The field should contain the string representation of a non-negative integer.",
                    f"{fld}.profile.{j}")


def _check_model_metrics(spec: ModelSpec, err: Emit) -> None:
    for i, mc in enumerate((spec.model_metrics or {}).get("metric_control", [])):
        fld = f"model_metrics.metric_control.{i}"
        ident, hist = mc.get("metric_identifier"), mc.get("histogram_options")
        if ident is None:
            err("model_metrics", "metric control must specify 'metric_identifier'", fld)
        elif not ident.get("family"):
            err("model_metrics", "metric identifier must specify non-empty 'family'", f"{fld}.metric_identifier")
        if hist is None:
            err("model_metrics", "metric control must specify 'histogram_options'", fld)
        elif not hist.get("buckets"):
            err("model_metrics", "histogram options must specify non-empty 'buckets'", f"{fld}.histogram_options")


def _check_warmup(spec: ModelSpec, err: Emit) -> None:
    mbs = spec.max_batch_size or 0
    input_names = {t.name for t in spec.input}
    for i, w in enumerate(spec.model_warmup):
        if w.batch_size and mbs and w.batch_size > mbs:
            err("model_warmup", f"warmup {w.name!r} batch_size {w.batch_size} exceeds max_batch_size ({mbs})",
                f"model_warmup.{i}.batch_size")
        for name in w.inputs:
            if name not in input_names:
                err("model_warmup", f"warmup {w.name!r} feeds {name!r}, which is not an input",
                    f"model_warmup.{i}.inputs.{name}")


def _check_accelerators(spec: ModelSpec, err: Emit) -> None:
    acc = spec.optimization.execution_accelerators if spec.optimization else None
    for i, a in enumerate(acc.gpu_execution_accelerator if acc else []):
        precision = a.parameters.get("precision_mode")
        if a.name == "tensorrt" and precision is not None and precision not in TRT_PRECISIONS:
            err("optimization.precision_mode", f"precision_mode {precision!r} is not one of "
                f"{sorted(TRT_PRECISIONS)}",
                f"optimization.execution_accelerators.gpu_execution_accelerator.{i}.parameters")
