"""``python -m devkit gpu-bundle`` (tools/devkit/gpu_bundle.py) without the network: what it carries, the
uncompressed re-zip of a wheel, the versions it asks for, its run.sh, and its refusals (a full build downloads
wheels and xz-packs 150 MB: docs/gpu.md shows one, built and run offline with ``unshare -n``)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from devkit import gpu_bundle as g  # tools/ is on pytest's pythonpath


@pytest.mark.parametrize(("name", "carried"), [
    ("pytriton/tritonserver/bin/tritonserver", True),
    ("pytriton/tritonserver/backends/python/libtriton_python.so", True),
    ("pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub", True),
    ("pytriton/tritonserver/python_backend_stubs/3.12", True),
    ("pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub", False),
    ("pytriton/tritonserver/python_backend_stubs/3.13", False),
    ("nvidia_pytriton.libs/libtritonserver-717102f0.so", True),
    ("nvidia_pytriton.libs/libb64-98cb6333.so.0d", True),
    ("nvidia_pytriton.libs/libpython3-419a3a08.13.so.1.0", False),
])
def test_the_server_goes_without_the_other_pythons_stubs_and_the_313_libpython(name: str, carried: bool) -> None:
    assert g.carried(name, "3.12") is carried


def test_a_wheel_is_rezipped_uncompressed_with_the_same_files(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    files = {"demo/__init__.py": b"x = 1\n" * 500, "demo-1.0.dist-info/RECORD": b"demo/__init__.py,,\n"}
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    out = tmp_path / "stored.whl"
    out.write_bytes(g.stored(wheel))
    with zipfile.ZipFile(out) as z:
        assert {i.filename: z.read(i) for i in z.infolist()} == files
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    assert out.stat().st_size > wheel.stat().st_size  # the xz around it compresses instead


def test_the_wheels_are_this_environments_versions_with_numpy_1_26() -> None:
    specs = dict(s.split("==") for s in g.wheel_specs("3.11"))
    assert set(specs) == {*g.LACKS, "pip"}
    assert specs["numpy"] == importlib.metadata.version("numpy") and specs["numpy"].startswith("1.26")
    assert specs["tritonclient"] == importlib.metadata.version("tritonclient")
    assert specs["geventhttpclient"] == importlib.metadata.version("geventhttpclient")
    # For 3.12, the version with a cp312 wheel (tritonclient's cap, 2.0.2, has none).
    assert dict(s.split("==") for s in g.wheel_specs("3.12"))["geventhttpclient"] == "2.0.12"


def test_run_sh_uses_the_bundles_python_version_and_refuses_another(tmp_path: Path) -> None:
    run_sh = tmp_path / "run.sh"
    run_sh.write_text(g.RUN_SH.format(version="3.12"))
    assert "PYTHON=${1:-${PYTHON:-python3.12}}" in run_sh.read_text()
    proc = subprocess.run(["sh", str(run_sh), sys.executable], capture_output=True, text=True, timeout=30)
    found = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert proc.returncode == 2
    assert proc.stderr == f"run.sh: {sys.executable} is Python {found}; this bundle is for Python 3.12 (gpu-bundle --python)\n"
    assert not (tmp_path / "env").exists()


def test_a_bundle_over_64_mib_is_refused_and_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def big(dest: Path, *args: object) -> Path:
        with dest.open("wb") as f:  # sparse: its size counts, not its blocks
            f.truncate(65 * 2**20)
        return dest

    monkeypatch.setattr(g, "download_wheels", lambda dest, version: [])
    monkeypatch.setattr(g, "build_project_wheel", lambda dest: dest)
    monkeypatch.setattr(g, "pack_wheels", lambda dest, wheels: dest.write_bytes(b"w") and dest)
    monkeypatch.setattr(g, "pack_server", big)
    monkeypatch.setattr(g, "pack_project", lambda dest: dest.write_bytes(b"p") and dest)
    with pytest.raises(g.BundleError, match=r"65\.0 MiB is over the 64 MiB one call carries \(project.tar.xz 0.0 MiB, "
                                            r"run.sh 0.0 MiB, tritonserver.tar.xz 65.0 MiB, wheels.tar.xz 0.0 MiB\)"):
        g.build(tmp_path / "bundle", "3.12", log=lambda line: None)
    assert list((tmp_path / "bundle").iterdir()) == []


def test_a_folder_with_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(g.BundleError, match="exists and is not empty"):
        g.build(tmp_path, "3.12", log=lambda line: None)


def test_the_command_refuses_a_bad_python_version(tmp_path: Path) -> None:
    from devkit.__main__ import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["gpu-bundle", str(tmp_path / "b"), "--python", "twelve"])
    assert res.exit_code == 2
    assert "--python: a version such as 3.12, got 'twelve'" in res.output
