"""What the fleet says: each channel's pointer, and what each agent reports on its /metrics (``release status``,
the staged rollout's view of its agents)."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from tritonops.core import metric_names, netio
from tritonops.core.errors import ReleaseError, UsageError
from tritonops.core.keys import channel_key
from tritonops.release.publish import read_pointer
from tritonops.release_format import records
from tritonops.stores import Store, Writer, open_store, open_writer

TARGET_METRICS_MAX = 16 << 20  # bytes read from one target's /metrics
TARGET_TIMEOUT = 10.0  # seconds for one target's whole /metrics page
CACHE_STATUS_MAX = 1 << 20  # bytes read from one node cache daemon's /status
CACHE_STATUS_TIMEOUT = 5.0  # seconds for it
_POINTER_FIELDS = ("release", "digest", "published", "note", "version", "expires")


def scrape(url: str) -> dict[str, Any]:
    """One agent's release series from its /metrics (``agent``: the URL; errors in the row, never raised):
    the channel, release and digest it serves, whether it is up to date, and its rollout's targeting."""
    from prometheus_client.parser import text_string_to_metric_families

    row: dict[str, Any] = {"agent": url}
    try:  # one deadline for the whole page, however slowly it trickles
        resp = netio.request(url, deadline=TARGET_TIMEOUT, limit=TARGET_METRICS_MAX)
        if resp.status != 200:
            raise ReleaseError(f"{netio.safe_url(url)}: HTTP {resp.status}")
        for fam in text_string_to_metric_families(resp.body.decode(errors="replace")):
            for s in fam.samples:
                if s.name == metric_names.RELEASE_INFO:
                    row.update(channel=s.labels.get("channel"), release=s.labels.get("release"),
                               digest=s.labels.get("digest"))
                elif s.name == metric_names.UP_TO_DATE:
                    row["up_to_date"] = s.value == 1
                elif s.name == metric_names.ROLLOUT_TARGETED:
                    row.update(targeted=s.value == 1, rollout=s.labels.get("rollout"), wave=s.labels.get("wave"))
    except (ReleaseError, ValueError) as e:  # unreachable, slow, too big, or not a metrics page
        row["error"] = str(e)
    return row


def check_url(url: str, option: str, expected: str) -> None:
    """A UsageError unless ``url`` is http(s)://HOST[:PORT]...: the error names the option and what it takes."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{option} {url!r}: expected {expected}")


def scrape_cache(url: str, channel: str, digest: str) -> dict[str, Any]:
    """Whether the node cache daemon at ``url`` (http://HOST:PORT) holds ``channel``'s release ``digest``:
    ``{url, warm}``, with ``error`` saying why not (unreachable, not warm yet, warm for another release);
    errors in the row, never raised."""
    row: dict[str, Any] = {"url": url, "warm": False}
    try:  # one deadline for the whole answer
        resp = netio.request(url.rstrip("/") + "/status", what="GET /status", deadline=CACHE_STATUS_TIMEOUT,
                             limit=CACHE_STATUS_MAX)
    except ReleaseError as e:
        why: str | None = f"unreachable: {e}"
    else:
        try:
            why = (records.cache_warm(json.loads(resp.body), channel, digest) if resp.status == 200
                   else f"GET /status: HTTP {resp.status} (not a cache daemon?)")
        except (ValueError, RecursionError):
            why = "GET /status: not JSON (not a cache daemon?)"
    if why is None:
        row["warm"] = True
    else:
        row["error"] = why
    return row


def status(to: str, channels: list[str], targets: list[str], s3_endpoint: str | None = None) -> dict[str, Any]:
    """Each channel's release, and which release each target (an agent's /metrics URL) serves."""
    for url in targets:
        check_url(url, "--agent-url", "an agent's http(s)://HOST:PORT/metrics URL")
    reader = open_store(to, s3_endpoint=s3_endpoint)
    # S3 with the controller's credentials (boto3's chain), not the agents' environment variables.
    writer = open_writer(to, s3_endpoint) if reader.kind.reports else None
    store: Store | Writer = writer or reader
    for c in channels:
        channel_key(c)  # a channel that is no name at all first: its own error
    if writer is not None:
        writer.check_exists()
    out: dict[str, Any] = {"store": to, "channels": {}, "targets": []}
    for c in channels:
        p = read_pointer(store, c)
        if p is None:  # a misspelled channel, or a store that holds none: never "(none)" and exit 0
            raise writer.missing_channel(c) if writer is not None else UsageError(
                f"{to}: channel {c!r} does not exist")
        out["channels"][c] = {k: p.get(k) for k in _POINTER_FIELDS}
    for url in targets:
        row = scrape(url)
        out["targets"].append({"target": url, **{k: row[k] for k in ("channel", "release", "digest", "up_to_date",
                                                                    "error") if k in row}})
    return out
