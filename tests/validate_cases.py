"""Failing and passing cases for every Triton configuration rule `tritonops validate` checks.

Shared by the unit tests (tests/unit/model_repo/test_validate_rules.py: validate reports the rule, with line and
field) and the parity suite (tests/integration/test_validate_parity.py: the real tritonserver agrees).
Every model is a Python-backend model, the one backend the wheel's tritonserver has, so Triton itself
can be asked about each case. Ensemble cases call the helper models in HELPERS.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ECHO = """import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
"""


def py(tail: str = "", *, mbs: int = 8, x: str = "dims: [ 4 ]", y: str = "dims: [ 4 ]",
       head: str = 'backend: "python"') -> str:
    """A Python-backend config; ``x``/``y`` are the rest of the input/output, ``tail`` appended fields."""
    return (f'name: "{{name}}"\n{head}\nmax_batch_size: {mbs}\n'
            f'input [ {{ name: "x" data_type: TYPE_FP32 {x} }} ]\n'
            f'output [ {{ name: "y" data_type: TYPE_FP32 {y} }} ]\n{tail}')


def ensemble(steps: str, *, mbs: int = 8, extra_input: str = "", tail: str = "") -> str:
    return (f'name: "{{name}}"\nplatform: "ensemble"\nmax_batch_size: {mbs}\n'
            f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }}{extra_input} ]\n'
            'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            f"ensemble_scheduling {{ step [\n{steps}\n] }}\n{tail}")


def step(model: str, src: str, dst: str) -> str:
    return (f'  {{ model_name: "{model}" model_version: -1 input_map {{ key: "x" value: "{src}" }} '
            f'output_map {{ key: "y" value: "{dst}" }} }}')


@dataclass(frozen=True)
class Case:
    config: str  # config.pbtxt; "{name}" becomes the model's name
    code: str | None  # the rule that must report an error; None: validate passes (warnings allowed)
    files: tuple[str, ...] = ("1/model.py",)
    parity: bool = True  # ask the real tritonserver too (False: Triton cannot be asked safely here)

    def write(self, repo: Path, name: str) -> Path:
        folder = repo / name
        folder.mkdir(parents=True)
        (folder / "config.pbtxt").write_text(self.config.replace("{name}", name))
        for rel in self.files:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(ECHO if rel.endswith(".py") else "")
        return folder


# Models the ensemble cases call: a batching echo and a non-batching one with a variable batch dim.
HELPERS = {
    "echo": Case(py(), None),
    "echo0": Case(py(mbs=0, x="dims: [ -1, 4 ]", y="dims: [ -1, 4 ]"), None),
}


def seq(*controls: str) -> str:
    return f"sequence_batching {{ control_input [ {', '.join(controls)} ] }}\n"


START01 = '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }'

CASES: dict[str, Case] = {
    # --- passes: what Triton accepts must pass (no false rejections) ---
    "ok_plain": Case(py(), None),
    "ok_unnamed": Case(py().replace('name: "{name}"\n', ""), None),
    "ok_backend_from_files": Case(py(head=""), None),
    "ok_reshape_variable": Case(py(x="dims: [ 2, 4, -1, 6 ] reshape { shape: [ 8, -1, 1, 6 ] }"), None),
    "ok_reshape_scalar": Case(py(x="dims: [ 1 ] reshape { shape: [ ] }"), None),
    "ok_priorities": Case(py("dynamic_batching { priority_levels: 2 default_priority_level: 2\n"
                             "  priority_queue_policy { key: 1 value { max_queue_size: 4 } } }\n"), None),
    "ok_preserve_ordering": Case(py("dynamic_batching { preserve_ordering: true priority_levels: 1 "
                                    "default_priority_level: 1\n  default_queue_policy { timeout_action: DELAY } }\n"),
                                 None),
    "ok_dynamic_batching_unbatched": Case(py("dynamic_batching { }\n", mbs=0), None),
    "ok_instance_count_zero": Case(py("instance_group [ { kind: KIND_CPU count: 0 } ]\n"), None),
    "ok_sequence": Case(py(seq(START01, '{ name: "CORRID" control [ { kind: '
                                      'CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }')), None),
    "ok_batch_io": Case(py('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "n" data_type: TYPE_FP32 '
                           'source_input: "x" } ]\nbatch_output [ { target_name: "y" kind: '
                           'BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "x" } ]\n'), None),
    "ok_specific_version_partly_there": Case(py("version_policy { specific { versions: [ 1, 3 ] } }\n"), None),
    "ok_leading_zero_folder_beside": Case(py(), None, files=("1/model.py", "01/model.py")),
    "ok_ensemble_steps_out_of_order": Case(ensemble(step("echo", "t", "y") + ",\n" + step("echo", "x", "t")), None),
    "ok_ensemble_unbatched_step": Case(ensemble(step("echo0", "x", "y")), None),
    # --- inputs and outputs (ValidateIOShape, ValidateModelInput/Output) ---
    "io_no_dims": Case(py(x=""), "tensor.dims"),
    "io_zero_dim": Case(py(y="dims: [ 0 ]"), "tensor.dims"),
    "io_reshape_count": Case(py(x="dims: [ 4 ] reshape { shape: [ 3 ] }"), "tensor.reshape"),
    "io_reshape_variable_vs_fixed": Case(py(x="dims: [ -1, 4 ] reshape { shape: [ 4 ] }"), "tensor.reshape"),
    "io_reshape_variable_count": Case(py(x="dims: [ -1, 4 ] reshape { shape: [ -1, 3 ] }"), "tensor.reshape"),
    "io_reshape_variable_number": Case(py(x="dims: [ -1, 4 ] reshape { shape: [ -1, -1, 4 ] }"), "tensor.reshape"),
    "io_reshape_empty_unbatched": Case(py(x="dims: [ 1 ] reshape { shape: [ ] }", mbs=0), "tensor.reshape"),
    "io_reshape_zero": Case(py(x="dims: [ 4 ] reshape { shape: [ 0 ] }"), "tensor.reshape"),
    "io_nhwc_dims": Case(py(x="format: FORMAT_NHWC dims: [ 4 ]"), "tensor.format"),
    "io_shape_tensor": Case(py(x="dims: [ 4 ] is_shape_tensor: true"), "tensor.shape_tensor"),
    "ok_duplicate_output": Case(py().replace('output [ { name: "y"', 'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] },'
                                      ' { name: "y"'), None),
    "ok_duplicate_input": Case(py().replace('input [ { name: "x"', 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },'
                                            ' { name: "x"'), None),
    # --- batch inputs and outputs (ValidateBatchIO) ---
    "batch_input_two_sources": Case(py('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "n" '
                                       'data_type: TYPE_FP32 source_input: [ "x", "x" ] } ]\n'), "batch_input"),
    "batch_input_unknown_source": Case(py('batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "n" '
                                          'data_type: TYPE_INT32 source_input: "z" } ]\n'), "batch_input"),
    "batch_input_data_type": Case(py('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "n" '
                                     'data_type: TYPE_INT64 source_input: "x" } ]\n'), "batch_input"),
    "batch_output_unknown_target": Case(py('batch_output [ { target_name: "z" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
                                           'source_input: "x" } ]\n'), "batch_output"),
    "batch_output_duplicate_target": Case(py('batch_output [ { target_name: [ "y", "y" ] kind: '
                                             'BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "x" } ]\n'), "batch_output"),
    "batch_output_unknown_source": Case(py('batch_output [ { target_name: "y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
                                           'source_input: "w" } ]\n'), "batch_output"),
    # --- dynamic batching ---
    "dyn_preferred_above_max": Case(py("dynamic_batching { preferred_batch_size: [ 16 ] }\n"),
                                    "dynamic_batching.preferred_batch_size"),
    "dyn_preferred_zero": Case(py("dynamic_batching { preferred_batch_size: [ 0 ] }\n"),
                               "dynamic_batching.preferred_batch_size"),
    "dyn_default_level_unset": Case(py("dynamic_batching { priority_levels: 2 }\n"), "dynamic_batching.priority"),
    "dyn_default_level_range": Case(py("dynamic_batching { priority_levels: 2 default_priority_level: 3 }\n"),
                                    "dynamic_batching.priority"),
    "dyn_policy_level_range": Case(py("dynamic_batching { priority_levels: 2 default_priority_level: 1\n"
                                      "  priority_queue_policy { key: 3 value { max_queue_size: 4 } } }\n"),
                                   "dynamic_batching.priority"),
    "dyn_preserve_ordering_levels": Case(py("dynamic_batching { preserve_ordering: true priority_levels: 2 "
                                            "default_priority_level: 1 }\n"), "dynamic_batching.preserve_ordering"),
    "dyn_preserve_ordering_delay": Case(py("dynamic_batching { preserve_ordering: true\n  default_queue_policy { "
                                           "timeout_action: DELAY default_timeout_microseconds: 100 } }\n"),
                                        "dynamic_batching.preserve_ordering"),
    # --- sequence batching ---
    "seq_two_start_tensors": Case(py(seq(START01, '{ name: "START2" control [ { kind: '
                                                'CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }')),
                                  "sequence_batching.control"),
    "seq_tensor_for_two_kinds": Case(py(seq(START01, '{ name: "START" control [ { kind: '
                                                   'CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }')),
                                     "sequence_batching.control"),
    "seq_no_false_true": Case(py(seq('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START } ] }')),
                              "sequence_batching.control"),
    "seq_three_values": Case(py(seq('{ name: "END" control [ { kind: CONTROL_SEQUENCE_END '
                                           'fp32_false_true: [ 0, 1, 2 ] } ] }')), "sequence_batching.control"),
    "seq_two_value_types": Case(py(seq('{ name: "READY" control [ { kind: CONTROL_SEQUENCE_READY '
                                              'int32_false_true: [ 0, 1 ] bool_false_true: [ false, true ] } ] }')),
                                "sequence_batching.control"),
    "seq_corrid_data_type": Case(py(seq('{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
                                               'data_type: TYPE_FP32 } ] }')), "sequence_batching.control"),
    "seq_oldest_preferred": Case(py("sequence_batching { oldest { preferred_batch_size: [ 16 ] } }\n"),
                                 "sequence_batching.preferred_batch_size"),
    "seq_direct_slot_utilization": Case(py("sequence_batching { direct { minimum_slot_utilization: 1.5 } }\n"),
                                        "sequence_batching.direct"),
    "seq_response_cache": Case(py("sequence_batching { }\nresponse_cache { enable: true }\n"), "sequence_batching"),
    # --- the model as a whole (ValidateModelConfig) ---
    "cfg_negative_max_batch": Case(py(mbs=-1), "max_batch_size"),
    "cfg_unknown_platform": Case(py(head='platform: "magic"'), "platform"),
    "cfg_misspelt_platform": Case(py(head='platform: "onnxruntime_onx"'), "platform"),
    "cfg_unknown_backend": Case(py(head='backend: "onnx"'), "backend"),
    "cfg_misspelt_field": Case(py().replace("max_batch_size", "max_batch"), "parse"),
    "cfg_misspelt_data_type": Case(py(x="dims: [ 4 ]").replace("TYPE_FP32", "TYPE_FLOAT", 1), "parse"),
    # a backend the model carries itself, where Triton looks first (parity: an empty file is no library)
    "ok_custom_backend_in_model_folder": Case(py(head='backend: "custom"'), None,
                                              files=("1/model.py", "libtriton_custom.so"), parity=False),
    "ok_custom_backend_in_version_folder": Case(py(head='backend: "custom"\nruntime: "libcustom.so"'), None,
                                                files=("1/libcustom.so",), parity=False),
    "cfg_platform_backend_pair": Case(py(head='platform: "tensorrt_plan"\nbackend: "onnxruntime"'), "platform",
                                      files=("1/model.onnx",)),
    "cfg_ensemble_with_backend": Case(ensemble(step("echo", "x", "y")).replace('platform: "ensemble"',
                                                                               'platform: "ensemble"\nbackend: "python"'),
                                      "platform"),
    "cfg_ensemble_scheduling_not_ensemble": Case(py("ensemble_scheduling { step [\n" + step("echo", "x", "y")
                                                    + "\n] }\n"), "ensemble.platform"),
    "cfg_decoupled_cache": Case(py("model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }\n"),
                                "response_cache"),
    # --- instance groups (ValidateInstanceGroup) on this CPU-only host ---
    "ig_cpu_with_gpus": Case(py("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n"), "instance_group.gpus"),
    "ig_model_with_gpus": Case(py("instance_group [ { kind: KIND_MODEL gpus: [ 0 ] } ]\n"), "instance_group.gpus"),
    "ig_gpu_without_gpus": Case(py("instance_group [ { kind: KIND_GPU } ]\n"), "target.gpu"),
    "ig_auto_with_gpu_id": Case(py("instance_group [ { gpus: [ 0 ] } ]\n"), "target.gpu"),
    "ig_negative_gpu_id": Case(py("instance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]\n"), "instance_group.gpus"),
    "ig_gpu_id_no_node_has": Case(py("instance_group [ { kind: KIND_GPU gpus: [ 0, 64 ] } ]\n"),
                                  "instance_group.gpus"),
    "ig_profile_not_tensorrt": Case(py('instance_group [ { kind: KIND_CPU profile: [ "0" ] } ]\n'),
                                    "instance_group.profile"),
    # --- layout ---
    "layout_version_not_ascii_digits": Case(py(), "layout.version", files=("\u0661/model.py",)),
    "layout_no_version_left": Case(py("version_policy { specific { versions: [ 3 ] } }\n"), "version_policy"),
    # --- ensembles ---
    "ens_input_unused": Case(ensemble(step("echo", "x", "y"),
                                      extra_input=', { name: "w" data_type: TYPE_FP32 dims: [ 4 ] }'),
                             "ensemble.dangling"),
    "ens_tensor_unused": Case(ensemble(step("echo", "x", "t") + ",\n" + step("echo", "x", "y")), "ensemble.unused"),
    "ens_dangling_read": Case(ensemble(step("echo", "nowhere", "y")), "ensemble.dangling"),
    "ens_written_twice": Case(ensemble(step("echo", "x", "y") + ",\n" + step("echo", "x", "y")), "ensemble.output"),
    "ens_instance_group": Case(ensemble(step("echo", "x", "y"), tail="instance_group [ { kind: KIND_CPU } ]\n"),
                               "ensemble.config"),
    "ens_batch_above_step": Case(ensemble(step("echo", "x", "y"), mbs=16), "ensemble.batch"),
    "ens_missing_model": Case(ensemble(step("nosuchmodel", "x", "y")), "ensemble.model"),
    "ens_misspelt_model": Case(ensemble(step("echoo", "x", "y")), "ensemble.model"),
    "ens_data_type": Case(ensemble(step("echo", "x", "y")).replace("TYPE_FP32", "TYPE_INT32", 1), "ensemble.datatype"),
    "ens_dims": Case(ensemble(step("echo", "x", "y")).replace("dims: [ 4 ]", "dims: [ 5 ]", 1), "ensemble.dims"),
    "ens_unknown_step_input": Case(ensemble(step("echo", "x", "y").replace('key: "x"', 'key: "q"')), "ensemble.input"),
}
# Two ensembles that call each other (A -> B -> A): written together by the tests.
CYCLE = {"cycle_a": Case(ensemble(step("cycle_b", "x", "y")), "ensemble.cycle"),
         "cycle_b": Case(ensemble(step("cycle_a", "x", "y")), "ensemble.cycle")}
