"""``release publish`` reports its upload as bytes of the release's total (issue 45): the domain code calls
``progress(done, total)``; the command draws a bar from it on a terminal only, never in ``--json`` output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops.cli import app
from tritonops.core.keys import manifest_key
from tritonops.release import publish as pub
from tritonops.release_format import signing
from tritonops.stores.oci import _Counted
from typer.testing import CliRunner

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")[0]


def _publish(store: Path, key: Path, channel: str) -> tuple[dict, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []
    out = pub.publish(SAMPLE, str(store), channel, key, progress=lambda done, total: calls.append((done, total)))
    return out, calls


def _release_bytes(store: Path, digest: str) -> int:
    """The total the release's signed manifest states (every file's length), read back from the store."""
    return sum(json.loads((store / manifest_key(digest)).read_text())["lengths"].values())


def test_progress_counts_up_to_the_releases_bytes(tmp_path: Path, key: Path) -> None:
    store = tmp_path / "store"
    out, calls = _publish(store, key, "stable")
    total = _release_bytes(store, out["digest"])
    assert total > 0 and out["uploaded"] > 0
    assert {t for _, t in calls} == {total}  # every call names the same total: the release's bytes
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == total  # never backwards, and it ends at the total
    assert len(calls) >= out["files"]  # at least one call per file


def test_files_already_in_the_store_count_as_done(tmp_path: Path, key: Path) -> None:
    store = tmp_path / "store"
    _publish(store, key, "stable")
    out, calls = _publish(store, key, "canary")  # the same content: every blob is there already
    assert out["uploaded"] == 0
    assert calls[-1] == (_release_bytes(store, out["digest"]),) * 2


def test_an_oci_upload_reports_each_chunk_as_it_is_read(tmp_path: Path) -> None:
    data = tmp_path / "model.onnx"
    data.write_bytes(b"x" * 100_000)
    seen: list[int] = []
    with _Counted(data.open("rb", buffering=0), seen.append) as fh:
        while fh.read(8192):  # as http.client sends a file body
            pass
    assert sum(seen) == 100_000 and len(seen) > 1


def test_the_command_draws_no_bar_off_a_terminal_nor_in_json(tmp_path: Path, key: Path) -> None:
    res = CliRunner().invoke(app, ["release", "publish", str(SAMPLE), "--store", str(tmp_path / "store"),
                                   "--key", str(key), "--channel", "stable", "--json"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["release"]  # stdout is the JSON document alone
    assert res.stderr == ""
