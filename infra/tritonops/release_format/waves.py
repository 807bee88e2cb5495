"""Staged rollouts in pull mode: the ``rollout`` a channel pointer may carry, and whether it takes this agent.

Its one job: decide, on the node, whether the channel's release is for this agent yet, and tell the
controller how it went (a status report in the store). The controller's half (start, advance, halt)
is :mod:`tritonops.release.rollout`.

A rollout lives in the pointer's signed part, next to the release it rolls out::

    "rollout": {"id": "r9-2026-12-02",                 # seeds the hash: another rollout, another sample
                "waves": [{"percent": 10}, {"groups": ["lab"]}, {"percent": 100}],
                "wave": 0,                             # waves 0..wave are targeted
                "halted": false,                       # true: nobody new takes the release
                "max_failures": 0.05,                  # the controller's threshold (the agent ignores it)
                "previous": {"release": "r8", "digest": "<hex>", "length": 2048}}  # what the channel served
                                                       # before (``start`` writes it; absent on a first release)

An agent is in a ``percent`` wave when ``sha256(id + "\\n" + agent id)`` read as a number in [0, 100) is
below the percentage (so membership is stable across polls and restarts, and the share of a large
fleet is the percentage), and in a ``groups`` wave when one of its ``--group-label``s is listed. It is
targeted when it is in any of waves 0..wave: membership only grows as the rollout advances. An agent
not targeted (or one the rollout reaches after it halted) keeps what it serves and downloads nothing;
``tritonops_release_rollout_targeted{channel,rollout,wave,previous}`` is 1 or 0 and ``status`` says why.
One with no gated release at all (a new node, a pod recreated mid-rollout) installs the rollout's
``previous`` release instead, as a pod recreated during a Kubernetes rolling update gets the old
version (``not targeted: serving previous release r8 ...``; the metric's ``previous`` label names it);
with no previous release (the channel's first) it takes the channel's, and ``status`` says why.

With ``--report``, after each release it applied, or that failed or was refused, the agent writes
``reports/<channel>/<agent id>.json`` into the store (a folder, or S3 with a SigV4 PUT signed with the
agent's own credentials; an HTTP mirror is read-only: no report). The report is an envelope of type
"report" (:mod:`trust`), signed with ``--report-key`` when one is given, else written with no
signatures and ``"unsigned": true``.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..core.errors import ReleaseError, UsageError
from ..core.names import MANIFEST_MAX, check_name, check_release_id

MAX_WAVES = 32
MAX_GROUPS = 64
REPORT_MAX = 16 << 10  # bytes of one status report (the controller reads no more)
REPORT_TIMEOUT = 10.0  # seconds for one report's PUT
REPORT_EXPIRES = 7 * 86400  # a report's signed expiry, seconds after it was written
RESULTS = ("applied", "gated", "failed", "refused")
_FIELDS = {"id", "waves", "wave", "halted", "max_failures", "previous"}
Target = tuple[str, str, int]  # (release, manifest digest, manifest length): what an agent applies


class RolloutError(ReleaseError):
    """A rollout that cannot be followed (names the pointer and the field)."""


def parse(doc: Any, where: str) -> dict[str, Any]:
    """A pointer's ``rollout``, checked field by field; RolloutError names the field."""
    if not isinstance(doc, dict):
        raise RolloutError(f"{where}: rollout is not an object {{'id', 'waves', 'wave', 'halted'}}")
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise RolloutError(f"{where}: rollout.{unknown[0]}: unknown field (known: {', '.join(sorted(_FIELDS))})")
    rid = check_name(doc.get("id"), where, "rollout.id", error=RolloutError)
    waves = doc.get("waves")
    if not isinstance(waves, list) or not 0 < len(waves) <= MAX_WAVES:
        raise RolloutError(f"{where}: rollout.waves: expected a list of 1-{MAX_WAVES} waves")
    out_waves: list[dict[str, Any]] = []
    last_percent = 0.0
    for i, w in enumerate(waves):
        f = f"rollout.waves[{i}]"
        if not isinstance(w, dict) or len(w) != 1 or not set(w) <= {"percent", "groups"}:
            raise RolloutError(f"{where}: {f}: expected {{'percent': 0-100}} or {{'groups': [NAME, ...]}}")
        if "percent" in w:
            p = w["percent"]
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 100:
                raise RolloutError(f"{where}: {f}.percent {p!r}: expected a number above 0, at most 100")
            if p < last_percent:
                raise RolloutError(f"{where}: {f}.percent {p:g} is below an earlier wave's {last_percent:g}")
            last_percent = float(p)
            out_waves.append({"percent": p})
        else:
            g = w["groups"]
            if not isinstance(g, list) or not 0 < len(g) <= MAX_GROUPS:
                raise RolloutError(f"{where}: {f}.groups: expected a list of 1-{MAX_GROUPS} group labels")
            out_waves.append({"groups": [check_name(x, where, f"{f}.groups label", error=RolloutError) for x in g]})
    wave = doc.get("wave", 0)
    if isinstance(wave, bool) or not isinstance(wave, int) or not 0 <= wave < len(waves):
        raise RolloutError(f"{where}: rollout.wave {wave!r}: expected a wave index 0-{len(waves) - 1}")
    halted = doc.get("halted", False)
    if not isinstance(halted, bool):
        raise RolloutError(f"{where}: rollout.halted {halted!r}: expected true or false")
    out: dict[str, Any] = {"id": rid, "waves": out_waves, "wave": wave, "halted": halted}
    if "max_failures" in doc:
        m = doc["max_failures"]
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
            raise RolloutError(f"{where}: rollout.max_failures {m!r}: expected a fraction 0-1")
        out["max_failures"] = m
    if "previous" in doc:
        out["previous"] = _previous(doc["previous"], where)
    return out


