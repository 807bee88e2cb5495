"""validate knows what the pinned Triton ships: unknown backends and platforms, GPUs the target lacks, did-you-mean
for misspelt fields, models and backends, and type errors that point at the config line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops import versions
from tritonops.cli import app
from tritonops.model_repo import triton_names
from tritonops.model_repo.validate import Target, validate
from typer.testing import CliRunner
from validate_cases import CASES, HELPERS, Case, py


def _repo(tmp_path: Path, cases: dict[str, Case]) -> Path:
    repo = tmp_path / "repo"
    for name, case in {**HELPERS, **cases}.items():
        case.write(repo, name)
    return repo


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["validate", *args])
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout


def test_the_backend_table_is_read_for_the_pinned_triton() -> None:
    # When the pin moves, read /opt/tritonserver/backends of the new image and the release notes again.
    assert triton_names.SHIPPED_WITH == versions.TRITON_SERVER_VERSION
    assert triton_names.CPU_BACKENDS <= triton_names.NGC_BACKENDS


@pytest.mark.parametrize("target", [[], ["--target", "cpu"], ["--target", "gpu"]])
def test_an_unknown_backend_is_refused_with_the_known_list_and_a_suggestion(tmp_path: Path, target: list[str]) -> None:
    repo = _repo(tmp_path, {"m": CASES["cfg_unknown_backend"]})
    code, out = _cli(str(repo / "m"), *target)
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("error"))
    assert line.startswith(f"error {repo / 'm' / 'config.pbtxt'}:2: [backend] unknown backend 'onnx'")
    assert 'did you mean "onnxruntime"?' in line and "ships dali, fil, identity, onnxruntime, openvino, python" in line
    assert "libtriton_onnx.so" in line


@pytest.mark.parametrize("backend", sorted(triton_names.VARIANT_BACKENDS))
def test_the_backends_of_ngcs_other_images_are_known(tmp_path: Path, backend: str) -> None:
    """vLLM and TensorRT-LLM ship in NGC's -vllm-python-py3 and -trtllm-python-py3 images, not the full one."""
    repo = _repo(tmp_path, {"m": Case(py(head=f'backend: "{backend}"'), None, files=("1/model.json",))})
    assert not [e for e in validate(repo / "m").errors if e.code == "backend"]
    assert [w.code for w in validate(repo / "m", target=Target.cpu).warnings if w.code == "target.backend"] == [
        "target.backend"]


def test_a_custom_backend_must_be_in_the_model_folder_or_every_version(tmp_path: Path) -> None:
    case = CASES["ok_custom_backend_in_model_folder"]
    repo = _repo(tmp_path, {"m": Case(case.config, None, files=("1/model.py", "2/libtriton_custom.so"))})
    assert [e.code for e in validate(repo / "m").errors] == ["backend"]  # version 1 would not load
    (repo / "m" / "1" / "libtriton_custom.so").write_text("")
    assert validate(repo / "m").ok


