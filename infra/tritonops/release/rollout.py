"""Staged rollouts, the controller's half: start a rollout on a channel, advance it wave by wave, halt it.

Its one job: move a channel's ``rollout`` (the field in the signed pointer that
:mod:`tritonops.release_format.waves` defines and each agent follows) only on evidence. ``start`` points the
channel at a release with the rollout at wave 0; ``advance`` looks at the agents of waves 0..wave and
moves to the next wave only when every one of them has an outcome and the failed share is at most
the threshold; over it, the rollout halts (``halted: true``: nobody new takes the release) and, with
``rollback_on_halt``, the channel moves back to its previous release for everyone. ``start`` also
signs into the rollout the release the channel served before it (``previous``: id, manifest digest and
length), which an agent with nothing gated that the rollout does not take installs (a new node).

What the agents did comes from two sources, merged: their ``/metrics`` (``--agent-url``, as ``release
status`` scrapes them: ``tritonops_release_rollout_targeted`` says the agent's wave,
``tritonops_release_info`` what it serves) and the status reports agents behind NAT write into the
store (``reports/<channel>/<agent>.json``; with ``report_keys`` only reports signed by one of them
count). A fleet list (``fleet``: agent ids, with their groups and each agent's own report key) names
agents that must report even when they have not: without one, "every targeted agent" means every agent
known from those sources. With one, a report counts only when it is its listed agent's, signed by that
agent's key, unexpired; the rest are listed as rejected, with the reason, and counted as unattributed.
A report also counts only when it is not older than the one ``advance`` last counted for its agent in this
rollout (Uptane's rule for vehicle manifests): ``advance`` keeps each agent's counted report version in
``rollouts/<channel>.json``, signed with the channel keys it was given, so an older report written back
(a "gated" from before a failure) is listed as a replay instead of hiding the failure.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tritonops.core.errors import ReleaseError, UsageError
from tritonops.core.keys import channel_key, counted_key, id_key, report_key, reports_prefix
from tritonops.core.names import check_name, check_release_id
from tritonops.release import publish as pub
from tritonops.release.status import check_url, scrape, scrape_cache
from tritonops.release_format import records, signing, trust
from tritonops.release_format import waves as ar
from tritonops.stores import Store, open_store

REPORTS_MAX = 100_000  # reports read per channel
READERS = 16  # reports read at once
COUNTED_EXPIRES = 10 * 365 * 86400.0  # the record is replaced at every advance that counts something new


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05``: the failed share of a wave's agents the rollout tolerates."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"--max-failures {text!r}: expected a percentage (5%) or a fraction (0.05)") from None
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise UsageError(f"--max-failures {text!r}: expected 0%-100%")
    return value


def parse_waves(text: str, groups: list[str] | None = None) -> list[dict[str, Any]]:
    """``10,50,100`` (percentages of the fleet) and group waves (``lab+qa``, or ``groups`` first)."""
    waves: list[dict[str, Any]] = [{"groups": list(groups)}] if groups else []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            raise UsageError(f"--waves {text!r}: an empty wave (expected e.g. 10,50,100)")
        try:
            waves.append({"percent": int(token) if token.isdigit() else float(token.rstrip("%"))})
        except ValueError:
            waves.append({"groups": token.split("+")})
    try:
        ar.parse({"id": "check", "waves": waves, "wave": 0}, "--waves")  # the agent's own checks
    except ar.RolloutError as e:
        raise UsageError(str(e)) from None
    return waves


def _spec(wave: dict[str, Any]) -> str:
    return f"{wave['percent']:g}%" if "percent" in wave else "groups " + "+".join(wave["groups"])


def start(to: str, channel: str, release: str, waves: list[dict[str, Any]], max_failures: float,
          rollout_id: str | None = None, s3_endpoint: str | None = None,
          pointer_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Point ``channel`` at ``release`` (published before: ids/<release>.json) with a rollout at wave 0."""
    check_release_id(release)
    writer = pub.open_writer(to, s3_endpoint)
    key = id_key(release)
    if not writer.exists(key):
        raise UsageError(f"{to}: release {release!r} was never published (no {key})")
    digest = records.id_digest(writer.get(key), f"{to}/{key}")
    rid = rollout_id or f"{release}-{channel}"
    ro = ar.parse({"id": rid, "waves": waves, "wave": 0, "halted": False, "max_failures": max_failures},
                  "rollout")
    note = f"rollout {rid} wave 0 ({_spec(ro['waves'][0])})"

    def with_previous(old: dict[str, Any] | None) -> tuple[str, str, str]:
        """The pointer as it is at the write names the release the channel served before the rollout: signed
        into ``rollout.previous``, it is what a new node the rollout does not take installs."""
        prev = previous_release(writer, channel, old, digest)
        if prev is None:
            ro.pop("previous", None)
        else:
            ro["previous"] = prev
        return release, digest, note

    moved = pub.move_pointer(writer, channel, "", "", note, target=with_previous, rollout=ro, **(pointer_args or {}))
    return {"channel": channel, "release": release, "digest": digest, "rollout": ro, "changed": moved["changed"],
            "previous": moved.get("previous")}


