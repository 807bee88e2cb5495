"""An OCI registry as a release store: ``oci://REGISTRY/REPO`` (the distribution API, standard library only).

The store's layout (:mod:`store`) maps onto one registry repository::

    blobs/sha256/<hex>                  the blob sha256:<hex> (content-addressed by the registry itself:
                                        a file shared by two releases is stored once)
    releases/<digest>/manifest.json     the blob sha256:<digest> (its sha256 is the release's digest)
    releases/<digest>/manifest.json.sigs  a layer of the release artifact, tag ``release-<digest>``
    channels/<name>.json                the one layer of the artifact tagged ``channel-<name>``
    root/<N>.json                       ... tagged ``root-<N>``
    ids/<release-id>.json               ... tagged ``id-<release-id>``

A release is an OCI image manifest with ``artifactType`` :data:`RELEASE_TYPE`: its layers are the
release's manifest, its signatures and every file (titled with its path, so ``oras pull`` writes the
repository out as it is); a pointer, a root and an id record are manifests of :data:`METADATA_TYPE`
whose one layer carries the document in the descriptor's ``data`` field as well (one request reads
it; the agent checks it against the descriptor's digest). Nothing the registry answers is trusted:
the agent verifies every document's signatures and every file's sha256 as with any other store.

An idle poll is one conditional ``GET /v2/REPO/manifests/channel-NAME`` (``If-None-Match``, answered
304). Auth: none, HTTP Basic, or a bearer token got from the ``WWW-Authenticate`` challenge's realm
(cached until it expires), with the credentials of a docker ``config.json`` (``auths``; a Kubernetes
``.dockerconfigjson``) or of a folder holding ``username`` and ``password`` files (a basic-auth
Secret mounted). A blob's redirect to another origin (the registry's storage) is followed without
any credential (netio). Every body is bounded as for the other stores.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import ssl
import threading
import time
import urllib.parse
from pathlib import Path
from typing import IO, Any

from ..core import netio
from ..core.errors import StoreError, UsageError
from ..core.fsio import read_bounded

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
RELEASE_TYPE = "application/vnd.tritonops.release.v1+json"
METADATA_TYPE = "application/vnd.tritonops.metadata.v1+json"
MANIFEST_LAYER = "application/vnd.tritonops.release.manifest.v1+json"
SIGNATURES_LAYER = "application/vnd.tritonops.release.signatures.v1+json"
DOCUMENT_LAYER = "application/vnd.tritonops.document.v1+json"
FILE_LAYER = "application/vnd.tritonops.file.v1"
EMPTY = {"mediaType": "application/vnd.oci.empty.v1+json",
         "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2}
TITLE = "org.opencontainers.image.title"
KEY_ANNOTATION = "io.tritonops.key"
OCI_MANIFEST_MAX = 4 << 20  # bytes: the distribution registry's own cap on a manifest
TOKEN_MAX = 64 << 10
AUTH_FILE_MAX = 1 << 20
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_REPO = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


def split_url(url: str) -> tuple[str, str]:
    """(registry host[:port], repository) of ``oci://REGISTRY/REPO``."""
    rest = url[len("oci://"):] if url.startswith("oci://") else url
    host, _, repo = rest.strip("/").partition("/")
    if not host or not repo or not _REPO.fullmatch(repo):
        raise UsageError(f"{url}: expected oci://REGISTRY/REPOSITORY (lower-case path parts: a-z, 0-9, '.', '_', '-')")
    return host, repo


def locate(key: str) -> tuple[str, str, str]:
    """Where a store key lives: ("blob", digest, "") or ("tag", tag, the layer's media type)."""
    parts = key.split("/")
    if len(parts) == 3 and parts[:2] == ["blobs", "sha256"]:
        return "blob", f"sha256:{parts[2]}", ""
    if len(parts) == 3 and parts[0] == "releases" and parts[2] == "manifest.json":
        return "blob", f"sha256:{parts[1]}", ""
    if len(parts) == 3 and parts[0] == "releases" and parts[2] == "manifest.json.sigs":
        return "tag", _tag(f"release-{parts[1]}", key), SIGNATURES_LAYER
    for folder, prefix in (("channels", "channel-"), ("root", "root-"), ("ids", "id-")):
        if len(parts) == 2 and parts[0] == folder and parts[1].endswith(".json"):
            return "tag", _tag(prefix + parts[1][:-len(".json")], key), DOCUMENT_LAYER
    raise UsageError(f"{key}: an oci:// store holds releases, channels, roots and ids only "
                     "(status reports need a folder or s3:// store)")


