"""A local Triton image for Podman: tritonserver 2.51 (CPU) from the nvidia-pytriton wheel, cached.

The image stands in for ``nvcr.io/nvidia/tritonserver`` where no registry can be reached (``podman kube
play`` of the rendered pods, ``python -m devkit kube``). It is built the way the triton_server role's
``wheel`` install method installs a CPU-only node:

* the controller (this machine) downloads the pinned wheels of ``tritonops.versions.TRITON_WHEELS``
  for the image's platform, sha256-checked (``pip download --require-hashes``), into ``.cache/``;
* the build installs them offline into a venv (``--no-index --no-deps --require-hashes``), assembles
  the Python backend (library, utils, the stub for the image's Python) under
  ``/opt/tritonserver/backends`` (tritonserver's default backend directory) and puts ``tritonserver``
  on ``PATH``, as in the NGC image, so the rendered ``args: [tritonserver, ...]`` run unchanged;
* the base is the devkit's own Debian bookworm image (``devkit.hosts.images``, mmdebstrap): no
  registry is asked for anything (``--pull=never``).

The NGC image's user ``triton-server`` (uid 1000) exists, and the image has ``python3`` and ``openssl``
(the release agent's needs). The image carries a label with the hash of its inputs (base image
inputs, Containerfile, wheel pins) and is rebuilt only when that hash changes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tritonops import versions

from devkit.hosts.images import INPUTS_LABEL, ImageSpec, build_image, cache_dir, image_label
from devkit.hosts.podman import HostsError, podman, podman_env, run_logged

IMAGE = f"localhost/tritonops-tritonserver-cpu:{versions.TRITON_SERVER_VERSION}-pytriton{versions.PYTRITON_VERSION}"
STAGE = f"{IMAGE}-stage"  # the built image before /dev/shm is made world-writable
PLATFORM = "x86_64"  # the wheels' platform key in TRITON_WHEELS; the image is amd64
PIP_PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PY = versions.PYTHON_BACKEND_STUB_PYTHON
VENV = "/opt/tritonserver/venv"
SITE = f"{VENV}/lib/python{PY}/site-packages"
UID = 1000
# Bump when the build procedure changes in a way the hashed inputs do not capture.
REVISION = "1"

CONTAINERFILE = """\
FROM {base}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv libpython{py} openssl \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && groupadd -g {uid} triton-server && useradd -u {uid} -g {uid} -M -d /tmp -s /usr/sbin/nologin triton-server
RUN --mount=type=bind,source=wheels,target=/wheels \\
    python3 -m venv {venv} \\
 && {venv}/bin/pip install --quiet --disable-pip-version-check --no-index --no-deps --require-hashes \\
      --find-links=/wheels --requirement=/wheels/requirements.txt \\
 && mkdir -p /opt/tritonserver/backends/python /opt/tritonserver/bin \\
 && cp {site}/pytriton/tritonserver/backends/python/libtriton_python.so \\
       {site}/pytriton/tritonserver/backends/python/triton_python_backend_utils.py \\
       {site}/pytriton/tritonserver/python_backend_stubs/{py}/triton_python_backend_stub \\
       /opt/tritonserver/backends/python/ \\
 && ln -s {site}/pytriton/tritonserver/bin/tritonserver /opt/tritonserver/bin/tritonserver \\
 && find {venv} -name __pycache__ -prune -exec rm -rf {{}} +
# The Python backend stub finds numpy and onnxruntime through the first python3 on PATH (the venv's).
ENV PATH={venv}/bin:/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    LD_LIBRARY_PATH={site}/nvidia_pytriton.libs
COPY --chmod=0755 kubelet-expand /usr/local/bin/kubelet-expand
USER {uid}:{uid}
WORKDIR /tmp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/kubelet-expand"]
CMD ["tritonserver", "--help"]
"""

# kubelet expands $(VAR) in a container's command and args from the container's env; podman 4.3's
# kube play passes them literally (Triton's admin key would be the text "$(TRITON_ADMIN_KEY)"). The
# image's entrypoint does what kubelet does, for a container that sets only args (as the NGC image's
# entrypoint runs them): $(NAME) of a set variable becomes its value, $$ becomes $, the rest is kept.
KUBELET_EXPAND = """\
#!/usr/bin/python3 -I
import os, re, sys
REF = re.compile(r"\\$\\$|\\$\\(([A-Za-z_][A-Za-z0-9_.-]*)\\)")
def expand(arg):
    return REF.sub(lambda m: "$" if m.group(0) == "$$" else os.environ.get(m.group(1), m.group(0)), arg)
