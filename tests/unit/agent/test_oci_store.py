"""The oci:// store against a registry stand-in on loopback (http.server): what docker-registry with htpasswd
does not show. A bearer token got from the WWW-Authenticate challenge's realm (once, then reused), a blob
redirected to storage on another origin (followed, never with the registry's credentials), and hostile
answers: an endless blob, one that trickles past its deadline, wrong bytes, a pointer whose embedded document is not what its digest says.
The real registry runs in tests/unit/agent/test_agent_pull.py (the ``oci`` store) and the release tests."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tritonops.cli import app
from tritonops.core.errors import StoreError, UsageError
from tritonops.core.exitcodes import ExitCode
from tritonops.core.keys import blob_key
from tritonops.stores import oci_api as oci
from tritonops.stores import open_store
from typer.testing import CliRunner

POINTER = b'{"signed": {"type": "channel"}, "signatures": []}'
FILE = b"model bytes " * 1000
SHA = hashlib.sha256(FILE).hexdigest()
USER, PASSWORD = "reader", "pw-for-tests"


class StandIn:
    """A registry (Bearer auth, its token service at /token) and, on another port, its blob storage."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []  # (server, path, headers)
        self.tokens = 0
        self.storage_mode = "ok"
        self.basic: str | None = None  # "USER:PASSWORD": the registry asks for Basic auth instead of a token
        self.pointer_manifest = oci.image_manifest(
            oci.METADATA_TYPE, [oci.descriptor(oci.DOCUMENT_LAYER, POINTER, embed=True)], {})
        self.registry = self._serve("registry", self._registry)
        self.storage = self._serve("storage", self._storage)
        self.host = f"127.0.0.1:{self.registry.server_port}"

    def _serve(self, name: str, handle: Any) -> http.server.ThreadingHTTPServer:
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                seen.append((name, self.path, dict(self.headers)))
                handle(self)

            def log_message(self, *args: object) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return srv

    @staticmethod
    def _send(h: Any, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _registry(self, h: Any) -> None:
        if h.path.startswith("/token"):
            good = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if h.headers.get("Authorization") != good:
                return self._send(h, 401)
            self.tokens += 1
            return self._send(h, 200, json.dumps({"token": "tok-1", "expires_in": 300}).encode())
        if self.basic is not None:
            if h.headers.get("Authorization") != "Basic " + base64.b64encode(self.basic.encode()).decode():
                return self._send(h, 401, b"{}", {"WWW-Authenticate": 'Basic realm="stand-in"'})
            h.headers.replace_header("Authorization", "Bearer tok-1")
        if h.headers.get("Authorization") != "Bearer tok-1":
            realm = f"http://{self.host}/token"
            return self._send(h, 401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="stand-in"'})
        if h.path.endswith("/manifests/channel-stable"):
            etag = f'"{oci.digest_of(self.pointer_manifest)}"'
            if h.headers.get("If-None-Match") == etag:
                return self._send(h, 304)
            return self._send(h, 200, self.pointer_manifest, {"ETag": etag, "Content-Type": oci.MANIFEST_TYPE})
        if "/blobs/sha256:" in h.path:
            return self._send(h, 307, headers={"Location": f"http://127.0.0.1:{self.storage.server_port}/b?X-Sig=1"})
        self._send(h, 404)

    def _storage(self, h: Any) -> None:
        if self.storage_mode == "endless":
            h.send_response(200)
            h.end_headers()
            try:
                while True:
                    h.wfile.write(b"x" * 65536)
            except OSError:
                return
        if self.storage_mode == "trickle":  # the right length announced, a byte every 0.2 s
            h.send_response(200)
            h.send_header("Content-Length", str(len(FILE)))
            h.end_headers()
            try:
                for i in range(len(FILE)):
                    h.wfile.write(FILE[i:i + 1])
                    h.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                return
        self._send(h, 200, FILE if self.storage_mode == "ok" else b"y" * len(FILE))

    def close(self) -> None:
        for srv in (self.registry, self.storage):
            srv.shutdown()
            srv.server_close()


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    srv = StandIn()
    creds = tmp_path / "basic-auth"  # a kubernetes.io/basic-auth Secret, mounted
    creds.mkdir()
    (creds / "username").write_text(USER)
    (creds / "password").write_text(PASSWORD + "\n")
    monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(creds))
    monkeypatch.setenv("TRITONOPS_REGISTRY_PLAIN_HTTP", srv.host)
    yield srv
    srv.close()


def test_a_bearer_token_from_the_challenge_then_a_conditional_idle_poll(stand_in: StandIn) -> None:
    store = open_store(f"oci://{stand_in.host}/team/models")
    assert store.get("channels/stable.json", conditional=True) == POINTER
    assert store.requests == 3 and stand_in.tokens == 1  # 401, the token, the manifest again
    token_query = next(p for s, p, _ in stand_in.seen if p.startswith("/token"))
    assert "scope=repository%3Ateam%2Fmodels%3Apull" in token_query and "service=stand-in" in token_query
    assert store.get("channels/stable.json", conditional=True) is None  # unchanged: 304
    assert store.requests == 4 and stand_in.tokens == 1  # one request per idle poll, the token reused


def test_a_blob_redirected_to_storage_gets_no_credentials(stand_in: StandIn, tmp_path: Path) -> None:
    store = open_store(f"oci://{stand_in.host}/team/models")
    assert store.download(blob_key(SHA), tmp_path / "f", SHA, len(FILE)) == len(FILE)
    storage = [hdrs for server, _, hdrs in stand_in.seen if server == "storage"]
    assert storage and all("Authorization" not in h for h in storage)  # the presigned URL is its own auth
    registry_blob = [h for s, p, h in stand_in.seen if s == "registry" and "/blobs/" in p]
    assert registry_blob[-1]["Authorization"] == "Bearer tok-1"


@pytest.mark.parametrize(("mode", "error"), [("endless", "larger than"), ("wrong", "content sha256"),
                                             ("trickle", "no complete answer within the 1s deadline")])
def test_an_endless_or_wrong_blob_is_refused_and_nothing_is_left(stand_in: StandIn, tmp_path: Path,
                                                                  mode: str, error: str) -> None:
    stand_in.storage_mode = mode
    with pytest.raises(StoreError, match=error):
        open_store(f"oci://{stand_in.host}/team/models", blob_timeout=1).download(blob_key(SHA), tmp_path / "f", SHA,
                                                                            len(FILE))
    assert not (tmp_path / "f").exists()


def test_an_embedded_document_that_is_not_its_digest_is_refused(stand_in: StandIn) -> None:
    doc = json.loads(stand_in.pointer_manifest)
    doc["layers"][0]["data"] = base64.b64encode(POINTER.replace(b"channel", b"chAnnel")).decode()
    stand_in.pointer_manifest = json.dumps(doc).encode()
    with pytest.raises(StoreError, match="data does not match its digest"):
        open_store(f"oci://{stand_in.host}/team/models").get("channels/stable.json")


def test_wrong_credentials_are_said_as_such(stand_in: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {stand_in.host: {"username": USER, "password": "wrong"}}}))
    monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(config))
    with pytest.raises(UsageError, match=rf"token service: HTTP 401 Unauthorized: the registry refused the "
                                         rf"credentials for {stand_in.host} in {config} \(TRITONOPS_REGISTRY_AUTH\)"):
        open_store(f"oci://{stand_in.host}/team/models").get("channels/stable.json")