def _tag(tag: str, key: str) -> str:
    if not _TAG.fullmatch(tag):
        raise UsageError(f"{key}: {tag!r} is not a valid OCI tag (at most 128 letters, digits, '.', '_', '-')")
    return tag


def load_auth(path: Path, registry: str) -> tuple[str, str] | None:
    """(username, password) for ``registry`` from a docker ``config.json`` (or ``.dockerconfigjson``), or
    from a folder with ``username`` and ``password`` files. None: the config names no such registry."""
    path = Path(path)
    if path.is_dir():
        try:
            user, pw = (read_bounded(path / n, AUTH_FILE_MAX, UsageError).decode().strip("\r\n")
                        for n in ("username", "password"))
        except UnicodeDecodeError:
            raise UsageError(f"{path}: username or password is not UTF-8 text") from None
        return user, pw
    raw = read_bounded(path, AUTH_FILE_MAX, UsageError)
    try:
        doc = json.loads(raw)
        auths = doc.get("auths", {}) if isinstance(doc, dict) else None
        assert isinstance(auths, dict)
    except (ValueError, AssertionError, RecursionError):
        raise UsageError(f"{path}: not a docker config.json (a JSON object with \"auths\")") from None
    for name, entry in auths.items():
        if _registry_name(name) != registry or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, sep, pw = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise UsageError(f"{path}: auths.{name}.auth: not base64 of USERNAME:PASSWORD")
            return user, pw
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return entry["username"], entry["password"]
        raise UsageError(f"{path}: auths.{name}: neither auth nor username/password (credential helpers "
                         "are not run by the agent: give the credentials themselves)")
    return None


def _registry_name(name: str) -> str:
    """``https://host:port/v1/`` or ``host:port``, as docker config keys are written, to ``host:port``."""
    return urllib.parse.urlsplit(name).netloc if "://" in name else name.split("/")[0]


def default_auth_file() -> Path | None:
    """TRITONOPS_REGISTRY_AUTH, else REGISTRY_AUTH_FILE (podman, skopeo), else $DOCKER_CONFIG/config.json or
    ~/.docker/config.json when it exists."""
    for var in ("TRITONOPS_REGISTRY_AUTH", "REGISTRY_AUTH_FILE"):
        if os.environ.get(var):
            return Path(os.environ[var])
    docker = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    return docker if docker.is_file() else None


ECR_HOST = re.compile(r"(\d{12})\.dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")
ECR_TARGET = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"


