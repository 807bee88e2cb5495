"""Producer signatures on the node: an OpenSSF model-signing bundle (``model.sig``) verified with the openssl CLI.

A root may name model producers' public keys and require their signature (``tritonops release root init
--producer-key PUB --require-model-signature``), in its signed part::

    "model_signature": {"required": true, "keys": {"<sha256 of the key's DER>": {"keytype": "ecdsa-p256",
                                                                                  "public": "<PEM>"}}}

The ``model_signing`` library's key-signed bundle (``model_signing sign key``) is a Sigstore bundle whose DSSE
envelope holds an in-toto statement; its signature is ECDSA (P-256, P-384 or P-521, hashed with SHA-256, -384,
-512) over ``PAE(payloadType, payload)``. A node checks it with no Python package: the signature with
``openssl dgst -verify`` under one of the root's producer keys, then the statement against the release's signed
manifest (every file it names with the sha256 the manifest states, which the download checked, and every file
of the release named). The controller runs the same check before it publishes (tritonops.release.publish).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import ReleaseError
from ..core.fsio import read_bounded
from . import signing

SIGNATURE_FILE = "model.sig"
BUNDLE_MAX = 64 << 20  # bytes of a model.sig read (a statement names every file: large models, large bundles)
SIGNATURES_MAX = 16
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# DER of the SubjectPublicKeyInfo's algorithm: id-ecPublicKey, then the named curve -> (keytype, openssl digest).
_EC_PUBLIC_KEY = bytes.fromhex("06072a8648ce3d0201")
_CURVES = {bytes.fromhex("06082a8648ce3d030107"): ("ecdsa-p256", "-sha256"),
           bytes.fromhex("06052b81040022"): ("ecdsa-p384", "-sha384"),
           bytes.fromhex("06052b81040023"): ("ecdsa-p521", "-sha512")}
_DIGESTS = dict(_CURVES.values())


def key_type(pem: bytes, where: str, error: type[ReleaseError]) -> tuple[str, str]:
    """(keytype, the key's id: sha256 hex of its DER) of one EC public key in PEM (model_signing's key
    method: P-256, P-384, P-521); else ``error`` naming ``where`` and what the file is instead."""
    m = signing._PEM.search(pem)
    if m is None or m.group(1) != b"PUBLIC KEY" or b"PRIVATE KEY" in pem:
        raise error(f"{where}: not a PEM public key; expected the producer's EC public key "
                    "('-----BEGIN PUBLIC KEY-----', the key model_signing sign key's private key pairs with)")
    try:
        der = base64.b64decode(b"".join(m.group(2).split()), validate=True)
    except (binascii.Error, ValueError):
        raise error(f"{where}: the PEM body is not base64; expected an EC public key") from None
    algorithm = der[:40]
    curve = next((c for c in _CURVES if _EC_PUBLIC_KEY in algorithm and c in algorithm), None)
    if curve is None:
        raise error(f"{where}: not an EC P-256, P-384 or P-521 public key (model_signing signs with those)")
    return _CURVES[curve][0], hashlib.sha256(der).hexdigest()


def parse_block(block: Any, where: str) -> tuple[dict[str, tuple[str, bytes]], bool]:
    """A root's ``model_signature`` part: (keyid -> (keytype, PEM), required). Absent: no keys, not required."""
    if block is None:
        return {}, False
    keys_doc = block.get("keys") if isinstance(block, dict) else None
    required = block.get("required") if isinstance(block, dict) else None
    if not isinstance(keys_doc, dict) or not keys_doc or not isinstance(required, bool):
        raise ReleaseError(f"{where}: model_signature must be {{'required': true|false, 'keys': {{KEYID: "
                           "{'keytype', 'public': PEM}}}} with at least one key")
    keys: dict[str, tuple[str, bytes]] = {}
    for kid, k in keys_doc.items():
        at = f"{where}: model_signature.keys[{str(kid)[:16]!r}]"
        if not isinstance(k, dict) or not isinstance(k.get("public"), str):
            raise ReleaseError(f"{at} must be {{'keytype', 'public': PEM}}")
        pem = k["public"].encode()
        keytype, actual = key_type(pem, at, ReleaseError)
        if (keytype, actual) != (k.get("keytype"), kid):
            raise ReleaseError(f"{at}: its keytype or id is not its key's ({keytype}, sha256 of the DER)")
        keys[kid] = (keytype, pem)
    return keys, required


def block(public_keys: list[Path], required: bool, error: type[ReleaseError]) -> dict[str, Any]:
    """The ``model_signature`` part of a new root for the producer public key files."""
    keys = {}
    for path in public_keys:
        pem = read_bounded(Path(path), signing.PUBLIC_KEY_MAX, error)
        keytype, kid = key_type(pem, f"--producer-key {path}", error)
        keys[kid] = {"keytype": keytype, "public": pem.decode()}
    return {"required": required, "keys": keys}


