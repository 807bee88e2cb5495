"""The gRPC header prefix is defined once (tritonops.triton.admin); the restricted admin APIs once too
(tritonops.triton.args; the role reads them through its lookup: test_command_line.py)."""

from __future__ import annotations

from tritonops.triton.admin import GRPC_HEADER_PREFIX, client_headers


def test_grpc_headers_get_the_prefix_once() -> None:
    assert client_headers("http", {"k": "v"}) == {"k": "v"}
    assert client_headers("grpc", {"k": "v"}) == {f"{GRPC_HEADER_PREFIX}k": "v"}
    assert client_headers("grpc", {f"{GRPC_HEADER_PREFIX}k": "v"}) == {f"{GRPC_HEADER_PREFIX}k": "v"}
