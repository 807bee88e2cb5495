"""OpenSSF model signing, accepted as it is: a producer's ``model.sig`` checked before a release is published.

The ``model-signing`` tool (OpenSSF, PyPI ``model-signing``) writes a Sigstore bundle whose DSSE envelope
signs an in-toto statement naming every file of a model with its digest. A repository signed by its
producer carries that bundle at its root as ``model.sig``; ``tritonops release verify`` and
``tritonops release publish --model-signature`` check it against the producer keys the operator
configured (``--producer-key``, a PEM public key, repeatable) before anything is uploaded, and the
bundle then travels with the release as one of its files (covered by the release's own signature).

A repository is accepted only when

* the bundle's signature is valid under one of the configured keys (key-based signing: the
  ``model_signing`` library's elliptic-curve verifier does this check, and the digest comparison),
* every file it names is there with the digest it names, and
* every file the release would ship (all but ``model.sig`` itself) is named in the statement: a file
  added after signing is refused, even where the producer's own verifier would ignore it.

Keyless (Sigstore/Fulcio certificate) bundles are not accepted here: verifying one needs the Sigstore
trust root, which the library fetches over the network (docs/releases.md says what can be checked
offline). This check runs on the controller with the library. When the store's root names producer keys
(``root init --producer-key``, optionally ``--require-model-signature``), nodes check the bundle again
before they install, with the openssl command line (``tritonops.release_format.producer``; publish runs that check
too); otherwise a node trusts the release signature that covers ``model.sig`` and every file.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
from pathlib import Path
from typing import Any

from tritonops.core.errors import ReleaseError, UsageError
from tritonops.release_format import manifest

SIGNATURE_FILE = "model.sig"


def statement(sig: Path) -> dict[str, Any]:
    """The in-toto statement a bundle's DSSE envelope carries (read only to name files; the library verifies)."""
    payload, material = _payload(sig)
    if "publicKey" not in material:
        raise ReleaseError(f"{sig}: refused: signed with a certificate (keyless Sigstore or x509: "
                           f"verificationMaterial has {', '.join(sorted(material)) or 'nothing'}), not with a key; "
                           f"tritonops accepts key-signed bundles (model_signing sign key)")
    return payload


def _payload(sig: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A bundle's statement and its verification material, each field checked, nothing verified."""
    try:
        bundle = json.loads(sig.read_bytes())
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"], validate=True))
        resources = payload["predicate"]["resources"]
        material = bundle["verificationMaterial"]
        if not isinstance(resources, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                       for r in resources):
            raise TypeError("predicate.resources: not a list of named files")
    except OSError as e:
        raise ReleaseError(f"{sig}: cannot read the model signature ({e.strerror or e})") from None
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise ReleaseError(f"{sig}: not an OpenSSF model-signing bundle (dsseEnvelope.payload, an in-toto "
                           f"statement with predicate.resources): {e}") from None
    return payload, material


def _public_keys(keys: list[Path]) -> list[Path]:
    if not keys:
        raise UsageError("--producer-key: name the producer's public key(s) (PEM) the model signature must verify with")
    for key in keys:
        try:
            text = Path(key).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"{key}: cannot read the producer key ({getattr(e, 'strerror', None) or e})") from None
        if "-----BEGIN PUBLIC KEY-----" not in text:
            raise UsageError(f"{key}: not a PEM public key: give the producer's public key")
    return [Path(k) for k in keys]


