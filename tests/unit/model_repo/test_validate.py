"""tritonops validate: one clear finding per problem, naming file, line and field."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from tritonops.cli import app
from tritonops.model_repo.validate import Target, UsageError, validate
from typer.testing import CliRunner

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"

PY_MODEL = """name: "{name}"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""


def model(repo: Path, name: str, config: str | None = None, files: tuple[str, ...] = ("1/model.py",),
          mbs: int = 8) -> Path:
    folder = repo / name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config if config is not None else PY_MODEL.format(name=name, mbs=mbs))
    for f in files:
        (folder / f).parent.mkdir(parents=True, exist_ok=True)
        (folder / f).write_text("")
    return folder


def only_error(report, code: str):  # type: ignore[no-untyped-def]
    errors = report.errors
    assert [e.code for e in errors] == [code], [e.model_dump() for e in errors]
    return errors[0]


def test_sample_repository_is_clean() -> None:
    report = validate(SAMPLE, target=Target.cpu)
    assert report.ok and not report.warnings, report
    assert report.models == ["mlp", "mlp_batched", "pipeline", "postprocess", "preprocess"]


def test_gpu_variant_is_clean_on_gpu_target() -> None:
    assert validate(SAMPLE, target=Target.gpu, config_name="gpu").ok


def test_malformed_config_gives_one_error_with_line_and_column(tmp_path: Path) -> None:
    model(tmp_path, "m", 'name: "m"\nbackend: "python"\ninput [ { name: "x" data_type: TYPE_FP32 dims: [4] }\n')
    e = only_error(validate(tmp_path), "parse")
    assert e.path.endswith("m/config.pbtxt") and e.line == 4


def test_wrong_data_type_names_line_and_field(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8).replace("TYPE_FP32 dims: [ 4 ] } ]\noutput", "TYPE_FLOAT dims: [ 4 ] } ]\noutput")
    model(tmp_path, "m", cfg)
    e = only_error(validate(tmp_path), "parse")
    assert (e.line, e.field) == (4, "data_type")
    assert "TYPE_FLOAT" in e.message


def test_missing_version_folder(tmp_path: Path) -> None:
    model(tmp_path, "m", files=())
    e = only_error(validate(tmp_path), "layout.version")
    assert e.path == str(tmp_path / "m") and "no numeric version folder" in e.message


def test_missing_model_file_for_the_backend(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8).replace('backend: "python"', 'platform: "onnxruntime_onnx"')
    model(tmp_path, "m", cfg, files=("1/model.py",))
    e = only_error(validate(tmp_path), "layout.model_file")
    assert e.path == str(tmp_path / "m" / "1") and "model.onnx" in e.message


def test_name_must_match_folder(tmp_path: Path) -> None:
    model(tmp_path, "m", PY_MODEL.format(name="other", mbs=8))
    e = only_error(validate(tmp_path), "name")
    assert (e.line, e.field) == (1, "name")


def test_preferred_batch_size_above_max(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8) + "dynamic_batching {\n  preferred_batch_size: [ 4, 16 ]\n}\n"
    model(tmp_path, "m", cfg)
    e = only_error(validate(tmp_path), "dynamic_batching.preferred_batch_size")
    assert (e.line, e.field) == (7, "dynamic_batching.preferred_batch_size.1")


def test_dynamic_batching_on_a_model_that_cannot_batch_is_a_warning(tmp_path: Path) -> None:
    # Triton 2.51 loads it (the queue still applies priorities and timeouts): a warning, not an error.
    model(tmp_path, "m", PY_MODEL.format(name="m", mbs=0) + "dynamic_batching { }\n")
    report = validate(tmp_path)
    assert report.ok
    assert [(w.line, w.field) for w in report.warnings if w.code == "dynamic_batching"] == [(6, "dynamic_batching")]


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8).replace(
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        'input [\n  { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },\n  { name: "x" data_type: TYPE_INT32 dims: [ 1 ] }\n]')
    model(tmp_path, "m", cfg)
    report = validate(tmp_path)  # Triton 2.51 loads such a model: a warning
    assert report.ok
    assert [(w.line, w.field) for w in report.warnings if w.code == "tensor.duplicate"] == [(6, "input.1.name")]


