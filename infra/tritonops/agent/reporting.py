"""The agent's half of a staged rollout: what it applies now (:func:`choose`, after the format's
:func:`tritonops.release_format.waves.decide`) and its status report into the store (:func:`report`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..core import metric_names
from ..core.errors import ReleaseError
from ..core.keys import channel_key, report_key
from ..release_format import records, trust
from ..release_format.waves import REPORT_MAX, REPORT_TIMEOUT, Target, decide
from . import releases


def choose(agent: Any, pointer: dict[str, Any]) -> Target | None:
    """What ``agent`` may apply now (:func:`decide`): the channel's release, the rollout's previous one, or
    None (keep what it serves); sets its rollout metric and status."""
    d = decide(pointer, agent.agent_id, agent.group_labels, releases.state(agent.releases),
               f"{agent.store}/{channel_key(agent.channel)}")
    if d.state and d.state.startswith("invalid: ") and agent.rollout_state != d.state:
        agent.log(f"release {pointer.get('release')} not applied: {d.state.removeprefix('invalid: ')}")
    agent.rollout_state = d.state
    agent.metrics.replace(metric_names.ROLLOUT_TARGETED, 1 if d.targeted else 0, channel=agent.channel,
                          rollout=d.rollout, wave=d.wave, previous=d.held or "")
    return None if d.serve is None else (str(d.serve["release"]), str(d.serve["digest"]), int(d.serve["length"]))


def report(agent: Any, out: dict[str, Any]) -> dict[str, Any] | None:
    """After an attempt: write the agent's status report (``--report``); never raises (logs instead)."""
    if not getattr(agent, "report", False) or out.get("result") not in ("applied", "failed"):
        return None
    pointer = agent.pointer or {}
    ro = pointer.get("rollout") if isinstance(pointer.get("rollout"), dict) else None
    prev = (ro or {}).get("previous")
    applied = prev if isinstance(prev, dict) and out.get("release") == prev.get("release") != pointer.get(
        "release") else pointer  # the rollout's previous release (a new node not targeted), or the channel's
    digest = str(applied.get("digest") or "")
    if out["result"] == "applied":
        result = "gated" if agent.triton is not None else "applied"
    else:
        result = "refused" if digest in agent.refused else "failed"
    signed = records.report(agent.agent_id, agent.channel, out.get("release") or pointer.get("release"), digest,
                            result, out.get("step"), str(out.get("error") or ""), list(agent.group_labels),
                            ro.get("id") if ro else None, time.time())
    try:
        if agent.report_key is not None:
            data = trust.sign_envelope(signed, [Path(agent.report_key)])
        else:
            data = (json.dumps({"signed": signed, "signatures": [], "unsigned": True}, indent=2, sort_keys=True)
                    + "\n").encode()
        agent.store.put(report_key(agent.channel, agent.agent_id), data, REPORT_TIMEOUT, REPORT_MAX)
    except ReleaseError as e:
        agent.log(f"status report not written: {e}")
        return None
    return signed
