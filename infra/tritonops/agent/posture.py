"""Triton's live security posture, with the standard library: do the admin APIs refuse a caller
without the admin header (HTTP and gRPC), and does gRPC speak TLS exactly when it is configured to?

gRPC runs on HTTP/2. A unary call needs no library: the connection preface, a SETTINGS frame, one
HEADERS frame (HPACK literals, no Huffman coding) and one DATA frame carrying the empty
``RepositoryIndexRequest``. The answer needs no HPACK decoding either: a served call sends its
message in a DATA frame, a refused one ends the stream with trailers only (gRPC sends errors as
trailers, never as a message).
"""

from __future__ import annotations

import socket
import ssl
import struct
import urllib.error
import urllib.request

GRPC_INDEX_PATH = "/inference.GRPCInferenceService/RepositoryIndex"
PROBE_MODEL = "tritonops-drift-posture-probe"  # loaded without the header: Triton must refuse before looking
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x7
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
ANSWERED, REFUSED = "answered", "refused"


def http_admin_answers(url: str) -> dict[str, bool | str]:
    """Each admin call without the header: True when Triton served it, False when it refused, or the error."""
    calls = {"index": ("/v2/repository/index", b"{}"),
             "load": (f"/v2/repository/models/{PROBE_MODEL}/load", b"{}")}
    out: dict[str, bool | str] = {}
    for name, (path, body) in calls.items():
        req = urllib.request.Request(url.rstrip("/") + path, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the node's own Triton
                out[name] = resp.status < 400
        except urllib.error.HTTPError as e:
            # 403 "This API is restricted": refused. Anything else (a failed load of the probe model)
            # means the call got past the restriction.
            out[name] = e.code != 403
        except (OSError, ValueError) as e:
            out[name] = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
    return out


def _int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = bytearray([first | limit]), value - limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _literal(name: str, value: str) -> bytes:
    """Literal header field without indexing, new name, no Huffman coding (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _int(len(n), 7) + n + _int(len(v), 7) + v


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the server")
        buf += chunk
    return buf


def grpc_index(host: str, port: int, tls: bool, timeout: float = 10.0) -> str:
    """RepositoryIndex without the admin header: ANSWERED (a message came back) or REFUSED.

    Raises OSError when the port does not speak gRPC the way it was asked to (TLS or not).
    """
    raw = socket.create_connection((host, port), timeout=timeout)
    sock: socket.socket = raw
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # posture, not identity: does it refuse an unauthenticated caller?
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(raw, server_hostname=host)
    with sock:
        headers = b"".join(_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "https" if tls else "http"), (":path", GRPC_INDEX_PATH),
            (":authority", f"{host}:{port}"), ("content-type", "application/grpc"), ("te", "trailers")))
        message = b"\x00" + struct.pack(">I", 0)  # uncompressed, empty RepositoryIndexRequest
        sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0) + _frame(_HEADERS, _END_HEADERS, 1, headers)
                     + _frame(_DATA, _END_STREAM, 1, message))
        first = True
        while True:
            head = _read_exact(sock, 9)
            length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
            stream = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
            payload = _read_exact(sock, length)
            if first and kind != _SETTINGS:
                raise ConnectionError("the server did not answer with HTTP/2 SETTINGS")
            first = False
            if kind == _SETTINGS and not flags & _ACK:
                sock.sendall(_frame(_SETTINGS, _ACK, 0))
            elif kind == _GOAWAY or (stream == 1 and kind == _RST_STREAM):
                return REFUSED
            elif stream == 1 and kind == _DATA and payload:
                return ANSWERED
            elif stream == 1 and flags & _END_STREAM:
                return REFUSED


def grpc_posture(host: str, port: int, tls: bool) -> dict[str, str | None]:
    """{"index": ANSWERED|REFUSED|None, "error": why the call failed, "unreachable": the same when nothing
    listens there, "plaintext": ANSWERED|REFUSED|None}.

    With TLS configured, a plaintext call must fail; without it, the plaintext call is the check.
    """
    out: dict[str, str | None] = {"index": None, "error": None, "unreachable": None, "plaintext": None}
    try:
        out["index"] = grpc_index(host, port, tls)
    except (ConnectionRefusedError, TimeoutError, socket.gaierror) as e:
        out["error"] = out["unreachable"] = f"{type(e).__name__}: {e}"
    except (OSError, ValueError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    if tls:
        try:
            out["plaintext"] = grpc_index(host, port, False, timeout=5)
        except (OSError, ValueError):
            out["plaintext"] = None
    return out
