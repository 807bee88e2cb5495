"""A channel signed with a key the stack does not trust is refused before any pod waits (issue 43, failure 5).

A folder store holds channels published with key K1 (``tritonops release publish``, the library call the
CLI makes). The dev stack's service, its store pointed at that folder, trusting K2: the preview-time check
(:func:`tritonops.k8s.stacks.triton.bootstrap.check_channels`) and ``tritonops preflight``'s channel probe
refuse, naming the channel, the store and the key; trusting K1 both pass. The verdict is the release
agent's own (:class:`tritonops.release_format.metadata.Trusted`), not a copy of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_harness import ROOT
from tritonops.k8s import preflight
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import bootstrap
from tritonops.release import publish as pub
from tritonops.release_format import signing, trust

SAMPLE = ROOT / "examples" / "model_repository"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("keys")
    return {name: signing.keygen(d / f"{name}.key", d / f"{name}.pub") for name in ("K1", "K2")}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, tuple[Path, Path]]) -> Path:
    """A folder store whose dev and dev-canary channels are signed with K1."""
    folder = tmp_path_factory.mktemp("store") / "vision"
    for channel in ("dev", "dev-canary"):
        pub.publish(SAMPLE, str(folder), channel, keys["K1"][0], target="cpu")
    return folder


def _cfg(store: Path, public: Path) -> TritonStackConfig:
    """The dev stack file with the user's public key set, then its store swapped for the folder (the stack
    file itself takes only what a pod can reach: s3, http(s), oci)."""
    raw, _ = read_stack_file("triton", "dev")
    services = [dict(s) for s in raw["modelServices"]]
    release = dict(services[0]["release"])
    release["trustedKeys"] = {**release["trustedKeys"], "publicKeys": {"release.pub": public.read_text()}}
    services[0]["release"] = release
    cfg = parse_config("triton", {**raw, "modelServices": services})
    assert isinstance(cfg, TritonStackConfig)
    svc = cfg.model_services[0]
    assert svc.release is not None
    moved = svc.model_copy(update={"release": svc.release.model_copy(update={"store": str(store)})})
    return cfg.model_copy(update={"model_services": [moved]})


def test_a_channel_signed_with_another_key_is_refused_naming_channel_key_and_store(
        store: Path, keys: dict[str, tuple[Path, Path]]) -> None:
    with pytest.raises(ConfigError) as exc:
        bootstrap.check_channels(_cfg(store, keys["K2"][1]), source="Pulumi.dev.yaml")
    assert exc.value.key == "tritonops-triton:modelServices[0].release.trustedKeys.publicKeys"
    message = str(exc.value)
    assert f"channel 'dev' of store {store}" in message
    assert f"key id {trust.keyid(keys['K2'][1].read_bytes())[:16]}" in message  # the key it trusts
    assert "signature" in message


def test_trusting_the_signing_key_passes(store: Path, keys: dict[str, tuple[Path, Path]]) -> None:
    states = bootstrap.check_channels(_cfg(store, keys["K1"][1]))
    assert [s.channel for s in states] == ["dev", "dev-canary"]
    assert all(s.release and s.store == str(store) for s in states)


def test_preflight_runs_the_same_check_per_channel(store: Path, keys: dict[str, tuple[Path, Path]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bootstrap.CHECK_ENV, raising=False)
    path = ROOT / "stacks" / "triton" / "Pulumi.dev.yaml"
    wrong = preflight.run(preflight._channel_probes(_cfg(store, keys["K2"][1]), path), api=None)  # type: ignore[arg-type]
    assert [(p.ok, p.what.split(",")[0]) for p in wrong] == [(False, f"channel dev of {store}"),
                                                             (False, f"channel dev-canary of {store}")]
    assert "trustedKeys.publicKeys" in wrong[0].command and "is not trusted" in wrong[0].command
    right = preflight.run(preflight._channel_probes(_cfg(store, keys["K1"][1]), path), api=None)  # type: ignore[arg-type]
    assert [p.ok for p in right] == [True, True]
    monkeypatch.setenv(bootstrap.CHECK_ENV, "off")
    assert preflight._channel_probes(_cfg(store, keys["K2"][1]), path) == []