def previous_release(writer: pub.Writer, channel: str, old: dict[str, Any] | None,
                     digest: str) -> dict[str, Any] | None:
    """{release, digest, length} of what ``old`` (the channel's pointer before a rollout of ``digest``) serves:
    its release, or, when it already names ``digest`` (a rollout started again), its rollout's previous
    one. None: the channel's first release, or one no agent could install (no signed length)."""
    if old is None:
        return None
    if old.get("digest") == digest:
        prev = (old.get("rollout") or {}).get("previous") if isinstance(old.get("rollout"), dict) else None
        return dict(prev) if isinstance(prev, dict) else None
    try:  # the length the old pointer signed, else the manifest's (a pointer of the unsigned format)
        length = old.get("length") or pub._release_length(writer, channel, old["release"], old["digest"])  # noqa: SLF001
    except ReleaseError:
        return None
    return {"release": old["release"], "digest": old["digest"], "length": int(length)}


# --- what the agents did ---------------------------------------------------------------------------


Fleet = list[tuple[str, list[str], bytes | None]]  # (agent id, its groups, its report public key PEM or None)


def read_reports(writer: pub.Writer, channel: str, report_keys: list[Path] | None = None,
                 fleet: Fleet | None = None, now: float | None = None) -> dict[str, Any]:
    """The agents' status reports for ``channel``: {"reports": {agent: signed}, "rejected": [why, ...]}.

    A report counts only when it is well formed (each field checked: a reason, never a traceback), unexpired,
    filed under its own agent's name and signed by that agent's key in ``fleet`` (or, for an agent the
    fleet gives no key, by one of ``report_keys`` when given). With a fleet, a report of an agent it does
    not list is not counted (rejected: "not in the fleet"); the groups a report claims are never used."""
    keys = writer.names(reports_prefix(channel))
    root = trust.implicit_root(report_keys) if report_keys else None
    members = {a: pem for a, _, pem in fleet} if fleet is not None else None
    out: dict[str, Any] = {"reports": {}, "rejected": []}

    def fetch(key: str) -> bytes | ReleaseError:
        try:
            return writer.get(key, limit=ar.REPORT_MAX)
        except ReleaseError as e:
            return e

    with ThreadPoolExecutor(READERS) as pool:  # one GET per report: in parallel, a fleet's worth in seconds
        bodies = list(pool.map(fetch, keys[:REPORTS_MAX]))
    for key, raw in zip(keys[:REPORTS_MAX], bodies, strict=True):
        where = f"{writer.url}/{key}"
        try:
            if isinstance(raw, ReleaseError):
                raise raw
            out["reports"].update([_one_report(raw, key, channel, where, root, members, now)])
        except ReleaseError as e:
            out["rejected"].append(str(e))
    return out


