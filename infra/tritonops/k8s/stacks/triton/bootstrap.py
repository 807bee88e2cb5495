"""Bootstrapping check of the triton stack: every pull-mode channel exists before anything is created.

A pull-mode pod's init container waits for its channel's release; on a channel nobody published to,
the Deployment never becomes ready and ``pulumi up`` times out. So the triton program reads each
pull-mode service's channel pointer (and its canary's) with the release agent's own store reader
(:func:`tritonops.stores.open_store`, the operator's AWS credentials) at preview and up, before it
creates a resource, and refuses with the ``tritonops release publish ... --channel C`` command to run
first. A store that cannot be reached refuses too, saying so.

A pointer that exists is then judged as the node will judge it: with the agent's own
:class:`tritonops.release_format.metadata.Trusted` (root rotation, signature threshold, channel, ``storeName``,
expiry) over the service's ``trustedKeys.publicKeys``, so a channel signed with a key the stack does not
trust (an example key, a key pair mixed up) is refused here, naming the channel, the store and the keys'
ids, instead of every pod's release-sync waiting out its deadline. Keys the stack does not hold (a
``trustedKeys.secret`` the user creates) cannot be read here: the pointer is then only read. A key the
user has not set yet (``publicKeys`` lacking one of ``keys``: required.user_values) is refused with the
command that sets it.

``tritonops render`` is offline and never runs it unless asked (``render --check-channels``).
``TRITONOPS_CHANNEL_CHECK=off`` skips it in the program (a preview without access to the store).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tritonops.core.errors import ReleaseError
from tritonops.core.keys import POINTER_MAX, ROOT_MAX, channel_key, root_key
from tritonops.k8s.config import ConfigError, ModelService, TritonStackConfig, project_name
from tritonops.k8s.stacks.triton import required
from tritonops.release_format import trust
from tritonops.release_format.metadata import Rejected, Trusted
from tritonops.release_format.metadata import unverified as parse_pointer
from tritonops.stores import Store, open_store
from tritonops.stores.s3 import S3Store

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
    store = open_store(rel.store, rel.s3_endpoint, timeout=timeout)
    if isinstance(store, S3Store) and rel.region:
        # The pods' AWS_REGION (release.region), not the operator's: the bucket's region.
        store.region = rel.region
        if store.base.endswith(".amazonaws.com"):
            store.base = f"https://{store.bucket}.s3.{rel.region}.amazonaws.com"
    return store


def publish_command(svc: ModelService, channel: str) -> str:
    rel = svc.release
    assert rel is not None
    endpoint = f" --s3-endpoint {rel.s3_endpoint}" if rel.s3_endpoint else ""
    return (
        f"tritonops release publish REPOSITORY --store {rel.store} --channel {channel} --key release-signing.key"
        f"{endpoint}"
    )


def channels(cfg: TritonStackConfig) -> list[tuple[int, str, str]]:
    """Each pull-mode channel: (model service index, its field under ``release``, the channel)."""
    out = []
    for i, svc in enumerate(cfg.model_services):
        rel = svc.release
        if rel is None:
            continue
        out.append((i, "channel", rel.channel))
        if rel.canary is not None:
            out.append((i, "canary.channel", rel.canary.channel))
    return out


def check_channels(cfg: TritonStackConfig, source: str | None = None, timeout: float = 15.0) -> list[ChannelState]:
    """Each pull-mode channel's pointer, read from its store and verified with the keys the pods will trust;
    a ConfigError naming the channel's key (or the keys') at the first that fails."""
    return [check_channel(cfg, i, field, channel, source, timeout) for i, field, channel in channels(cfg)]


def check_channel(cfg: TritonStackConfig, index: int, field: str, channel: str, source: str | None = None,
                  timeout: float = 15.0) -> ChannelState:
    """One channel of model service ``index`` (``field``: ``channel`` or ``canary.channel``): its pointer
    exists and, where the stack holds the service's public keys, the node's own check trusts it."""
    prefix = project_name("triton")
    svc = cfg.model_services[index]
    rel = svc.release
    assert rel is not None
    for path, command in required.user_values(cfg).items():  # a key the user has not set yet: nothing to trust
        if path.startswith(f"modelServices[{index}]."):
            raise ConfigError(f"{prefix}:{path}", f"not set: the public key {svc.name!r}'s pods verify channel "
                              f"{channel!r} with; {command}", source)
    store = _store(svc, timeout)
    key = f"{prefix}:modelServices[{index}].release.{field}"
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
                f"for it for ever. Publish a release to it first: {publish_command(svc, channel)}",
                source,
            ) from None
        raise ConfigError(
            key,
            f"cannot read channel {channel!r} of {svc.name!r} ({text}); the stack checks that each "
            "pull-mode channel exists before creating anything: give this shell read access to the store "
            f"(AWS credentials, region, endpoint) or, to preview without it, set {CHECK_ENV}=off",
            source,
        ) from None
    keys = public_keys(cfg, index)
    if keys:
        keys_key = f"{prefix}:modelServices[{index}].release.trustedKeys.publicKeys"
        _verify(svc, keys, channel, raw, store, keys_key, where, source)
    return ChannelState(svc.name, channel, rel.store, str(pointer.get("release")))


def public_keys(cfg: TritonStackConfig, index: int) -> dict[str, str] | None:
    """The public keys (name -> PEM) model service ``index``'s pods will trust, where the stack holds them:
    its own publicKeys, or those another service gives the trusted-keys ConfigMap they share."""
    rel = cfg.model_services[index].release
    assert rel is not None
    tk = rel.trusted_keys
    if tk.public_keys:
        return {k: v for k, v in tk.public_keys.items() if k in tk.keys}
    for other in cfg.model_services:
        o = other.release.trusted_keys if other.release is not None else None
        if o is not None and o.public_keys and tk.config_map is not None and o.config_map == tk.config_map:
            return {k: v for k, v in o.public_keys.items() if k in tk.keys}
    return None


def _verify(svc: ModelService, keys: dict[str, str], channel: str, raw: bytes, store: Store, key: str,
            where: str, source: str | None) -> None:
    """The pointer judged by the node's own check (:meth:`Trusted.check`) against the service's publicKeys,
    written as the files the pods mount; a ConfigError naming the channel, the store and the keys otherwise."""
    rel = svc.release
    assert rel is not None
    with tempfile.TemporaryDirectory(prefix="tritonops-keys-") as tmp:
        files = []
        for name, pem in sorted(keys.items()):
            path = Path(tmp) / "keys" / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(pem.strip() + "\n")
            files.append(path)
        ids = ", ".join(f"{p.name} (key id {trust.keyid(p.read_bytes())[:16]})" for p in files)
        try:  # a fresh node: no .trusted.json, the keys as its implicit root; the roots it names read here
            trusted = Trusted(trust.implicit_root(files), rel.store_name)
            roots = [store.get(root_key(n), limit=ROOT_MAX) or b"" for n in trusted.roots_needed(raw, where)]
            trusted.check(raw, channel, roots, where)
        except (Rejected, ReleaseError) as exc:
            raise ConfigError(
                key,
                f"channel {channel!r} of store {rel.store} is not trusted by {svc.name!r}'s pods: {exc}. The stack "
                f"trusts {ids}; publish with the private half of one of them, or set the public key of the key "
                "the channel is signed with",
                source,
            ) from None
