"""The project folder commands read: ``stacks/``, ``ansible/`` and ``roles/`` of a tritonops project.

Nothing is looked up relative to where the package is installed (a wheel in site-packages has no
stacks next to it). The folder is ``--project-dir``, else ``$TRITONOPS_PROJECT_DIR``, else the
current directory; a command that needs a file there and does not find it says which file, under
which folder, and how to point it elsewhere. Data the package ships (``prices.json``) is read with
``importlib.resources`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TRITONOPS_PROJECT_DIR"
HINT = f"pass --project-dir (or set {ENV_VAR}) to the project folder"


class ProjectError(ValueError):
    """A file the command needs is not in the project folder; the message names both."""


def project_dir(explicit: Path | None = None) -> Path:
    """``explicit`` (--project-dir), else $TRITONOPS_PROJECT_DIR, else the current directory."""
    if explicit is not None:
        return explicit
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else Path.cwd()


def stacks_dir(explicit: Path | None = None) -> Path:
    """The Pulumi projects' folder (``stacks/<name>/Pulumi.<env>.yaml``)."""
    return project_dir(explicit) / "stacks"


def missing(rel: str, root: Path) -> str:
    """The message for a file the command needs: ``no stacks/triton/Pulumi.dev.yaml under /x; pass ...``."""
    return f"no {rel} under {root}; {HINT}"


def require(rel: str, explicit: Path | None = None) -> Path:
    """``rel`` inside the project folder; ProjectError naming both when it is not there."""
    root = project_dir(explicit)
    path = root / rel
    if not path.exists():
        raise ProjectError(missing(rel, root))
    return path
