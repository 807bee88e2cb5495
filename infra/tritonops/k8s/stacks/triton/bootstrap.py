"""Bootstrapping check of the triton stack: every pull-mode channel exists before anything is created.

A pull-mode pod's init container waits for its channel's release; on a channel nobody published to,
the Deployment never becomes ready and ``pulumi up`` times out. So the triton program reads each
pull-mode service's channel pointer (and its canary's) with the release agent's own store reader
(:class:`tritonops.agent.store.Store`, the operator's AWS credentials) at preview and up, before it
creates a resource, and refuses with the ``tritonops release publish ... --channel C`` command to run
first. A store that cannot be reached refuses too, saying so.

``tritonops render`` is offline and never runs it unless asked (``render --check-channels``).
``TRITONOPS_CHANNEL_CHECK=off`` skips it in the program (a preview without access to the store).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tritonops.agent.metadata import unverified as parse_pointer
from tritonops.agent.store import Store
from tritonops.core.errors import ReleaseError
from tritonops.core.keys import POINTER_MAX, channel_key
from tritonops.k8s.config import ConfigError, ModelService, TritonStackConfig, project_name

CHECK_ENV = "TRITONOPS_CHANNEL_CHECK"  # "off": the program skips the check


@dataclass(frozen=True)
class ChannelState:
    service: str
    channel: str
    store: str
    release: str  # the release id the pointer names


def enabled() -> bool:
    return os.environ.get(CHECK_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def _store(svc: ModelService, timeout: float) -> Store:
    rel = svc.release
    assert rel is not None
    store = Store(rel.store, rel.s3_endpoint, timeout=timeout)
    if store.kind == "s3" and rel.region:
        # The pods' AWS_REGION (release.region), not the operator's: the bucket's region.
        store.region = rel.region
        if store.base.endswith(".amazonaws.com"):
            store.base = f"https://{store.bucket}.s3.{rel.region}.amazonaws.com"
    return store


def _publish_command(svc: ModelService, channel: str) -> str:
    rel = svc.release
    assert rel is not None
    endpoint = f" --s3-endpoint {rel.s3_endpoint}" if rel.s3_endpoint else ""
    return (
        f"tritonops release publish REPOSITORY --store {rel.store} --channel {channel} --key release-signing.key"
        f"{endpoint}"
    )


def check_channels(cfg: TritonStackConfig, source: str | None = None, timeout: float = 15.0) -> list[ChannelState]:
    """Each pull-mode channel's pointer, read from its store; a ConfigError naming the channel's key otherwise."""
    out: list[ChannelState] = []
    prefix = project_name("triton")
    for i, svc in enumerate(cfg.model_services):
        rel = svc.release
        if rel is None:
            continue
        channels = [("channel", rel.channel)]
        if rel.canary is not None:
            channels.append(("canary.channel", rel.canary.channel))
        store = _store(svc, timeout)
        for field, channel in channels:
            key = f"{prefix}:modelServices[{i}].release.{field}"
            where = f"{rel.store}/{channel_key(channel)}"
            try:
                raw = store.get(channel_key(channel), limit=POINTER_MAX)
                assert raw is not None  # not a conditional read
                pointer = parse_pointer(raw, where)
            except ReleaseError as exc:
                text = str(exc)
                if "HTTP 404" in text or text.endswith(": not found"):
                    raise ConfigError(
                        key,
                        f"channel {channel!r} does not exist in {rel.store}: the pods of {svc.name!r} would wait "
                        f"for it for ever. Publish a release to it first: {_publish_command(svc, channel)}",
                        source,
                    ) from None
                raise ConfigError(
                    key,
                    f"cannot read channel {channel!r} of {svc.name!r} ({text}); the stack checks that each "
                    "pull-mode channel exists before creating anything: give this shell read access to the store "
                    f"(AWS credentials, region, endpoint) or, to preview without it, set {CHECK_ENV}=off",
                    source,
                ) from None
            out.append(ChannelState(svc.name, channel, rel.store, str(pointer.get("release"))))
    return out
