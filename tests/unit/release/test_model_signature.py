"""OpenSSF model signing accepted as it is (tritonops.release.model_signature): a repository the ``model-signing``
package from PyPI signs with an elliptic-curve key is accepted by ``tritonops release verify`` and published with
its ``model.sig`` by ``release publish --model-signature``; a byte changed, a file added or removed after signing,
or a signature by a key nobody configured is refused in one line with exit 1, and nothing reaches the store.

The producer's side is the ``model_signing`` library itself (the calls its ``model_signing sign key`` CLI makes,
the signature file ignored as the CLI ignores it), so the bundle format is the real one, not ours.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonops.cli import app
from tritonops.core.exitcodes import ExitCode
from tritonops.release_format import signing
from typer.testing import CliRunner

model_signing = pytest.importorskip("model_signing")

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
RUNNER = CliRunner()


def _ec_pair(where: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = where / f"{name}.key", where / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _sign(repo: Path, private: Path) -> None:
    """What ``model_signing sign key REPO --private_key KEY --signature REPO/model.sig`` does."""
    from model_signing import hashing
    from model_signing import signing as ms_signing

    ms_signing.Config().use_elliptic_key_signer(private_key=private).set_hashing_config(
        hashing.Config().set_ignored_paths(paths=["model.sig"])).sign(repo, repo / "model.sig")


@pytest.fixture
def signed(tmp_path: Path) -> dict[str, Path]:
    repo = tmp_path / "repo"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    private, public = _ec_pair(tmp_path, "producer")
    _sign(repo, private)
    return {"repo": repo, "public": public, "other": _ec_pair(tmp_path, "other")[1], "tmp": tmp_path}


def _verify(repo: Path, *keys: Path) -> tuple[int, str]:
    res = RUNNER.invoke(app, ["release", "verify", str(repo), *[a for k in keys for a in ("--producer-key", str(k))]])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res.exit_code, " ".join(res.output.split())  # one message; rich wraps it at the runner's 80 columns


def test_a_repository_model_signing_signed_is_accepted(signed: dict[str, Path]) -> None:
    code, out = _verify(signed["repo"], signed["other"], signed["public"])  # any one configured key will do
    assert code == ExitCode.OK, out
    assert "18 file(s) signed by" in out and "producer.pub" in out


@pytest.mark.parametrize(("tamper", "says"), [
    (lambda r: (r / "mlp" / "config.pbtxt").write_bytes((r / "mlp" / "config.pbtxt").read_bytes() + b" "),
     "1 file(s) differ from what the producer signed: mlp/config.pbtxt"),
    (lambda r: (r / "mlp" / "1" / "extra.onnx").write_bytes(b"\0"),
     "1 file(s) the producer did not sign: mlp/1/extra.onnx"),
    (lambda r: (r / "mlp" / "golden.json").unlink(), "1 signed file(s) missing: mlp/golden.json"),
], ids=["byte-changed", "file-added", "file-removed"])
def test_a_repository_changed_after_signing_is_refused_in_one_line(signed: dict[str, Path], tamper, says) -> None:
    tamper(signed["repo"])
    code, out = _verify(signed["repo"], signed["public"])
    assert code == ExitCode.FINDINGS
    assert out == f"error: {signed['repo'] / 'model.sig'}: refused: {says}"


def test_a_signature_by_an_unconfigured_key_is_refused(signed: dict[str, Path]) -> None:
    code, out = _verify(signed["repo"], signed["other"])
    assert code == ExitCode.FINDINGS
    assert out == (f"error: {signed['repo'] / 'model.sig'}: refused: signed by none of the 1 configured producer "
                   f"key(s) ({signed['other']})")


def test_an_unsigned_repository_or_an_unusable_key_is_one_line(signed: dict[str, Path]) -> None:
    (signed["repo"] / "model.sig").unlink()
    code, out = _verify(signed["repo"], signed["public"])
    assert code == ExitCode.FINDINGS and out.startswith(f"error: {signed['repo'] / 'model.sig'}: no OpenSSF model")
    _sign(signed["repo"], signed["tmp"] / "producer.key")
    code, out = _verify(signed["repo"], signed["tmp"] / "producer.key")  # a private key by mistake
    assert code == ExitCode.USAGE and out.startswith(f"error: {signed['tmp'] / 'producer.key'}: not a PEM public key")
    code, out = _verify(signed["repo"])
    assert code == ExitCode.USAGE and "--producer-key" in out
    (signed["repo"] / "model.sig").write_text("{}")
    code, out = _verify(signed["repo"], signed["public"])
    assert code == ExitCode.FINDINGS and "model.sig: not an OpenSSF model-signing bundle" in out


def _publish(signed: dict[str, Path], store: Path, *extra: str) -> tuple[int, str]:
    key = signed["tmp"] / "release.key"
    if not key.exists():
        signing.keygen(key, signed["tmp"] / "release.pub")
    res = RUNNER.invoke(app, ["release", "publish", str(signed["repo"]), "--store", str(store), "--channel", "stable",
                              "--key", str(key), "--model-signature", "--producer-key", str(signed["public"]),
                              *extra])
    assert "Traceback" not in res.output
    return res.exit_code, res.output


def test_publish_keeps_the_bundle_with_the_release(signed: dict[str, Path]) -> None:
    store = signed["tmp"] / "store"
    code, out = _publish(signed, store, "--json")
    assert code == ExitCode.OK, out
    result = json.loads(out)
    assert result["model_signature"]["producer_key"] == str(signed["public"])
    text = next((store / "releases").glob("*/manifest.json")).read_text()
    assert '"model.sig"' in text  # a file of the release, covered by the release signature
    bundle = (signed["repo"] / "model.sig").read_bytes()
    assert (store / "blobs" / "sha256" / hashlib.sha256(bundle).hexdigest()).read_bytes() == bundle


def test_publish_of_a_tampered_repository_uploads_nothing(signed: dict[str, Path]) -> None:
    (signed["repo"] / "mlp" / "1" / "model.onnx").write_bytes(b"not the model")
    store = signed["tmp"] / "store"
    code, out = _publish(signed, store)
    assert code == ExitCode.FINDINGS
    assert "differ from what the producer signed: mlp/1/model.onnx" in out
    assert not store.exists() or not any(store.rglob("*.json"))


def _edit_bundle(repo: Path, edit) -> None:
    bundle = json.loads((repo / "model.sig").read_text())
    edit(bundle["verificationMaterial"])
    (repo / "model.sig").write_text(json.dumps(bundle))


def test_a_certificate_bundle_keyless_or_x509_is_refused_naming_why(signed: dict[str, Path]) -> None:
    _edit_bundle(signed["repo"], lambda m: (m.pop("publicKey"), m.update(x509CertificateChain={"certificates": []})))
    code, out = _verify(signed["repo"], signed["public"])
    assert code == ExitCode.FINDINGS
    assert "refused: signed with a certificate (keyless Sigstore or x509" in out


def test_a_bundle_of_the_older_format_without_a_key_hint(signed: dict[str, Path]) -> None:
    """No key hint: the library checks the signature itself (cryptography's InvalidSignature for another key,
    never a traceback) and prints a warning, kept off --json."""
    _edit_bundle(signed["repo"], lambda m: m["publicKey"].pop("hint"))
    code, out = _verify(signed["repo"], signed["other"])
    assert code == ExitCode.FINDINGS and "signed by none of the 1 configured producer key(s)" in out
    res = RUNNER.invoke(app, ["release", "verify", str(signed["repo"]), "--producer-key", str(signed["public"]),
                              "--json"])
    assert res.exit_code == ExitCode.OK and json.loads(res.stdout)["files"] == 18


@pytest.fixture(scope="module")
def signed_template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("signed")
    repo = where / "repo"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    private, public = _ec_pair(where, "producer")
    _sign(repo, private)
    return {"repo": repo, "public": public}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_of_any_signed_file_is_named_in_one_line(signed_template: dict[str, Path],
                                                                  tmp_path: Path, data: st.DataObject) -> None:
    """Whatever the digests' bytes (a quote in the library's text once cut the message to a raw dump), the
    refusal names the one file changed, read by hashing again rather than from the library's words."""
    repo = Path(tempfile.mkdtemp(dir=tmp_path)) / "repo"
    shutil.copytree(signed_template["repo"], repo)
    files = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")
                   if p.is_file() and p.name != "model.sig" and p.stat().st_size)
    name = data.draw(st.sampled_from(files))
    body = bytearray((repo / name).read_bytes())
    at = data.draw(st.integers(0, len(body) - 1))
    body[at] ^= data.draw(st.integers(1, 255))
    (repo / name).write_bytes(bytes(body))
    code, out = _verify(repo, signed_template["public"])
    assert code == ExitCode.FINDINGS
    assert out == f"error: {repo / 'model.sig'}: refused: 1 file(s) differ from what the producer signed: {name}"