def _one_report(raw: bytes, key: str, channel: str, where: str, root: trust.Root | None,
                members: dict[str, bytes | None] | None, now: float | None) -> tuple[str, dict[str, Any]]:
    """(agent id, its report's signed part) once it may count; ReleaseError saying why not otherwise."""
    env = trust.parse_envelope(raw, where, "report")
    agent = check_name(env["signed"].get("agent"), where, "agent", 253)
    if key != report_key(channel, agent):
        raise ReleaseError(f"{where}: a report of agent {agent!r} under another agent's name")
    if members is not None and agent not in members:
        raise ReleaseError(f"{where}: agent {agent!r} is not in the fleet: not counted")
    pem = (members or {}).get(agent)
    if pem is not None:  # the agent's own key, and no other agent's
        kid = trust.keyid(pem, where)
        signed = trust.verify(raw, "report", trust.Root(0, None, {kid: pem}, {"report": ((kid,), 1)}),
                              f"{where} (agent {agent}'s report key)", "report")
    elif root is not None:
        signed = trust.verify(raw, "report", root, where, "report")
    else:
        signed = env["signed"]
    records.check_report(signed, where)
    if trust.expired(signed, now):
        raise ReleaseError(f"{where}: expired at {signed['expires']}: not counted")
    return agent, {**signed, "signed": bool(env["signatures"])}


def _counted_root(writer: pub.Writer, keys: list[Path]) -> trust.Root | None:
    """Who may sign the counted record: the channel role of the root nodes trust, else the keys given now."""
    root = pub.nodes_root(writer)
    if root is not None or not keys:
        return root
    pems = {trust.keyid(pem): pem for pem in (trust.public_pem(Path(k)) for k in keys)}
    return trust.Root(0, None, pems, {"channel": (tuple(sorted(pems)), 1)})


def last_counted(writer: pub.Writer, channel: str, rollout_id: str, keys: list[Path]) -> dict[str, int]:
    """agent -> the report version ``advance`` last counted for it in rollout ``rollout_id`` ({} for a new one).

    The record is verified as the channel role's (unsigned only where neither a root nor a key is at hand);
    one that does not verify is refused: nothing is judged on it."""
    key = counted_key(channel)
    if not writer.exists(key):
        return {}
    where, raw = f"{writer.url}/{key}", writer.get(key, limit=trust.ENVELOPE_MAX)
    root = _counted_root(writer, keys)
    signed = (trust.verify(raw, "channel", root, where, "counted") if root is not None
              else trust.parse_envelope(raw, where, "counted")["signed"])
    agents = signed.get("agents")
    if signed.get("rollout") != rollout_id:
        return {}
    if not isinstance(agents, dict) or not all(type(v) is int for v in agents.values()):
        raise ReleaseError(f"{where}: agents is not a map of agent id to report version")
    return dict(agents)


def drop_replays(got: dict[str, Any], last: dict[str, int], channel: str) -> None:
    """Move each report older than the one counted before for its agent from ``reports`` to ``rejected``."""
    for agent, r in list(got["reports"].items()):
        if r.get("version", 0) < last.get(agent, 0):
            got["rejected"].append(f"{report_key(channel, agent)}: version {r.get('version')} is older "
                                   f"than the report counted before ({last[agent]}): a replay, not counted")
            del got["reports"][agent]


def write_counted(writer: pub.Writer, channel: str, rollout_id: str, last: dict[str, int],
                  reports: dict[str, Any], keys: list[Path]) -> None:
    """Record the versions counted now (never lower than before); signed by ``keys``, written only on a change."""
    agents = {**last, **{a: max(int(r.get("version", 0)), last.get(a, 0)) for a, r in reports.items()}}
    if keys and agents != last:
        doc = {"type": "counted", "version": 1, "rollout": rollout_id, "agents": dict(sorted(agents.items())),
               "expires": trust.format_time(time.time() + COUNTED_EXPIRES)}  # read as long as its rollout runs
        writer.put(counted_key(channel), trust.sign_envelope(doc, list(keys)), "application/json")


