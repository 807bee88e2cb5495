"""AWS credentials for signing S3 reads, the way AWS SDKs find them in a container (standard library only).

The chain, in botocore's order (``botocore.credentials.create_credential_resolver``: environment,
then web identity, then the container provider); the first one configured is used:

1. **Static keys** ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``): for
   S3-compatible stores that are not AWS (MinIO, Ceph) or a controller's own keys. Never refreshed.
2. **IRSA** (EKS IAM roles for service accounts) ``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``
   (+ ``AWS_ROLE_SESSION_NAME``): STS ``AssumeRoleWithWebIdentity`` (Query API, an unsigned POST) at
   ``AWS_ENDPOINT_URL_STS``, else ``AWS_ENDPOINT_URL``, else ``https://sts.<region>.amazonaws.com``
   (region from ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, default us-east-1).
3. **EKS Pod Identity** (and ECS) ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` with the token in
   ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` (or ``AWS_CONTAINER_AUTHORIZATION_TOKEN``): a GET with
   ``Authorization: <token>`` answering ``{AccessKeyId, SecretAccessKey, Token, Expiration}``. As in
   botocore's ``ContainerMetadataFetcher``, the URI must be https, or http to a loopback address or to
   169.254.170.2 (ECS), 169.254.170.23 / fd00:ec2::23 (EKS Pod Identity) or localhost.

Nothing configured: no credentials (an anonymous read of a public bucket or mirror).

Temporary credentials (2 and 3) are fetched on first use and again before they expire: a refresh is
tried from ``min(15 min, half the lifetime)`` before expiry; if it fails, the old credentials are used
until ``min(10 min, a quarter of the lifetime)`` before expiry, after which the failure is raised
(botocore's advisory and mandatory windows, scaled down for short-lived credentials). Token files are
read again on every refresh (the kubelet rotates them). Every request is bounded in time (one overall
deadline: ``STS_TIMEOUT``, ``CONTAINER_TIMEOUT``) and size (``RESPONSE_MAX``) and follows no redirect
(:mod:`netio`), so a token never reaches another host; no retries here (the agent's poll loop is the
retry). A failure raises ``CredentialsError`` (a ``StoreError``: exit 3, "retry later"), whose text
names the variable and the endpoint but never a token, a key or a response body beyond STS's error
code and message.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import json
import os
import re
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET  # noqa: S405 - bounded, DOCTYPE refused before parsing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core import netio
from ..core.errors import StoreError
from ..core.fsio import read_bounded

STS_TIMEOUT = 10.0
CONTAINER_TIMEOUT = 5.0
RESPONSE_MAX = 64 << 10  # bytes: an STS or container-credentials answer is well under 4 KiB
TOKEN_MAX = 16 << 10
ADVISORY_WINDOW = 15 * 60.0
MANDATORY_WINDOW = 10 * 60.0
RETRY_AFTER_FAILURE = 30.0  # seconds between refresh attempts while the old credentials still hold
# botocore.utils.ContainerMetadataFetcher._ALLOWED_HOSTS: http only to these (or a loopback address).
CONTAINER_HOSTS = ("169.254.170.2", "169.254.170.23", "fd00:ec2::23", "localhost")
STS_VERSION = "2011-06-15"


class CredentialsError(StoreError):
    """Credentials could not be had (exit 3: the store cannot be read now; retry later)."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None
    expiry: float | None = None  # epoch seconds; None for static keys

    def __repr__(self) -> str:  # never print a secret, even in a debugger or an assertion
        return f"Credentials(access_key={self.access_key!r}, token={'set' if self.token else None}, " \
               f"expiry={self.expiry!r})"


