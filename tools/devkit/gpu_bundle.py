"""``python -m devkit gpu-bundle DEST``: a folder (under 64 MiB) that runs gpu-check on a GPU machine with no network.

A lent GPU machine has a Python with torch and some of our dependencies, nvidia-smi, and no network; one
call carries at most 64 MiB (docs/DESIGN: "A real GPU, when one is lent"). The bundle holds:

* ``tritonserver.tar.xz``: the nvidia-pytriton wheel's ``pytriton/tritonserver`` and
  ``nvidia_pytriton.libs`` from this environment, without the other Python versions' backend stubs and
  the 3.13 libpython (packed with xz's largest dictionary: the wheel's two identical perf_analyzer
  copies, and its libraries, compress far better than in a zip);
* ``wheels.tar.xz``: ``--no-deps`` wheels for the target Python of what that machine lacks
  (:data:`LACKS`) and the project's own pins that matter (numpy 1.26: Triton 2.51's Python backend serves
  empty outputs under numpy 2), each at the version this environment runs, re-zipped uncompressed so
  the xz around them compresses their contents; with pip's own wheel to install them and the
  project's wheel (``tritonops``, built from this checkout);
* ``project.tar.xz``: the checkout's tracked files (gpu-check, its models, the gpu_facts role and the
  collection's plugins);
* ``run.sh``: makes a venv from the machine's Python, installs the wheels into it offline, unpacks the
  server into it, puts the machine's own site-packages *after* the venv's (a ``.pth`` file: the
  project's pins win, the machine's torch is still found), links the collection and perf_analyzer's
  libb64/libcudart, and runs ``tools/gpu_check.py``.

Usage: ``python -m devkit gpu-bundle DEST [--python 3.12]``; on the GPU machine ``sh DEST/run.sh
[PYTHON]`` (default: ``python3.12`` on PATH; the lent machine's is ``/opt/torch/.venv/bin/python``).
"""

from __future__ import annotations

import importlib.metadata
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from tritonops.triton import server

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 64  # what one call to the GPU machine carries
# What the lent GPU machine's Python lacks (DESIGN.md), and the project's pins that must win there.
LACKS = (
    "tritonclient",  # with perf_analyzer in its bin/
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
    "geventhttpclient", "gevent", "greenlet", "zope.event", "zope.interface", "brotli", "python-rapidjson",
    "certifi", "six", "urllib3",  # geventhttpclient's and tritonclient's own, small
    "grafana-foundation-sdk", "ansible-core", "resolvelib", "nvidia-cuda-runtime-cu12",
    "grpcio",  # tritonclient.grpc (model_config_pb2, which gpu-check and pbtxt read) imports it; not in DESIGN's list
    "numpy",  # 1.26, the project's pin: the Python backend's stub imports it before the machine's numpy 2
)
# Where this environment's version has no wheel for a newer Python: the version that has one, per target.
NEWER_WHEEL = {
    # tritonclient caps it at 2.0.2 (no cp312 wheel); 2.0.12 served the H200 run of issue 35.
    ("geventhttpclient", "3.12"): "2.0.12",
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
             "linux_x86_64")
STUB_LIBPYTHON = "libpython3-"  # nvidia_pytriton.libs' libpython (the 3.13 stub's), auditwheel-renamed

RUN_SH = """\
#!/bin/sh
# gpu-check from this folder, with no network. Made by `python -m devkit gpu-bundle` (tools/devkit/gpu_bundle.py).
#   sh run.sh [PYTHON]    PYTHON: the machine's Python {version} (default: python{version} on PATH)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${{1:-${{PYTHON:-python{version}}}}}
found=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || {{
  echo "run.sh: cannot run $PYTHON" >&2; exit 2; }}
if [ "$found" != "{version}" ]; then
  echo "run.sh: $PYTHON is Python $found; this bundle is for Python {version} (gpu-bundle --python)" >&2
  exit 2
fi
ENV=$HERE/env
if [ ! -e "$ENV/.installed" ]; then
  start=$(date +%s)
  rm -rf "$ENV" "$HERE/wheels" "$HERE/project"
  "$PYTHON" -m venv --without-pip "$ENV"
  SITE=$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tar -xJf "$HERE/wheels.tar.xz" -C "$HERE"
  tar -xJf "$HERE/project.tar.xz" -C "$HERE"
  # pip from its own wheel; every wheel offline, without dependencies (the machine has the rest)
  "$ENV/bin/python" "$(ls "$HERE"/wheels/pip-*.whl)/pip" install --no-index --no-deps --no-compile \\
    --disable-pip-version-check --no-warn-script-location --quiet "$HERE"/wheels/*.whl
  tar -xJf "$HERE/tritonserver.tar.xz" -C "$SITE"
  # The machine's own packages (torch, onnxruntime, rich, ...) after the venv's: the project's pins win.
  "$PYTHON" -c 'import site; print("\\n".join(site.getsitepackages()))' > "$SITE/zz_machine.pth"
  # The checkout is the collection tritonops.triton (galaxy.yml), as `make venv` links it.
  mkdir -p "$SITE/ansible_collections/tritonops"
  ln -sfn "$HERE/project" "$SITE/ansible_collections/tritonops/triton"
  # perf_analyzer loads libb64.so.0d and libcudart.so.12: the server's own copies.
  mkdir -p "$HERE/lib"
  ln -sf "$(ls "$SITE"/nvidia_pytriton.libs/libb64-*.so.0d)" "$HERE/lib/libb64.so.0d"
  ln -sf "$(ls "$SITE"/nvidia_pytriton.libs/libcudart-*.so.12*)" "$HERE/lib/libcudart.so.12"
  touch "$ENV/.installed"
  echo "run.sh: installed into $ENV in $(( $(date +%s) - start )) s, offline"
fi
export LD_LIBRARY_PATH="$HERE/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
export PATH="$ENV/bin:$PATH"
exec "$ENV/bin/python" "$HERE/project/tools/gpu_check.py"
"""


