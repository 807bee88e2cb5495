"""The error classes of every tritonops package (the agent's and the controller's), one per exit code.

``ReleaseError`` (exit 1) names the file, the field or the step that failed; ``UsageError`` (exit 2) a
bad argument or an input the user named that cannot be used; ``StoreError`` (exit 3) a store or server
that did not answer, or answered with something unusable (codes in :mod:`tritonops.core.exitcodes`).
"""

from __future__ import annotations


class ReleaseError(Exception):
    """A release step failed; the message names the file, the field or the step (exit 1).

    ``status`` is the HTTP status of the answer that made it (Triton's, a store's) when one came: what
    :mod:`tritonops.agent.failures` reads, with the step and the ``errno`` of an ``OSError`` underneath, to tell a
    failure that may pass on retry from one that never will."""

    status: int | None = None


class UsageError(ReleaseError, ValueError):
    """A bad argument, or an input the user named that cannot be used (exit 2)."""


class StoreError(ReleaseError):
    """A store or server did not answer, or answered with something unusable (exit 3)."""


class TooLong(StoreError):
    """The store answered more bytes than the length allowed (a signed length, a cap): it served
    something other than what was signed. A refusal of what it served (exit 1, never retried), for a
    manifest and a release's file alike; a StoreError still for the callers that only read."""
