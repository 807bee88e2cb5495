"""Ed25519 signatures over a release's manifest, with the openssl command line (OpenSSL 3).

openssl ships with every target (Debian 12, Ubuntu 22.04, slim images: ca-certificates needs it),
so nodes verify with no Python package, and the controller signs with the same tool. Keys are files
the operator owns: ``tritonops release keygen`` writes a private key (0600) and its public key; nodes
trust one or more public keys (several while a key is rotated).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core.errors import ReleaseError, UsageError
from ..core.fsio import read_bounded

SIGNATURE_SUFFIX = ".sig"
PUBLIC_KEY_MAX = 16 << 10  # bytes: an Ed25519 public key in PEM is 113
# DER of an Ed25519 SubjectPublicKeyInfo (RFC 8410): SEQUENCE { SEQUENCE { OID 1.3.101.112 } BIT STRING (32 bytes) }
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")
_PEM = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.S)
# Algorithm OIDs (DER) an operator may hand us by mistake, to say what the key is instead.
_OTHER_KEYS = {bytes.fromhex("06092a864886f70d010101"): "an RSA", bytes.fromhex("06072a8648ce3d0201"): "an EC",
               bytes.fromhex("06032b6571"): "an Ed448", bytes.fromhex("06032b656e"): "an X25519",
               bytes.fromhex("06032b656f"): "an X448"}


def check_public_key(path: Path, option: str = "--trusted-key") -> Path:
    """``path`` holds one Ed25519 public key in PEM (what ``tritonops release keygen`` writes); anything
    else (missing, empty, a private key, another algorithm, garbage) is a UsageError naming the file and
    what is wrong, so a bad key reads as a bad argument (exit 2), never as "does not verify" (exit 1)."""
    try:
        raw = read_bounded(Path(path), PUBLIC_KEY_MAX, UsageError)
    except UsageError as e:
        raise UsageError(f"{option} {e}") from None
    public_key_der(raw, f"{option} {path}", UsageError)
    return Path(path)


def public_key_der(raw: bytes, where: str, error: type[ReleaseError] = UsageError) -> bytes:
    """The DER SubjectPublicKeyInfo of the one Ed25519 public key in PEM ``raw``; else ``error`` naming
    ``where`` and what ``raw`` is instead (empty, a private key, another algorithm, not PEM)."""
    if not raw.strip():
        raise error(f"{where}: empty; expected an Ed25519 public key (PEM, from tritonops release keygen)")
    if b"PRIVATE KEY" in raw:
        raise error(f"{where}: a private key; nodes trust the public key only (the .pub file that "
                    "tritonops release keygen writes, or openssl pkey -in KEY -pubout)")
    m = _PEM.search(raw)
    if m is None or m.group(1) != b"PUBLIC KEY":
        found = f"a PEM {m.group(1).decode(errors='replace').lower()}" if m else "not PEM"
        raise error(f"{where}: {found}; expected '-----BEGIN PUBLIC KEY-----' (an Ed25519 public key)")
    try:
        der = base64.b64decode(b"".join(m.group(2).split()), validate=True)
    except (binascii.Error, ValueError):
        raise error(f"{where}: the PEM body is not base64; expected an Ed25519 public key") from None
    if len(der) == len(_ED25519_SPKI) + 32 and der.startswith(_ED25519_SPKI):
        return der
    kind = next((name for oid, name in _OTHER_KEYS.items() if oid in der[:32]), None)
    if kind:
        raise error(f"{where}: {kind} public key; release signatures are Ed25519 "
                    "(tritonops release keygen writes a key pair)")
    raise error(f"{where}: not an Ed25519 public key ({len(der)} bytes of DER that are not one)")


def _openssl(args: list[str], what: str) -> subprocess.CompletedProcess:
    exe = shutil.which("openssl")
    if exe is None:
        raise ReleaseError(f"{what}: the openssl command is not installed (apt-get install openssl)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def keygen(private_key: Path, public_key: Path) -> tuple[Path, Path]:
    """A new Ed25519 key pair, both written as new files only: never over an existing file (a private key
    included) and never through a link (the public key opened O_EXCL, the private key hard-linked from a
    private folder to its name; both fail on any existing name)."""
    if not str(private_key).strip() or not str(public_key).strip():
        raise UsageError("keygen: the private and the public key each need a file path")
    private_key, public_key = Path(private_key), Path(public_key)
    for name in (private_key, public_key):
        if name.exists() or name.is_symlink():
            raise UsageError(f"{name}: exists; remove it first if you really mean to replace the key")
    if private_key.absolute() == public_key.absolute():
        raise UsageError(f"{private_key}: the private and the public key cannot be the same file")
    if public_key.is_dir():
        raise UsageError(f"{public_key}: a folder; the public key needs a file path")
    private_key.parent.mkdir(parents=True, exist_ok=True)
    public_key.parent.mkdir(parents=True, exist_ok=True)
    # The private key is made in a private (0700) folder beside its name, then hard-linked to the name: the
    # link fails on any existing name (a file, a link, a dangling link planted meanwhile), so the key is
    # only ever written to a new file and never through a link.
    tmp = Path(tempfile.mkdtemp(prefix=".tritonops-keygen-", dir=private_key.parent))
    try:
        made, pub = tmp / "key", tmp / "key.pub"
        old = os.umask(0o077)
        try:
            r = _openssl(["genpkey", "-algorithm", "ed25519", "-out", str(made)], str(private_key))
        finally:
            os.umask(old)
        if r.returncode != 0:
            raise ReleaseError(f"{private_key}: openssl genpkey failed: {r.stderr.strip()}")
        os.chmod(made, 0o600)
        r = _openssl(["pkey", "-in", str(made), "-pubout", "-out", str(pub)], str(public_key))
        if r.returncode != 0:
            raise ReleaseError(f"{public_key}: openssl pkey failed: {r.stderr.strip()}")
        _write_new(public_key, pub.read_bytes())
        try:
            _link_new(made, private_key)
        except ReleaseError:
            public_key.unlink()  # the one written just now: a pair or nothing
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return private_key, public_key


def _write_new(name: Path, data: bytes) -> None:
    """``data`` into a new file ``name`` (0644): O_EXCL refuses any existing name, a link (dangling or not)
    included, so nothing is replaced and nothing is written through a link."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise UsageError(f"{name}: exists; remove it first if you really mean to replace the key") from None
    except OSError as e:
        raise ReleaseError(f"{name}: cannot write ({e.strerror or e})") from None
    os.fchmod(fd, 0o644)  # whatever the umask; on the file opened, never on a name
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _link_new(made: Path, name: Path) -> None:
    """``made`` under ``name``, a name that must not exist (a file, a link, a dangling link planted meanwhile)."""
    try:
        os.link(made, name)
    except FileExistsError:
        raise UsageError(f"{name}: exists; remove it first if you really mean to replace the key") from None
    except OSError as e:
        raise ReleaseError(f"{name}: cannot write ({e.strerror or e})") from None


