"""The release format's records (release_format/records.py) and the store's keys (core/keys.py): one parse and
one build each, the bytes as they always were (issue 47 items 2 and 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonops.agent import releases
from tritonops.core import keys
from tritonops.core.errors import ReleaseError, StoreError
from tritonops.core.names import STATE_FILE
from tritonops.release_format import records


def test_every_store_key_is_built_by_core_keys() -> None:
    assert keys.channel_key("stable") == keys.CHANNELS_PREFIX + "stable.json" == "channels/stable.json"
    assert keys.id_key("r7") == "ids/r7.json"
    assert keys.report_key("stable", "node-1") == keys.reports_prefix("stable") + "node-1.json"
    assert keys.reports_prefix("stable") == f"{keys.REPORTS_FOLDER}/stable/" == "reports/stable/"
    assert keys.counted_key("stable") == "rollouts/stable.json"


def test_the_node_state_round_trips_to_the_same_bytes(tmp_path: Path) -> None:
    assert releases.state(tmp_path) == {"current": None, "digest": None, "history": []}
    doc = {"current": "r1", "digest": "a" * 64, "history": [{"release": "r1", "digest": "a" * 64}]}
    (tmp_path / STATE_FILE).write_text(records.state_text(doc))
    assert releases.state(tmp_path) == doc
    assert records.state_text(releases.state(tmp_path)) == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    (tmp_path / STATE_FILE).write_bytes(b"\xff[")
    assert releases.state(tmp_path)["current"] is None
    assert "unreadable" in releases.state(tmp_path)["error"]


def test_a_release_id_record_is_read_back_or_refused_naming_the_file() -> None:
    raw = records.id_record("r1", "b" * 64)
    assert raw == json.dumps({"release": "r1", "digest": "b" * 64}).encode()
    assert records.id_digest(raw, "s/ids/r1.json") == "b" * 64
    for bad in (b"[]", b"{", b'{"release": "r1"}'):
        with pytest.raises(StoreError, match=r"^s/ids/r1.json: not a release id record"):
            records.id_digest(bad, "s/ids/r1.json")


def test_a_report_is_built_and_checked_by_the_same_module() -> None:
    signed = records.report("node-1", "stable", "r1", "c" * 64, "gated", None, "x" * 900, ["lab"], "ro-1", 1000.0)
    assert signed["version"] == 1_000_000 and len(signed["error"]) == 500 and signed["type"] == "report"
    records.check_report(signed, "w")
    with pytest.raises(ReleaseError, match="^w: result 'won' is not one of applied, gated, failed, refused"):
        records.check_report({**signed, "result": "won"}, "w")


def test_a_pointer_is_built_and_parsed_by_the_same_module() -> None:
    first = records.next_pointer("stable", None, "r1", "d" * 64, "publish", 10, None, None, 60.0, 0.0)
    assert records.parse_pointer(first, "p") == first and first["version"] == 1 and first["history"] == []
    second = records.next_pointer("stable", first, "r2", "e" * 64, "promote", 10, None, None, 60.0, 1.0)
    assert second["version"] == 2 and [h["release"] for h in second["history"]] == ["r1"]
    with pytest.raises(StoreError, match=r"^p: signed.length is missing or not valid"):
        records.parse_pointer({**first, "length": 0}, "p")
