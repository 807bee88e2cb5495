"""What bounds a setting (issue 35 item 2): the largest share of a request's time, from Triton's counters
and the client's latency, names the bound and what could lift it."""

from __future__ import annotations

import pytest
from tritonops.triton.bench import ServerBreakdown
from tritonops.triton.bounds import LIFT, bound


def _server(queue: float = 0.0, cin: float = 0.0, infer: float = 0.0, cout: float = 0.0,
            request: float | None = None) -> ServerBreakdown:
    counted = queue + cin + infer + cout
    return ServerBreakdown(requests=100, queue_ms=queue, compute_input_ms=cin, compute_infer_ms=infer,
                           compute_output_ms=cout, request_ms=counted if request is None else request)


@pytest.mark.parametrize(("server", "client_ms", "name"), [
    (_server(queue=8.0, infer=1.0), 9.5, "queue"),
    (_server(queue=0.5, infer=9.0, cin=0.2, cout=0.2), 10.0, "compute infer"),
    (_server(infer=1.0, cin=2.0, cout=1.5), 4.8, "input/output"),
    # the GPU run of issue 35: the model computes a small share; the frontend and the client the rest
    (_server(queue=0.1, infer=0.9, cin=0.2, cout=0.2, request=2.0), 10.0, "frontend/client"),
])
def test_the_largest_share_names_the_bound(server: ServerBreakdown, client_ms: float, name: str) -> None:
    b = bound(server, client_ms)
    assert b is not None and b.name == name
    assert sum(b.shares.values()) == pytest.approx(1.0)
    assert b.sentence().endswith(LIFT[name])


def test_the_sentence_gives_the_models_share_first() -> None:
    b = bound(_server(queue=0.1, infer=0.9, cin=0.2, cout=0.2, request=2.0), 10.0)
    assert b is not None
    assert b.sentence().startswith("the model computes 9% of the request time (queue 1%, input/output 4%, "
                                   "frontend/client 86%): the frontend")


def test_the_client_latency_below_tritons_request_time_adds_nothing() -> None:
    b = bound(_server(queue=1.0, infer=3.0), client_mean_ms=1.0)  # a client clock that read less
    assert b is not None and b.shares["frontend/client"] == 0.0 and b.shares["compute infer"] == 0.75


def test_nothing_counted_is_no_bound() -> None:
    assert bound(ServerBreakdown(), 5.0) is None
    assert bound(_server(), None) is None