def test_a_misspelt_platform_gets_a_suggestion(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m": CASES["cfg_misspelt_platform"]})
    e = validate(repo / "m").errors
    assert [(x.code, x.line, x.field) for x in e] == [("platform", 2, "platform")]
    assert 'did you mean "onnxruntime_onnx"?' in e[0].message


def test_a_backend_the_cpu_build_lacks_is_a_warning_on_a_cpu_target(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m": Case(py(head='backend: "onnxruntime"'), None, files=("1/model.onnx",))})
    report = validate(repo / "m", target=Target.cpu)
    assert report.ok
    assert [(w.code, w.line, w.field) for w in report.warnings if w.code.startswith("target")] == [
        ("target.backend", 2, "backend")]
    assert not [w for w in validate(repo / "m", target=Target.gpu).warnings if w.code.startswith("target")]


def test_kind_gpu_without_a_target_is_a_warning_that_says_how_to_silence_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m": Case(py("instance_group [ { kind: KIND_GPU } ]\n"), None)})
    code, out = _cli(str(repo / "m"))
    assert code == 0
    warning = next(x for x in out.splitlines() if "target.gpu" in x or "KIND_GPU" in x)
    assert warning.startswith(f"warning {repo / 'm' / 'config.pbtxt'}:6: [instance_group.0.kind]")
    assert "--target gpu" in warning and "--target cpu" in warning
    report = validate(repo / "m")
    assert [w.code for w in report.warnings if w.code.startswith("target")] == ["target.gpu"]
    for quiet in ({"target": Target.gpu}, {"gpus": 1}):
        assert not [w for w in validate(repo / "m", **quiet).warnings if w.code == "target.gpu"]
    assert [e.code for e in validate(repo / "m", target=Target.cpu).errors] == ["target.gpu"]  # as before


@pytest.mark.parametrize(("ids", "bad"), [("[ -1 ]", "-1"), ("[ 0, 64 ]", "64"), ("[ 1000000 ]", "1000000")])
def test_gpu_ids_no_gpu_can_have_are_refused_without_a_target(tmp_path: Path, ids: str, bad: str) -> None:
    repo = _repo(tmp_path, {"m": Case(py(f"instance_group [ {{ kind: KIND_GPU gpus: {ids} }} ]\n"), None)})
    for kw in ({}, {"target": Target.gpu}, {"gpus": 8}):
        errors = validate(repo / "m", **kw).errors
        assert [(e.code, e.line) for e in errors] == [("instance_group.gpus", 6)], errors
        assert f"gpu id {bad}" in errors[0].message


def test_gpu_ids_beyond_the_targets_count_are_refused_once(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m": Case(py("instance_group [ { kind: KIND_GPU gpus: [ 0, 2, -1 ] } ]\n"), None)})
    errors = validate(repo / "m", gpus=2).errors
    assert sorted((e.code, e.field) for e in errors) == [("instance_group.gpus", "instance_group.0.gpus.2"),
                                                         ("target.gpu", "instance_group.0.gpus.1")]


@pytest.mark.parametrize(("broken", "field", "hint"), [
    (("max_batch_size", "max_batch"), "max_batch", '"max_batch_size"'),
    (("dims: [ 4 ] } ]\noutput", "dim: [ 4 ] } ]\noutput"), "dim", '"dims"'),
    (("TYPE_FP32", "TYPE_FLOAT"), "data_type", '"TYPE_FP32"'),
    (("instance_group [ { kind: KIND_CPU", "instance_group [ { kind: KIND_GUP"), "kind", '"KIND_GPU"'),
    (("dynamic_batching { }", "dynamic_batching { max_queue_delay: 100 }"), "max_queue_delay",
     '"max_queue_delay_microseconds"'),
])
def test_a_misspelt_field_or_value_gets_a_suggestion(tmp_path: Path, broken: tuple[str, str], field: str,
                                                     hint: str) -> None:
    config = py("instance_group [ { kind: KIND_CPU } ]\ndynamic_batching { }\n").replace(*broken)
    repo = _repo(tmp_path, {"m": Case(config, None)})
    code, out = _cli(str(repo / "m"))
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("error"))
    assert f"m/config.pbtxt:{config.count(chr(10), 0, config.index(broken[1])) + 1}: [{field}]" in line
    assert f"did you mean {hint}" in line


def test_a_misspelt_model_or_tensor_in_an_ensemble_step_gets_a_suggestion(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"ens": CASES["ens_misspelt_model"],
                            "ens2": Case(CASES["ens_unknown_step_input"].config, "ensemble.input")})
    errors = {e.code: e for e in validate(repo).errors}
    assert 'echoo (step 0) (did you mean "echo" or "echo0"?)' in errors["ensemble.model"].message
    assert 'non-existing input q in model echo (did you mean' not in errors["ensemble.input"].message  # nothing near
    (repo / "ens2" / "config.pbtxt").write_text(CASES["ens_unknown_step_input"].config.replace('"q"', '"xx"')
                                                .replace("{name}", "ens2"))
    assert 'non-existing input xx in model echo (did you mean "x"?)' in \
        next(e.message for e in validate(repo / "ens2").errors if e.code == "ensemble.input")


@pytest.mark.parametrize(("case", "code", "what"), [("ens_data_type", "ensemble.datatype", "data_type"),
                                                    ("ens_dims", "ensemble.dims", "dims")])
def test_ensemble_type_errors_name_both_config_lines(tmp_path: Path, case: str, code: str, what: str) -> None:
    repo = _repo(tmp_path, {"ens": CASES[case]})
    e = next(x for x in validate(repo / "ens").errors if x.code == code)
    assert (e.path, e.field) == (str(repo / "ens" / "config.pbtxt"), "ensemble_scheduling.step.0.input_map.x")
    assert [(r.path, r.field) for r in e.related] == [
        (str(repo / "ens" / "config.pbtxt"), f"input.0.{what}"), (str(repo / "echo" / "config.pbtxt"), f"input.0.{what}")]
    for r in e.related:
        assert r.line and f"{what}:" in Path(r.path).read_text().splitlines()[r.line - 1]
    code_, out = _cli(str(repo / "ens"))
    assert code_ == 1 and f"  see {repo / 'echo' / 'config.pbtxt'}:4: [input.0.{what}]" in out.splitlines()
    assert json.loads(CliRunner().invoke(app, ["validate", str(repo / "ens"), "--json"]).stdout)["errors"][0][
        "related"][1] == {"path": str(repo / "echo" / "config.pbtxt"), "line": 4, "field": f"input.0.{what}"}
