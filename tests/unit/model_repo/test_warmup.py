"""Generated ``model_warmup`` (tritonops.model_repo.warmup): from golden.json, through Triton's protobuf, into the
model's ``warmup/`` folder, covered by the release's manifest. Triton running it: tests/integration/test_warmup_triton.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tritonops.cli import app
from tritonops.core.keys import manifest_key
from tritonops.model_repo import pbtxt, warmup
from tritonops.model_repo.golden import Golden
from tritonops.model_repo.target import Target
from tritonops.model_repo.validate import validate
from tritonops.release import publish as pub
from tritonops.release_format import signing
from typer.testing import CliRunner


def test_every_model_with_golden_inputs_gets_one_warmup_per_case(sample_repo: Path) -> None:
    results = {r.model: r for r in warmup.generate(sample_repo)}
    assert results["pipeline"].action == "skipped"  # an ensemble: Triton refuses model_warmup there
    assert {m for m, r in results.items() if r.action == "generated"} == {"mlp", "mlp_batched", "preprocess",
                                                                         "postprocess"}
    spec = pbtxt.load(sample_repo / "mlp" / "config.pbtxt").spec
    golden = Golden.load(sample_repo / "mlp" / "golden.json")
    assert [w.name for w in spec.model_warmup] == [f"golden:{c.name}" for c in golden.cases]
    for w, case in zip(spec.model_warmup, golden.cases, strict=True):
        features = case.inputs["features"].array()
        assert w.batch_size == features.shape[0]  # Triton repeats the one sample to the batch size
        inp = w.inputs["features"]
        assert (inp.data_type, inp.dims) == ("TYPE_FP32", list(features.shape[1:]))
        raw = (sample_repo / "mlp" / "warmup" / inp.input_data_file).read_bytes()
        assert np.array_equal(np.frombuffer(raw, "<f4").reshape(1, -1), features[:1])
    report = validate(sample_repo, target=Target.cpu)
    assert report.ok and not report.warnings, [f.message for f in report.warnings]


def test_the_operators_text_stays_and_a_second_run_changes_nothing(sample_repo: Path) -> None:
    config = sample_repo / "mlp" / "config.pbtxt"
    config.write_text("# operator's note\n" + config.read_text())
    warmup.generate(sample_repo)
    first = config.read_text()
    assert first.startswith("# operator's note\n") and "model_warmup" in first
    files = {p.name: p.stat().st_mtime_ns for p in (sample_repo / "mlp" / "warmup").iterdir()}
    warmup.generate(sample_repo)
    assert config.read_text() == first
    assert {p.name: p.stat().st_mtime_ns for p in (sample_repo / "mlp" / "warmup").iterdir()} == files


def test_a_changed_golden_file_regenerates_and_removes_stale_files(sample_repo: Path) -> None:
    warmup.generate(sample_repo)
    golden = json.loads((sample_repo / "mlp" / "golden.json").read_text())
    golden["cases"] = golden["cases"][:1]
    (sample_repo / "mlp" / "golden.json").write_text(json.dumps(golden))
    warmup.generate(sample_repo)
    assert len(pbtxt.load(sample_repo / "mlp" / "config.pbtxt").spec.model_warmup) == 1
    assert sorted(p.name for p in (sample_repo / "mlp" / "warmup").iterdir()) == ["golden-0-0.bin"]


def test_an_operators_own_warmup_is_kept(sample_repo: Path) -> None:
    config = sample_repo / "mlp" / "config.pbtxt"
    config.write_text(config.read_text() + 'model_warmup { name: "mine" batch_size: 1 inputs { key: "features" '
                      'value { data_type: TYPE_FP32 dims: 16 zero_data: true } } }\n')
    before = config.read_text()
    result = warmup.generate_model(sample_repo / "mlp")
    assert result.action == "kept" and config.read_text() == before
    assert not (sample_repo / "mlp" / "warmup").exists()


def test_a_model_without_batching_gets_the_whole_tensor_and_strings_are_length_prefixed(tmp_path: Path) -> None:
    model = tmp_path / "echo"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "python"\ninput { name: "text" data_type: TYPE_STRING dims: 2 }\n'
                                        'output { name: "out" data_type: TYPE_STRING dims: 2 }\n')
    (model / "golden.json").write_text(json.dumps({"cases": [{"name": "two", "inputs": {
        "text": {"datatype": "BYTES", "shape": [2], "data": ["ab", "c"]}}, "outputs": {
        "out": {"datatype": "BYTES", "shape": [2], "data": ["ab", "c"]}}}]}))
    assert warmup.generate_model(model).action == "generated"
    (w,) = pbtxt.load(model / "config.pbtxt").spec.model_warmup
    assert (w.batch_size, w.inputs["text"].dims) == (1, [2])
    assert (model / "warmup" / "golden-0-0.bin").read_bytes() == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"


def test_a_golden_input_the_model_lacks_is_an_error_naming_the_file(sample_repo: Path) -> None:
    path = sample_repo / "mlp" / "golden.json"
    path.write_text(path.read_text().replace('"features"', '"feature"', 1))
    with pytest.raises(pbtxt.ModelConfigError, match=r"golden\.json.*'feature', which is not an input"):
        warmup.generate_model(sample_repo / "mlp")
    res = CliRunner().invoke(app, ["warmup", str(sample_repo)], env={"COLUMNS": "200"})
    assert res.exit_code == 1 and "golden.json" in res.output and "Traceback" not in res.output


def test_publish_with_warmup_signs_the_generated_files(sample_repo: Path, tmp_path: Path) -> None:
    key = signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")[0]
    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["release", "publish", str(sample_repo), "--store", str(store), "--key", str(key),
                                   "--channel", "stable", "--warmup", "--json"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    digest = json.loads(res.output)["digest"]
    listed = json.loads((store / manifest_key(digest)).read_text())["files"]
    assert "mlp/warmup/golden-0-0.bin" in listed
    assert pub.read_pointer(pub.open_writer(str(store)), "stable")["digest"] == digest
