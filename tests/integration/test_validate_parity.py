"""Parity: for every rule case, `tritonops validate` and the real tritonserver give the same verdict.

One tritonserver (the nvidia-pytriton wheel's, CPU only, Python backend) in explicit model-control
mode serves a repository holding every case of tests/validate_cases.py; each test loads one case
through the repository API and asserts Triton accepts it exactly when validate passes it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from validate_cases import CASES, CYCLE, HELPERS

from infra.model_repo.validate import Target, validate
from infra.triton import server

pytestmark = pytest.mark.integration
ASKED = {n: c for n, c in {**CASES, **CYCLE}.items() if c.parity}


@pytest.fixture(scope="module")
def parity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.TritonServer]:
    repo = tmp_path_factory.mktemp("parity") / "repo"
    for name, case in {**HELPERS, **ASKED}.items():
        case.write(repo, name)
    srv = server.start(repo, model_control_mode="explicit")
    yield srv
    srv.stop()


def _triton_loads(srv: server.TritonServer, name: str) -> tuple[bool, str]:
    client = httpclient.InferenceServerClient(srv.http_url, network_timeout=60)
    try:
        client.load_model(name)
    except InferenceServerException as e:
        return False, str(e)
    ready = client.is_model_ready(name)
    client.unload_model(name, unload_dependents=True)
    return ready, "loaded"


@pytest.mark.parametrize("name", sorted(ASKED))
def test_validate_and_triton_agree(parity_server: server.TritonServer, name: str) -> None:
    report = validate(parity_server.repository / name, target=Target.cpu)
    loaded, why = _triton_loads(parity_server, name)
    assert parity_server.process.poll() is None, parity_server.log()[-3000:]
    assert report.ok == loaded, (f"validate {'passes' if report.ok else 'refuses'} {name} "
                                 f"({[e.message for e in report.errors]}); Triton: {why}")
    assert ASKED[name].code is None or not loaded
