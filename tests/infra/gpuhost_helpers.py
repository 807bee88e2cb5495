"""Plain helpers for the GPU host checks (nvidia_driver, container_runtime, jetson, node_monitoring).

Functions rather than fixtures so they can be used at module level (expectations) and in messages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from tritonops import versions

REPO = Path(__file__).resolve().parents[2]


_PIN = re.compile(r"\{\{ lookup\('tritonops\.triton\.pin', '(\w+)'\) \}\}")


def defaults(role: str) -> dict[str, Any]:
    """roles/<role>/defaults/main.yml: the expectations where the inventory says nothing; a pin default
    (the tritonops.triton.pin lookup) is the pin's value, as Ansible resolves it."""
    data = dict(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {})
    return {k: versions.pin(m.group(1)) if isinstance(v, str) and (m := _PIN.fullmatch(v)) else v
            for k, v in data.items()}


def journal(host: Any, unit: str, lines: int = 60) -> str:
    """The unit's recent journal, for failure messages that explain themselves."""
    out = host.run(f"journalctl -u {unit} --no-pager -n {lines}")
    return f"\n--- journalctl -u {unit} ---\n{out.stdout}{out.stderr}"
