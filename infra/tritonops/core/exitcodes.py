"""The one exit-code scheme of every tritonops command (the CLI and the node agent alike).

A usage error can never read as "drift found" or "findings": it has its own code, the one argparse
and click already use for a bad command line.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # done, nothing found
    FINDINGS = 1  # ran and found something: errors, drift, failed requests, a lagging target, a refused release
    USAGE = 2  # bad command line or unusable input (a missing, unreadable or malformed file the user named)
    FAILED = 3  # could not do its job: a server, store or source that did not answer or broke mid-way


HELP = ("Exit codes: 0 ok, 1 findings (errors, drift, failed requests, a refused release), "
        "2 usage error or unusable input, 3 the check itself could not run (unreachable server or store).")
