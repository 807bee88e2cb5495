"""The agent's argparse value types: every bad value is a usage error (exit 2) naming it, never a
traceback or a check that runs against the wrong thing."""

from __future__ import annotations

import argparse
import math
import urllib.parse
from pathlib import Path
from typing import Any


def path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def number(low: float, high: float = math.inf, low_ok: bool = True) -> Any:
    """A finite float in [low, high) (or (low, high) without ``low_ok``): NaN and infinity are refused."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and (value >= low if low_ok else value > low) and value < high):
            bound = f"{'>=' if low_ok else '>'} {low:g}" + (f" and < {high:g}" if high < math.inf else "")
            raise argparse.ArgumentTypeError(f"{text} must be a finite number {bound}")
        return value
    return parse


def url(text: str) -> str:
    """http(s)://HOST[:PORT], the port a number."""
    parts = urllib.parse.urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the port is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r}: expected http(s)://HOST:PORT")
    return text


def listen(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT (a port from 1 to 65535)")
    return text


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port from 1 to 65535")
    return int(text)


def folder(text: str) -> str:
    """A folder to write into: it must not be a file (it need not exist yet)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: not a folder")
    return text


def grpc_address(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets), the port 1 to 65535."""
    host, _, text = value.rpartition(":")
    if not host:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return host.strip("[]"), port(text)