def test_invalid_dims_and_reshape(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8).replace(
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 0 ] } ]').replace(
        'dims: [ 4 ] } ]', 'dims: [ 4 ] reshape { shape: [ 3 ] } } ]', 1)
    model(tmp_path, "m", cfg)
    codes = sorted(e.code for e in validate(tmp_path).errors)
    assert codes == ["tensor.dims", "tensor.reshape"]


def test_leading_minus_one_with_batching_is_a_warning(tmp_path: Path) -> None:
    model(tmp_path, "m", PY_MODEL.format(name="m", mbs=8).replace("dims: [ 4 ] } ]\noutput", "dims: [ -1, 4 ] } ]\noutput"))
    report = validate(tmp_path)
    assert report.ok
    assert sorted(w.code for w in report.warnings) == ["golden.missing", "tensor.batch_dim"]


def test_kind_gpu_on_a_cpu_target(tmp_path: Path) -> None:
    model(tmp_path, "m", PY_MODEL.format(name="m", mbs=8) + "instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    assert validate(tmp_path, target=Target.gpu).ok
    e = only_error(validate(tmp_path, target=Target.cpu), "target.gpu")
    assert (e.line, e.field) == (6, "instance_group.0.kind")


def test_priority_levels_and_warmup(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8) + (
        "dynamic_batching { priority_levels: 2 default_priority_level: 3 }\n"
        'model_warmup [ { name: "w" batch_size: 16 inputs { key: "z" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } } ]\n'
    )
    model(tmp_path, "m", cfg)
    codes = sorted(e.code for e in validate(tmp_path).errors)
    assert codes == ["dynamic_batching.priority", "model_warmup", "model_warmup"]


def test_tensorrt_precision_mode(tmp_path: Path) -> None:
    cfg = PY_MODEL.format(name="m", mbs=8) + (
        'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt"\n'
        '  parameters { key: "precision_mode" value: "FP8" } } ] } }\n')
    model(tmp_path, "m", cfg)
    e = only_error(validate(tmp_path), "optimization.precision_mode")
    assert e.line == 7


def _pipeline(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(SAMPLE, repo)
    return repo


def test_ensemble_dangling_tensor(tmp_path: Path) -> None:
    repo = _pipeline(tmp_path)
    cfg = repo / "pipeline" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('value: "logits_t"\n    }\n  }\n  step', 'value: "logits_x"\n    }\n  }\n  step'))
    e = only_error(validate(repo), "ensemble.dangling")
    assert e.path == str(cfg)
    assert e.field == "ensemble_scheduling.step.2.input_map.logits"
    assert cfg.read_text().splitlines()[e.line - 1].strip() == "input_map {"  # type: ignore[operator]
    assert "'logits_t'" in e.message


def test_ensemble_type_and_model_mismatches(tmp_path: Path) -> None:
    repo = _pipeline(tmp_path)
    pre = repo / "preprocess" / "config.pbtxt"
    pre.write_text(pre.read_text().replace("TYPE_UINT8", "TYPE_INT32"))
    (repo / "preprocess" / "golden.json").unlink()  # its golden data would be wrong too
    e = only_error(validate(repo), "ensemble.datatype")
    assert "TYPE_UINT8" in e.message and "TYPE_INT32" in e.message
    cfg = repo / "pipeline" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('model_name: "postprocess"', 'model_name: "post"'))
    codes = sorted(e.code for e in validate(repo).errors)
    assert codes == ["ensemble.datatype", "ensemble.model"]  # the step's outputs are still wired: one finding


def test_single_model_validation_sees_its_siblings() -> None:
    assert validate(SAMPLE / "pipeline").ok


def test_golden_data_must_match_the_config(tmp_path: Path) -> None:
    repo = _pipeline(tmp_path)
    golden = repo / "mlp" / "golden.json"
    golden.write_text(golden.read_text().replace('"FP32"', '"FP64"', 1))
    e = only_error(validate(repo), "golden.datatype")
    cfg = repo / "mlp" / "config.pbtxt"  # the config line that declares the type, the golden file beside it
    assert (e.path, e.field) == (str(cfg), "input.0.data_type")
    assert cfg.read_text().splitlines()[e.line - 1].strip() == "data_type: TYPE_FP32"  # type: ignore[operator]
    assert [(r.path, r.field) for r in e.related] == [(str(golden), "cases.0.inputs.features")]
    assert e.related[0].line == 1 and "FP64" in e.message and "TYPE_FP32" in e.message


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(SAMPLE), "--json"])
    assert ok.exit_code == 0
    assert json.loads(ok.stdout)["models"] == ["mlp", "mlp_batched", "pipeline", "postprocess", "preprocess"]
    model(tmp_path, "m", files=())
    bad = runner.invoke(app, ["validate", str(tmp_path)])
    assert bad.exit_code == 1
    assert "error" in bad.stdout and str(tmp_path / "m") in bad.stdout and "Traceback" not in bad.output
    usage = runner.invoke(app, ["validate", str(tmp_path / "missing")])
    assert usage.exit_code == 2


