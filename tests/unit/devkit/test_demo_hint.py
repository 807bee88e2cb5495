"""`make demo`'s closing lines: every command they print works as printed from the checkout (issue 35: the
commands were not on PATH and nothing said so; `python -m devkit hosts down` failed, No module named devkit)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from devkit.demo import EDGE_NODE, closing_hint, write_key_file

ROOT = Path(__file__).resolve().parents[3]


def _hint(tmp_path: Path) -> list[str]:
    return closing_hint(EDGE_NODE, "10.88.0.5", tmp_path / "key", 127).splitlines()


def test_the_hint_says_how_to_get_the_commands_on_path(tmp_path: Path) -> None:
    hint = _hint(tmp_path)
    assert "tritonops and ansible-playbook are in .venv/bin" in hint[0]
    assert hint[1].split("#")[0].strip() == ". .venv/bin/activate"
    assert (ROOT / ".venv" / "bin" / "activate").is_file()  # make venv made it; the hint names it as it is


def test_the_removal_commands_it_prints_work_from_the_checkout(tmp_path: Path) -> None:
    down = next(ln for ln in _hint(tmp_path) if "make demo-down" in ln)
    assert "python -m devkit" not in down.split("#")[0]  # the bare module run failed: No module named devkit
    recipe = subprocess.run(["make", "--no-print-directory", "-n", "demo-down"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert recipe.strip().endswith(f"-m devkit hosts down {EDGE_NODE}")
    direct = down.split("removes the node: ", 1)[1]
    for command in (recipe.strip(), direct):
        argv = command.split()
        outer = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the command sets
        env = {**outer, **dict(a.split("=", 1) for a in argv if re.match(r"^[A-Z]+=", a))}
        argv = [a for a in argv if not re.match(r"^[A-Z]+=", a)]
        if argv[0] == ".venv/bin/python":
            argv[0] = sys.executable
        res = subprocess.run([*argv, "--help"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60,
                             check=False)
        assert res.returncode == 0 and "Remove a node" in res.stdout, command + res.stderr


def test_the_bench_line_uses_a_key_file_only_this_user_reads(tmp_path: Path) -> None:
    key = write_key_file(tmp_path / "key", "s3cret")
    assert key.read_text() == "s3cret\n" and stat.S_IMODE(key.stat().st_mode) == 0o600
    bench = next(ln for ln in _hint(tmp_path) if "tritonops bench" in ln)
    assert f"--admin-key-file {key}" in bench and "s3cret" not in "\n".join(_hint(tmp_path))


def test_the_tune_line_is_accepted_as_printed_and_reaches_the_node(tmp_path: Path) -> None:
    """The printed tune command parses, finds the model's config in the checkout, writes nothing, and goes on
    to the node: against an address where nothing answers it exits 3 naming it (not 2, a usage error)."""
    import shlex
    import socket

    from tritonops.cli import app
    from typer.testing import CliRunner

    with socket.socket() as probe:  # a loopback port nothing listens on, as the node's would be when down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    line = next(ln for ln in closing_hint(EDGE_NODE, "127.0.0.1", write_key_file(tmp_path / "key", "s3cret"), 1)
                .splitlines() if "tritonops tune" in ln)
    argv = shlex.split(line.replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    assert argv[:2] == ["tritonops", "tune"] and "--no-write" in argv
    before = (ROOT / "examples/model_repository/mlp_batched/config.pbtxt").read_text()
    cwd = os.getcwd()
    os.chdir(ROOT)  # the hint's paths are the checkout's
    try:
        result = CliRunner().invoke(app, argv[1:])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 3, result.output
    assert f"127.0.0.1:{port}" in result.output
    assert (ROOT / "examples/model_repository/mlp_batched/config.pbtxt").read_text() == before
