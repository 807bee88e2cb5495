"""The CLI on the base dependencies only: it starts, the base commands run, and a command that needs an extra
says which one in one line and exits 3 (tritonops.cli.extras), never a traceback.

Each run is a fresh Python in which every package an extra brings is unimportable (``sys.modules[name] =
None`` makes both ``import`` and ``importlib.util.find_spec`` see it as absent), so a module-level import
of an extra-only package anywhere on the CLI's start-up path fails these tests. The wheel test
(tests/integration/test_wheel.py) checks the same against a real install with the declared dependencies.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tritonops.cli import extras
from tritonops.core.exitcodes import ExitCode

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "model_repository"
# Every top-level import name an extra brings (pyproject's extras), including those only tests use.
ABSENT = sorted({m.split(".")[0] for names in extras.MODULES.values() for m in names} | {
    "pulumi_policy", "kubernetes_validate", "ansible", "molecule", "testinfra", "onnx", "onnxruntime",
    "moto", "nvidia"})
BARE = ("import sys\n"
        f"for name in {ABSENT!r}:\n"
        "    sys.modules[name] = None\n"
        "from tritonops.cli import app\n"
        "sys.argv = ['tritonops', *sys.argv[1:]]\n"
        "app()\n")


def bare(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BARE, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "LANG": "C.UTF-8",
                                            "TRITONOPS_PROJECT_DIR": str(ROOT)})


def test_help_and_version_start_without_any_extra() -> None:
    res = bare("--help")
    assert res.returncode == 0, res.stderr
    assert "observability" in res.stdout and "release" in res.stdout
    assert bare("--version").stdout.startswith("tritonops ")


@pytest.mark.parametrize("args", [
    ("validate", str(SAMPLE)),
    ("manifest", str(SAMPLE)),
    ("render", "--stack", "triton", "--env", "dev", "--check-config"),
    ("release", "status", "--store", "{tmp}", "--channel", "stable"),  # an empty store: it reads, finds none
], ids=lambda a: a[0] if a[0] != "release" else "release status")
def test_base_commands_run_without_any_extra(args: tuple[str, ...], tmp_path: Path) -> None:
    res = bare(*(a.format(tmp=tmp_path) for a in args))
    read_an_empty_store = "channel 'stable' does not exist (channels there: none)" in res.stderr
    assert res.returncode in (ExitCode.OK, ExitCode.FINDINGS) or read_an_empty_store, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "needs the" not in res.stderr


@pytest.mark.parametrize(("args", "command", "extra"), [
    (("observability", "export", "{tmp}/out"), "observability export", "obs"),
    (("serve", str(SAMPLE)), "serve", "triton"),
    (("bench", "mlp"), "bench", "obs"),
    (("tune", "mlp", "--repository", str(SAMPLE)), "tune", "obs"),
    (("render", "--stack", "triton", "--env", "dev", "--out", "{tmp}/out", "--project-dir", "{project}"), "render",
     "obs"),
    (("drift", "--source", "pulumi", "--json"), "drift --source pulumi", "k8s"),
    (("drift", "-i", "ansible/inventories/example", "--json"), "drift --source ansible/models", "ansible"),
    (("drift", "--source", "models", "-i", "ansible/inventories/example"), "drift --source models", "ansible"),
    (("release", "publish", str(SAMPLE), "--store", "s3://bucket/prefix", "--key", "{tmp}/k"), "release publish", "s3"),
    (("release", "status", "--store", "s3://bucket/prefix", "--channel", "stable"), "release status", "s3"),
    (("release", "verify", str(SAMPLE), "--producer-key", "{tmp}/producer.pub"), "release verify", "signing"),
    (("release", "publish", str(SAMPLE), "--store", "{tmp}/store", "--model-signature"),
     "release publish --model-signature", "signing"),
], ids=lambda a: a if isinstance(a, str) else None)
def test_a_command_needing_an_extra_names_it_and_exits_3(args: tuple[str, ...], command: str, extra: str,
                                                         tmp_path: Path, user_project: Path) -> None:
    res = bare(*(a.format(tmp=tmp_path, project=user_project) for a in args))
    assert (res.returncode, res.stderr, res.stdout) == (
        ExitCode.FAILED, f"tritonops {command} needs the '{extra}' extra: pip install 'tritonops[{extra}]'\n", "")


def test_every_extra_named_by_the_cli_is_declared_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras.MODULES) <= set(declared)