def parse_fleet(path: Path) -> Fleet:
    """A fleet list: one agent per line, ``AGENT-ID [GROUP,GROUP] [key=PUBLIC-KEY-FILE]``; '#' starts a
    comment. ``key=`` names the agent's own report key (relative to the list's folder): its reports count
    only when that key signed them."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--fleet {path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    out: Fleet = []
    for n, line in enumerate(lines, 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        where = f"--fleet {path}:{n}"
        key = [p for p in parts[1:] if p.startswith("key=")]
        rest = [p for p in parts[1:] if not p.startswith("key=")]
        if len(rest) > 1 or len(key) > 1:
            raise UsageError(f"{where}: expected 'AGENT-ID [GROUP,GROUP] [key=PUBLIC-KEY-FILE]'")
        groups = [check_name(g, where, "group label") for g in rest[0].split(",")] if rest else []
        pem = None
        if key:
            file = Path(path).parent / key[0][4:]
            signing.check_public_key(file, f"{where}: key=")
            pem = file.read_bytes()
        out.append((check_name(parts[0], where, "agent id", 253), groups, pem))
    return out


def observe(pointer: dict[str, Any], ro: dict[str, Any], reports: dict[str, Any], scraped: list[dict[str, Any]],
            fleet: Fleet | None = None) -> list[dict[str, Any]]:
    """One row per known agent: its first wave (None: in none) and its outcome for the pointer's release
    (applied / gated / failed / refused, or None: nothing yet)."""
    rows: dict[str, dict[str, Any]] = {}
    for agent, groups, _ in fleet or []:
        rows[agent] = {"agent": agent, "source": "fleet", "wave": ar.wave_of(agent, groups, ro), "outcome": None}
    for agent, r in reports.items():
        row = rows.setdefault(agent, {"agent": agent, "wave": ar.wave_of(agent, r.get("groups") or [], ro)})
        row["source"] = "report" + ("" if r.get("signed") else " (unsigned)")
        ok = r.get("rollout") == ro["id"] and r.get("digest") == pointer["digest"]
        row["outcome"] = r["result"] if ok else None
    for s in scraped:
        row = {"agent": s["agent"], "source": "metrics", "wave": None, "outcome": None}
        if "error" in s:
            row["error"] = s["error"]
        elif s.get("rollout") == ro["id"] and (s.get("wave") or "").isdigit():
            row["wave"] = int(s["wave"])
            if s.get("digest") == pointer["digest"]:
                row["outcome"] = "gated"
            elif s.get("targeted") and s.get("up_to_date") and not ro["halted"]:  # not serving it, not behind
                row["outcome"] = "refused"
        elif s.get("rollout") != ro["id"]:
            row["error"] = f"the agent follows rollout {s.get('rollout')!r}, not {ro['id']!r} (not polled yet?)"
        rows[s["agent"]] = row
    return list(rows.values())


def waves_table(ro: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per wave: its agents (targeted once the rollout reached it), and how many applied/gated/failed."""
    table = []
    for i, w in enumerate(ro["waves"]):
        mine = [r for r in rows if r["wave"] == i]
        counts = {k: sum(r["outcome"] == k for r in mine) for k in records.OUTCOMES}
        table.append({"wave": i, "spec": _spec(w), "reached": i <= ro["wave"], "agents": len(mine),
                      "targeted": len(mine) if i <= ro["wave"] else 0, **counts,
                      "pending": sum(r["outcome"] is None for r in mine) if i <= ro["wave"] else 0})
    return table


def _current(writer: pub.Writer, channel: str) -> tuple[dict[str, Any], dict[str, Any]]:
    p = pub.read_pointer(writer, channel)
    if p is None:
        raise UsageError(f"{writer.url}: channel {channel!r} does not exist")
    if p.get("rollout") is None:
        raise UsageError(f"{writer.url}: channel {channel!r} has no rollout (start one: tritonops release rollout "
                         "start)")
    return p, ar.parse(p["rollout"], f"{writer.url}/{channel_key(channel)}")


