"""Shared fixtures (the sample repository, a real CPU-only Triton, moto_server) and the test tiers.

Every test carries exactly one tier marker, which says what it needs (``pyproject.toml`` registers
them, ``--strict-markers`` refuses any other):

* ``unit``: nothing beyond in-process or loopback helpers that start well under a second;
* ``integration``: starts real servers on loopback (Triton, Prometheus, Alertmanager, moto_server);
* ``host``: needs Podman nodes (molecule's verify, drift-live, a real fleet).

The tier comes from the folder (``FOLDER_TIERS``) unless the file marks another one itself
(``pytestmark = pytest.mark.integration`` in tests/unit, for example). ``slow`` (over ~30 s) is
marked by hand and is orthogonal. ``make check`` runs ``-m "unit and not slow"``.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_REPO = ROOT / "examples" / "model_repository"
# The project folder (stacks/, ansible/, roles/) for code that resolves it (tritonops.project), wherever
# pytest is started from; a test that needs another one passes --project-dir or sets the variable itself.
os.environ.setdefault("TRITONOPS_PROJECT_DIR", str(ROOT))
# rich sizes a console made at import time (tritonops.cli.output's) from COLUMNS then: one width for
# every test, whichever module a pytest-xdist worker imports first.
os.environ.setdefault("COLUMNS", "200")

TIERS = ("unit", "integration", "host")
# The tier of every test under a folder of tests/ (its first path part), unless the file marks its own.
FOLDER_TIERS = {"unit": "unit", "integration": "integration", "infra": "host"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its folder's tier unless it marks one; refuse a test with none or two."""
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        own = {m.name for m in item.iter_markers() if m.name in TIERS}
        if not own:
            path = Path(item.path)
            part = path.relative_to(tests_dir).parts[0] if path.is_relative_to(tests_dir) else ""
            tier = FOLDER_TIERS.get(part)
            if tier is None:
                raise pytest.UsageError(f"{item.nodeid}: no tier marker (one of {', '.join(TIERS)}) and no "
                                        f"folder tier for {path} (tests/conftest.py FOLDER_TIERS)")
            item.add_marker(tier)
        elif len(own) > 1:
            raise pytest.UsageError(f"{item.nodeid}: more than one tier marker ({', '.join(sorted(own))})")


@pytest.fixture
def sample_repo(tmp_path: Path) -> Path:
    """A private copy of the sample repository that a test may edit."""
    dest = tmp_path / "model_repository"
    shutil.copytree(SAMPLE_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """tritonserver from the nvidia-pytriton wheel on free loopback ports, explicit model control,
    every sample model loaded. Session-wide: tests must not unload models from it."""
    from tritonops.triton import server

    workdir = tmp_path_factory.mktemp("triton")
    repo = workdir / "model_repository"
    shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    srv = server.start(repo, model_control_mode="explicit", load_models=["*"], workdir=workdir)
    yield srv
    srv.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[str]:
    """moto_server (moto[server]) on 127.0.0.1: a stand-in for AWS S3, started and stopped here."""
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]', in the dev extra)")
    from local_servers import serving  # here, not at the top: test_tiers runs this conftest alone in a scratch tree

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with serving([str(exe), "-H", "127.0.0.1", "-p", str(port)], url, "moto_server"):
        yield url


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The CNCF distribution registry (Debian's docker-registry) on 127.0.0.1: TLS, htpasswd auth."""
    if shutil.which("docker-registry") is None:
        pytest.skip("docker-registry is not installed (make apt)")
    from oci_registry import running  # here, not at the top: test_tiers runs this conftest alone

    with running(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture(scope="session")
def user_project() -> Path:
    """A project folder whose stacks/ hold what only the user gives (a generated release public key,
    the cluster-aws values), as `pulumi config set` writes them: tests/unit/k8s/k8s_harness.user_stacks."""
    sys.path.insert(0, str(ROOT / "tests" / "unit" / "k8s"))
    from k8s_harness import user_stacks

    return user_stacks().parent
