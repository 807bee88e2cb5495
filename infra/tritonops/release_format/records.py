"""The release format's records, each with its one parse and its one build (issue 47 item 2).

- the channel pointer's signed part (``channels/<name>.json``, an envelope signed by the ``channel`` role):
  :func:`next_pointer` (the controller) and :func:`parse_pointer` (everyone who reads one);
- an agent's status report's signed part (``reports/<channel>/<agent>.json``): :func:`report` (the agent)
  and :func:`check_report` (the controller);
- the node's gated state (``<releases>/current.json``): :func:`parse_state` and :func:`state_text`;
- a release id record (``ids/<release>.json``, ``{"release", "digest"}``): :func:`id_record` and
  :func:`id_digest`;
- a node cache daemon's ``GET /status`` (agent/cache_daemon.py): :func:`cache_status` (the daemon) and
  :func:`cache_warm` (the controller's ``rollout advance --cache-url``).

Each is a plain JSON object; the bytes on disk and in stores are what they were (sorted keys, the same
indent). Pure: no I/O (the callers read and write).
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ReleaseError, StoreError
from ..core.names import MANIFEST_MAX, check_name, check_release_id
from . import trust
from .waves import MAX_GROUPS, REPORT_EXPIRES

HISTORY = 20  # earlier releases a pointer lists (what rollback and status name)
OUTCOMES = ("applied", "gated", "failed", "refused")  # a status report's ``result``
STATE_HISTORY = 50  # releases the node's current.json remembers


def _hex64(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def is_int(v: Any, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def parse_pointer(signed: dict[str, Any], where: str) -> dict[str, Any]:
    """The signed part of a channel pointer, its fields checked (StoreError naming the field otherwise)."""
    for name, ok in (("channel", isinstance(signed.get("channel"), str) and bool(signed.get("channel"))),
                     ("release", isinstance(signed.get("release"), str)),
                     ("digest", _hex64(signed.get("digest"))),
                     ("version", is_int(signed.get("version"), 1)),
                     ("length", is_int(signed.get("length"), 1) and signed["length"] <= MANIFEST_MAX),
                     ("root_version", is_int(signed.get("root_version"), 0)),
                     ("expires", isinstance(signed.get("expires"), str))):
        if not ok:
            raise StoreError(f"{where}: signed.{name} is missing or not valid "
                             f"({str(signed.get(name))[:80]!r})")
    try:
        check_release_id(signed["release"])
    except ReleaseError as e:
        raise StoreError(f"{where}: signed.release: {e}") from None
    history = signed.get("history", [])
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise StoreError(f"{where}: signed.history is not a list of {{'release', 'digest'}} entries")
    return dict(signed)


def next_pointer(channel: str, old: dict[str, Any] | None, release: str, digest: str, note: str, length: int,
                 root: trust.Root | None, rollout: dict[str, Any] | None, expires: float,
                 now: float) -> dict[str, Any]:
    """The signed part of ``channel``'s next pointer after ``old``: version + 1, the history, the expiry."""
    same = old is not None and old["digest"] == digest and old["release"] == release
    # A rollout's next wave (or its halt) is the same release: no new history entry.
    history = ([{k: old[k] for k in ("release", "digest", "published", "note") if k in old}]
               if old and not same else [])
    history += (old or {}).get("history", [])
    doc = {"type": "channel", "channel": channel, "version": int((old or {}).get("version", 0)) + 1,
           "expires": trust.format_time(now + expires), "release": release, "digest": digest, "length": length,
           "root_version": root.version if root else 0, "note": note, "published": trust.format_time(now),
           "history": history[:HISTORY]}
    if root is not None and root.name:
        doc["store"] = root.name  # nodes with --store-name refuse another store's pointer under the same keys
    if rollout is not None:
        doc["rollout"] = rollout
    return doc


