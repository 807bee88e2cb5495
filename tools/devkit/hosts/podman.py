"""Thin wrappers around the ``podman`` CLI with the project's containers.conf."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

CONTAINERS_CONF = Path(__file__).with_name("containers.conf")


class HostsError(RuntimeError):
    """A host image or node operation failed; the message says what and where to look."""


def podman_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    if extra:
        env.update(extra)
    return env


def require_podman() -> None:
    if shutil.which("podman") is None:
        raise HostsError("podman is not installed (make apt installs podman, runc and friends)")
    if os.geteuid() != 0:
        raise HostsError("the project's hosts use rootful Podman: run as root")


def podman(
    args: Sequence[str], check: bool = True, timeout: float | None = 600
) -> subprocess.CompletedProcess[str]:
    require_podman()
    res = subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(), timeout=timeout)
    if check and res.returncode != 0:
        raise HostsError(f"podman {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return res


def run_logged(cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
               timeout: float | None = 3600) -> None:
    """Run a long command with its output in ``log``; on failure raise with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        res = subprocess.run(list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=dict(env) if env else None,
                             timeout=timeout)
    if res.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise HostsError(f"{cmd[0]} failed ({res.returncode}); log {log}:\n{tail}")
