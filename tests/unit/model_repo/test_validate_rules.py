"""Every Triton configuration rule: a failing case reports that rule with file, line and field; a passing
case passes. The same cases go to the real tritonserver in tests/integration/test_validate_parity.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonops.model_repo.validate import Target, validate
from validate_cases import CASES, CYCLE, HELPERS


def _repo(tmp_path: Path, cases: dict) -> Path:  # type: ignore[type-arg]
    repo = tmp_path / "repo"
    for name, case in {**HELPERS, **cases}.items():
        case.write(repo, name)
    return repo


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.code is None))
def test_what_triton_accepts_passes(tmp_path: Path, name: str) -> None:
    repo = _repo(tmp_path, {name: CASES[name]})
    report = validate(repo / name, target=Target.cpu)
    assert report.ok, [e.model_dump() for e in report.errors]


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.code is not None))
def test_each_rule_reports_file_line_and_field(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    repo = _repo(tmp_path, {name: case})
    report = validate(repo / name, target=Target.cpu)
    found = [e for e in report.errors if e.code == case.code]
    assert found, [e.model_dump() for e in report.errors]
    first = found[0]
    if first.path.endswith("config.pbtxt"):
        assert first.line and first.field, first
        assert first.field.split(".")[0] in Path(first.path).read_text().splitlines()[first.line - 1] or \
            first.field.split(".")[0] in Path(first.path).read_text(), first


def test_the_helpers_and_the_whole_case_repository_fail_only_where_meant(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {**CASES, **CYCLE})
    report = validate(repo, target=Target.cpu)
    failing = {Path(e.path).relative_to(repo).parts[0] for e in report.errors}
    assert failing == {n for n, c in {**CASES, **CYCLE}.items() if c.code is not None}


def test_cyclic_ensembles_are_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path, CYCLE)
    report = validate(repo)
    cycles = [e for e in report.errors if e.code == "ensemble.cycle"]
    assert {(Path(e.path).parent.name, e.field) for e in cycles} == {
        ("cycle_a", "ensemble_scheduling.step.0.model_name"), ("cycle_b", "ensemble_scheduling.step.0.model_name")}
    assert "circular dependency between ensembles: cycle_a -> cycle_b -> cycle_a" in \
        next(e.message for e in cycles if "cycle_a/" in e.path)


@pytest.mark.parametrize(("config", "message"), [
    (CASES["dyn_default_level_unset"].config, "default priority level must be in range [1, 2]"),
    (CASES["dyn_preserve_ordering_levels"].config,
     "Only one priority level is allowed when 'preserve_ordering' is true"),
    (CASES["seq_two_start_tensors"].config, "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors"),
    (CASES["batch_output_duplicate_target"].config, "target output name 'y' can only be specified once"),
    (CASES["io_reshape_variable_number"].config,
     "has different number of variable-size dimensions for dims and reshape"),
    (CASES["cfg_ensemble_scheduling_not_ensemble"].config,
     "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"),
])
def test_messages_quote_triton(tmp_path: Path, config: str, message: str) -> None:
    from validate_cases import Case

    repo = _repo(tmp_path, {"m": Case(config, "x")})
    assert any(message in e.message for e in validate(repo / "m").errors), validate(repo / "m").errors


@pytest.mark.parametrize(("gpus", "ids", "ok"), [(2, "[ 0, 1 ]", True), (2, "[ 2 ]", False), (1, "[ 0 ]", True),
                                                 (0, "[ 0 ]", False)])
def test_gpu_ids_against_the_gpus_the_target_has(tmp_path: Path, gpus: int, ids: str, ok: bool) -> None:
    from validate_cases import Case, py

    repo = _repo(tmp_path, {"m": Case(py(f"instance_group [ {{ kind: KIND_GPU gpus: {ids} }} ]\n"), None)})
    report = validate(repo / "m", gpus=gpus)
    assert report.ok is ok, report.errors
    if not ok:
        assert report.errors[0].code == "target.gpu" and report.errors[0].field.startswith("instance_group.0")
    assert validate(repo / "m").ok  # GPU count unknown: ids are not checked


def test_jetson_profile_has_one_gpu(tmp_path: Path) -> None:
    from validate_cases import Case, py

    repo = _repo(tmp_path, {"m": Case(py("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]\n"), None)})
    e = validate(repo / "m", target=Target.jetson).errors
    assert [x.code for x in e] == ["target.gpu"] and "target 'jetson' has 1 GPU (ids 0..0)" in e[0].message
