"""Fixtures the agent tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_harness import release_source
from tritonops.release import publish as pub
from tritonops.release_format import signing


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The release key pair (openssl Ed25519), made once per module: ``key`` signs, ``pub`` a node trusts."""
    d = tmp_path_factory.mktemp("keys")
    key, pubkey = signing.keygen(d / "release.key", d / "release.pub")
    return {"key": key, "pub": pubkey}


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> Path:
    """Made once: a store with r1 on stable and r2 published, not moved; each test gets a copy."""
    base = tmp_path_factory.mktemp("published")
    pub.publish(release_source(base, "a"), str(base / "store"), "stable", keys["key"], target="cpu", version="r1")
    pub.publish(release_source(base, "b", "two"), str(base / "store"), None, keys["key"], target="cpu",
                version="r2", channels=["stable"])
    return base / "store"
