"""The built wheel works outside this checkout: validate, smoke, render and drift from a fresh venv.

The wheel is built from a copy of the package sources (pyproject.toml, README.md, infra/), so nothing is
written into the checkout, and installed non-editable into a new venv under a temporary folder. The
venv reaches the dependencies through a .pth file naming this checkout's .venv site-packages: a .pth
line only adds that folder to sys.path, it does not run the .pth files in it, so the checkout's
editable finder for ``tritonops`` (``__editable__.tritonops-*.pth`` -> infra/) stays invisible. Every
command runs from a temporary working directory with a minimal environment (no PYTHONPATH).

Drift runs its Pulumi source, which needs no hosts: it finds the stacks under ``--project-dir`` and,
where the Pulumi CLI is absent (this machine, CI), fails that source with exit 3 and a message naming
the stacks; and the models source from a folder with no project in it is a usage error naming the file
and folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "model_repository"
# What the product wheel must not carry: the development kit (tools/devkit), in any form.
NOT_SHIPPED = ("devkit/", "tritonops/hosts/", "tritonops/demo.py", "tritonops/ansible_roles.py", "containers.conf")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    cwd: Path  # a scratch working directory outside the checkout

    @property
    def path(self) -> str:
        return f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {"PATH": self.path, "HOME": str(self.cwd), "LANG": "C.UTF-8", "COLUMNS": "200"}
        return subprocess.run([str(self.venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True,
                              cwd=self.cwd, env=env, timeout=timeout)


def _sh(cmd: list[str], cwd: Path) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    assert res.returncode == 0, f"{' '.join(cmd)}: {res.stdout[-3000:]}{res.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    assert not tmp.resolve().is_relative_to(ROOT)
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "infra", src / "infra", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _sh([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(src), "-w", str(tmp / "dist")], tmp)
    wheel = next((tmp / "dist").glob("tritonops-*.whl"))

    venv = tmp / "venv"
    _sh([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    # Installed before the .pth exists: pip then sees no other tritonops (the checkout's editable one).
    _sh([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps",
         "--no-index", str(wheel)], tmp)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "tritonops-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    cwd = tmp / "work"
    cwd.mkdir()
    return Installed(wheel, venv, cwd)


def test_the_wheel_carries_the_product_only(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert [n for n in names if any(bad in n for bad in NOT_SHIPPED)] == []
    assert {"tritonops/cli/__init__.py", "tritonops/project.py", "tritonops/capacity/prices.json"} <= set(names)


def test_the_venv_imports_the_installed_package_not_the_checkout(installed: Installed) -> None:
    probe = ("import importlib.util, json, sys, tritonops; print(json.dumps({'file': tritonops.__file__, "
             "'finders': [repr(f) for f in sys.meta_path], 'path': sys.path, "
             "'devkit': importlib.util.find_spec('devkit') is not None}))")
    doc = json.loads(installed.run("python", "-c", probe).stdout)
    assert Path(doc["file"]).is_relative_to(installed.venv)
    assert not any("editable" in f for f in doc["finders"])
    assert str(ROOT / "infra") not in doc["path"] and str(ROOT / "tools") not in doc["path"]
    assert doc["devkit"] is False


def test_help_lists_no_development_kit_commands(installed: Installed) -> None:
    res = installed.run("tritonops", "--help")
    assert res.returncode == 0, res.stderr
    commands = {line.split()[1] for line in res.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 1}
    assert {"validate", "smoke", "render", "drift", "plan", "release"} <= commands
    assert not {"hosts", "demo"} & commands
    assert "Exit codes: 0 ok, 1 findings" in res.stdout


def test_validate_a_copy_of_the_sample_repository(installed: Installed) -> None:
    repo = installed.cwd / "model_repository"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    res = installed.run("tritonops", "validate", "model_repository")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "5 models, 0 errors, 0 warnings" in res.stdout
    (repo / "mlp" / "config.pbtxt").write_text('name: "mlp"\nbackend: "onnxruntime"\nmax_batch_size: -1\n')
    bad = installed.run("tritonops", "validate", "model_repository", "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    errors = json.loads(bad.stdout)["errors"]
    assert {"path": "model_repository/mlp/config.pbtxt", "line": 3, "field": "max_batch_size"}.items() <= errors[0].items()


def test_smoke_against_a_real_tritonserver(installed: Installed, triton) -> None:  # type: ignore[no-untyped-def]
    repo = installed.cwd / "smoke_repository"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    res = installed.run("tritonops", "smoke", f"http://{triton.http_url}", "--repository", "smoke_repository",
                        "--metrics-url", triton.metrics_url, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["server_version"] == "2.51.0"
    assert sorted(c["target"] for c in doc["checks"] if c["check"] == "golden") == sorted(
        p.name for p in SAMPLE.iterdir() if (p / "golden.json").is_file())


def _project(installed: Installed) -> Path:
    project = installed.cwd.parent / "project"
    if not project.exists():
        shutil.copytree(ROOT / "stacks", project / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    return project


def test_render_from_a_project_dir(installed: Installed) -> None:
    project = _project(installed)
    res = installed.run("tritonops", "render", "--stack", "triton", "--env", "dev", "--out", "rendered",
                        "--project-dir", str(project), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    written = json.loads(res.stdout)
    kinds = {w["kind"] for w in written}
    assert {"Deployment", "Service", "Namespace"} <= kinds
    assert all((installed.cwd / w["path"]).is_file() or Path(w["path"]).is_file() for w in written)
    assert (installed.cwd / "rendered" / "kustomization.yaml").is_file()


def test_render_without_a_project_names_the_file_and_folder(installed: Installed) -> None:
    res = installed.run("tritonops", "render", "--stack", "triton", "--env", "dev", "--out", "rendered2")
    assert res.returncode == 2, res.stdout + res.stderr
    flat = "".join((res.stdout + res.stderr).split())  # rich wraps long lines
    assert f"nostackconfigfile{installed.cwd}/stacks/triton/Pulumi.dev.yaml;pass--project-dir" in flat
    assert "Traceback" not in flat


def test_drift_pulumi_source_from_a_project_dir(installed: Installed) -> None:
    """The source finds every stack under --project-dir; with no Pulumi CLI it fails (3), naming them."""
    project = _project(installed)
    res = installed.run("tritonops", "drift", "--source", "pulumi", "--project-dir", str(project), "--json")
    doc = json.loads(res.stdout)
    assert res.returncode == 3, res.stdout + res.stderr
    [result] = doc["results"]
    # Every stack file found (dev, prod, staging, ...), never a fixed list of names.
    found = sorted((ROOT / "stacks").glob("*/Pulumi.*.yaml"))
    assert result["hosts"] == [f"{p.parent.name}/{p.name[len('Pulumi.'):-len('.yaml')]}" for p in found]
    assert {"triton/staging", "triton/prod"} <= set(result["hosts"])
    if shutil.which("pulumi", path=installed.path) is None:
        assert "Pulumi CLI is not installed" in doc["errors"]["pulumi"]


def test_drift_pulumi_source_without_a_project_names_the_folder(installed: Installed) -> None:
    res = installed.run("tritonops", "drift", "--source", "pulumi", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"]["pulumi"]
    assert f"under {installed.cwd / 'stacks'}" in error and "--project-dir" in error


def test_drift_models_source_without_a_project_is_a_usage_error(installed: Installed) -> None:
    inventory = installed.cwd / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    node1:\n")
    res = installed.run("tritonops", "drift", "--source", "models", "-i", "hosts.yml")
    assert res.returncode == 2, res.stdout + res.stderr
    flat = "".join((res.stdout + res.stderr).split())  # rich wraps long lines
    assert f"noansible/drift_probe.ymlunder{installed.cwd};pass--project-dir" in flat
