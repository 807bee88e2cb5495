"""Producer signatures a root requires (issue 44 item 5): ``release root init --producer-key PUB
--require-model-signature`` signs the producers' EC keys into the root; publish then refuses a release without a
``model.sig`` verifying under one of them, and every node checks it again before it installs, with the openssl
command line and no Python package (the shipped zipapp run with ``-I -S``: no site-packages at all).

The producer's side is the real ``model_signing`` library (what ``model_signing sign key`` does); a publisher that
skips the check (an older tritonops, or anyone holding the release and channel keys) is the controller with its
check switched off, so that the node's own refusal is what is tested.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_harness import cli, key_pairs, release_source
from tritonops import agent_bundle as bundle
from tritonops.core.errors import ReleaseError, UsageError
from tritonops.release import publish as pub
from tritonops.release_format import producer, trust

pytest.importorskip("model_signing")


def _ec_pair(folder: Path, name: str, curve: str = "SECP256R1") -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(getattr(ec, curve)())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _sign(repo: Path, private: Path) -> Path:
    """What ``model_signing sign key REPO --private_key KEY --signature REPO/model.sig`` does."""
    from model_signing import hashing, signing

    signing.Config().use_elliptic_key_signer(private_key=private).set_hashing_config(
        hashing.Config().set_ignored_paths(paths=["model.sig"])).sign(repo, repo / "model.sig")
    return repo


@pytest.fixture(scope="module")
def signer_and_producer_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    out = key_pairs(d, "release")
    out["producer"], out["producer.pub"] = _ec_pair(d, "producer")
    out["rogue"], out["rogue.pub"] = _ec_pair(d, "rogue")
    out["pyz"] = bundle.build(d / "tritonops-agent.pyz")
    return out


def _root(store: Path, signer_and_producer_keys: dict[str, Path], required: bool | None = True) -> dict[str, Any]:
    return pub.write_root(str(store), {r: [signer_and_producer_keys["release.pub"]] for r in trust.ROLES}, [signer_and_producer_keys["release"]], first=True,
                          trusted_keys=[signer_and_producer_keys["release.pub"]], name="fleet", producer_keys=[signer_and_producer_keys["producer.pub"]],
                          require_model_signature=required)


def _sync(tmp_path: Path, store: Path, signer_and_producer_keys: dict[str, Path]) -> subprocess.CompletedProcess:
    """The node: the shipped zipapp on the standard library only (-I -S: no site-packages, no cryptography)."""
    node = tmp_path / "node"
    (node / "releases").mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-I", "-S", str(signer_and_producer_keys["pyz"]), "sync", "--store", str(store), "--channel",
                           "stable", "--store-name", "fleet", "--link", str(node / "models"), "--releases",
                           str(node / "releases"), "--trusted-key", str(signer_and_producer_keys["release.pub"])],
                          capture_output=True, text=True, timeout=120)


def _unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A publisher that does not check producer signatures: the node's check is all that stands."""
    monkeypatch.setattr(pub, "_model_signature", lambda *a: (None, None))
    monkeypatch.setattr(pub, "_producer_as_nodes", lambda *a: None)


def _forge_statement(repo: Path, name: str) -> None:
    """Change ``name`` after signing and write its new digest into the statement, leaving the signature as it was."""
    import hashlib

    with (repo / name).open("a") as f:
        f.write("\n# changed after signing\n")
    bundle_doc = json.loads((repo / "model.sig").read_text())
    statement = json.loads(base64.b64decode(bundle_doc["dsseEnvelope"]["payload"]))
    for r in statement["predicate"]["resources"]:
        if r["name"] == name:
            r["digest"] = hashlib.sha256((repo / name).read_bytes()).hexdigest()
    bundle_doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (repo / "model.sig").write_text(json.dumps(bundle_doc))


