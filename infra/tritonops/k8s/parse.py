"""A stack's config map -> its validated model: pydantic's field rules, then the rules across fields.

``parse_config`` takes the map without the project namespace, whether it came from the stack file
(``tritonops.k8s.stack_file.load_stack_config``) or from the Pulumi engine
(:func:`tritonops.k8s.engine.pulumi_config`), so both paths validate identically. Every error is a
``ConfigError`` naming the full config key. The rules across fields of each stack live with it:
``tritonops.k8s.stacks.<stack>.checks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tritonops.k8s.config import MODELS, STACKS, ConfigError, ConfigErrors, StackConfig
from tritonops.k8s.config_keys import DNS_LABEL, config_key
from tritonops.k8s.stacks.cluster_aws import checks as cluster_aws
from tritonops.k8s.stacks.platform import checks as platform
from tritonops.k8s.stacks.triton import checks as triton

CHECKS = {"cluster-aws": cluster_aws.check, "platform": platform.check, "triton": triton.check}


def parse_config(
    stack: str, raw: Mapping[str, Any], source: str | None = None, env: str | None = None
) -> StackConfig:
    """Validate a stack's config map (keys without the project namespace); ConfigError names the key.

    ``env``: the stack's name, the ``environment`` when the map leaves it unset or empty.
    """
    if stack not in MODELS:
        raise ConfigError("--stack", f"unknown stack {stack!r} (known: {', '.join(STACKS)})", source)
    model = MODELS[stack]
    data = dict(raw)
    named = bool(data.get("environment"))
    if not named and env is not None:
        data["environment"] = env
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:  # every field the schema refuses, not only the first
        raise ConfigErrors([ConfigError(config_key(stack, tuple(p for p in err["loc"] if not (
            isinstance(p, str) and p.startswith("function-")))), err["msg"], source) for err in exc.errors()]) from exc
    environment = getattr(cfg, "environment", "")
    if not DNS_LABEL.match(environment):
        given = "" if named else f" (the stack's name {env!r}: set environment to a DNS label)" if env else ""
        raise ConfigError(
            config_key(stack, ("environment",)),
            f"{environment!r}{given} must be a DNS label (lowercase, digits, '-'; at most 63): "
            "it is a label value and a tag",
            source,
        )
    CHECKS[stack](cfg, source)
    return cfg  # type: ignore[return-value]
