"""Fixtures the agent tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonops.release_format import signing


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The release key pair (openssl Ed25519), made once per module: ``key`` signs, ``pub`` a node trusts."""
    d = tmp_path_factory.mktemp("keys")
    key, pubkey = signing.keygen(d / "release.key", d / "release.pub")
    return {"key": key, "pub": pubkey}