def report(agent: str, channel: str, release: str | None, digest: str, result: str, step: str | None,
           error: str, groups: list[str], rollout: str | None, now: float) -> dict[str, Any]:
    """The signed part of an agent's status report after an attempt (its version: the time in ms)."""
    return {"type": "report", "version": int(now * 1000), "expires": trust.format_time(now + REPORT_EXPIRES),
            "agent": agent, "channel": channel, "release": release, "digest": digest, "result": result,
            "step": step, "error": error[:500], "time": trust.format_time(now), "groups": groups,
            "rollout": rollout}


def check_report(signed: dict[str, Any], where: str) -> None:
    """Each field a report's reader uses, checked: ReleaseError naming the field."""
    if signed.get("result") not in OUTCOMES:
        raise ReleaseError(f"{where}: result {str(signed.get('result'))[:40]!r} is not one of " + ", ".join(OUTCOMES))
    for name in ("rollout", "digest", "release"):
        if not isinstance(signed.get(name), (str, type(None))):
            raise ReleaseError(f"{where}: {name} {str(signed.get(name))[:40]!r} is not a string")
    groups = signed.get("groups", [])
    if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
        raise ReleaseError(f"{where}: groups {str(groups)[:40]!r} is not a list of at most {MAX_GROUPS} labels")
    for g in groups:
        check_name(g, where, "groups label")
    if "expires" in signed:
        trust.parse_time(signed["expires"], where)
    if type(signed.get("version", 0)) is not int or signed.get("version", 0) < 0:
        raise ReleaseError(f"{where}: version {str(signed.get('version'))[:40]!r} is not a whole number")


def parse_state(raw: bytes | None, where: str) -> dict[str, Any]:
    """The node's gated state (``{"current", "digest", "served", "history"}``) from ``current.json``'s bytes
    (None: no file yet). Unknown state is not a crash: an unreadable file gives no gated release (``error``
    says why) until the next one is marked."""
    empty: dict[str, Any] = {"current": None, "digest": None, "history": []}
    if raw is None:
        return empty
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not an object")
    except (ValueError, RecursionError) as e:
        return {**empty, "error": f"{where}: unreadable ({e}); ignored"}
    doc.setdefault("digest", None)
    doc.setdefault("history", [])
    return dict(doc)


def state_text(doc: dict[str, Any]) -> str:
    """``current.json``'s text for the state ``doc`` (:func:`parse_state` reads it back)."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def id_record(release: str, digest: str) -> bytes:
    """``ids/<release>.json``: the content a release id names."""
    return json.dumps({"release": release, "digest": digest}).encode()


def id_digest(raw: bytes, where: str) -> str:
    """The digest a release id record names; StoreError for anything that is not one."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("digest"), str):
            raise ValueError("no digest")
    except (ValueError, RecursionError):
        raise StoreError(f"{where}: not a release id record {{'release', 'digest'}}") from None
    return str(doc["digest"])


def cache_status(cache: str, used_bytes: int, quota: int | None, channels: list[dict[str, Any]]) -> dict[str, Any]:
    """A node cache daemon's ``GET /status``: its cache, and per followed channel the prefetcher's warm state
    (``{channel, warm, releases, digests, fetched_bytes, seconds, at}`` once a pass filled it; ``warm`` false
    before the first pass, and with ``error`` after a failed one)."""
    return {"cache": cache, "used_bytes": used_bytes, "quota": quota, "channels": channels}


def cache_warm(doc: Any, channel: str, digest: str) -> str | None:
    """None when the cache status ``doc`` says ``channel`` is warm with the release manifest ``digest``
    (among its ``digests``: the channel's release and its rollout's previous one); else why not."""
    rows = doc.get("channels") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        return "not a cache daemon's status (no channels list)"
    row = next((r for r in rows if isinstance(r, dict) and r.get("channel") == channel), None)
    if row is None:
        return f"does not follow channel {channel} (cache serve --channel {channel})"
    digests = row.get("digests")
    if row.get("warm") is True and isinstance(digests, list) and digest in digests:
        return None
    if row.get("error"):
        return f"not warm: {row['error']}"
    if row.get("warm") is True:
        return f"warm for {', '.join(map(str, row.get('releases') or []))} only, not yet for this release"
    return "not warm yet (no prefetch pass has finished)"