def summary(to: str, channel: str, agent_urls: list[str], s3_endpoint: str | None = None,
            fleet: Fleet | None = None,
            report_keys: list[Path] | None = None) -> dict[str, Any] | None:
    """The channel's rollout, its agents and the per-wave counts; None when the channel has no rollout."""
    reader = open_store(to, s3_endpoint=s3_endpoint)
    # The kinds agents report into read with the controller's access (reports listed too); the others as
    # agents read them.
    writer = pub.open_writer(to, s3_endpoint) if reader.kind.reports else None
    store: Store | pub.Writer = writer or reader
    p = pub.read_pointer(store, channel)
    if p is None or p.get("rollout") is None:
        return None
    ro = ar.parse(p["rollout"], f"{to}/{channel_key(channel)}")
    got: dict[str, Any] = (read_reports(writer, channel, report_keys, fleet) if writer is not None else
                           {"reports": {}, "rejected": [f"{to}: an HTTP mirror cannot be listed; reports not read"]})
    if writer is not None:
        drop_replays(got, last_counted(writer, channel, ro["id"], []), channel)
    rows = observe(p, ro, got["reports"], [scrape(u) for u in agent_urls], fleet)
    return {"channel": channel, "release": p["release"], "digest": p["digest"], "rollout": ro,
            "waves": waves_table(ro, rows), "agents": rows, "rejected_reports": got["rejected"],
            "unattributed": len(got["rejected"])}


def check_bindings(fleet: Fleet | None, report_keys: list[Path] | None, where: str) -> None:
    """Refuse reports any of several keys may sign for any agent: with more than one ``--report-key``,
    every agent that counts must be bound to its own key (``key=`` in the fleet file), or one agent's key
    can report its failing neighbour "gated". One shared key (a lab) and bound fleets pass."""
    if len(report_keys or []) < 2:
        return
    unbound = [agent for agent, _groups, key in fleet or [] if key is None]
    if fleet is None or unbound:
        who = "no --fleet file binds agents to keys"
        if fleet is not None:
            who = (f"{len(unbound)} agent(s) of the fleet file have no key= ({', '.join(unbound[:5])}"
                   f"{' ...' if len(unbound) > 5 else ''})")
        raise UsageError(f"{where}: {len(report_keys or [])} --report-key given and {who}: any of those keys could "
                         "sign any agent's report (a failed node reported 'gated' by its neighbour's key); bind "
                         "each agent with 'AGENT-ID key=FILE' in --fleet, or pass --unbound-reports (unsafe)")