class BundleError(RuntimeError):
    """The bundle could not be made (a download, the wheel build), or it is over the limit."""


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BundleError(f"{what} failed (exit {proc.returncode}): {' / '.join(tail)}")


def _xz(dest: Path) -> tarfile.TarFile:
    """A tar.xz writer with xz's largest dictionary (64 MiB: a second copy of a file within it costs nothing)."""
    return tarfile.open(dest, "w:xz", preset=9)


def carried(name: str, version: str, libs: str = "nvidia_pytriton.libs") -> bool:
    """Whether the server's file ``name`` (relative to site-packages) goes into the bundle for ``version``:
    not another Python's backend stub, not the libpython the 3.13 stub loads."""
    parts = Path(name).parts
    if len(parts) > 3 and parts[:3] == ("pytriton", "tritonserver", "python_backend_stubs") and parts[3] != version:
        return False
    return not (len(parts) > 1 and parts[0] == libs and parts[1].startswith(STUB_LIBPYTHON))


def pack_server(dest: Path, version: str) -> Path:
    """tritonserver.tar.xz: the wheel's server and libraries, with the backend stub of ``version`` only."""
    install = server.find_install()
    site = install.root.parent.parent
    stubs = install.root / "python_backend_stubs"
    if not (stubs / version).is_dir():
        have = ", ".join(sorted(p.name for p in stubs.iterdir()))
        raise BundleError(f"the wheel's tritonserver has no Python backend stub for {version} (it has {have})")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return info if carried(info.name, version, install.libs.name) else None

    with _xz(dest) as tar:
        tar.add(install.root, arcname=str(install.root.relative_to(site)), filter=keep)
        tar.add(install.libs, arcname=install.libs.name, filter=keep)
    return dest


def wheel_specs(version: str) -> list[str]:
    """``name==version`` for each of :data:`LACKS` at the version this environment runs (or its newer wheel)."""
    specs = []
    for name in LACKS:
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise BundleError(f"{name} is not installed here (`make venv`): the bundle carries the version "
                              "this environment runs") from None
        specs.append(f"{name}=={NEWER_WHEEL.get((name, version), have)}")
    specs.append(f"pip=={importlib.metadata.version('pip')}")
    return specs


def download_wheels(dest: Path, version: str) -> list[Path]:
    """``--no-deps`` wheels of :func:`wheel_specs` for CPython ``version`` on x86_64 Linux, into ``dest``."""
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
          "--only-binary=:all:", "--python-version", version, "--implementation", "cp", *platforms,
          "-d", str(dest), *wheel_specs(version)], f"pip download for Python {version}")
    return sorted(dest.glob("*.whl"))


def build_project_wheel(dest: Path) -> Path:
    """The project's wheel, built from a copy of its package sources (the checkout stays clean)."""
    with tempfile.TemporaryDirectory(prefix="tritonops-bundle-src-") as tmp:
        src = Path(tmp)
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "infra", src / "infra", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
              str(src), "-w", str(dest)], "building the tritonops wheel")
    return next(dest.glob("tritonops-*.whl"))


def stored(wheel: Path) -> bytes:
    """``wheel`` re-zipped without compression (the same files, so the same wheel to pip)."""
    out = io.BytesIO()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_STORED)
    return out.getvalue()


def pack_wheels(dest: Path, wheels: list[Path]) -> Path:
    with _xz(dest) as tar:
        for wheel in wheels:
            data = stored(wheel)
            info = tarfile.TarInfo(f"wheels/{wheel.name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
    return dest


def pack_project(dest: Path) -> Path:
    """project.tar.xz: the checkout's tracked files as they are in the working tree, under project/."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True,
                           timeout=60).stdout.decode().split("\0")
    with _xz(dest) as tar:
        for name in filter(None, files):
            if (ROOT / name).exists() or (ROOT / name).is_symlink():  # deleted in the working tree: not carried
                tar.add(ROOT / name, arcname=f"project/{name}", recursive=False)
    return dest


def sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def build(dest: Path, version: str, log: Callable[[str], None] = print) -> dict[str, int]:
    """Make the bundle in ``dest`` (new or empty); its files' sizes. BundleError over :data:`LIMIT_MIB`."""
    if dest.exists() and any(dest.iterdir()):
        raise BundleError(f"{dest}: exists and is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tritonops-bundle-") as tmp:
        wheels = download_wheels(Path(tmp), version)
        log(f"downloaded {len(wheels)} wheels for Python {version}")
        wheels.append(build_project_wheel(Path(tmp) / "project"))
        pack_wheels(dest / "wheels.tar.xz", wheels)
    log("packed wheels.tar.xz")
    pack_server(dest / "tritonserver.tar.xz", version)
    log("packed tritonserver.tar.xz")
    pack_project(dest / "project.tar.xz")
    (dest / "run.sh").write_text(RUN_SH.format(version=version))
    (dest / "run.sh").chmod(0o755)
    found = sizes(dest)
    total = sum(found.values())
    if total > LIMIT_MIB * 2**20:
        parts = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in found.items())
        for name in found:  # not carried: what was made here goes
            (dest / name).unlink()
        raise BundleError(f"{dest}: {total / 2**20:.1f} MiB is over the {LIMIT_MIB} MiB one call carries ({parts})")
    return found
