"""A read-only client of a Kubernetes API server, from a kubeconfig, on the standard library.

Enough for ``tritonops preflight``: GET a path, answer (HTTP status, JSON). The kubeconfig's current
context (or the one named) gives the server, its CA (``certificate-authority[-data]`` or
``insecure-skip-tls-verify``) and the user: a bearer ``token``/``tokenFile``, a client certificate
(``client-certificate[-data]``/``client-key[-data]``) or an ``exec`` credential plugin (EKS's
``aws eks get-token``), whose ExecCredential ``status.token`` is used. Credentials are never printed.
A server that does not answer raises :class:`Unreachable`; a kubeconfig that cannot be used,
:class:`KubeconfigError`.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TIMEOUT_S = 10.0
# Metadata only: a Secret's existence is checked without its values coming over the wire.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class KubeconfigError(ValueError):
    """The kubeconfig is missing, unreadable or names what it does not hold."""


class Unreachable(RuntimeError):
    """The API server did not answer (connection, TLS, timeout, or an exec plugin that failed)."""


def default_kubeconfig() -> Path:
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def _named(doc: dict[str, Any], section: str, name: str, path: Path) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return dict(entry.get(section[:-1]) or {})
    raise KubeconfigError(f"{path}: no {section[:-1]} named {name!r}")


def _data_or_file(spec: dict[str, Any], key: str, base: Path) -> bytes | None:
    if spec.get(f"{key}-data"):
        return base64.b64decode(spec[f"{key}-data"])
    if spec.get(key):
        return (base / str(spec[key])).expanduser().read_bytes()
    return None


@dataclass
class Client:
    server: str
    context: str
    ssl_context: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    def get(self, path: str, accept: str = "application/json") -> tuple[int, Any]:
        """(status, parsed JSON body or None) of GET ``path``; :class:`Unreachable` when nothing answers."""
        req = urllib.request.Request(self.server.rstrip("/") + path, headers={**self.headers, "Accept": accept})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=self.ssl_context) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read() or b"null")
            except ValueError:
                body = None
            return e.code, body
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise Unreachable(f"the API server {self.server} did not answer: {reason}") from None


def _exec_token(spec: dict[str, Any]) -> str:
    cmd = [str(spec.get("command")), *[str(a) for a in spec.get("args") or []]]
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in spec.get("env") or []}}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unreachable(f"the kubeconfig's exec credential plugin {cmd[0]!r} did not run: {e}") from None
    if out.returncode != 0:
        raise Unreachable(f"the kubeconfig's exec credential plugin {cmd[0]!r} failed (exit {out.returncode})")
    try:
        return str(json.loads(out.stdout)["status"]["token"])
    except (ValueError, KeyError, TypeError):
        raise Unreachable(f"the exec credential plugin {cmd[0]!r} printed no ExecCredential status.token") from None


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ca = _data_or_file(cluster, "certificate-authority", base)
        if ca is not None:
            ctx.load_verify_locations(cadata=ca.decode())
    cert = _data_or_file(user, "client-certificate", base)
    key = _data_or_file(user, "client-key", base)
    if cert is not None and key is not None:
        with tempfile.TemporaryDirectory() as tmp:  # ssl reads a client key from files only
            cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            for p, data in ((cert_path, cert), (key_path, key)):
                p.touch(mode=0o600)
                p.write_bytes(data)
            ctx.load_cert_chain(cert_path, key_path)
    return ctx


def client(kubeconfig: Path, context: str | None = None) -> Client:
    """A client for ``context`` (default: the current context) of ``kubeconfig``."""
    if not kubeconfig.is_file():
        raise KubeconfigError(f"no kubeconfig at {kubeconfig}")
    try:
        doc = yaml.safe_load(kubeconfig.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise KubeconfigError(f"{kubeconfig}: not a readable kubeconfig ({e.__class__.__name__})") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{kubeconfig}: not a kubeconfig mapping")
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError(f"{kubeconfig}: no current-context (pass --context)")
    ctx = _named(doc, "contexts", str(name), kubeconfig)
    cluster = _named(doc, "clusters", str(ctx.get("cluster")), kubeconfig)
    user = _named(doc, "users", str(ctx.get("user")), kubeconfig) if ctx.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise KubeconfigError(f"{kubeconfig}: cluster {ctx.get('cluster')!r} has no https:// server")
    base = kubeconfig.parent
    headers: dict[str, str] = {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / str(user["tokenFile"])).read_text().strip()
    if not token and isinstance(user.get("exec"), dict):
        token = _exec_token(user["exec"])
    if token:
        headers["Authorization"] = f"Bearer {token}"
    tls = _ssl_context(cluster, user, base) if server.startswith("https://") else None
    return Client(server, str(name), tls, headers)