def advance(to: str, channel: str, agent_urls: list[str] | None = None, s3_endpoint: str | None = None,
            fleet: Fleet | None = None, report_keys: list[Path] | None = None,
            max_failures: float | None = None, rollback_on_halt: bool = False,
            pointer_args: dict[str, Any] | None = None, unbound_reports: bool = False,
            cache_urls: list[str] | None = None) -> dict[str, Any]:
    """Judge waves 0..wave; then the next wave, a halt (and a rollback), or nothing yet ("waiting").

    result: "advanced", "complete" (the last wave is reached and healthy), "waiting" (an agent has no
    outcome yet, or none is known, or a node cache of ``cache_urls`` is not warm yet), "halted" (failed
    share over the threshold; written now), or "already halted". The threshold is ``max_failures`` or the
    one ``start`` wrote into the rollout. Several report keys not bound to agents are refused
    (:func:`check_bindings`) unless ``unbound_reports``. ``cache_urls``: the cache daemons (``cache serve``)
    of the nodes the next wave runs on; the move waits until each holds the channel's release (``caches``).
    """
    if not unbound_reports:
        check_bindings(fleet, report_keys, "release rollout advance")
    for url in cache_urls or []:
        check_url(url, "--cache-url", "a node cache daemon's http(s)://HOST:PORT")
    writer = pub.open_writer(to, s3_endpoint)
    p, ro = _current(writer, channel)
    where = f"{to}/{channel_key(channel)}"
    got = read_reports(writer, channel, report_keys, fleet)
    keys = list((pointer_args or {}).get("keys") or [])
    last = last_counted(writer, channel, ro["id"], keys)
    drop_replays(got, last, channel)
    write_counted(writer, channel, ro["id"], last, got["reports"], keys)
    rows = observe(p, ro, got["reports"], [scrape(u) for u in agent_urls or []], fleet)
    table = waves_table(ro, rows)
    targeted = [r for r in rows if r["wave"] is not None and r["wave"] <= ro["wave"]]
    failed = sum(r["outcome"] in ("failed", "refused") for r in targeted)
    pending = [r["agent"] for r in targeted if r["outcome"] is None]
    limit = ro.get("max_failures", 0.0) if max_failures is None else max_failures
    out: dict[str, Any] = {"channel": channel, "release": p["release"], "rollout": ro["id"], "wave": ro["wave"],
                           "targeted": len(targeted), "failed": failed, "pending": pending, "max_failures": limit,
                           "waves": table, "unreachable": [r["agent"] for r in rows if "error" in r],
                           "rejected_reports": got["rejected"], "unattributed": len(got["rejected"])}
    if ro["halted"]:
        return {**out, "result": "already halted"}
    unchanged = (p["release"], p["digest"])

    def same_pointer(now: dict[str, Any] | None) -> tuple[str, str, str]:
        """Write only over the pointer judged: a move meanwhile (another advance, a publish) wins."""
        if now is None or (now["release"], now["digest"]) != unchanged or now.get("rollout") != p["rollout"]:
            raise ReleaseError(f"{where}: moved while the rollout was judged; nothing written, run it again")
        return p["release"], p["digest"], note

    if targeted and failed / len(targeted) > limit:
        note = f"rollout {ro['id']} halted at wave {ro['wave']}: {failed}/{len(targeted)} failed"
        pub.move_pointer(writer, channel, "", "", note, target=same_pointer, rollout={**ro, "halted": True},
                         **(pointer_args or {}))
        out.update(result="halted", reason=f"{failed} of {len(targeted)} targeted agents failed "
                                           f"({failed / len(targeted):.1%} > {limit:.1%})")
        if rollback_on_halt:
            out["rollback"] = pub.rollback(to, channel, s3_endpoint=s3_endpoint, **(pointer_args or {}))
        return out
    if not targeted:
        return {**out, "result": "waiting", "reason": "no agent of waves 0.."
                f"{ro['wave']} is known: pass --agent-url or --fleet, or run the agents with --report"}
    if pending:
        return {**out, "result": "waiting",
                "reason": f"{len(pending)} of {len(targeted)} targeted agents have no outcome yet"}
    if ro["wave"] == len(ro["waves"]) - 1:
        return {**out, "result": "complete", "reason": f"the last wave is reached, {failed} failed"}
    if cache_urls:  # the next wave's nodes read the release from their caches: warm before they are asked
        with ThreadPoolExecutor(READERS) as pool:
            out["caches"] = list(pool.map(lambda u: scrape_cache(u, channel, p["digest"]), cache_urls))
        cold = [f"{c['url']}: {c['error']}" for c in out["caches"] if not c["warm"]]
        if cold:
            return {**out, "result": "waiting", "reason": f"{len(cold)} of {len(cache_urls)} node caches are not "
                    f"warm for release {p['release']} yet ({'; '.join(cold)})"}
    nxt = ro["wave"] + 1
    note = f"rollout {ro['id']} wave {nxt} ({_spec(ro['waves'][nxt])})"
    pub.move_pointer(writer, channel, "", "", note, target=same_pointer, rollout={**ro, "wave": nxt},
                     **(pointer_args or {}))
    return {**out, "result": "advanced", "wave": nxt}