def sign(data: bytes, private_key: Path) -> bytes:
    """The Ed25519 signature of ``data`` (64 bytes)."""
    if not Path(private_key).is_file():
        raise UsageError(f"{private_key}: signing key not found, or not a regular file "
                         "(tritonops release keygen writes one)")
    with tempfile.TemporaryDirectory(prefix="tritonops-sign-") as tmp:
        src, out = Path(tmp) / "data", Path(tmp) / "sig"
        src.write_bytes(data)
        r = _openssl(["pkeyutl", "-sign", "-inkey", str(private_key), "-rawin", "-in", str(src), "-out", str(out)],
                     str(private_key))
        if r.returncode != 0:
            raise UsageError(f"{private_key}: cannot sign with this key: {r.stderr.strip()[:300]}")
        return out.read_bytes()


def verify(data: bytes, signature: bytes, trusted_keys: list[Path], what: str) -> Path:
    """The trusted public key that signed ``data``; raise when none did."""
    if not trusted_keys:
        raise ReleaseError(f"{what}: no trusted public key configured: an unsigned release never reaches Triton")
    with tempfile.TemporaryDirectory(prefix="tritonops-verify-") as tmp:
        src, sig = Path(tmp) / "data", Path(tmp) / "sig"
        src.write_bytes(data)
        sig.write_bytes(signature)
        for key in trusted_keys:
            check_public_key(Path(key))
            r = _openssl(["pkeyutl", "-verify", "-pubin", "-inkey", str(key), "-rawin", "-in", str(src),
                          "-sigfile", str(sig)], str(key))
            if r.returncode == 0:
                return Path(key)
    raise ReleaseError(f"{what}: signature does not verify with any trusted key "
                       f"({', '.join(str(k) for k in trusted_keys)})")
