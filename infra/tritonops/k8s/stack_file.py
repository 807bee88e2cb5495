"""Reading a stack file: ``stacks/<stack>/Pulumi.<env>.yaml`` -> its config map and validated model.

The file is read bounded; every way it can be broken (too large, not UTF-8, not YAML, not a
``config:`` mapping) is a ``ConfigError`` naming the file (and the line, for YAML). Encrypted
(``secure:``) values are left to the Pulumi engine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tritonops import project
from tritonops.core.errors import UsageError
from tritonops.core.fsio import read_bounded
from tritonops.k8s.config import MODELS, STACKS, ConfigError, StackConfig, project_name
from tritonops.k8s.parse import parse_config

# A Pulumi stack name as it names its file Pulumi.<env>.yaml: letters, digits, '-', '_', '.'.
_STACK_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")

STACK_FILE_MAX_BYTES = 1 << 20


def stack_file(stack: str, env: str, stacks_dir: Path | None = None) -> Path:
    """``stacks_dir`` (default: stacks/ of the project folder, tritonops.project) / stack / Pulumi.<env>.yaml."""
    return (stacks_dir or project.stacks_dir()) / stack / f"Pulumi.{env}.yaml"


def read_stack_file(stack: str, env: str, stacks_dir: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(own config without namespace, other namespaces' keys as written) from Pulumi.<env>.yaml."""
    check_env_name(env)
    if stack not in MODELS:
        raise ConfigError("--stack", f"unknown stack {stack!r} (known: {', '.join(STACKS)})")
    path = stack_file(stack, env, stacks_dir)
    if not path.is_file():
        known = ", ".join(stack_envs(stack, stacks_dir))
        also = f" (stacks with one: {known})" if known else ""
        raise ConfigError("--env", f"no stack config file {path}; {project.HINT}{also}")
    config = read_config_map(path)
    prefix = project_name(stack) + ":"
    own: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            continue  # encrypted with the stack's secrets provider: only the Pulumi engine can read it
        if key.startswith(prefix):
            own[key[len(prefix) :]] = value
        else:
            other[key] = value
    return own, other


def read_config_map(path: Path) -> dict[str, Any]:
    """The ``config:`` map of a stack file: bounded, and every way it can be broken is a ConfigError."""
    try:
        doc = yaml.safe_load(read_bounded(path, STACK_FILE_MAX_BYTES, UsageError).decode("utf-8")) or {}
    except UsageError as e:
        raise ConfigError("--env", str(e)) from None
    except UnicodeDecodeError as e:
        raise ConfigError("config", f"not UTF-8 text (byte {e.start})", source=str(path)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError("config", f"{where}not valid YAML ({getattr(e, 'problem', None) or e})",
                          source=str(path)) from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(config or {}, dict):
        raise ConfigError("config", "expected a mapping `config: {KEY: VALUE, ...}`", source=str(path))
    return config or {}


def load_stack_config(stack: str, env: str, stacks_dir: Path | None = None) -> StackConfig:
    own, _ = read_stack_file(stack, env, stacks_dir)
    return parse_config(stack, own, source=str(stack_file(stack, env, stacks_dir)), env=env)


def check_env_name(env: str) -> None:
    """A stack name that is a safe file-name component (it names Pulumi.<env>.yaml), else ConfigError."""
    if not _STACK_NAME.match(env):
        raise ConfigError(
            "--env",
            f"{env!r} is not a stack name: letters, digits, '-', '_', '.' (not first), at most 100; "
            "it names the file Pulumi.<env>.yaml",
        )


def stack_envs(stack: str, stacks_dir: Path | None = None) -> list[str]:
    """The stacks of a project that have a file: every ``Pulumi.<env>.yaml`` of stacks/<stack>/, sorted."""
    folder = (stacks_dir or project.stacks_dir()) / stack
    if not folder.is_dir():
        return []
    envs = (p.name[len("Pulumi.") : -len(".yaml")] for p in folder.glob("Pulumi.*.yaml") if p.is_file())
    return sorted(e for e in envs if _STACK_NAME.match(e))
