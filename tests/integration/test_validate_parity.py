"""Parity: for every rule case, `tritonops validate` and the real tritonserver give the same verdict.

One tritonserver (the nvidia-pytriton wheel's, CPU only, Python backend) in explicit model-control
mode serves a repository holding every case of tests/validate_cases.py. The ensembles' step models are
loaded first, then every case, one at a time, through the repository API (each loaded one is unloaded
again), and each test asserts Triton accepted its case exactly when validate passes it.

One at a time because Triton 2.51 is not safe otherwise: with four loads in flight, an ensemble's
load reloading its shared step model beside the others crashed tritonserver with SIGSEGV in
libtritonserver (model_lifecycle), and the crashed server never answered the loads in flight.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tritonops.model_repo.validate import Target, validate
from tritonops.triton import server
from validate_cases import CASES, CYCLE, HELPERS

pytestmark = pytest.mark.integration
LOAD_TIMEOUT_S = 120  # a load on a cold, busy 2-core machine takes seconds; a crashed server never answers
ASKED = {n: c for n, c in {**CASES, **CYCLE}.items() if c.parity}


@pytest.fixture(scope="module")
def parity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.TritonServer]:
    repo = tmp_path_factory.mktemp("parity") / "repo"
    for name, case in {**HELPERS, **ASKED}.items():
        case.write(repo, name)
    srv = server.start(repo, model_control_mode="explicit",
                       extra_args=["--exit-timeout-secs=5", "--model-load-thread-count=4"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def verdicts(parity_server: server.TritonServer) -> dict[str, tuple[bool, str]]:
    """Triton's verdict on every case: (loaded and ready, why)."""
    for helper in HELPERS:
        assert _triton_loads(parity_server, helper, unload=False) == (True, "loaded"), parity_server.log()[-3000:]
    return {name: _triton_loads(parity_server, name) for name in ASKED}


def _triton_loads(srv: server.TritonServer, name: str, unload: bool = True) -> tuple[bool, str]:
    client = httpclient.InferenceServerClient(srv.http_url, network_timeout=LOAD_TIMEOUT_S)
    try:
        client.load_model(name)
    except InferenceServerException as e:
        return False, str(e)
    except TimeoutError:
        pytest.fail(f"Triton did not answer the load of {name} within {LOAD_TIMEOUT_S} s; its log ends:\n{srv.log()[-3000:]}")
    ready = client.is_model_ready(name)
    if unload:  # the ensembles' steps (echo, echo0) stay: other cases share them
        client.unload_model(name)
    return ready, "loaded"


@pytest.mark.parametrize("name", sorted(ASKED))
def test_validate_and_triton_agree(parity_server: server.TritonServer, verdicts: dict[str, tuple[bool, str]],
                                  name: str) -> None:
    report = validate(parity_server.repository / name, target=Target.cpu)
    loaded, why = verdicts[name]
    assert parity_server.process.poll() is None, parity_server.log()[-3000:]
    assert report.ok == loaded, (f"validate {'passes' if report.ok else 'refuses'} {name} "
                                 f"({[e.message for e in report.errors]}); Triton: {why}")
    assert ASKED[name].code is None or not loaded
