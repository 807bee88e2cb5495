"""Release stores: a folder, HTTP(S), S3 and an OCI registry, read by nodes and written by the controller.

Each kind is one module that reads and writes (``folder``, ``http``, ``s3``, ``oci``; the registry's HTTP
client in ``oci_api``, SigV4 and the AWS credential chain in ``aws_credentials``) and one entry of
:data:`KINDS` (:class:`base.Kind`: its schemes, its URL form, whether agents report into it, a pod's egress
to it). :func:`open_store` opens a store for reading (the agents'), :func:`open_writer` for writing (the
controller's). Reads use the standard library only and ship in the agent's zipapp; S3 writes use boto3,
imported inside the functions that write, so the node never loads it.

Rules for this package: the standard library and ``tritonops.core`` only, boto3 and botocore inside write
functions only (tests/unit/test_layers.py), relative imports only (the zipapp renames the package).
"""

from __future__ import annotations

import threading

from ..core.errors import UsageError
from ..core.keys import BLOB_TIMEOUT, METADATA_TIMEOUT
from . import base, folder, http, oci, s3
from .base import Kind, Store, Writer, forms, kind_of, publish_forms

KINDS = base.KINDS
KINDS.extend((s3.KIND, http.KIND, oci.KIND, folder.KIND))

__all__ = ["KINDS", "Kind", "Store", "Writer", "forms", "kind_of", "open_store", "open_writer", "publish_forms",
           "schemes"]


def schemes(network: bool = False) -> tuple[str, ...]:
    """The URL schemes of every kind (``network``: only those a pod reaches over the network)."""
    return tuple(s for k in KINDS for s in k.schemes if s and (k.ports or not network))


def open_store(url: str, s3_endpoint: str | None = None, timeout: float = METADATA_TIMEOUT,
               blob_timeout: float = BLOB_TIMEOUT, cancel: threading.Event | None = None) -> Store:
    """Read-only access to a store URL, as agents read it. ``timeout``: the overall deadline (connect,
    headers, body) of a pointer, manifest or signature read; ``blob_timeout`` that of one file's download;
    ``cancel``: set it to end a request at once; ``s3_endpoint``: an S3-compatible store's endpoint."""
    if not url.strip():
        raise UsageError(f"store: empty; expected {forms()}")
    url = url.rstrip("/") or url
    return kind_of(url).reads(url, s3_endpoint=s3_endpoint, timeout=timeout, blob_timeout=blob_timeout,
                              cancel=cancel)


def open_writer(url: str, s3_endpoint: str | None = None) -> Writer:
    """The controller's access to a store URL: its reads with the controller's credentials, its writes."""
    reader = open_store(url, s3_endpoint=s3_endpoint)
    if reader.kind.writes is None:
        raise UsageError(f"{url}: publish to {publish_forms()}")
    return reader.kind.writes(url, s3_endpoint, reader)
