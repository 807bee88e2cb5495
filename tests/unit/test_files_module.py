"""The collection's tritonops.triton.files module (plugins/modules/files.py) run in-process on a scratch
folder: one call converges directories, files (text, base64 bytes, a copy of a node path) and removals;
check mode predicts without touching anything; --diff shows each changed path; a second call changes
nothing; validate refuses bad content and leaves the old file."""

from __future__ import annotations

import base64
import grp
import importlib.util
import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("tritonops_files_module", REPO / "plugins" / "modules" / "files.py")
assert SPEC and SPEC.loader
files_module = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(files_module)

OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def run(capsys: pytest.CaptureFixture[str], entries: list[dict[str, Any]], check: bool = False,
        diff: bool = True) -> dict[str, Any]:
    """One module run; its JSON result."""
    args = {"files": [{"owner": OWNER, "group": GROUP, **e} for e in entries],
            "_ansible_check_mode": check, "_ansible_diff": diff}
    with patch_module_args(args), pytest.raises(SystemExit):
        files_module.main()
    return json.loads(capsys.readouterr().out)


def bundle(tmp: Path) -> list[dict[str, Any]]:
    (tmp / "src.bin").write_bytes(b"\x00\x01binary")
    return [
        {"path": str(tmp / "etc" / "app"), "state": "directory", "mode": "0750"},
        {"path": str(tmp / "etc" / "app" / "app.conf"), "content": "port = 80\n", "mode": "0644"},
        {"path": str(tmp / "etc" / "app" / "agent.pyz"), "content_b64": base64.b64encode(b"PK\x03\x04zip").decode(),
         "mode": "0755"},
        {"path": str(tmp / "etc" / "app" / "copy.bin"), "remote_src": str(tmp / "src.bin"), "mode": "0600"},
        {"path": str(tmp / "old.py"), "state": "absent"},
    ]


def test_one_call_converges_the_bundle_then_changes_nothing(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old.py").write_text("print('replaced by the agent')\n")
    first = run(capsys, bundle(tmp_path))
    app = tmp_path / "etc" / "app"
    assert first["changed"] is True
    assert first["changed_paths"] == [e["path"] for e in bundle(tmp_path)]
    assert (app / "app.conf").read_text() == "port = 80\n"
    assert (app / "agent.pyz").read_bytes() == b"PK\x03\x04zip"
    assert (app / "copy.bin").read_bytes() == b"\x00\x01binary"
    assert not (tmp_path / "old.py").exists()
    modes = {p.name: oct(p.stat().st_mode & 0o7777) for p in [app, *app.iterdir()]}
    assert modes == {"app": "0o750", "app.conf": "0o644", "agent.pyz": "0o755", "copy.bin": "0o600"}
    # Missing parents are made too.
    assert (tmp_path / "etc").is_dir()
    second = run(capsys, bundle(tmp_path))
    assert second["changed"] is False and second["changed_paths"] == [] and "diff" not in second
    assert [f["existed"] for f in second["files"]] == [True, True, True, True, False]


def test_check_mode_predicts_each_change_with_its_diff_and_touches_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, bundle(tmp_path))
    conf = tmp_path / "etc" / "app" / "app.conf"
    conf.write_text("port = 81\n")
    (tmp_path / "etc" / "app" / "copy.bin").chmod(0o644)
    (tmp_path / "etc" / "app").chmod(0o755)
    result = run(capsys, bundle(tmp_path), check=True)
    assert result["changed_paths"] == [str(tmp_path / "etc" / "app"), str(conf), str(tmp_path / "etc" / "app" / "copy.bin")]
    assert conf.read_text() == "port = 81\n"
    assert (tmp_path / "etc" / "app" / "copy.bin").stat().st_mode & 0o777 == 0o644
    by_header = {d.get("before_header"): d for d in result["diff"]}
    assert by_header[str(conf)]["before"] == "port = 81\n" and by_header[str(conf)]["after"] == "port = 80\n"
    assert by_header[str(tmp_path / "etc" / "app" / "copy.bin")]["before"]["mode"] == "0644"
    assert by_header[str(tmp_path / "etc" / "app")]["after"]["mode"] == "0750"
    # Without --diff: the same prediction, no diff.
    assert "diff" not in run(capsys, bundle(tmp_path), check=True, diff=False)


