"""Triton's restricted admin APIs: which ones a hardened server locks, and how clients unlock them.

Used by the Kubernetes builders (server args), the smoke check and the edge tooling (client headers),
so the names and the gRPC metadata prefix live in one place.
"""

from __future__ import annotations

from typing import Literal

# Admin APIs that only callers with the header secret may use; inference, health and metadata stay open.
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace", "logging")
RESTRICTED = ",".join(RESTRICTED_APIS)
# Triton checks gRPC metadata under this prefix: the HTTP header `k` is `triton-grpc-protocol-k` over gRPC.
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


def client_headers(protocol: Literal["http", "grpc"], headers: dict[str, str]) -> dict[str, str]:
    """The headers as Triton expects them on ``protocol`` (gRPC names get the prefix once)."""
    if protocol == "http":
        return dict(headers)
    return {k if k.startswith(GRPC_HEADER_PREFIX) else GRPC_HEADER_PREFIX + k: v for k, v in headers.items()}