def test_the_producers_own_verifier_passes_on_a_nodes_installed_copy(signed: dict[str, Path],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What docs/releases.md tells an operator to run on a node: the ``model_signing verify key`` command line
    (its click program, run here in-process) on the folder the agent installed, the agent's own
    ``MANIFEST.sha256.json`` named with ``--ignore-paths``; without it the producer's verifier refuses the
    extra file, as the docs say. The folder is the release the link points at (``readlink -f``): the
    verifier refuses a symbolic link."""
    from click.testing import CliRunner as ClickRunner
    from model_signing import _cli as model_signing_cli
    from tritonops import agent_bundle as bundle

    store = signed["tmp"] / "store"
    code, out = _publish(signed, store)
    assert code == ExitCode.OK, out
    node = signed["tmp"] / "node"
    (node / "releases").mkdir(parents=True)
    pyz = bundle.build(signed["tmp"] / "tritonops-agent.pyz")
    done = subprocess.run([sys.executable, "-I", str(pyz), "sync", "--store", str(store), "--channel", "stable",
                           "--link", str(node / "models"), "--releases", str(node / "releases"),
                           "--trusted-key", str(signed["tmp"] / "release.pub")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    # The CLI starts OpenTelemetry when it can import it; the dev venv's copy (pulumi's) is too old for it.
    monkeypatch.setitem(sys.modules, "opentelemetry.instrumentation", None)
    models = (node / "models").resolve()  # the release folder the link points at: the verifier refuses a link
    argv = ["verify", "key", str(models), "--public_key", str(signed["public"]),
            "--signature", str(models / "model.sig")]
    plain = ClickRunner().invoke(model_signing_cli.main, argv)
    assert plain.exit_code == 1 and "MANIFEST.sha256.json" in plain.output, plain.output
    ignoring = ClickRunner().invoke(model_signing_cli.main, [*argv, "--ignore-paths",
                                                             str(models / "MANIFEST.sha256.json")])
    assert ignoring.exit_code == 0 and "Verification succeeded" in ignoring.output, ignoring.output


def _publish_plain(signed: dict[str, Path], store: Path) -> Any:
    key = signed["tmp"] / "release.key"
    if not key.exists():
        signing.keygen(key, signed["tmp"] / "release.pub")
    res = RUNNER.invoke(app, ["release", "publish", str(signed["repo"]), "--store", str(store), "--channel", "stable",
                              "--key", str(key)])
    assert "Traceback" not in res.output
    return res


def test_a_model_signature_is_never_published_silently(signed: dict[str, Path]) -> None:
    """Without --model-signature a model.sig still ships only when the files match it, with a warning that its
    signer was not checked; a model.sig that no longer matches is refused before anything is uploaded."""
    res = _publish_plain(signed, signed["tmp"] / "store")
    assert res.exit_code == ExitCode.OK, res.output
    warning = " ".join(res.stderr.split())
    assert warning == (f"warning: {signed['repo'] / 'model.sig'}: shipped without checking who signed it: its 18 "
                       "file(s) match, but the signature is verified only with --model-signature --producer-key PUB")
    (signed["repo"] / "mlp" / "config.pbtxt").write_bytes((signed["repo"] / "mlp" / "config.pbtxt").read_bytes() + b" ")
    (signed["repo"] / "mlp" / "golden.json").unlink()
    store = signed["tmp"] / "store2"
    res = _publish_plain(signed, store)
    assert res.exit_code == ExitCode.FINDINGS
    assert " ".join(res.output.split()) == (
        f"error: {signed['repo'] / 'model.sig'}: refused: the repository no longer matches its model signature: "
        "1 file(s) differ from what the producer signed: mlp/config.pbtxt; 1 file(s) signed but missing: "
        "mlp/golden.json (re-sign it, or remove model.sig to publish it unsigned)")
    assert not store.exists() or not any(store.rglob("*.json"))
    (signed["repo"] / "model.sig").unlink()
    res = _publish_plain(signed, store)
    assert res.exit_code == ExitCode.OK and "warning" not in res.output, res.output