def _library_verify(repository: Path, sig: Path, key: Path) -> str | None:
    """None when ``model_signing`` accepts the bundle under ``key``, else its reason (one line).

    Anything the library raises is a refusal (fail closed): a wrong signature is cryptography's
    InvalidSignature, a bundle it cannot read an AttributeError; what it prints (a warning about an
    older bundle format) is kept off our stdout, which may be --json."""
    from cryptography.exceptions import InvalidSignature
    from model_signing import verifying

    config = verifying.Config().use_elliptic_key_verifier(public_key=key).set_ignore_unsigned_files(True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            config.verify(repository, sig)
    except InvalidSignature:
        return "Key mismatch: the signature does not verify with this key"
    except Exception as e:  # the library's verdict, whatever it raised, refuses the release
        return " ".join(str(e).split()) or type(e).__name__
    return None


def _differences(repo: Path, predicate: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The signed files that differ from their signed digest, and those missing: found by hashing each
    file again as the statement says it was hashed, never by reading the library's message (whose text
    quotes the digests and varies with their bytes). A statement of shards (not whole files) or a digest
    algorithm hashlib lacks names nothing here."""
    changed: list[str] = []
    gone: list[str] = []
    if predicate.get("serialization", {}).get("method") != "files":
        return changed, gone
    for r in predicate["resources"]:
        name, algorithm = r["name"], str(r.get("algorithm", ""))
        path = repo / name
        if not path.is_file():
            gone.append(name)
        elif algorithm in hashlib.algorithms_available:
            with path.open("rb") as f:
                if hashlib.file_digest(f, algorithm).hexdigest() != r.get("digest"):
                    changed.append(name)
    return sorted(changed), sorted(gone)


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"


def _refusal(repo: Path, sig: Path, keys: list[Path], reasons: list[str]) -> ReleaseError:
    """One line: which files differ (a verified signature over other content), or why no key matched.

    A reason other than a key mismatch means the library verified the signature under some key and then
    found the content different: the statement is then the producer's, and hashing the files again names
    them."""
    content = [r for r in reasons if not r.startswith("Key mismatch")]
    if not content:
        return ReleaseError(f"{sig}: refused: signed by none of the {len(keys)} configured producer key(s) "
                            f"({', '.join(str(k) for k in keys)})")
    changed, gone = _differences(repo, statement(sig)["predicate"])
    if changed:
        return ReleaseError(f"{sig}: refused: {len(changed)} file(s) differ from what the producer signed: "
                            f"{_listed(changed)}")
    if gone:
        return ReleaseError(f"{sig}: refused: {len(gone)} signed file(s) missing: {_listed(gone)}")
    return ReleaseError(f"{sig}: refused: {content[0][:300]}")


def unverified(repository: Path, files: dict[str, str]) -> str | None:
    """A ``model.sig`` about to ship without ``--model-signature``: never silently. Refused (exit 1) when the
    files no longer match its statement (a digest, a signed file gone, a file it does not name); when they
    match, the warning that who signed it was not checked. None: no ``model.sig``.

    ``files``: the release's files (relative path -> sha256). Matching files prove nothing about the signer
    (anyone can write a statement), hence the warning."""
    sig = Path(repository) / SIGNATURE_FILE
    if not sig.is_file():
        return None
    predicate = _payload(sig)[0]["predicate"]
    changed, gone = _differences(Path(repository), predicate)
    uncovered = sorted(set(files) - {r["name"] for r in predicate["resources"]} - {SIGNATURE_FILE})
    found = [f"{len(names)} file(s) {what}: {_listed(names)}" for names, what in (
        (changed, "differ from what the producer signed"), (gone, "signed but missing"),
        (uncovered, "the producer did not sign")) if names]
    if found:
        raise ReleaseError(f"{sig}: refused: the repository no longer matches its model signature: {'; '.join(found)} "
                           "(re-sign it, or remove model.sig to publish it unsigned)")
    return (f"{sig}: shipped without checking who signed it: its {len(predicate['resources'])} file(s) match, "
            "but the signature is verified only with --model-signature --producer-key PUB")


def verify(repository: Path, producer_keys: list[Path], files: dict[str, str] | None = None) -> dict[str, Any]:
    """Check ``repository``'s ``model.sig`` against ``producer_keys``; what was verified, or raise.

    ``files`` is the release's files (relative path -> sha256, :func:`manifest.tree_files`) when the caller
    has them already. Raises UsageError (exit 2) for an unusable key, ReleaseError (exit 1) when refused."""
    repository = Path(repository)
    keys = _public_keys(producer_keys)
    if not repository.is_dir():
        raise UsageError(f"{repository}: not a model repository folder")
    sig = repository / SIGNATURE_FILE
    if not sig.is_file():
        raise ReleaseError(f"{sig}: no OpenSSF model signature (the producer signs with: model_signing sign key "
                           f"{repository} --private_key KEY --signature {sig})")
    names = {r["name"] for r in statement(sig)["predicate"]["resources"]}
    reasons = []
    for key in keys:
        reason = _library_verify(repository, sig, key)
        if reason is None:
            break
        reasons.append(reason)
    else:
        raise _refusal(repository, sig, keys, reasons)
    shipped = files if files is not None else manifest.tree_files(repository)
    uncovered = sorted(set(shipped) - names - {SIGNATURE_FILE})
    if uncovered:
        raise ReleaseError(f"{sig}: refused: {len(uncovered)} file(s) the producer did not sign: "
                           f"{_listed(uncovered)}")
    return {"repository": str(repository), "signature": str(sig), "producer_key": str(key), "files": len(names)}