def _status(url: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["release", "status", "--store", url, "--channel", "stable"])
    assert "Traceback" not in res.output
    return res.exit_code, " ".join(res.output.split())


def test_the_real_registry_says_which_setting_fixes_each_refusal(
        oci_registry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the distribution registry (TLS, htpasswd): a wrong password names the credentials file and its
    variable, and is a usage error (exit 2), not "retry later" (3); an untrusted certificate names
    TRITONOPS_REGISTRY_CA; plain HTTP sent to a TLS registry names TRITONOPS_REGISTRY_PLAIN_HTTP."""
    url = oci_registry.url("errors/models")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {oci_registry.host: {"username": "publisher", "password": "wrong"}}}))
    monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(config))
    monkeypatch.setenv("TRITONOPS_REGISTRY_CA", str(oci_registry.ca))
    code, out = _status(url)
    assert code == ExitCode.USAGE, out
    assert f"HTTP 401 Unauthorized: the registry refused the credentials for {oci_registry.host} in {config} " \
           "(TRITONOPS_REGISTRY_AUTH)" in out
    monkeypatch.setenv("TRITONOPS_REGISTRY_AUTH", str(oci_registry.config))
    monkeypatch.delenv("TRITONOPS_REGISTRY_CA")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-cas.pem"))  # not the machine's CAs either
    code, out = _status(url)
    assert code == ExitCode.USAGE and "set TRITONOPS_REGISTRY_CA to the CA file that signed it" in out, out
    monkeypatch.setenv("TRITONOPS_REGISTRY_PLAIN_HTTP", oci_registry.host)
    code, out = _status(url)
    assert code == ExitCode.USAGE and f"TRITONOPS_REGISTRY_PLAIN_HTTP={oci_registry.host} sends it plain HTTP" in out, out


def test_auth_files_docker_config_and_a_basic_auth_folder(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    b64 = base64.b64encode(b"u:p:with:colons").decode()
    config.write_text(json.dumps({"auths": {"https://reg.example:5000/v1/": {"auth": b64},
                                            "other.example": {"username": "a", "password": "b"}}}))
    assert oci.load_auth(config, "reg.example:5000") == ("u", "p:with:colons")
    assert oci.load_auth(config, "other.example") == ("a", "b")
    assert oci.load_auth(config, "absent.example") is None
    config.write_text(json.dumps({"auths": {"reg.example": {"auth": "not base64!"}}}))
    with pytest.raises(UsageError, match=r"config.json: auths.reg.example.auth: not base64 of USERNAME:PASSWORD"):
        oci.load_auth(config, "reg.example")
    config.write_text(json.dumps({"credsStore": "desktop", "auths": {"reg.example": {}}}))
    with pytest.raises(UsageError, match="credential helpers are not run"):
        oci.load_auth(config, "reg.example")
    config.write_text("[]")
    with pytest.raises(UsageError, match="not a docker config.json"):
        oci.load_auth(config, "reg.example")


@pytest.mark.parametrize("url", ["oci://reg.example", "oci://reg.example/Upper/case", "oci:///repo"])
def test_a_bad_registry_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError, match="expected oci://REGISTRY/REPOSITORY"):
        open_store(url)


def test_reports_are_not_kept_in_a_registry() -> None:
    with pytest.raises(UsageError, match="status reports need a folder or s3:// store"):
        oci.locate("reports/stable/node-1.json")


@pytest.mark.integration  # moto_server answers ECR's GetAuthorizationToken
def test_ecr_credentials_from_get_authorization_token(stand_in: StandIn, moto_s3: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """TRITONOPS_REGISTRY_AUTH=ecr (or an ECR host name and no auth file): the agent's AWS chain (IRSA ...)
    signs GetAuthorizationToken, and its AWS:TOKEN answers the registry's Basic challenge."""
    for k, v in (("TRITONOPS_REGISTRY_AUTH", "ecr"), ("AWS_ACCESS_KEY_ID", "testing"),
                 ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_ECR", moto_s3)):
        monkeypatch.setenv(k, v)
    stand_in.basic = "AWS:123456789012-auth-token"  # what moto answers for its default account
    store = open_store(f"oci://{stand_in.host}/team/models")
    assert store.get("channels/stable.json", conditional=True) == POINTER
    assert store.requests == 3  # 401, GetAuthorizationToken, the manifest again
    assert store.get("channels/stable.json", conditional=True) is None and store.requests == 4  # the token kept
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StoreError, match="ECR auth needs AWS credentials"):
        open_store(f"oci://{stand_in.host}/team/models").get("channels/stable.json")


def test_the_ecr_request_signature_matches_botocore() -> None:
    """GetAuthorizationToken signed as botocore signs it (service "ecr", the JSON target header signed too)."""
    import datetime

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials
    from tritonops.stores.aws_credentials import Credentials, sigv4_headers

    now = datetime.datetime(2026, 12, 4, 12, 0, 0, tzinfo=datetime.UTC)
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "token/with+chars=")
    url, body = "https://api.ecr.eu-west-1.amazonaws.com/", b'{"registryIds": ["123456789012"]}'
    extra = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": oci.ECR_TARGET}
    ours = sigv4_headers(url, "eu-west-1", now=now, credentials=creds, method="POST", service="ecr", extra=extra,
                         payload_hash=hashlib.sha256(body).hexdigest())
    req = AWSRequest(method="POST", url=url, data=body, headers={
        **extra, "X-Amz-Date": ours["x-amz-date"], "X-Amz-Security-Token": creds.token,
        "x-amz-content-sha256": ours["x-amz-content-sha256"]})
    req.context["timestamp"] = ours["x-amz-date"]
    auth = SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key, creds.token), "ecr", "eu-west-1")
    signature = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    assert ours["Authorization"].endswith(f"Signature={signature}")
    assert "/eu-west-1/ecr/aws4_request" in ours["Authorization"]