def ecr_login(host: str, deadline: float, cancel: threading.Event | None) -> tuple[str, str, float]:
    """(user, password, refresh-at) from ECR's GetAuthorizationToken, signed (SigV4, service "ecr") with the
    AWS credentials chain the S3 store uses (IRSA, Pod Identity, static keys); ``AWS_ENDPOINT_URL_ECR``
    or ``AWS_ENDPOINT_URL`` for another endpoint. The token is asked again 5 minutes before it expires."""
    from . import aws_credentials

    m = ECR_HOST.fullmatch(host)
    region = (m.group(2) if m else None) or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise StoreError(f"{host}: ECR auth needs a region (an ECR host name, or AWS_REGION)")
    endpoint = (os.environ.get("AWS_ENDPOINT_URL_ECR") or os.environ.get("AWS_ENDPOINT_URL")
                or f"https://api.ecr.{region}.amazonaws.com")
    url = endpoint.rstrip("/") + "/"
    provider = aws_credentials.from_env()
    if provider is None:
        raise StoreError(f"{host}: ECR auth needs AWS credentials (IRSA, Pod Identity or static keys); none are set")
    body = json.dumps({"registryIds": [m.group(1)]} if m else {}).encode()
    extra = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": ECR_TARGET}
    headers = {**extra, **aws_credentials.sigv4_headers(url, region, credentials=provider.get(), env={}, method="POST",
                                                        payload_hash=hashlib.sha256(body).hexdigest(),
                                                        service="ecr", extra=extra)}
    resp = netio.request(url, what=f"{host} ECR GetAuthorizationToken", headers=headers, data=body, method="POST",
                         deadline=deadline, limit=TOKEN_MAX, error=StoreError, cancel=cancel)
    if resp.status != 200:
        raise StoreError(f"{host}: ECR GetAuthorizationToken answered HTTP {resp.status} {resp.body[:200]!r}")
    try:
        data = json.loads(resp.body)["authorizationData"][0]
        user, sep, pw = base64.b64decode(data["authorizationToken"]).decode().partition(":")
        assert sep
        expires = float(data.get("expiresAt") or 0)
    except (ValueError, KeyError, IndexError, TypeError, AssertionError, UnicodeDecodeError):
        raise StoreError(f"{host}: ECR GetAuthorizationToken's answer holds no USER:PASSWORD token") from None
    return user, pw, max(expires - 300, time.time() + 60)


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """The scheme and parameters of a WWW-Authenticate header (``Bearer realm="...",service="..."``)."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


class Registry:
    """One repository of one registry: authenticated, bounded requests (reads and, for the controller, writes)."""

    def __init__(self, url: str, auth: Path | None = None, ca: Path | None = None, owner: Any = None) -> None:
        """``owner``: the object whose ``requests`` counter this counts into and whose ``cancel`` event
        (set: end a request at once) it obeys; itself when None."""
        self.url = url
        self.host, self.repo = split_url(url)
        insecure = os.environ.get("TRITONOPS_REGISTRY_PLAIN_HTTP", "") == self.host  # a loopback test registry only
        self.base = f"{'http' if insecure else 'https'}://{self.host}"
        auth = auth or default_auth_file()
        self.auth_file = auth
        # ECR: a token from GetAuthorizationToken (the pod's IRSA role ...), for an ECR host name without an
        # auth file, or TRITONOPS_REGISTRY_AUTH=ecr.
        self.ecr = str(auth) == "ecr" or (auth is None and ECR_HOST.fullmatch(self.host) is not None)
        self.credentials = load_auth(auth, self.host) if auth and not self.ecr else None
        self._credentials_until = float("inf")
        ca = ca or (Path(os.environ["TRITONOPS_REGISTRY_CA"]) if os.environ.get("TRITONOPS_REGISTRY_CA") else None)
        self.context: ssl.SSLContext | None = None
        if ca:
            if not Path(ca).is_file():
                raise UsageError(f"{ca}: the registry's CA file does not exist")
            self.context = ssl.create_default_context(cafile=str(ca))
        self.owner = owner if owner is not None else self
        self.requests = 0
        self.cancel: threading.Event | None = None
        self._authorization: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    # --- auth ---------------------------------------------------------------------------------

    def _refused(self, what: str, status: int) -> UsageError:
        """The registry (or its token service) refused the credentials given: no retry fixes that, so a usage
        error (exit 2) naming where they came from, never "retry later" (exit 3)."""
        if self.ecr:
            source = "the ECR token GetAuthorizationToken gave (the AWS credentials' role lacks ecr:BatchGetImage?)"
        elif self.credentials is None:
            source = ("no credentials (set TRITONOPS_REGISTRY_AUTH to a docker config.json naming "
                      f"{self.host}, or a folder with username and password)")
        else:
            var = next((v for v in ("TRITONOPS_REGISTRY_AUTH", "REGISTRY_AUTH_FILE")
                        if os.environ.get(v) and Path(os.environ[v]) == self.auth_file), None)
            source = f"the credentials for {self.host} in {self.auth_file}" + (f" ({var})" if var else "")
        return UsageError(f"{what}: HTTP {status} {netio.reason(status)}: the registry refused {source}: check the "
                          f"user name and password, and the user's access to {self.repo}")

    def _tls_hint(self, e: StoreError) -> StoreError | UsageError:
        """A TLS failure says which setting fixes it: the registry's CA, or plain HTTP for a test registry."""
        cause = e.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError):
            return UsageError(f"{e}: the registry's certificate is not signed by a trusted CA: set "
                              "TRITONOPS_REGISTRY_CA to the CA file that signed it")
        if isinstance(cause, ssl.SSLError):
            return UsageError(f"{e}: no TLS answer from {self.host} (a plain-HTTP registry? tritonops speaks HTTPS; "
                              f"TRITONOPS_REGISTRY_PLAIN_HTTP={self.host} allows plain HTTP, for a loopback test "
                              "registry only)")
        return e

    def _basic(self, deadline: float = 10.0) -> str:
        if self.ecr and (self.credentials is None or time.time() >= self._credentials_until):
            user, pw, self._credentials_until = ecr_login(self.host, deadline, self.owner.cancel)
            self.owner.requests += 1
            self.credentials = (user, pw)
        if self.credentials is None:
            raise UsageError(f"{self.url}: the registry asks for credentials and none were given "
                             f"(TRITONOPS_REGISTRY_AUTH: a docker config.json naming {self.host}, or a folder "
                             "with username and password)")
        user, pw = self.credentials
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()

    def _login(self, header: str, scope: str, deadline: float) -> None:
        """Answer a 401's challenge: Basic credentials as they are, or a bearer token from the realm."""
        scheme, params = _challenge(header)
        if scheme == "basic":
            self._authorization = self._basic(deadline)
            until = self._credentials_until  # wall clock (an ECR token's expiry); _expires is monotonic
            self._expires = float("inf") if until == float("inf") else time.monotonic() + until - time.time()
            return
        if scheme != "bearer" or not params.get("realm"):
            raise StoreError(f"{self.url}: the registry asks for {header[:60]!r} auth; Basic and Bearer are spoken")
        realm = params["realm"]
        if urllib.parse.urlsplit(realm).scheme != "https" and netio.origin(realm)[:2] != netio.origin(self.base)[:2]:
            raise StoreError(f"{self.url}: token realm {netio.safe_url(realm)} is plain HTTP on another host: "
                             "credentials are not sent there")
        query = {k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v}
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        headers = {"Authorization": self._basic(deadline)} if self.credentials or self.ecr else {}
        self.owner.requests += 1
        resp = netio.request(url, what=f"{self.url} token", headers=headers, deadline=deadline, limit=TOKEN_MAX,
                             error=StoreError, cancel=self.owner.cancel, context=self.context)
        if resp.status in (401, 403):
            raise self._refused(f"{self.url}: the token service", resp.status)
        if resp.status != 200:
            raise StoreError(f"{self.url}: the token service answered HTTP {resp.status} {netio.reason(resp.status)}")
        try:
            doc = json.loads(resp.body)
            token = doc.get("token") or doc.get("access_token")
            assert isinstance(token, str) and token
            life = float(doc.get("expires_in") or 60)
        except (ValueError, AssertionError, AttributeError, TypeError):
            raise StoreError(f"{self.url}: the token service's answer holds no token") from None
        self._authorization, self._expires = f"Bearer {token}", time.monotonic() + max(life - 10, 1)

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None, data: Any = None,
                limit: int, deadline: float, push: bool = False, sink: Any = None,
                what: str | None = None) -> netio.Response:
        """One request to ``/v2/REPO/PATH`` (or an absolute upload URL), authenticated; a 401 is answered
        once (a new token or Basic) and the request sent again."""
        scope = f"repository:{self.repo}:{'pull,push' if push else 'pull'}"
        url = path if "://" in path else f"{self.base}/v2/{self.repo}/{path}"
        what = what or f"{self.url} {method} {path.split('?')[0][-80:]}"
        for attempt in (1, 2):
            with self._lock:
                auth = self._authorization if time.monotonic() < self._expires else None
            here = netio.origin(url)

            def sign(target: str, auth: str | None = auth, here: tuple = here) -> dict[str, str]:
                sent = dict(headers or {})
                if auth and netio.origin(target) == here:
                    sent["Authorization"] = auth
                return sent

            self.owner.requests += 1
            if hasattr(data, "seek"):
                data.seek(0)
            try:
                resp = netio.request(url, what=what, headers=sign, data=data, method=method, deadline=deadline,
                                     limit=limit, error=StoreError, sink=sink, cancel=self.owner.cancel,
                                     context=self.context, foreign_redirects=method in ("GET", "HEAD"))
            except StoreError as e:
                raise self._tls_hint(e) from e.__cause__
            if resp.status == 400 and self.base.startswith("http:") and b"HTTPS" in resp.body:
                raise UsageError(f"{what}: the registry speaks HTTPS, but TRITONOPS_REGISTRY_PLAIN_HTTP={self.host} "
                                 "sends it plain HTTP: unset it")
            if resp.status != 401:
                return resp
            if attempt == 2:  # answered with the credentials (or token) just given: they are refused
                break
            challenge = resp.headers.get("WWW-Authenticate")
            if not challenge:
                break
            with self._lock:
                self._login(challenge, scope, deadline)
        raise self._refused(what, 401)

    # --- reads --------------------------------------------------------------------------------

    def manifest(self, tag: str, limit: int, deadline: float, etag: str | None = None) -> netio.Response:
        headers = {"Accept": MANIFEST_TYPE}
        if etag:
            headers["If-None-Match"] = etag
        return self.request("GET", f"manifests/{tag}", headers=headers, limit=limit, deadline=deadline)

    def exists(self, kind: str, ref: str, deadline: float, push: bool = False) -> bool:
        resp = self.request("HEAD", f"{'blobs' if kind == 'blob' else 'manifests'}/{ref}", limit=0,
                            headers={"Accept": MANIFEST_TYPE}, deadline=deadline, push=push)
        if resp.status in (200, 204):
            return True
        if resp.status == 404:
            return False
        raise StoreError(f"{self.url} {kind} {ref}: HTTP {resp.status} {netio.reason(resp.status)}")

    # --- writes (the controller) -----------------------------------------------------------

    def push_blob(self, digest: str, data: bytes | IO[bytes], size: int, deadline: float) -> None:
        """A blob uploaded in one PUT (POST for a session, then PUT ?digest=); the registry checks the digest."""
        resp = self.request("POST", "blobs/uploads/", headers={"Content-Length": "0"}, data=b"", limit=0,
                            deadline=deadline, push=True)
        if resp.status != 202 or not resp.headers.get("Location"):
            raise StoreError(f"{self.url}: starting an upload answered HTTP {resp.status} {netio.reason(resp.status)}")
        location = urllib.parse.urljoin(resp.url, resp.headers["Location"])
        url = location + ("&" if "?" in location else "?") + urllib.parse.urlencode({"digest": digest})
        resp = self.request("PUT", url, headers={"Content-Type": "application/octet-stream",
                                                 "Content-Length": str(size)}, data=data, limit=0,
                            deadline=deadline, push=True, what=f"{self.url} blob {digest[:19]}")
        if resp.status != 201:
            raise StoreError(f"{self.url} blob {digest[:19]}: upload answered HTTP {resp.status} "
                             f"{netio.reason(resp.status)} {resp.body[:200]!r}")

    def put_manifest(self, tag: str, raw: bytes, deadline: float, if_match: str | None = None,
                     create: bool = False) -> int:
        """PUT a manifest under ``tag``; the status (201, or 412 where a registry honours the condition)."""
        headers = {"Content-Type": MANIFEST_TYPE}
        if if_match:
            headers["If-Match"] = if_match
        elif create:
            headers["If-None-Match"] = "*"
        resp = self.request("PUT", f"manifests/{tag}", headers=headers, data=raw, limit=0, deadline=deadline,
                            push=True)
        if resp.status not in (201, 412):
            raise StoreError(f"{self.url}:{tag}: writing the manifest answered HTTP {resp.status} "
                             f"{netio.reason(resp.status)} {resp.body[:200]!r}")
        return resp.status


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data: bytes, title: str | None = None, embed: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {"mediaType": media_type, "digest": digest_of(data), "size": len(data)}
    if embed:
        d["data"] = base64.b64encode(data).decode()
    if title:
        d["annotations"] = {TITLE: title}
    return d


