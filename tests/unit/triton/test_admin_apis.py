"""The restricted admin APIs and the gRPC header prefix are defined once (tritonops.triton.admin)."""

from __future__ import annotations

from pathlib import Path

import yaml
from tritonops.triton.admin import GRPC_HEADER_PREFIX, client_headers
from tritonops.triton.args import RESTRICTED_APIS

ROOT = Path(__file__).resolve().parents[3]


def test_edge_role_restricts_the_same_apis_as_kubernetes() -> None:
    defaults = yaml.safe_load((ROOT / "roles/triton_server/defaults/main.yml").read_text())
    assert tuple(defaults["triton_server_restricted_apis"]) == RESTRICTED_APIS


def test_grpc_headers_get_the_prefix_once() -> None:
    assert client_headers("http", {"k": "v"}) == {"k": "v"}
    assert client_headers("grpc", {"k": "v"}) == {f"{GRPC_HEADER_PREFIX}k": "v"}
    assert client_headers("grpc", {f"{GRPC_HEADER_PREFIX}k": "v"}) == {f"{GRPC_HEADER_PREFIX}k": "v"}