def _envelope(raw: bytes, where: str) -> tuple[bytes, bytes, list[bytes], dict[str, Any]]:
    """(payloadType, payload, signatures, statement) of a bundle, its shape checked, nothing verified."""
    try:
        env = json.loads(raw.decode("utf-8"))["dsseEnvelope"]
        payload_type, payload = str(env["payloadType"]).encode(), base64.b64decode(env["payload"], validate=True)
        sigs = env["signatures"]
        if not isinstance(sigs, list) or not 0 < len(sigs) <= SIGNATURES_MAX:
            raise TypeError(f"signatures: 1 to {SIGNATURES_MAX} expected")
        sigs = [base64.b64decode(s["sig"], validate=True) for s in sigs]
        statement = json.loads(payload)
        resources = statement["predicate"]["resources"]
        if not isinstance(resources, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                       for r in resources):
            raise TypeError("predicate.resources: not a list of named files")
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError) as e:
        raise ReleaseError(f"{where}: not an OpenSSF model-signing bundle (dsseEnvelope with an in-toto statement "
                           f"naming predicate.resources): {str(e)[:200]}") from None
    if payload_type.decode() != PAYLOAD_TYPE:
        raise ReleaseError(f"{where}: payloadType {payload_type.decode()[:60]!r}, expected {PAYLOAD_TYPE!r}")
    return payload_type, payload, sigs, statement


def _signer(payload_type: bytes, payload: bytes, sigs: list[bytes], keys: dict[str, tuple[str, bytes]],
            where: str) -> str:
    """The id of the producer key whose ECDSA signature over the DSSE PAE verifies (openssl); raise otherwise."""
    pae = b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(payload), payload)
    with tempfile.TemporaryDirectory(prefix="tritonops-producer-") as tmp:
        data = Path(tmp) / "pae"
        data.write_bytes(pae)
        for i, sig in enumerate(sigs):
            sig_file = Path(tmp) / f"sig{i}"
            sig_file.write_bytes(sig)
            for kid, (keytype, pem) in sorted(keys.items()):
                key_file = Path(tmp) / f"{kid}.pem"
                key_file.write_bytes(pem)
                r = signing._openssl(["dgst", _DIGESTS[keytype], "-verify", str(key_file), "-signature",
                                      str(sig_file), str(data)], where)
                if r.returncode == 0:
                    return kid
    raise ReleaseError(f"{where}: refused: the model signature verifies with none of the root's {len(keys)} "
                       f"producer key(s) ({', '.join(k[:12] for k in sorted(keys))})")


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"


def check(raw: bytes | None, files: dict[str, str], keys: dict[str, tuple[str, bytes]], where: str) -> str:
    """The producer key id under which ``raw`` (a release's ``model.sig``; None: it has none) verifies and names
    exactly ``files`` (relative path -> sha256, the release's signed manifest; ``model.sig`` itself aside) with
    their digests; raise ReleaseError (one line naming the files) otherwise."""
    if raw is None or SIGNATURE_FILE not in files:
        raise ReleaseError(f"{where}: refused: no producer signature ({SIGNATURE_FILE}); the root requires one "
                           f"(the producer signs with: model_signing sign key REPO --private_key KEY "
                           f"--signature REPO/{SIGNATURE_FILE})")
    payload_type, payload, sigs, statement = _envelope(raw, f"{where}: {SIGNATURE_FILE}")
    kid = _signer(payload_type, payload, sigs, keys, f"{where}: {SIGNATURE_FILE}")
    predicate = statement["predicate"]
    method = predicate.get("serialization", {}).get("method") if isinstance(predicate, dict) else None
    if method != "files":
        raise ReleaseError(f"{where}: {SIGNATURE_FILE}: refused: serialized as {str(method)[:20]!r}; nodes check "
                           "whole files (model_signing's default serialization, not shards)")
    signed = {r["name"]: r for r in predicate["resources"]}
    other = sorted(n for n, r in signed.items() if r.get("algorithm") != "sha256")
    if other:
        raise ReleaseError(f"{where}: {SIGNATURE_FILE}: refused: {_listed(other)} hashed with "
                           f"{str(signed[other[0]].get('algorithm'))[:20]!r}; nodes check sha256 "
                           "(model_signing's default)")
    found = [f"{len(names)} file(s) {what}: {_listed(names)}" for names, what in (
        (sorted(n for n, r in signed.items() if n in files and files[n] != r.get("digest")),
         "differ from what the producer signed"),
        (sorted(set(signed) - set(files)), "signed but missing"),
        (sorted(set(files) - set(signed) - {SIGNATURE_FILE}), "the producer did not sign")) if names]
    if found:
        raise ReleaseError(f"{where}: {SIGNATURE_FILE}: refused: {'; '.join(found)}")
    return kid


class Producers(Protocol):
    """What a trusted root says of producers (tritonops.release_format.trust.Root): their keys, and whether required."""

    @property
    def producer_keys(self) -> dict[str, tuple[str, bytes]]: ...

    @property
    def require_model_signature(self) -> bool: ...


def needed(root: Producers, files: dict[str, str]) -> bool:
    """Whether a release of ``files`` is checked under ``root``: it requires producer signatures, or it names
    producer keys and the release carries a ``model.sig`` (a forged one is never installed, required or not)."""
    return bool(root.producer_keys) and (root.require_model_signature or SIGNATURE_FILE in files)


def require(root: Producers, folder: Path, files: dict[str, str], where: str) -> str | None:
    """The node's install-time check of the release in ``folder`` under ``root`` (:func:`needed`, :func:`check`):
    the verifying producer key id, or None when there is nothing to check."""
    if not needed(root, files):
        return None
    sig = Path(folder) / SIGNATURE_FILE
    raw = read_bounded(sig, BUNDLE_MAX, ReleaseError) if sig.is_file() else None
    return check(raw, files, root.producer_keys, where)