def test_a_secret_files_diff_hides_the_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "env"
    path.write_text("SECRET=old\n")
    result = run(capsys, [{"path": str(path), "content": "SECRET=new\n", "mode": "0600", "diff": False}], check=True)
    assert result["changed"] is True
    assert "SECRET" not in json.dumps(result["diff"]), result["diff"]


def test_if_missing_leaves_what_is_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "release").mkdir()
    (tmp_path / "models").symlink_to(tmp_path / "release")
    entry = {"path": str(tmp_path / "models"), "state": "directory", "mode": "0750", "if_missing": True}
    assert run(capsys, [entry])["changed"] is False
    assert (tmp_path / "models").is_symlink()
    (tmp_path / "models").unlink()
    assert run(capsys, [entry])["changed"] is True
    assert (tmp_path / "models").is_dir() and not (tmp_path / "models").is_symlink()


def test_validate_refuses_bad_content_and_keeps_the_old_file(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpu.fact"
    path.write_text("print(1)\n")
    entry = {"path": str(path), "content": "print(\n", "mode": "0755",
             "validate": '/usr/bin/env python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" %s'}
    with patch_module_args({"files": [{"owner": OWNER, "group": GROUP, **entry}]}), pytest.raises(SystemExit):
        files_module.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and "validate failed" in result["msg"] and str(path) in result["msg"]
    assert path.read_text() == "print(1)\n"
    assert [p.name for p in tmp_path.iterdir()] == ["gpu.fact"]  # no temporary file left


@pytest.mark.parametrize("entry, message", [
    ({"content": "a", "remote_src": "/etc/hostname"}, "exactly one of content, src and remote_src"),
    ({}, "exactly one of content, src and remote_src"),
    ({"src": "agent.pyz"}, "src is read by the action plugin"),
    ({"content_b64": "not base64!"}, "content_b64 is not base64"),
])
def test_a_bad_entry_fails_naming_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           entry: dict[str, Any], message: str) -> None:
    path = tmp_path / "f"
    with patch_module_args({"files": [{"path": str(path), "owner": OWNER, "group": GROUP, **entry}]}), \
            pytest.raises(SystemExit):
        files_module.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and message in result["msg"] and str(path) in result["msg"], result["msg"]
    assert not path.exists()


def test_units_are_read_after_the_files_and_nothing_is_started(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """units: what systemctl is-enabled / is-active print for each, read only (a role enables and starts
    a unit only when it is not already, with no probe task of its own)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "systemctl"
    fake.write_text('#!/bin/sh\necho "$@" >> ' + str(calls) + '\ncase "$1 $2" in\n'
                    '  "is-enabled a.timer") echo enabled ;; "is-active a.timer") echo active ;;\n'
                    '  "is-enabled b.timer") echo disabled; exit 1 ;; "is-active b.timer") echo inactive; exit 3 ;;\n'
                    '  *) echo not-found; exit 4 ;;\nesac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    args = {"files": [{"path": str(tmp_path / "a.conf"), "content": "x\n", "owner": OWNER, "group": GROUP}],
            "units": ["a.timer", "b.timer", "c.timer"], "_ansible_check_mode": True}
    with patch_module_args(args), pytest.raises(SystemExit):
        files_module.main()
    out = json.loads(capsys.readouterr().out)
    assert out["units"] == {"a.timer": {"enabled": "enabled", "active": "active"},
                            "b.timer": {"enabled": "disabled", "active": "inactive"},
                            "c.timer": {"enabled": "not-found", "active": "not-found"}}
    assert calls.read_text().split("\n")[:-1] == [f"{verb} {u}" for u in ("a.timer", "b.timer", "c.timer")
                                                  for verb in ("is-enabled", "is-active")]
    assert not (tmp_path / "a.conf").exists() and out["changed_paths"] == [str(tmp_path / "a.conf")]
