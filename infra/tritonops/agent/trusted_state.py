"""The reads and writes the node's metadata checks need (issue 47): ``release_format.metadata`` judges bytes
and reads nothing; this module reads them from the store and the node folder and writes what it trusted.

- ``<releases>/.trusted.json``: :func:`load` at start, :func:`save` (atomically, under the folder's lock);
- a channel pointer's root rotation: :func:`check_pointer` reads each ``root/<N>.json`` the pointer names
  (:meth:`metadata.Trusted.roots_needed`) and hands the bytes to :meth:`metadata.Trusted.check`;
- a release's manifest: :func:`fetch_manifest` reads it under its signed length, and its signatures, for
  :func:`metadata.verify_manifest`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import TooLong
from ..core.fsio import read_bounded, write_atomic
from ..core.keys import ROOT_MAX, SIGNATURE_MAX, manifest_key, root_key, signatures_key
from ..core.names import TRUSTED_FILE
from ..release_format import metadata, trust
from ..stores import Store


def load(releases: Path, trusted_keys: list[Path], store_name: str | None) -> metadata.Trusted:
    """What the node trusts: ``.trusted.json`` when there is one, else the --trusted-key files' implicit root
    (a bad key: UsageError, exit 2)."""
    path = Path(releases) / TRUSTED_FILE
    state = read_bounded(path, metadata.TRUSTED_MAX) if path.exists() or path.is_symlink() else None
    return metadata.Trusted(trust.implicit_root(trusted_keys), store_name, state, str(path))


def save(releases: Path, trusted: metadata.Trusted) -> None:
    """Write the trusted state atomically (the caller holds the node folder's lock)."""
    write_atomic(Path(releases) / TRUSTED_FILE, trusted.serialize())
    trusted.dirty = False


def check_pointer(trusted: metadata.Trusted, raw: bytes, channel: str, store: Store, where: str) -> metadata.Checked:
    """The pointer judged by ``trusted`` after reading the root versions it names (StoreError: a root could not
    be read, try again; Rejected: refused)."""
    roots = [store.get(root_key(n), limit=ROOT_MAX) or b"" for n in trusted.roots_needed(raw, where)]
    return trusted.check(raw, channel, roots, where)


def fetch_manifest(store: Store, digest: str, length: int | None, release: str, channel: str,
                   root: trust.Root) -> tuple[bytes, dict[str, Any], list[str]]:
    """A release's manifest read under the pointer's signed ``length`` and verified
    (:func:`metadata.verify_manifest`): (its bytes, its parsed fields, the keyids that signed it). Rejected when
    it does not hold; StoreError when the store did not answer (try again), :class:`metadata.Truncated` (both)
    when it answered fewer bytes (then the signatures are not read)."""
    where = f"{store}/{manifest_key(digest)}"
    if length is None:
        raise metadata.Rejected("length", f"{where}: no signed channel pointer states this manifest's length")
    try:
        raw = store.get(manifest_key(digest), limit=length)
    except TooLong as e:
        raise metadata.Rejected("length", f"{e} (the signed pointer states {length})") from None
    assert raw is not None  # not a conditional read
    metadata.check_length(raw, length, where)
    sigs = store.get(signatures_key(digest), limit=SIGNATURE_MAX) or b""
    doc, signers = metadata.verify_manifest(raw, sigs, digest, length, release, channel, root, where)
    return raw, doc, signers
