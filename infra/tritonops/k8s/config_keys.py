"""Config keys as errors name them, and the name rules every stack's checks share.

A :class:`tritonops.k8s.config.ConfigError` names the full key: ``tritonops-triton:modelServices[0].name``
(:func:`config_key`). The rules across fields of each stack (``tritonops.k8s.stacks.<stack>.checks``)
and :func:`tritonops.k8s.parse.parse_config` build their keys here.
"""

from __future__ import annotations

import re

from tritonops.k8s.config import ConfigError, project_name

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

Loc = tuple[int | str, ...]


def key_path(loc: Loc) -> str:
    """``("modelServices", 0, "name")`` -> ``modelServices[0].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def config_key(stack: str, loc: Loc) -> str:
    """The full config key of ``loc`` in ``stack``'s namespace."""
    return f"{project_name(stack)}:{key_path(loc)}"


def check_dns_label(stack: str, loc: Loc, name: str, source: str | None) -> None:
    if not DNS_LABEL.match(name) or len(name) > 40:
        raise ConfigError(
            config_key(stack, loc), f"{name!r} must be a DNS label (lowercase, digits, '-'; at most 40)", source
        )


def check_object_name(
    loc: Loc, name: str, what: str, source: str | None, stack: str = "triton"
) -> None:
    if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        raise ConfigError(
            config_key(stack, loc), f"{name!r} is not a valid {what} name (lowercase, digits, '-', '.')", source
        )
