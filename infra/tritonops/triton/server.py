"""Run a real, CPU-only ``tritonserver`` from the ``nvidia-pytriton`` wheel.

The wheel ships a complete Triton 2.51 binary with HTTP, gRPC, metrics and the Python backend. This
module finds it in the current environment, lays out a backend directory with the Python backend stub
for this interpreter, starts the server on free loopback ports and waits until it is ready. It is used
by the test fixtures, by ``make demo`` and by ``tritonops serve``.

The server runs in its own session, so a signal sent to this process does not reach it by itself: while
a server started here runs, SIGINT, SIGTERM and SIGHUP are forwarded to it (SIGHUP as SIGTERM, Triton's
graceful shutdown) and raise KeyboardInterrupt here, so the caller's cleanup runs. ``stop()`` waits for
the server and removes the temporary folder ``start()`` made; whatever a caller leaves running or on
disk is stopped and removed when the interpreter exits.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import tritonclient.http as httpclient

from tritonops.triton.args import Listener, settings, triton_args
from tritonops.versions import NUMPY_VERSION


class TritonNotInstalled(RuntimeError):
    """The nvidia-pytriton wheel (which carries tritonserver) is not installed here."""


class PythonBackendMismatch(RuntimeError):
    """The Python backend's stub would import a numpy that Triton 2.51's Python backend cannot serve with."""


_PYTHON_BACKEND = re.compile(r'^\s*backend\s*:\s*"python"', re.MULTILINE)


def stub_pythonpath() -> list[str]:
    """Where the Python backend's stub imports from first (its PYTHONPATH): this interpreter's site-packages,
    then the caller's PYTHONPATH; after them, its own Python's path (as this interpreter's, same version)."""
    return [*site.getsitepackages(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]


def stub_numpy(paths: Sequence[str]) -> tuple[str, str] | None:
    """(version, folder) of the numpy found first on ``paths``, then on this interpreter's path; None: none."""
    for folder in [*paths, *sys.path]:
        for dist in importlib.metadata.distributions(name="numpy", path=[folder]):
            return dist.version, folder
    return None


def numpy_problem(paths: Sequence[str] | None = None) -> str | None:
    """Why Triton 2.51's Python backend would serve wrong answers with the numpy its stub imports, or None.

    Its stub was built against numpy 1.x: under numpy 2 a model's outputs come back empty (over HTTP:
    "[500] output tensor shape does not match size of output"; measured on a GPU, issue 35).
    """
    found = stub_numpy(stub_pythonpath() if paths is None else paths)
    if found is None or not found[0].split(".")[0].isdigit() or int(found[0].split(".")[0]) < 2:
        return None
    return (f"the Python backend's stub would import numpy {found[0]} from {found[1]}, and Triton 2.51's "
            f"Python backend serves empty outputs under numpy 2: install numpy=={NUMPY_VERSION} there "
            f"(the project's pin, pip install 'numpy<2')")


def python_backend_models(repository: Path) -> list[str]:
    """The models of ``repository`` whose config.pbtxt names the Python backend."""
    return sorted(p.parent.name for p in Path(repository).glob("*/config.pbtxt")
                  if p.is_file() and _PYTHON_BACKEND.search(p.read_text(errors="replace")))


def check_python_backend(repository: Path, paths: Sequence[str] | None = None) -> None:
    """PythonBackendMismatch, naming the models and the numpy, before any is loaded (:func:`numpy_problem`)."""
    models = python_backend_models(repository)
    problem = numpy_problem(paths) if models else None
    if problem:
        raise PythonBackendMismatch(f"{repository}: {', '.join(models)} use the Python backend; {problem}")


@dataclass(frozen=True)
class TritonInstall:
    """Where the wheel's server binary, libraries and Python backend live."""

    root: Path  # .../site-packages/pytriton/tritonserver
    libs: Path  # .../site-packages/nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    def backend_dir(self, dest: Path) -> Path:
        """Copy the Python backend and the stub for this interpreter into ``dest/python``."""
        python_be = dest / "python"
        python_be.mkdir(parents=True, exist_ok=True)
        for f in (self.root / "backends" / "python").iterdir():
            if f.is_file():
                shutil.copy2(f, python_be / f.name)
        stub = self.root / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
        shutil.copy2(stub / "triton_python_backend_stub", python_be / "triton_python_backend_stub")
        return dest


def find_install() -> TritonInstall:
    for sp in [*site.getsitepackages(), site.getusersitepackages()]:
        root = Path(sp) / "pytriton" / "tritonserver"
        if (root / "bin" / "tritonserver").exists():
            return TritonInstall(root=root, libs=Path(sp) / "nvidia_pytriton.libs")
    raise TritonNotInstalled(
        "tritonserver not found: install the wheel with `pip install 'tritonops[triton]'` "
        "(nvidia-pytriton carries a CPU-only tritonserver)"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TritonServer:
    """A running tritonserver process on loopback."""

    repository: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    owned_workdir: Path | None = None  # the temporary folder start() made: removed by stop()

    def __post_init__(self) -> None:
        _LIVE[self.process] = False
        # At interpreter exit, whatever the caller did not stop: same shutdown, at most once.
        self._finalizer = weakref.finalize(self, _shutdown, self.process, self.owned_workdir, 30.0)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> None:
        """Shut the server down (SIGINT unless a forwarded signal already asked), wait, remove the temp folder."""
        _shutdown(self.process, self.owned_workdir, timeout)
        self._finalizer.detach()


# Servers started by this process and not yet shut down (True: a forwarded signal asked them to stop).
_LIVE: dict[subprocess.Popen[bytes], bool] = {}
# The signals forwarded, and what the server gets for each.
_FORWARDED: dict[int, int] = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
                              signal.SIGHUP: signal.SIGTERM}


def _shutdown(process: subprocess.Popen[bytes], workdir: Path | None, timeout: float) -> None:
    try:
        if process.poll() is None:
            if not _LIVE.get(process):
                process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        _LIVE.pop(process, None)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _forward(signum: int, frame: FrameType | None) -> None:
    live = [p for p in _LIVE if p.poll() is None]
    if not live:  # nothing of ours runs: the signal's usual meaning
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    for process in live:
        if not _LIVE[process]:
            process.send_signal(_FORWARDED[signum])
            _LIVE[process] = True
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}: tritonserver asked to stop")


def _install_forwarding() -> None:
    """Forward SIGINT, SIGTERM and SIGHUP to the servers we started, where nobody else handles them."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _FORWARDED:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _forward)


def start(
    repository: Path,
    *,
    model_control_mode: str = "none",
    load_models: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    workdir: Path | None = None,
    ready_timeout: float = 120,
    wait_ready: bool = True,
) -> TritonServer:
    """Start tritonserver on free loopback ports and (by default) wait until it is ready.

    Raises RuntimeError with the server log when it exits or does not become ready in time.
    """
    install = find_install()
    check_python_backend(repository)  # before anything starts: a mismatch would serve empty outputs
    owned = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="tritonops-server-"))
    backends = install.backend_dir(workdir / "backends")
    ports = [free_port() for _ in range(3)]
    args = [str(install.binary), *triton_args(settings(
        "serve-explicit" if model_control_mode == "explicit" else "serve",
        model_repository=str(Path(repository).absolute()),  # a symlink stays one (release switches)
        backend_directory=str(backends),
        model_control_mode=model_control_mode,
        load_models=tuple(load_models),
        http=Listener(address="127.0.0.1", port=ports[0]),
        grpc=Listener(address="127.0.0.1", port=ports[1]),
        metrics=Listener(address="127.0.0.1", port=ports[2]),  # loopback, as HTTP and gRPC
        extra_args=tuple(extra_args),
    ))]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(install.libs), env.get("LD_LIBRARY_PATH")]))
    # The Python backend stub imports numpy/onnxruntime from the interpreter that runs us.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(stub_pythonpath())
    log_path = workdir / "tritonserver.log"
    _install_forwarding()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = TritonServer(
        repository=Path(repository),
        http_port=ports[0],
        grpc_port=ports[1],
        metrics_port=ports[2],
        process=proc,
        log_path=log_path,
        extra_args=list(extra_args),
        owned_workdir=workdir if owned else None,
    )
    if wait_ready:
        try:
            wait_until_ready(server, timeout=ready_timeout)
        except BaseException:  # a forwarded signal (KeyboardInterrupt) too
            server.stop()
            raise
    return server


def wait_until_ready(server: TritonServer, timeout: float = 120) -> None:
    # Closed when done: a kept-alive connection makes Triton wait out its --exit-timeout-secs when it stops.
    client = httpclient.InferenceServerClient(server.http_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"tritonserver exited with code {server.process.returncode}; log:\n{server.log()[-4000:]}"
                )
            try:
                if client.is_server_ready():
                    return
            except Exception:  # noqa: BLE001 - connection refused while it starts
                pass
            time.sleep(0.2)
    finally:
        client.close()
    raise RuntimeError(f"tritonserver not ready after {timeout}s; log:\n{server.log()[-4000:]}")


@contextmanager
def running(repository: Path, **kwargs: object) -> Iterator[TritonServer]:
    server = start(repository, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