def test_a_requiring_root_is_signed_metadata_and_rotate_keeps_it(tmp_path: Path, signer_and_producer_keys: dict[str, Path]) -> None:
    store = tmp_path / "store"
    code, out = cli("release", "root", "init", "--store", store, "--name", "fleet", "--sign-with", signer_and_producer_keys["release"],
                    "--trusted-key", signer_and_producer_keys["release.pub"], *[a for r in trust.ROLES for a in (f"--{r}-key",
                                                                                              signer_and_producer_keys["release.pub"])],
                    "--producer-key", signer_and_producer_keys["producer.pub"], "--require-model-signature")
    assert code == 0 and "producer signatures required: 1 producer key(s)" in out, out
    root = trust.load_root((store / "root" / "1.json").read_bytes(), "root 1")
    assert root.require_model_signature and list(root.producer_keys) == [
        producer.key_type(signer_and_producer_keys["producer.pub"].read_bytes(), "k", ReleaseError)[1]]
    rotate = ("release", "root", "rotate", "--store", store, "--sign-with", signer_and_producer_keys["release"],
              *[a for r in trust.ROLES for a in (f"--{r}-key", signer_and_producer_keys["release.pub"])])
    assert cli(*rotate)[0] == 0  # nothing said: the producer keys and the requirement carry over
    assert trust.load_root((store / "root" / "2.json").read_bytes(), "root 2").require_model_signature
    code, out = cli(*rotate, "--no-require-model-signature")
    assert code == 0 and "checked when present" in out, out
    # a tampered requirement breaks the root's own signature
    doc = json.loads((store / "root" / "1.json").read_text())
    doc["signed"]["model_signature"]["required"] = False
    with pytest.raises(ReleaseError, match="valid signature"):
        trust.load_root(json.dumps(doc).encode(), "root 1")


def test_producer_keys_that_are_not_ec_public_keys_are_refused_naming_the_file(tmp_path: Path,
                                                                               signer_and_producer_keys: dict[str, Path]) -> None:
    base = ("release", "root", "init", "--store", tmp_path / "s", "--sign-with", signer_and_producer_keys["release"], "--trusted-key",
            signer_and_producer_keys["release.pub"], *[a for r in trust.ROLES for a in (f"--{r}-key", signer_and_producer_keys["release.pub"])])
    code, out = cli(*base, "--producer-key", signer_and_producer_keys["release.pub"])  # Ed25519: model_signing signs with EC keys
    assert code == 2 and "release.pub" in out and "EC P-256" in out, out
    code, out = cli(*base, "--producer-key", signer_and_producer_keys["producer"])  # the private key
    assert code == 2 and "not a PEM public key" in out, out
    code, out = cli(*base, "--require-model-signature")
    assert code == 2 and "--producer-key" in out, out
    assert not (tmp_path / "s" / "root" / "1.json").exists()