def parse_time(text: str, where: str) -> float:
    """ISO 8601 (``2026-12-01T17:00:00Z``, fractions, ``+00:00``) to epoch seconds; Python 3.10 safe."""
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?", text.strip())
    if not m:
        raise CredentialsError(f"{where}: Expiration {text[:40]!r} is not an ISO 8601 time")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    tz = m.group(8) or "Z"
    offset = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[-2:]) * 60)
    try:
        when = datetime.datetime(y, mo, d, h, mi, s, tzinfo=datetime.timezone.utc)  # noqa: UP017 - 3.10
    except ValueError:
        raise CredentialsError(f"{where}: Expiration {text[:40]!r} is not a valid time") from None
    return when.timestamp() + float(m.group(7) or 0) - offset


def _read_token(path: str, variable: str) -> str:
    try:
        token = read_bounded(Path(path), TOKEN_MAX, CredentialsError).decode("utf-8", "replace").strip()
    except CredentialsError as e:
        raise CredentialsError(f"{variable} {e}") from None
    if not token:
        raise CredentialsError(f"{variable} {path}: empty")
    return token


def _safe_url(url: str) -> str:
    """The URL without query or user info, for messages."""
    return netio.safe_url(url)


class Provider:
    """Refreshable credentials from one source; ``get()`` is thread-safe and refreshes as needed."""

    source = "static"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._creds: Credentials | None = None
        self._obtained = 0.0
        self._failed_at: float | None = None
        self.errors = 0  # refreshes that failed (the agent's metrics read it)
        self.refreshes = 0  # refreshes that succeeded
        self.last_error: str | None = None

    def _fetch(self) -> Credentials:
        raise NotImplementedError

    @property
    def expiry(self) -> float | None:
        return self._creds.expiry if self._creds else None

    def _windows(self, creds: Credentials) -> tuple[float, float]:
        assert creds.expiry is not None
        life = max(creds.expiry - self._obtained, 0.0)
        return min(ADVISORY_WINDOW, life / 2), min(MANDATORY_WINDOW, life / 4)

    def get(self) -> Credentials:
        with self._lock:
            now = self._clock()
            creds = self._creds
            if creds is not None and creds.expiry is None:
                return creds
            if creds is not None:
                advisory, mandatory = self._windows(creds)
                left = creds.expiry - now  # type: ignore[operator]
                if left > advisory:
                    return creds
                if left > mandatory and self._failed_at is not None and now - self._failed_at < RETRY_AFTER_FAILURE:
                    return creds  # a refresh failed a moment ago; the old ones still hold
            try:
                fresh = self._fetch()
                if fresh.expiry is not None and fresh.expiry <= now:
                    raise CredentialsError(f"{self.source} credentials: answered credentials that expired "
                                           f"{now - fresh.expiry:.0f}s ago (is this node's clock right?)")
            except CredentialsError as e:
                self.errors += 1
                self.last_error = str(e)
                self._failed_at = now
                if creds is not None and creds.expiry is not None and creds.expiry - now > self._windows(creds)[1]:
                    return creds  # advisory refresh failed: keep using the old ones a while
                raise
            self._creds, self._obtained, self._failed_at, self.last_error = fresh, now, None, None
            self.refreshes += 1
            return fresh


class StaticProvider(Provider):
    source = "static"

    def __init__(self, creds: Credentials) -> None:
        super().__init__()
        self._creds = creds

    def _fetch(self) -> Credentials:  # pragma: no cover - static credentials never expire
        assert self._creds is not None
        return self._creds