def image_manifest(artifact_type: str, layers: list[dict[str, Any]], annotations: dict[str, str]) -> bytes:
    """An OCI image manifest (1.1 artifact form: an artifactType and the empty config)."""
    doc = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": artifact_type, "config": EMPTY,
           "layers": layers, "annotations": annotations}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def layer_bytes(raw: bytes, media_type: str, where: str) -> tuple[dict[str, Any] | None, bytes | None]:
    """The layer of ``media_type`` in a manifest and its embedded bytes (checked against its digest; None
    when not embedded: read the blob)."""
    try:
        doc = json.loads(raw)
        layers = doc.get("layers")
        assert isinstance(layers, list)
    except (ValueError, AssertionError, AttributeError, RecursionError):
        raise StoreError(f"{where}: not an OCI image manifest") from None
    layer = next((x for x in layers if isinstance(x, dict) and x.get("mediaType") == media_type), None)
    if layer is None:
        raise StoreError(f"{where}: the manifest has no {media_type} layer (not an artifact tritonops wrote)")
    if not isinstance(layer.get("digest"), str) or type(layer.get("size")) is not int:
        raise StoreError(f"{where}: the {media_type} layer has no digest or size")
    if "data" not in layer:
        return layer, None
    try:
        data = base64.b64decode(str(layer["data"]), validate=True)
    except ValueError:
        raise StoreError(f"{where}: the {media_type} layer's data is not base64") from None
    if digest_of(data) != layer["digest"] or len(data) != layer["size"]:
        raise StoreError(f"{where}: the {media_type} layer's data does not match its digest")
    return layer, data
