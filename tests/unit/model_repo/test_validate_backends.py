"""validate and the backends a node's Triton has: custom backends declared by name or by Triton's backend directory,
the Jetson build's own backend set, and ensemble type errors at the step's line with the composing model beside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops.cli import app
from tritonops.model_repo import triton_names
from tritonops.model_repo.validate import MODEL_FILES, Target, validate
from typer.testing import CliRunner
from validate_cases import HELPERS, Case, ensemble, py


def _repo(tmp_path: Path, cases: dict[str, Case]) -> Path:
    repo = tmp_path / "repo"
    for name, case in {**HELPERS, **cases}.items():
        case.write(repo, name)
    return repo


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["validate", *args])
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


CUSTOM = Case(py(head='backend: "mybackend"'), None, files=("1/model.bin",))


def _model(backend: str) -> Case:
    return Case(py(head=f'backend: "{backend}"'), None, files=(f"1/{MODEL_FILES.get(backend, 'model.bin')}",))


def test_a_custom_backend_is_declared_by_name_or_by_the_backend_directory(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m": CUSTOM})
    config = repo / "m" / "config.pbtxt"
    code, out, _ = _cli(str(repo / "m"))
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("error"))
    assert line.startswith(f"error {config}:2: [backend] unknown backend 'mybackend'")
    assert line.endswith("or from Triton's backend folder: declare that with --backend mybackend or "
                         "--backend-directory DIR")
    assert _cli(str(repo / "m"), "--backend", "other", "--backend", "mybackend")[0] == 0
    backends = tmp_path / "backends"  # as /opt/tritonserver/backends: one folder per backend
    for name in ("mybackend", "python"):
        (backends / name).mkdir(parents=True)
    (backends / "libtritonserver.so").write_text("")  # a file is not a backend
    code, out, _ = _cli(str(repo / "m"), "--backend-directory", str(backends), "--json")
    assert code == 0 and json.loads(out)["backends"] == ["mybackend", "python"]
    # a declared name is one more name for did-you-mean, and the message says what was declared
    e = validate(repo / "m", backends=["mybackend2"]).errors
    assert [(x.code, x.line, x.field) for x in e] == [("backend", 2, "backend")]
    assert 'did you mean "mybackend2"?' in e[0].message and "mybackend2 declared" in e[0].message


@pytest.mark.parametrize(("args", "says"), [
    (["--backend", "../x"], "--backend: backend name '../x'"),
    (["--backend-directory", "{missing}"], "not a directory (Triton's backend folder"),
])
def test_a_bad_backend_declaration_is_a_usage_error(tmp_path: Path, args: list[str], says: str) -> None:
    repo = _repo(tmp_path, {"m": CUSTOM})
    code, out, err = _cli(str(repo / "m"), *[a.format(missing=tmp_path / "nope") for a in args])
    assert code == 2 and not out and says in err


def test_a_declared_backend_silences_the_cpu_builds_warning(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m": Case(py(head='backend: "onnxruntime"'), None, files=("1/model.onnx",))})
    assert [w.code for w in validate(repo / "m", target=Target.cpu).warnings if w.code.startswith("target")] == [
        "target.backend"]
    assert not [w for w in validate(repo / "m", target=Target.cpu, backends=["onnxruntime"]).warnings
                if w.code.startswith("target")]


def test_the_jetson_backend_table_names_its_source() -> None:
    assert triton_names.JETSON_BACKENDS < triton_names.NGC_BACKENDS
    assert "backend_platform_support_matrix" in triton_names.JETSON_SOURCE


@pytest.mark.parametrize("backend", sorted(triton_names.KNOWN_BACKENDS - triton_names.JETSON_BACKENDS))
def test_a_backend_the_jetson_build_lacks_is_refused_on_a_jetson(tmp_path: Path, backend: str) -> None:
    repo = _repo(tmp_path, {"m": _model(backend)})
    assert not [e for e in validate(repo / "m", target=Target.gpu).errors if e.code == "target.backend"]
    code, out, _ = _cli(str(repo / "m"), "--target", "jetson")
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("error"))
    assert line.startswith(f"error {repo / 'm' / 'config.pbtxt'}:2: [backend] backend '{backend}' is not in "
                           "Triton's Jetson build")
    assert "ship onnxruntime, python, pytorch, tensorflow, tensorrt" in line and "support_matrix" in line
    assert validate(repo / "m", target=Target.jetson, backends=[backend]).ok  # built for the Jetson, declared


def test_the_jetson_builds_backends_pass_on_a_jetson(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {f"m_{b}": _model(b) for b in sorted(triton_names.JETSON_BACKENDS)})
    assert validate(repo, target=Target.jetson).ok


def test_an_ensemble_type_error_at_a_later_step_names_that_steps_line(tmp_path: Path) -> None:
    """Step 1 reads a tensor step 0 wrote with another type: the step's map line, then both composing models."""
    steps = ('{ model_name: "echo" model_version: -1\n'
             '  input_map { key: "x" value: "x" }\n'
             '  output_map { key: "y" value: "mid" } },\n'
             '{ model_name: "as_int" model_version: -1\n'
             '  input_map { key: "x" value: "mid" }\n'
             '  output_map { key: "y" value: "y" } }')
    repo = _repo(tmp_path, {"ens": Case(ensemble(steps), "ensemble.datatype"),
                            "as_int": Case(py().replace("TYPE_FP32", "TYPE_INT32", 1), None)})
    ens, echo, as_int = (repo / m / "config.pbtxt" for m in ("ens", "echo", "as_int"))
    code, out, _ = _cli(str(repo / "ens"))
    assert code == 1
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("error"))
    assert lines[at].startswith(f"error {ens}:11: [ensemble_scheduling.step.1.input_map.x] in ensemble ens, "
                                "ensemble tensor mid: inconsistent data type")
    assert 'input_map { key: "x" value: "mid" }' in ens.read_text().splitlines()[10]
    assert lines[at + 1:at + 3] == [f"  see {echo}:5: [output.0.data_type]", f"  see {as_int}:4: [input.0.data_type]"]