def sts_endpoint(env: Mapping[str, str]) -> str:
    override = env.get("AWS_ENDPOINT_URL_STS") or env.get("AWS_ENDPOINT_URL")
    if override:
        return override.rstrip("/") + "/"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    return f"https://sts.{region}.amazonaws.com/"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_sts(data: bytes, where: str) -> dict[str, str]:
    """The Credentials of an AssumeRoleWithWebIdentity answer, or CredentialsError with STS's code and message.

    Bounded by the caller; a DOCTYPE (the only place entities can be declared) is refused before parsing.
    """
    if b"<!doctype" in data.lower() or b"<!entity" in data.lower():
        raise CredentialsError(f"{where}: answer carries a DOCTYPE or entity declaration; refused")
    try:
        root = ET.fromstring(data)  # noqa: S314 - no DTD possible (checked above), size bounded
    except ET.ParseError:
        raise CredentialsError(f"{where}: answer is not XML") from None
    fields = {_local(el.tag): (el.text or "").strip() for el in root.iter()}
    if _local(root.tag) == "ErrorResponse" or ("Code" in fields and "AccessKeyId" not in fields):
        code, message = fields.get("Code", "?")[:80], fields.get("Message", "")[:200]
        raise CredentialsError(f"{where}: STS refused: {code}: {message}".rstrip(": "))
    creds = {k: fields.get(k, "") for k in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")}
    missing = [k for k, v in creds.items() if not v]
    if missing:
        raise CredentialsError(f"{where}: AssumeRoleWithWebIdentityResult lacks {', '.join(missing)}")
    return creds


class WebIdentityProvider(Provider):
    """IRSA: AssumeRoleWithWebIdentity with the projected service-account token."""

    source = "web_identity"

    def __init__(self, env: Mapping[str, str], clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.token_file = env["AWS_WEB_IDENTITY_TOKEN_FILE"]
        self.role_arn = env.get("AWS_ROLE_ARN", "")
        if not self.role_arn:
            raise CredentialsError("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not: set both (IRSA)")
        self.session_name = env.get("AWS_ROLE_SESSION_NAME") or f"tritonops-agent-{int(clock())}"
        self.endpoint = sts_endpoint(env)
        if urllib.parse.urlsplit(self.endpoint).scheme not in ("https", "http"):
            raise CredentialsError(f"AWS_ENDPOINT_URL_STS {_safe_url(self.endpoint)}: expected https://HOST")

    def _fetch(self) -> Credentials:
        where = f"STS {_safe_url(self.endpoint)} AssumeRoleWithWebIdentity {self.role_arn}"
        token = _read_token(self.token_file, "AWS_WEB_IDENTITY_TOKEN_FILE")
        body = urllib.parse.urlencode({"Action": "AssumeRoleWithWebIdentity", "Version": STS_VERSION,
                                       "RoleArn": self.role_arn, "RoleSessionName": self.session_name,
                                       "WebIdentityToken": token}).encode()
        resp = netio.request(self.endpoint, what=where, data=body, method="POST", headers={
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8", "Accept": "text/xml"},
            deadline=STS_TIMEOUT, limit=RESPONSE_MAX, error=CredentialsError, redirects=False)
        data = resp.body
        if not 200 <= resp.status < 300:
            if len(data) < RESPONSE_MAX and data.lstrip().startswith(b"<"):  # whole, and XML
                parse_sts(data, f"{where}: HTTP {resp.status}")  # raises with STS's code and message
            raise CredentialsError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}".rstrip())
        c = parse_sts(data, where)
        return Credentials(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"],
                           parse_time(c["Expiration"], where))


def check_container_uri(uri: str) -> None:
    """What botocore's ContainerMetadataFetcher allows: https anywhere; http to loopback or the AWS hosts."""
    p = urllib.parse.urlsplit(uri)
    if p.scheme == "https" and p.hostname:
        return
    if p.scheme == "http" and p.hostname:
        try:
            if ipaddress.ip_address(p.hostname).is_loopback:
                return
        except ValueError:
            pass
        if p.hostname in CONTAINER_HOSTS:
            return
    raise CredentialsError(f"AWS_CONTAINER_CREDENTIALS_FULL_URI {_safe_url(uri)}: expected https://, or http:// "
                           f"to a loopback address or one of {', '.join(CONTAINER_HOSTS)}")


class ContainerProvider(Provider):
    """EKS Pod Identity (and ECS task roles given by a full URI): the container credentials endpoint."""

    source = "container"

    def __init__(self, env: Mapping[str, str], clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.uri = env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
        check_container_uri(self.uri)
        self.token_file = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
        self.token = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN")

    def _fetch(self) -> Credentials:
        where = f"AWS_CONTAINER_CREDENTIALS_FULL_URI {_safe_url(self.uri)}"
        headers = {"Accept": "application/json"}
        token = (_read_token(self.token_file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") if self.token_file
                 else self.token)
        if token is not None:
            if "\r" in token or "\n" in token:
                raise CredentialsError(f"{where}: the authorization token is not a legal header value")
            headers["Authorization"] = token
        # The container endpoint is link-local: never through a proxy.
        resp = netio.request(self.uri, what=where, headers=headers, deadline=CONTAINER_TIMEOUT, limit=RESPONSE_MAX,
                             error=CredentialsError, redirects=False, proxies={})
        if not 200 <= resp.status < 300:
            raise CredentialsError(f"{where}: HTTP {resp.status} {netio.reason(resp.status)}".rstrip())
        data = resp.body
        try:
            doc = json.loads(data.decode("utf-8"))
            ak, sk, tok, exp = (doc[k] for k in ("AccessKeyId", "SecretAccessKey", "Token", "Expiration"))
        except (ValueError, KeyError, TypeError):
            raise CredentialsError(f"{where}: expected JSON with AccessKeyId, SecretAccessKey, Token, "
                                   f"Expiration") from None
        if not all(isinstance(v, str) and v for v in (ak, sk, tok, exp)):
            raise CredentialsError(f"{where}: AccessKeyId, SecretAccessKey, Token and Expiration must be strings")
        return Credentials(ak, sk, tok, parse_time(exp, where))


def from_env(env: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time) -> Provider | None:
    """The first configured source of the chain (see the module's docstring), or None (anonymous)."""
    env = os.environ if env is None else env
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return StaticProvider(Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"],
                                          env.get("AWS_SESSION_TOKEN") or None))
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return WebIdentityProvider(env, clock)
    if env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return ContainerProvider(env, clock)
    return None


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def sigv4_headers(url: str, region: str, now: datetime.datetime | None = None,
                  env: dict[str, str] | None = None, credentials: Credentials | None = None,
                  method: str = "GET", payload_hash: str = _EMPTY_SHA256, service: str = "s3",
                  extra: dict[str, str] | None = None) -> dict[str, str]:
    """AWS Signature Version 4 headers for an S3 GET of ``url`` (or ``method``, with the body's sha256 hex;
    ``service``: another AWS API, ECR's; ``extra``: headers to sign too, X-Amz-Target).

    With ``credentials`` (from a provider: IRSA, Pod Identity, static), those; else static keys from
    ``env`` (the process environment when None). None at all: no headers (an anonymous read of a public
    bucket or mirror). A session token is sent, and signed, as ``x-amz-security-token``.
    """
    if credentials is None:
        env = dict(os.environ) if env is None else env
        if not env.get("AWS_ACCESS_KEY_ID") or not env.get("AWS_SECRET_ACCESS_KEY"):
            return {}
        credentials = Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"],
                                  env.get("AWS_SESSION_TOKEN") or None)
    key_id, secret = credentials.access_key, credentials.secret_key
    now = now or datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - Python 3.10 on nodes
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    parts = urllib.parse.urlsplit(url)
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date,
               **{k.lower(): v for k, v in (extra or {}).items()}}
    if credentials.token:
        headers["x-amz-security-token"] = credentials.token
    names = sorted(headers)
    query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                     for k, v in sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True)))
    canonical = "\n".join([method, parts.path or "/", query, "".join(f"{n}:{headers[n]}\n" for n in names),
                           ";".join(names), payload_hash])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {n: v for n, v in headers.items() if n != "host"}
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={';'.join(names)}, "
                            f"Signature={signature}")
    return out