argv = [expand(a) for a in sys.argv[1:]]
os.execvp(argv[0], argv)
"""

Step = Callable[[str], None]


def requirements() -> str:
    """The hashed requirements of the image's wheels (the role's ``requirements.txt``)."""
    return "".join(f"{pin} --hash=sha256:{sha}\n" for pin, sha in versions.TRITON_WHEELS[PLATFORM].items())


def base_spec() -> ImageSpec:
    return ImageSpec(arch="amd64")


def containerfile(base: ImageSpec | None = None) -> str:
    spec = base or base_spec()
    return CONTAINERFILE.format(base=spec.image, py=PY, uid=UID, venv=VENV, site=SITE)


def inputs_hash(base: ImageSpec | None = None) -> str:
    spec = base or base_spec()
    doc = {"rev": REVISION, "base": spec.inputs_hash(), "containerfile": containerfile(spec),
           "entrypoint": KUBELET_EXPAND, "requirements": requirements()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def wheel_dir() -> Path:
    """The controller's wheel cache for these pins (named by their hash, like the role's)."""
    return cache_dir().parent / "wheels" / f"{PLATFORM}-{hashlib.sha1(requirements().encode()).hexdigest()[:12]}"


def download_wheels(step: Step) -> Path:
    """Every pinned wheel, sha256-checked, into :func:`wheel_dir` (skipped when all are there)."""
    dest = wheel_dir()
    dest.mkdir(parents=True, exist_ok=True)
    req = dest / "requirements.txt"
    wanted = len(versions.TRITON_WHEELS[PLATFORM])
    if req.is_file() and req.read_text() == requirements() and len(list(dest.glob("*.whl"))) >= wanted:
        step(f"wheels {dest.name}: cached")
        return dest
    req.write_text(requirements())
    step(f"pip download {wanted} pinned wheels into {dest}")
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
           "--require-hashes", "--python-version", PY, "--implementation", "cp", "--abi", f"cp{PY.replace('.', '')}",
           "--abi", "abi3", "--abi", "none", *(f"--platform={p}" for p in PIP_PLATFORMS),
           "-r", str(req), "-d", str(dest)]
    run_logged(cmd, cache_dir() / "logs" / "triton-image-wheels.log", timeout=1800)
    return dest


def image_is_current() -> bool:
    return image_label(IMAGE) == inputs_hash()


def build(step: Step | None = None, force: bool = False) -> bool:
    """Make :data:`IMAGE` current (the Debian base first). True when something was built."""
    say: Step = step or (lambda _msg: None)
    spec = base_spec()
    build_image(spec, step=say)
    want = inputs_hash(spec)
    if not force and image_label(IMAGE) == want:
        say(f"{IMAGE}: cached (inputs {want})")
        return False
    wheels = download_wheels(say)
    say(f"podman build {IMAGE}")
    with tempfile.TemporaryDirectory(prefix="triton-ctx-", dir=cache_dir()) as ctx:
        ctx_dir = Path(ctx)
        (ctx_dir / "Containerfile").write_text(containerfile(spec))
        (ctx_dir / "kubelet-expand").write_text(KUBELET_EXPAND)
        (ctx_dir / "wheels").mkdir()
        for f in [*wheels.glob("*.whl"), wheels / "requirements.txt"]:
            (ctx_dir / "wheels" / f.name).hardlink_to(f)
        run_logged(["podman", "build", "--pull=never", "--label", f"{INPUTS_LABEL}={want}", "-t", STAGE,
                    "-f", str(ctx_dir / "Containerfile"), str(ctx_dir)],
                   cache_dir() / "logs" / "build-triton-image.log", env=podman_env(), timeout=1800)
    _world_writable_dev_shm(STAGE, IMAGE, say)
    if image_label(IMAGE) != want:
        raise HostsError(f"{IMAGE}: built, but its {INPUTS_LABEL} label is not {want}")
    return True


def _world_writable_dev_shm(stage: str, image: str, say: Step) -> None:
    """Commit ``stage`` as ``image`` with ``/dev/shm`` mode 1777 in the layer.

    Podman gives a new volume the owner and mode of the image's directory at the mount point (kube
    play 4.3 makes each emptyDir such a volume); Kubernetes' emptyDir ignores the image. The rootfs'
    ``/dev/shm`` is root 0755, so the pod's ``shm`` emptyDir would refuse uid 1000 (the Python backend's
    shared memory: "Permission denied"). A build step cannot change it (``RUN`` sees a tmpfs ``/dev``),
    so the built image's filesystem is changed through ``podman mount`` and committed.
    """
    say(f"podman commit {image} (/dev/shm 1777)")
    ctr = podman(["create", stage]).stdout.strip()
    try:
        root = Path(podman(["mount", ctr]).stdout.strip())
        (root / "dev" / "shm").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "shm").chmod(0o1777)
        podman(["umount", ctr])
        podman(["commit", "--quiet", ctr, image])
    finally:
        podman(["rm", "-f", ctr], check=False)
        podman(["untag", stage], check=False)


def check(image: str = IMAGE) -> str:
    """onnxruntime's and numpy's versions from the image's python3 (the Python backend's imports work)."""
    res = subprocess.run(["podman", "run", "--rm", "--network=none", image, "python3", "-c",
                          "import onnxruntime, numpy; print(onnxruntime.__version__, numpy.__version__)"],
                         capture_output=True, text=True, env=podman_env(), timeout=120)
    if res.returncode != 0:
        raise HostsError(f"{image}: python3 with onnxruntime does not run: {res.stderr.strip()[-500:]}")
    return res.stdout.strip()