def test_nodes_install_only_what_a_root_producer_signed(tmp_path: Path, signer_and_producer_keys: dict[str, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    _root(store, signer_and_producer_keys)
    out = pub.publish(_sign(release_source(tmp_path, "good"), signer_and_producer_keys["producer"]), str(store), "stable",
                      signer_and_producer_keys["release"], target="cpu", version="r1")
    assert "(root version 1)" in out["model_signature"]["producer_key"]
    run = _sync(tmp_path, store, signer_and_producer_keys)
    assert run.returncode == 0, run.stderr
    assert os.readlink(tmp_path / "node" / "models") == "releases/r1"

    unsigned = release_source(tmp_path, "unsigned", "v2")
    with pytest.raises(ReleaseError, match="no producer signature.*nothing written"):
        pub.publish(unsigned, str(store), "stable", signer_and_producer_keys["release"], target="cpu", version="r2")
    rogue = _sign(release_source(tmp_path, "rogue", "v3"), signer_and_producer_keys["rogue"])
    with pytest.raises(ReleaseError, match="none of the root's 1 producer key"):
        pub.publish(rogue, str(store), "stable", signer_and_producer_keys["release"], target="cpu", version="r3")
    forged = _sign(release_source(tmp_path, "forged", "v4"), signer_and_producer_keys["producer"])
    _forge_statement(forged, "mlp/1/model.py")
    changed = _sign(release_source(tmp_path, "changed", "v5"), signer_and_producer_keys["producer"])
    with (changed / "mlp" / "1" / "model.py").open("a") as f:
        f.write("\n# changed after signing\n")
    with pytest.raises(ReleaseError, match="differ from what the producer signed: mlp/1/model.py"):
        pub.publish(changed, str(store), "stable", signer_and_producer_keys["release"], target="cpu", version="r5")

    _unchecked(monkeypatch)  # the same releases, published by a controller that does not check
    for source, release, reason in ((unsigned, "r2", "no producer signature"),
                                    (rogue, "r3", "none of the root's 1 producer key"),
                                    (forged, "r4", "none of the root's 1 producer key"),
                                    (changed, "r5", "differ from what the producer signed: mlp/1/model.py")):
        pub.publish(source, str(store), "stable", signer_and_producer_keys["release"], target="cpu", version=release)
        run = _sync(tmp_path, store, signer_and_producer_keys)
        assert run.returncode != 0 and reason in run.stdout + run.stderr, (release, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
        assert os.readlink(tmp_path / "node" / "models") == "releases/r1"  # still the signed one
        assert not (tmp_path / "node" / "releases" / release).exists()  # refused before install


def test_a_model_sig_that_does_not_verify_is_never_published_silently(tmp_path: Path, signer_and_producer_keys: dict[str, Path]) -> None:
    # a root that names producer keys without requiring them: unsigned passes, a forged model.sig does not
    store = tmp_path / "store"
    _root(store, signer_and_producer_keys, required=False)
    out = pub.publish(release_source(tmp_path, "plain"), str(store), "stable", signer_and_producer_keys["release"], target="cpu",
                      version="r1")
    assert out["model_signature"] is None and out["model_signature_unverified"] is None
    rogue = _sign(release_source(tmp_path, "rogue", "v2"), signer_and_producer_keys["rogue"])
    with pytest.raises(ReleaseError, match="none of the root's 1 producer key.*nothing written"):
        pub.publish(rogue, str(store), "stable", signer_and_producer_keys["release"], target="cpu", version="r2")
    # no root: who signed cannot be known, so a model.sig whose files match ships with a warning, never silently
    bare = tmp_path / "bare"
    out = pub.publish(rogue, str(bare), "stable", signer_and_producer_keys["release"], target="cpu", version="r2")
    assert "shipped without checking who signed it" in out["model_signature_unverified"]
    code, text = cli("release", "publish", rogue, "--store", bare, "--channel", "stable", "--key", signer_and_producer_keys["release"],
                     "--target", "cpu", "--version", "r2")
    assert code == 0 and "warning:" in text and "shipped without checking who signed it" in text, text
    # with --model-signature the producer key named decides (the library's verifier)
    code, text = cli("release", "publish", rogue, "--store", bare, "--channel", "stable", "--key", signer_and_producer_keys["release"],
                     "--target", "cpu", "--version", "r3", "--model-signature", "--producer-key", signer_and_producer_keys["producer.pub"])
    assert code == 1 and "signed by none of the 1 configured producer key" in text, text


def test_a_pointer_moved_back_to_an_unsigned_release_is_refused_by_the_controller_and_the_node(
        tmp_path: Path, signer_and_producer_keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    _root(store, signer_and_producer_keys, required=False)
    pub.publish(release_source(tmp_path, "plain"), str(store), "stable", signer_and_producer_keys["release"], target="cpu", version="r1")
    assert _sync(tmp_path, store, signer_and_producer_keys).returncode == 0
    pub.publish(_sign(release_source(tmp_path, "signed", "v2"), signer_and_producer_keys["producer"]), str(store), "stable",
                signer_and_producer_keys["release"], target="cpu", version="r2")
    assert _sync(tmp_path, store, signer_and_producer_keys).returncode == 0
    pub.write_root(str(store), {r: [signer_and_producer_keys["release.pub"]] for r in trust.ROLES}, [signer_and_producer_keys["release"]], first=False,
                   require_model_signature=True)  # from now on every release must be signed: r1, installed, is not
    with pytest.raises(UsageError, match="release r1: refused: no producer signature.*nothing written"):
        pub.rollback(str(store), "stable", keys=signer_and_producer_keys["release"])
    _unchecked(monkeypatch)
    pub.rollback(str(store), "stable", keys=signer_and_producer_keys["release"])
    run = _sync(tmp_path, store, signer_and_producer_keys)
    assert run.returncode != 0 and "release r1: refused: no producer signature" in run.stdout, run.stdout
    assert os.readlink(tmp_path / "node" / "models") == "releases/r2"


@pytest.mark.parametrize("curve", ["SECP384R1", "SECP521R1"])
def test_the_node_check_verifies_every_curve_model_signing_signs_with(tmp_path: Path, curve: str) -> None:
    from tritonops.release_format import manifest

    private, public = _ec_pair(tmp_path, "p", curve)
    repo = _sign(release_source(tmp_path, "r"), private)
    files = manifest.tree_files(repo)
    keytype, kid = producer.key_type(public.read_bytes(), str(public), ReleaseError)
    keys = {kid: (keytype, public.read_bytes())}
    assert producer.check((repo / "model.sig").read_bytes(), files, keys, "r") == kid
    other = _ec_pair(tmp_path, "o", curve)[1]
    okeytype, okid = producer.key_type(other.read_bytes(), str(other), ReleaseError)
    with pytest.raises(ReleaseError, match="none of the root's 1 producer key"):
        producer.check((repo / "model.sig").read_bytes(), files, {okid: (okeytype, other.read_bytes())}, "r")
