"""A release store's layout: the key of each object, and how much of each (in bytes and seconds) is read.

A store holds, under one prefix::

    blobs/sha256/<hex>                   every file of every release, once, by content
    releases/<digest>/manifest.json      the manifest (its sha256 is <digest>): each file's sha256 and
                                         length, the release id, the channels it may be served on ...
    releases/<digest>/manifest.json.sigs ... and its signatures (role "release", trust.sign_detached)
    ids/<release-id>.json                {"release", "digest"}: an id names one content for ever
    channels/<name>.json                 the pointer, a signed envelope (role "channel", agent.trust):
                                         {"signed": {"type": "channel", "channel", "version", "expires",
                                         "release", "digest", "length", "root_version", "history", ...},
                                         "signatures": [...]}
    root/<N>.json                        root (keys and thresholds) version N, signed by N-1's root keys
                                         and its own: nodes follow a rotation without a redeploy
    reports/<channel>/<agent id>.json    an agent's status report (--report; release rollout reads them)
    rollouts/<channel>.json              the report versions ``release rollout advance`` counted (replays)

The node reads a store with ``tritonops.stores.open_store``; the controller writes one with
``tritonops.release.publish``: both name its objects with these functions.
"""

from __future__ import annotations

from .errors import UsageError

POINTER_MAX = 256 << 10
SIGNATURE_MAX = 64 << 10  # a manifest's signatures: a JSON list of {"keyid", "sig"}, one per signing key
ROOT_MAX = 512 << 10  # a root document (keys and thresholds), read before it is verified
METADATA_TIMEOUT = 10.0  # seconds, overall, for a pointer, a manifest or a signature
BLOB_TIMEOUT = 600.0  # seconds, overall, for one file of a release


CHANNEL_MAX = 128  # characters of a channel name (its pointer's file name must fit any store: 255 bytes)
CHANNELS_PREFIX = "channels/"  # every channel's pointer is under it (what a listing of the channels reads)
REPORTS_FOLDER = "reports"  # every agent's status report is under it (the only folder agents write)


def channel_key(channel: str) -> str:
    if (not channel or not all(c.isalnum() or c in "._-" for c in channel) or channel[0] in ".-"
            or len(channel) > CHANNEL_MAX or not channel.isascii()):
        raise UsageError(f"channel {channel[:40]!r}{'...' if len(channel) > 40 else ''}: use letters, digits, "
                         f"'.', '_' or '-' (1-{CHANNEL_MAX} characters)")
    return f"{CHANNELS_PREFIX}{channel}.json"


def id_key(release: str) -> str:
    """``{"release", "digest"}``: the content a release id names, claimed once (release publish)."""
    return f"ids/{release}.json"


def counted_key(channel: str) -> str:
    """The report version counted last per agent in a channel's rollout (signed by the channel role)."""
    return f"rollouts/{channel}.json"


def reports_prefix(channel: str) -> str:
    """The folder of a channel's status reports (one per agent)."""
    return f"{REPORTS_FOLDER}/{channel}/"


def report_key(channel: str, agent_id: str) -> str:
    """An agent's status report on a channel (its last attempt's result)."""
    return f"{reports_prefix(channel)}{agent_id}.json"


def manifest_key(digest: str) -> str:
    return f"releases/{digest}/manifest.json"


def signatures_key(digest: str) -> str:
    """The signatures of a release's manifest (role "release")."""
    return manifest_key(digest) + ".sigs"


def root_key(version: int) -> str:
    """Root (keys and thresholds) version ``version``: what a node fetches to follow a key rotation."""
    return f"root/{int(version)}.json"


def blob_key(sha256: str) -> str:
    return f"blobs/sha256/{sha256}"
