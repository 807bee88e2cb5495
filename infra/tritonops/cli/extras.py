"""The one check that a command's optional dependencies (a pyproject extra) are installed.

``pip install tritonops`` brings the base dependencies only; a command that needs more calls
:func:`require` before it does anything, and without the extra it prints one line naming the extra and
the pip command, and exits 3 (``ExitCode.FAILED``: the command could not do its job here), never a
traceback. The modules that need an extra are imported only inside the commands that need them, so
``tritonops --help`` and every base command start without any extra. Where a domain module imports an
extra's package itself, the command runs that code inside :func:`imports`, which says the same.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn
from urllib.parse import urlsplit

import typer
from rich.markup import escape

from tritonops.cli.output import err_console
from tritonops.core.exitcodes import ExitCode
from tritonops.stores import s3

# What each extra of pyproject.toml brings that the package imports (import names; tests/unit/cli keeps the
# extras declared).
MODULES: dict[str, tuple[str, ...]] = {
    "obs": ("grafana_foundation_sdk", "matplotlib", "nvidia.cuda_runtime"),
    "k8s": ("pulumi", "pulumi_kubernetes", "pulumi_aws"),
    "triton": ("pytriton",),
    "s3": ("boto3", "botocore"),
    "ansible": ("ansible",),  # ansible-playbook: drift's ansible and models sources
    "signing": ("model_signing",),
}

EXTRA_OF = {module: extra for extra, modules in MODULES.items() for module in modules}


def missing(extra: str) -> list[str]:
    """The import names of ``extra`` that this Python cannot find."""
    return [m for m in MODULES[extra] if not _found(m)]


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package (``nvidia`` of ``nvidia.cuda_runtime``) is not there
        return False


def require(command: str, extra: str) -> None:
    """Exit 3 with ``tritonops COMMAND needs the 'EXTRA' extra: pip install 'tritonops[EXTRA]'`` unless it is there."""
    if missing(extra):
        _fail(command, extra)


@contextmanager
def imports(command: str) -> Iterator[None]:
    """Around code that may import an extra's package (deep in a domain module): the same line and exit 3 as
    :func:`require` when it is missing; any other missing module is a bug and is raised."""
    try:
        yield
    except ModuleNotFoundError as e:
        name = e.name or ""
        extra = next((EXTRA_OF[m] for m in EXTRA_OF if name == m or name.startswith(m + ".")), None)
        if extra is None:
            raise
        _fail(command, extra)


def _fail(command: str, extra: str) -> NoReturn:
    err_console.print(escape(f"tritonops {command} needs the '{extra}' extra: pip install 'tritonops[{extra}]'"),
                      highlight=False, soft_wrap=True)
    raise typer.Exit(ExitCode.FAILED)


def require_program(command: str, extra: str, program: str) -> None:
    """A program an extra installs (``ansible-playbook``): there when the extra is, or when it is on PATH
    (a system package); else the same line and exit 3 as :func:`require`."""
    if missing(extra) and shutil.which(program) is None:
        _fail(command, extra)


def require_store(command: str, store: str) -> None:
    """An ``s3://`` store is written and read with boto3 (the 's3' extra); a folder or HTTP mirror needs nothing."""
    if urlsplit(store).scheme in s3.KIND.schemes:
        require(command, "s3")
