"""Plain helpers for the GPU host checks (nvidia_driver, container_runtime, jetson, node_monitoring).

Functions rather than fixtures so they can be used at module level (expectations) and in messages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from tritonops import versions
from tritonops.triton.args import FACTS

REPO = Path(__file__).resolve().parents[2]


_PIN = re.compile(r"\{\{ lookup\('tritonops\.triton\.pin', '(\w+)'\) \}\}")
_FACT = re.compile(r"\{\{ lookup\('tritonops\.triton\.tritonserver_args', '(\w+)'\) \}\}")


def defaults(role: str) -> dict[str, Any]:
    """roles/<role>/defaults/main.yml: the expectations where the inventory says nothing; a pin default
    (the tritonops.triton.pin lookup) is the pin's value, and a fact of Triton's (the tritonserver_args
    lookup: ports, admin header) the fact's, as Ansible resolves them."""
    data = dict(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {})

    def resolved(v: Any) -> Any:
        if isinstance(v, str) and (m := _PIN.fullmatch(v)):
            return versions.pin(m.group(1))
        return FACTS[m.group(1)] if isinstance(v, str) and (m := _FACT.fullmatch(v)) else v

    return {k: resolved(v) for k, v in data.items()}


def journal(host: Any, unit: str, lines: int = 60) -> str:
    """The unit's recent journal, for failure messages that explain themselves."""
    out = host.run(f"journalctl -u {unit} --no-pager -n {lines}")
    return f"\n--- journalctl -u {unit} ---\n{out.stdout}{out.stderr}"


def role_defaults(role: str) -> dict[str, Any]:
    """A role's defaults/main.yml as a dict (the expectations where the inventory says nothing), pins resolved."""
    return defaults(role)