def _previous(p: Any, where: str) -> dict[str, Any]:
    """``rollout.previous``: the release the channel served before the rollout, with its manifest's digest
    and length (signed with the pointer: what a node with nothing gated installs when not targeted)."""
    shape = "expected {'release', 'digest', 'length'}"
    if not isinstance(p, dict) or set(p) != {"release", "digest", "length"}:
        raise RolloutError(f"{where}: rollout.previous: {shape}")
    try:
        check_release_id(p["release"] if isinstance(p["release"], str) else "")
    except ReleaseError:
        raise RolloutError(f"{where}: rollout.previous.release {str(p['release'])[:80]!r}: not a release id") from None
    d = p["digest"]
    if not isinstance(d, str) or len(d) != 64 or not set(d) <= set("0123456789abcdef"):
        raise RolloutError(f"{where}: rollout.previous.digest {str(d)[:80]!r}: expected a sha256 hex digest")
    n = p["length"]
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MANIFEST_MAX:
        raise RolloutError(f"{where}: rollout.previous.length {str(n)[:40]!r}: expected 1-{MANIFEST_MAX} "
                           "(the manifest's bytes)")
    return {"release": p["release"], "digest": d, "length": n}


def bucket(rollout_id: str, agent_id: str) -> float:
    """The agent's place in [0, 100) for this rollout: sha256 of (rollout id, agent id), stable everywhere."""
    h = hashlib.sha256(f"{rollout_id}\n{agent_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 * 100


def wave_of(agent_id: str, groups: list[str] | tuple[str, ...], rollout: dict[str, Any]) -> int | None:
    """The first wave (any, not only up to the current one) that takes the agent; None: none does."""
    b = bucket(rollout["id"], agent_id)
    labels = set(groups)
    for i, w in enumerate(rollout["waves"]):
        if ("percent" in w and b < w["percent"]) or labels & set(w.get("groups", ())):
            return i
    return None


def targets(agent_id: str, groups: list[str] | tuple[str, ...], rollout: dict[str, Any] | None) -> bool:
    """Whether waves 0..rollout["wave"] take the agent (no rollout: every agent is targeted)."""
    if rollout is None:
        return True
    first = wave_of(agent_id, groups, rollout)
    return first is not None and first <= rollout["wave"]


def identity(agent_id: str | None, groups: list[str] | tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The agent's id (``--agent-id``, default :func:`default_agent_id`) and group labels, checked (UsageError)."""
    return (check_name(agent_id or default_agent_id(), "--agent-id", "agent id", 253, UsageError),
            tuple(check_name(g, "--group-label", "group label", error=UsageError) for g in groups))


def default_agent_id() -> str:
    """``POD_NAME`` (set it from the downward API; a pod's host name is its name too), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


# --- the agent's side: the hook in Agent.poll, and the status report ----------------------------------


class Decision(NamedTuple):
    """What a rollout makes of one agent (:func:`decide`): ``serve`` is the pointer (its release), the
    rollout's ``previous`` entry, or None (keep what it serves); ``state`` is the agent's status line."""

    serve: Mapping[str, Any] | None
    state: str | None
    targeted: bool
    rollout: str  # the rollout's id ("" for none, or an invalid one)
    at: str  # the wave the rollout is at ("" for none)
    wave: str  # the first wave that takes the agent ("" for none)
    held: str | None  # the previous release it serves, or installs, because the rollout does not take it


def decide(pointer: Mapping[str, Any], agent_id: str, groups: list[str] | tuple[str, ...],
           state: Mapping[str, Any], where: str) -> Decision:
    """Pure: what the agent ``agent_id`` (``groups``) applies under ``pointer`` (its ``release``, ``digest``
    and ``rollout``) given its gated ``state`` (releases.state: ``current``, ``digest``). The agent
    (:func:`choose`) and the drift check (agent.drift: what a pull node should serve) both decide by it.

    Not targeted, or halted before it was reached: it keeps what it serves (no download). An agent
    already serving the release stays on it whatever the rollout says (halting stops the spread; the
    controller's --rollback-on-halt moves the pointer back for everyone). One with no gated release
    (a new node) that the rollout does not take installs ``rollout.previous``, the release the channel
    served before the rollout started; with none (the channel's first release), the channel's."""
    raw = pointer.get("rollout")
    if raw is None:
        return Decision(pointer, None, True, "", "", "", None)
    try:
        ro = parse(raw, where)
    except RolloutError as e:
        return Decision(None, f"invalid: {e}", False, "", "", "", None)
    first = wave_of(agent_id, groups, ro)
    targeted = first is not None and first <= ro["wave"]
    prev = ro.get("previous")
    place = f"rollout {ro['id']} at wave {ro['wave']}, this agent " + ("in no wave" if first is None else
                                                                       f"in wave {first}")
    serve: Mapping[str, Any] | None = pointer
    held = None  # the previous release this agent serves, or installs, because the rollout does not take it
    if state.get("digest") == pointer.get("digest"):
        why = f"serving: rollout {ro['id']}, this agent in wave {first} (at wave {ro['wave']})"
    elif targeted and not ro["halted"]:
        why = f"targeted: rollout {ro['id']} wave {first} (at wave {ro['wave']})"
    elif state.get("current") or prev is not None:  # not for this agent yet: keep what it serves
        if state.get("current"):
            serve = None
            held = prev["release"] if prev is not None and state.get("digest") == prev["digest"] else None
        elif prev is not None:  # nothing gated here (a new node): what the agents of its wave still serve
            serve, held = prev, prev["release"]
        also = f"serving previous release {held}" if held else ""
        if not targeted:
            why = f"not targeted: {also} ({place})" if held else f"not targeted: {place}"
        else:
            why = (f"halted: rollout {ro['id']} stopped at wave {ro['wave']} before this agent applied it"
                   + (f": {also}" if held else ""))
    else:
        why = (f"no previous release: rollout {ro['id']} names none (the channel's first release), so this "
               f"agent, with nothing gated, takes {pointer['release']} "
               f"({'halted, ' if ro['halted'] else ''}{place})")
    return Decision(serve, why, targeted, ro["id"], str(ro["wave"]), "" if first is None else str(first), held)
