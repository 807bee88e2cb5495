"""Triton's restricted admin APIs: how clients unlock them.

Used by the smoke check, bench, tune and the edge tooling (client headers), so the header's key and the
gRPC metadata prefix live in one place; which APIs a server locks is ``tritonops.triton.args.RESTRICTED_APIS``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from tritonops.core.triton_http import DEFAULT_HEADER, SECRET_ENV

# Triton checks gRPC metadata under this prefix: the HTTP header `k` is `triton-grpc-protocol-k` over gRPC.
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


def client_headers(protocol: Literal["http", "grpc"], headers: dict[str, str]) -> dict[str, str]:
    """The headers as Triton expects them on ``protocol`` (gRPC names get the prefix once)."""
    if protocol == "http":
        return dict(headers)
    return {k if k.startswith(GRPC_HEADER_PREFIX) else GRPC_HEADER_PREFIX + k: v for k, v in headers.items()}


class AdminKeyError(ValueError):
    """The admin key could not be read from where the operator pointed (a usage error)."""


def admin_key(key_file: Path | None, environ: Mapping[str, str] | None = None) -> str:
    """The admin header's value as the roles and stacks hand it out, never from a command line.

    ``key_file``: a file holding the value alone (one line; a trailing newline is dropped), readable
    by the operator. Without one, the release agent's environment variable (``TRITONOPS_ADMIN_SECRET``).
    "" when neither is set: the server's admin APIs are open, or the call fails with 403 and says so.
    """
    if key_file is None:
        return (os.environ if environ is None else environ).get(SECRET_ENV, "")
    try:
        raw = key_file.read_bytes()[: 64 << 10]
    except OSError as e:
        raise AdminKeyError(f"--admin-key-file {key_file}: cannot read it ({e.strerror or e})") from None
    lines = raw.decode(errors="replace").splitlines()
    value = lines[0].strip() if lines else ""
    if not value or any(ln.strip() for ln in lines[1:]):
        raise AdminKeyError(f"--admin-key-file {key_file}: expected the admin key alone on one line")
    return value


def check_header_name(name: str) -> str:
    """``--header`` names the admin header; a ``NAME=VALUE`` would put the secret on the command line."""
    if "=" in name or ":" in name:
        raise AdminKeyError(f"--header {name.partition('=')[0].partition(':')[0]!r}=...: --header takes the "
                            f"header's name only; its value comes from --admin-key-file or {SECRET_ENV}, "
                            "never the command line")
    if not name.strip() or any(c.isspace() for c in name):
        raise AdminKeyError(f"--header {name!r}: not a header name")
    return name


def admin_headers(header: str, key: str) -> dict[str, str]:
    """``{header: key}``, or nothing when there is no key."""
    return {header: key} if key else {}


def restricted_hint(reason: str) -> str:
    """``reason`` (a server's answer), with what to do when it is Triton refusing a restricted API."""
    if "restricted" in reason.lower() or "403" in reason:
        return (f"{reason}: the server restricts its admin APIs; give their key with --admin-key-file FILE "
                f"or {SECRET_ENV} (and --header when its name is not {DEFAULT_HEADER})")
    return reason
