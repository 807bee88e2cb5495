"""The oci:// store with another client, ORAS (the ``oras`` Python SDK), against docker-registry on loopback
(TLS with a CA made by the fixture, htpasswd): what tritonops publishes, oras lists and pulls byte-exact;
what oras pushes (a pointer no key of ours signed) the agent refuses, and the node keeps its release."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from oci_registry import PASSWORD, USER
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.core.names import MANIFEST_FILE
from tritonops.release import publish as pub
from tritonops.release_format import signing
from tritonops.stores import open_store

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"

# oras-py retries a failing request with backoff for minutes: a broken setup fails here within a minute.
pytestmark = pytest.mark.timeout(60)
oras_client = pytest.importorskip("oras.client", reason="the oras SDK is in the dev extra")


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oci_registry: Any) -> dict[str, Any]:
    monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(oci_registry.config))
    monkeypatch.setenv("TRITONOPS_REGISTRY_CA", str(oci_registry.ca))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    key, pubkey = signing.keygen(tmp_path / "release.key", tmp_path / "release.pub")
    repo = f"interop/{tmp_path.name.lower().replace('_', '-')}"
    out = pub.publish(SAMPLE, oci_registry.url(repo), "stable", key, target="cpu", version="r1")
    client = oras_client.OrasClient(hostname=oci_registry.host, tls_verify=str(oci_registry.ca),
                                       auth_backend="basic")  # htpasswd: Basic (the token backend reads a Basic realm as a URL)
    client.auth.set_basic_auth(USER, PASSWORD)
    return {"out": out, "pub": pubkey, "repo": f"{oci_registry.host}/{repo}", "url": oci_registry.url(repo),
            "oras": client}


def test_oras_lists_and_pulls_a_published_release_byte_exact(tmp_path: Path, published: dict[str, Any]) -> None:
    client, digest = published["oras"], published["out"]["digest"]
    tags = client.get_tags(published["repo"])
    assert {f"release-{digest}", "channel-stable", "id-r1"} <= set(tags), tags
    out = tmp_path / "pulled"
    client.pull(target=f"{published['repo']}:release-{digest}", outdir=str(out))
    got = _tree(out)
    want = _tree(SAMPLE)
    assert {k: v for k, v in got.items() if not k.startswith(MANIFEST_FILE)} == want
    assert hashlib.sha256((out / MANIFEST_FILE).read_bytes()).hexdigest() == digest
    assert json.loads((out / f"{MANIFEST_FILE}.sigs").read_text())  # the signatures came along
    got_manifest = client.get_manifest(f"{published['repo']}:release-{digest}")
    assert got_manifest["artifactType"] == "application/vnd.tritonops.release.v1+json"


def test_a_pointer_pushed_by_oras_that_no_key_of_ours_signs_is_refused(
        tmp_path: Path, published: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "node"
    (node / "releases").mkdir(parents=True)
    agent = Agent(open_store(published["url"]), "stable", node / "models", node / "releases", [published["pub"]],
                  log=lambda m: None)
    assert agent.poll()["result"] == "applied"
    forged = tmp_path / "work" / "stable.json"  # what an attacker with push rights would write
    forged.parent.mkdir()
    forged.write_text(json.dumps({"signed": {"type": "channel", "channel": "stable", "version": 99, "release": "evil",
                                             "digest": "0" * 64, "length": 10, "expires": "2099-01-01T00:00:00Z",
                                             "root_version": 0, "history": []}, "signatures": []}))
    monkeypatch.chdir(forged.parent)
    published["oras"].push(target=f"{published['repo']}:channel-stable", quiet=True,
                           files=["stable.json:application/vnd.tritonops.document.v1+json"])
    result = agent.poll()
    assert (result["result"], result.get("rejected")) == ("error", "signature"), result  # read from oras's blob
    assert "signed by no key" in result["error"]
    assert releases.active_release(agent.link, agent.releases) == "r1"
    assert sorted(p.name for p in agent.releases.iterdir()) == [".trusted.json", "current.json", "r1"]
