"""Triton's command line: its default ports, the admin APIs and the flags that restrict them, and one parser.

:mod:`tritonops.triton.args` writes the command line; the node's effective-state check
(``agent/effective.py``) and the CrossGuard pack (``policies/tritonops``) read it back with the functions
here. Standard library only: the node agent's zipapp ships this module.
"""

from __future__ import annotations

from collections.abc import Iterable

# Triton's default HTTP, gRPC and metrics ports (what a site leaves unset listens there).
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
# Admin APIs that only callers with the header secret may use; inference, health and metadata stay open.
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace", "logging")
# Triton's names of the restriction over HTTP and over gRPC.
RESTRICTED_FLAGS = ("--http-restricted-api", "--grpc-restricted-protocol")


def flag_of(arg: str) -> str:
    """``--name`` of ``--name=value`` (the argument itself without ``=``)."""
    return arg.partition("=")[0]


def values_of(args: Iterable[object], flag: str) -> list[str]:
    """Every value ``flag`` is given, in order: ``--flag=VALUE`` or ``--flag VALUE``."""
    argv = [str(a) for a in args]
    return [a.partition("=")[2] if "=" in a else argv[i + 1] for i, a in enumerate(argv)
            if flag_of(a) == flag and ("=" in a or i + 1 < len(argv))]


def value_of(args: Iterable[object], flag: str, default: str = "") -> str:
    """The value Triton takes for ``flag`` (the last one given), or ``default``."""
    return next(reversed(values_of(args, flag)), default)


def restricted_groups(args: Iterable[object], flag: str) -> set[str]:
    """API groups ``flag`` restricts (``GROUPS:KEY=VALUE``, repeatable); a setting without a non-empty
    KEY=VALUE restricts nothing."""
    groups: set[str] = set()
    for value in values_of(args, flag):
        apis, _, header = value.partition(":")
        key, _, secret = header.partition("=")
        if key and secret:
            groups |= {g.strip() for g in apis.split(",")}
    return groups
