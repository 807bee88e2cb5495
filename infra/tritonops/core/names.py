"""The names a release is made of, and their checks: one place for each, shared by every package.

The manifest's and golden files' names (and the manifest's size cap), a file path inside a release
(:func:`check_path`), a release id (:func:`check_release_id`) and an id, agent id or group label
(:func:`check_name`). Pure functions: they read nothing and raise the error class they are given.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ReleaseError, UsageError

MANIFEST_FILE = "MANIFEST.sha256.json"
MANIFEST_MAX = 64 << 20  # bytes: a manifest of some 500,000 files
GOLDEN_FILE = "golden.json"
# A node's release folder: what the agent marks current, its install journal and staging folders, and the
# metadata it trusts (channel pointers and root): one name each, read by the agent, drift and push mode.
STATE_FILE = "current.json"
JOURNAL_FILE = ".journal.json"
STAGING_PREFIX = ".staging-"
TRUSTED_FILE = ".trusted.json"
# One path part of a file in a release: what Triton model and file names need, nothing a shell reads.
# Used with fullmatch: "$" would also match before a final newline.
_SAFE_PART = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9._+-]{0,254}")


def check_path(rel: str, where: str = "manifest", error: type[ReleaseError] = ReleaseError) -> str:
    """A file path inside a release: relative, no '..', each part from a safe character set."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or not all(_SAFE_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        raise error(f"{where}: file path {rel!r} is not allowed (use letters, digits and '._+-' in each "
                           "part, not starting with '-')")
    return rel


def check_release_id(release: str) -> str:
    ok = bool(release) and release[0].isalnum() and all(c.isalnum() or c in "._-" for c in release)
    if not ok or len(release) > 100 or not release.isascii():
        raise UsageError(f"release id {release!r}: use letters, digits, '.', '_' or '-' (starting alphanumeric)")
    return release


def check_name(value: Any, where: str, what: str, limit: int = 128,
               error: type[ReleaseError] = ReleaseError) -> str:
    """An id, agent id or group label: letters, digits, '.', '_', '-' (starting alphanumeric)."""
    ok = (isinstance(value, str) and 0 < len(value) <= limit and value.isascii() and value[0].isalnum()
          and all(c.isalnum() or c in "._-" for c in value))
    if not ok:
        raise error(f"{where}: {what} {str(value)[:80]!r}: use 1-{limit} letters, digits, '.', '_' or '-' "
                           "(starting alphanumeric)")
    return str(value)
