"""Why a release step failed and whether trying again can help: the agent's one table of failure classes.

A failure is classed by its cause, not by the exception that carried it: the step that failed, the
``errno`` of an ``OSError`` underneath (however many errors wrapped it), the HTTP status Triton or a
store answered, and whether Triton is live. Two classes:

* ``retry``: the same release may pass later (a store or network that did not answer, a full or
  failing disk, Triton down or answering 5xx, another command holding the node folder): tried again
  with backoff, the target reported behind meanwhile;
* ``refused``: it never will (a bad signature or digest, a release that cannot be laid out on a file
  system, a model config Triton's load refused, a failed golden gate): refused until the channel moves.

The pull agent counts each failure in ``tritonops_release_failures_total{step, class}`` and shows the
class, the cause and the next retry time in ``/status``; the CLI maps ``retry`` to exit 3 (nothing was
decided) and ``refused`` to exit 1.
"""

from __future__ import annotations

import errno
from typing import Any

from ..core.lock import LockBusy

RETRY = "retry"
REFUSED = "refused"

# cause -> (class, what it means). The one table: every failure the agent reports is one of these.
CAUSES: dict[str, tuple[str, str]] = {
    "store": (RETRY, "the store did not answer, or answered with a missing, short or damaged object"),
    "disk": (RETRY, "the node's disk is full or failing (ENOSPC, EDQUOT, EIO): passes once space returns"),
    "local": (RETRY, "another error of the node's file system (permissions, a read-only mount)"),
    "triton": (RETRY, "Triton does not answer (in time), is not live, or answered 5xx"),
    "lock": (RETRY, "another command held the node folder for longer than the lock timeout"),
    "metadata": (REFUSED, "the signed metadata does not hold: signature, digest, format, or a release id reused"),
    "layout": (REFUSED, "the release cannot be laid out on a file system (a file/folder clash, a name or "
                        "path too long: EEXIST, EISDIR, ENOTDIR, ENAMETOOLONG)"),
    "model": (REFUSED, "Triton's load refused the model (it answered 4xx: its config or files)"),
    "golden": (REFUSED, "the golden gate failed against what Triton answered"),
}

# errno of an OSError underneath a failure -> its cause (whatever the step).
ERRNO_CAUSES = {
    errno.ENOSPC: "disk", errno.EDQUOT: "disk", errno.EIO: "disk",
    errno.ENAMETOOLONG: "layout", errno.EISDIR: "layout", errno.ENOTDIR: "layout", errno.EEXIST: "layout",
}

# The cause of a failed step when nothing more specific is known.
STEP_CAUSES = {
    "fetch": "store", "verify": "metadata", "install": "metadata", "triton": "triton", "lock": "lock",
    "activate": "local", "load": "model", "golden": "golden", "unload": "triton", "mark": "local",
}

# Steps that talk to Triton: a failure while Triton is not live is Triton's, not the release's.
TRITON_STEPS = ("triton", "load", "golden", "unload")


def _chain(error: BaseException | None) -> list[BaseException]:
    """The error and those it was raised from or while handling (``raise X from None`` keeps the context)."""
    seen: list[BaseException] = []
    while error is not None and error not in seen and len(seen) < 16:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def cause(step: str, error: BaseException | None = None, triton_live: bool | None = None) -> str:
    """The cause (a key of :data:`CAUSES`) of ``step`` failing with ``error``."""
    chain = _chain(error)
    for e in chain:
        if isinstance(e, OSError) and e.errno in ERRNO_CAUSES:
            return ERRNO_CAUSES[e.errno]
    if any(isinstance(e, LockBusy) for e in chain):
        return "lock"
    if step in TRITON_STEPS and triton_live is False:
        return "triton"
    status = next((s for s in (getattr(e, "status", None) for e in chain) if isinstance(s, int)), None)
    if status is not None and status >= 500:
        return "triton" if step in TRITON_STEPS else "store"
    if step in ("load", "unload") and status is None and chain:
        return "triton"  # no answer at all (a deadline, a dropped connection): Triton's, not the model's
    return STEP_CAUSES.get(step, "local")


def classify(step: str, error: BaseException | None = None, triton_live: bool | None = None) -> tuple[str, str]:
    """(class, cause): ``retry`` or ``refused``, and why."""
    c = cause(step, error, triton_live)
    return CAUSES[c][0], c


def record(step: str, reason: str, klass: str, cause_: str, tries: int = 0,
           next_retry: float | None = None) -> dict[str, Any]:
    """What ``/status`` shows of a release's last failure."""
    return {"step": step, "class": klass, "cause": cause_, "meaning": CAUSES[cause_][1], "reason": reason,
            "tries": tries, "next_retry": next_retry}