def test_cli_parse_error_has_no_traceback(tmp_path: Path) -> None:
    model(tmp_path, "m", 'name: "m"\nbackend: "python"\nmax_batch: 4\n')
    result = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 1
    assert "m/config.pbtxt:3: [max_batch]" in result.stdout
    assert "Traceback" not in result.output


# --- hostile and broken input: findings, never a traceback or a hang ------------------------------

def test_version_folder_beyond_a_64_bit_number(tmp_path: Path) -> None:
    # tritonserver aborts on it (std::stoll throws out_of_range, uncaught)
    model(tmp_path, "m", files=("1/model.py", "99999999999999999999999/model.py"))
    e = only_error(validate(tmp_path), "layout.version")
    assert e.path == str(tmp_path / "m" / "99999999999999999999999") and "64-bit" in e.message


def test_version_folder_of_non_ascii_digits(tmp_path: Path) -> None:
    model(tmp_path, "m", files=("\u0661/model.py",))  # ARABIC-INDIC DIGIT ONE: Python's isdigit() says yes
    report = validate(tmp_path)
    assert sorted(e.code for e in report.errors) == ["layout.version", "name.unsafe"]
    assert any("no numeric version folder" in e.message for e in report.errors)


def test_unsafe_model_and_file_names(tmp_path: Path) -> None:
    model(tmp_path, "a b", PY_MODEL.format(name="a b", mbs=8))
    model(tmp_path, "ok", files=("1/model.py", "1/$(reboot).txt"))
    report = validate(tmp_path)
    assert sorted((e.code, Path(e.path).name) for e in report.errors) == [
        ("name.unsafe", "$(reboot).txt"), ("name.unsafe", "a b")]
    assert all("not allowed" in e.message for e in report.errors)


def test_an_empty_path_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        validate("")


def test_a_huge_config_is_refused_before_parsing(tmp_path: Path) -> None:
    entry = 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    model(tmp_path, "m", 'name: "m"\nbackend: "python"\n' + entry * (50 * 2**20 // len(entry)))  # 50 MB
    start = time.perf_counter()
    e = only_error(validate(tmp_path), "parse")
    assert time.perf_counter() - start < 5
    assert e.path.endswith("m/config.pbtxt") and "larger than 1048576 bytes" in e.message


@pytest.mark.parametrize(("data", "message", "line"), [
    (b'name: "m"\nbackend: "python"\n\x00\x01\x02', "binary", 3),
    (b'name: "m"\n\xff\xfe garbage', "not UTF-8", 2),
])
def test_binary_or_undecodable_config(tmp_path: Path, data: bytes, message: str, line: int) -> None:
    folder = model(tmp_path, "m")
    (folder / "config.pbtxt").write_bytes(data)
    e = only_error(validate(tmp_path), "parse")
    assert message in e.message and e.line == line
    result = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 1 and "Traceback" not in result.output and message in result.output


def test_cli_gpus_option_and_empty_path(tmp_path: Path) -> None:
    model(tmp_path, "m", PY_MODEL.format(name="m", mbs=8) + "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]\n")
    runner = CliRunner()
    assert runner.invoke(app, ["validate", str(tmp_path), "--gpus", "2"]).exit_code == 0
    one = runner.invoke(app, ["validate", str(tmp_path), "--gpus", "1", "--json"])
    assert one.exit_code == 1
    assert [e["field"] for e in json.loads(one.stdout)["errors"]] == ["instance_group.0.gpus.0"]
    assert runner.invoke(app, ["validate", str(tmp_path), "--gpus", "-1"]).exit_code == 2
    empty = runner.invoke(app, ["validate", ""])
    assert empty.exit_code == 2 and "Traceback" not in empty.output
