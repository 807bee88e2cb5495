"""The agent's AWS credential chain (aws_credentials.py): botocore's order and URI rules, refresh before
expiry, failures that name the source but no secret, and SigV4 with temporary credentials equal to
botocore's. The endpoints are small http.server instances on 127.0.0.1; the clock is injected.
"""

from __future__ import annotations

import datetime
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tritonops.stores import aws_credentials as ac
from tritonops.stores.aws_credentials import sigv4_headers

T0 = 1_800_000_000.0  # 2027-01-15
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "IQoJb3JpZ2luX2VjE//session+token/with=chars"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Endpoint:
    """A credentials endpoint on loopback: answers ``self.reply(handler)`` -> (status, body)."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                outer.seen.append({"auth": self.headers.get("Authorization"), "path": self.path,
                                   "body": self.rfile.read(n).decode() if n else ""})
                code, body = outer.reply(outer.seen[-1])
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()


@pytest.fixture
def endpoint() -> Iterator[Any]:
    made: list[Endpoint] = []

    def make(reply: Any) -> Endpoint:
        made.append(Endpoint(reply))
        return made[-1]

    yield make
    for e in made:
        e.server.shutdown()
        e.server.server_close()


def _container_reply(token_of: dict[str, str], clock: Clock, life: float = 3600.0) -> Any:
    """Pod Identity: 200 with fresh credentials when Authorization is the current token, else 401."""
    issued: list[str] = []

    def reply(req: dict[str, Any]) -> tuple[int, str]:
        if req["auth"] != token_of["current"]:
            return 401, '{"Message": "bad token"}'
        issued.append(req["auth"])
        n = len(issued)
        return 200, json.dumps({"AccessKeyId": f"ASIAPOD{n}", "SecretAccessKey": SECRET, "Token": f"{TOKEN}{n}",
                                "Expiration": _iso(clock.now + life)})
    return reply


def _chain(env: dict[str, str], clock: Clock) -> ac.Provider:
    p = ac.from_env(env, clock=clock)
    assert p is not None
    return p


# --- the chain -------------------------------------------------------------------------------------------

def test_chain_follows_botocores_order(tmp_path: Path) -> None:
    irsa = {"AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "t"), "AWS_ROLE_ARN": "arn:aws:iam::1:role/r"}
    pod = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.23/v1/credentials"}
    static = {"AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": "minio-secret"}
    assert ac.from_env({}) is None
    assert isinstance(ac.from_env(pod), ac.ContainerProvider)
    assert isinstance(ac.from_env({**pod, **irsa}), ac.WebIdentityProvider)
    provider = ac.from_env({**pod, **irsa, **static})
    assert isinstance(provider, ac.StaticProvider)
    assert provider.get() == ac.Credentials("minio", "minio-secret")


def test_half_set_irsa_names_the_missing_variable(tmp_path: Path) -> None:
    with pytest.raises(ac.CredentialsError, match="AWS_ROLE_ARN is not"):
        ac.from_env({"AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "t")})


@pytest.mark.parametrize("uri", [
    "https://creds.example.com/v1", "http://127.0.0.1:8080/creds", "http://127.9.9.9/c", "http://[::1]:80/c",
    "http://localhost/c", "http://169.254.170.2/v2/credentials/x", "http://169.254.170.23/v1/credentials",
    "http://[fd00:ec2::23]/v1/credentials", "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/c",
    "http://evil.example.com/c", "file:///etc/passwd", "ftp://127.0.0.1/c",
])
def test_container_uri_is_allowed_exactly_where_botocore_allows_it(uri: str) -> None:
    from botocore.utils import ContainerMetadataFetcher

    try:
        ContainerMetadataFetcher()._validate_allowed_url(uri)
        botocore_ok = True
    except ValueError:
        botocore_ok = False
    if uri.startswith(("file:", "ftp:")):
        botocore_ok = False  # botocore would then fail to fetch; we refuse up front
    try:
        ac.check_container_uri(uri)
        ours = True
    except ac.CredentialsError as e:
        assert "AWS_CONTAINER_CREDENTIALS_FULL_URI" in str(e)
        ours = False
    assert ours == botocore_ok


# --- EKS Pod Identity: token file, refresh, failures ---------------------------------------------------

def test_pod_identity_refreshes_before_expiry_and_rereads_the_token_file(tmp_path: Path, endpoint: Any) -> None:
    clock, tokens = Clock(), {"current": "token-1"}
    ep = endpoint(_container_reply(tokens, clock))
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text("token-1\n")
    p = _chain({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ep.url + "/v1/credentials",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token_file)}, clock)
    first = p.get()
    assert (first.access_key, first.token, first.expiry) == ("ASIAPOD1", TOKEN + "1", T0 + 3600)
    clock.now = T0 + 3600 - 901  # outside botocore's 15-minute advisory window: cached
    assert p.get() is first and len(ep.seen) == 1
    token_file.write_text("token-2\n")  # the kubelet rotated the projected token
    tokens["current"] = "token-2"
    clock.now = T0 + 3600 - 899  # inside it: fetched again, with the token read again
    second = p.get()
    assert second.access_key == "ASIAPOD2" and [r["auth"] for r in ep.seen] == ["token-1", "token-2"]
    assert (p.refreshes, p.errors) == (2, 0)


def test_short_lived_credentials_refresh_at_half_their_life(tmp_path: Path, endpoint: Any) -> None:
    clock, tokens = Clock(), {"current": "t"}
    ep = endpoint(_container_reply(tokens, clock, life=60))
    p = _chain({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ep.url, "AWS_CONTAINER_AUTHORIZATION_TOKEN": "t"}, clock)
    p.get()
    clock.now = T0 + 29
    p.get()
    assert len(ep.seen) == 1
    clock.now = T0 + 31
    assert p.get().access_key == "ASIAPOD2"


def test_a_refused_refresh_keeps_valid_credentials_then_fails_naming_the_endpoint_not_the_secret(
        tmp_path: Path, endpoint: Any) -> None:
    clock, tokens = Clock(), {"current": "good-token"}
    ep = endpoint(_container_reply(tokens, clock))
    p = _chain({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ep.url + "/creds?x=secretquery",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN": "good-token"}, clock)
    first = p.get()
    tokens["current"] = "nobody"  # the agent's token is refused from now on
    clock.now = T0 + 3600 - 800  # advisory window: the refresh fails, the old credentials still serve
    assert p.get() is first and p.errors == 1
    clock.now += 5  # within RETRY_AFTER_FAILURE: no new request
    assert p.get() is first and len(ep.seen) == 2
    clock.now = T0 + 3600 - 599  # mandatory window: the failure is raised
    with pytest.raises(ac.CredentialsError) as e:
        p.get()
    text = str(e.value)
    assert "AWS_CONTAINER_CREDENTIALS_FULL_URI" in text and "HTTP 401" in text
    for secret in ("good-token", SECRET, TOKEN, "secretquery"):
        assert secret not in text
    assert p.errors == 2 and secret not in repr(first)


def test_a_closed_endpoint_is_a_credentials_error_within_the_timeout() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = _chain({"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"http://127.0.0.1:{port}/creds"}, Clock())
    with pytest.raises(ac.CredentialsError, match="refused"):
        p.get()


@pytest.mark.parametrize("body", ["not json", "{}", '{"AccessKeyId": 1, "SecretAccessKey": "s", "Token": "t", '
                                  '"Expiration": "2030-01-01T00:00:00Z"}', "x" * (ac.RESPONSE_MAX + 10)])
def test_a_malformed_container_answer_is_refused(endpoint: Any, body: str) -> None:
    ep = endpoint(lambda req: (200, body))
    with pytest.raises(ac.CredentialsError, match="AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        ac.ContainerProvider({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ep.url}).get()


def test_a_token_with_a_newline_is_never_sent(endpoint: Any) -> None:
    ep = endpoint(lambda req: (500, ""))
    p = ac.ContainerProvider({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ep.url,
                              "AWS_CONTAINER_AUTHORIZATION_TOKEN": "a\r\nX-Injected: 1"})
    with pytest.raises(ac.CredentialsError, match="not a legal header value"):
        p.get()
    assert ep.seen == []


# --- IRSA: STS AssumeRoleWithWebIdentity ----------------------------------------------------------------

STS_OK = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult><Credentials>
    <AccessKeyId>ASIASTS</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>
    <SessionToken>{token}</SessionToken><Expiration>{exp}</Expiration>
  </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"""
STS_DENIED = """<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>
  <Code>InvalidIdentityToken</Code><Message>No OpenIDConnect provider found in your account</Message></Error>
  <RequestId>1</RequestId></ErrorResponse>"""


def _irsa(tmp_path: Path, url: str, clock: Clock | None = None) -> ac.Provider:
    (tmp_path / "token").write_text("eyJhbGciOi.jwt-1.sig")
    return _chain({"AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "token"), "AWS_ENDPOINT_URL_STS": url,
                   "AWS_ROLE_ARN": "arn:aws:iam::111122223333:role/model-reader",
                   "AWS_ROLE_SESSION_NAME": "pod-a"}, clock or Clock())


def test_irsa_sends_the_token_file_and_parses_sts(tmp_path: Path, endpoint: Any) -> None:
    import urllib.parse

    clock = Clock()
    ep = endpoint(lambda req: (200, STS_OK.format(secret=SECRET, token=TOKEN, exp="2027-01-15T09:00:00.000Z")))
    p = _irsa(tmp_path, ep.url, clock)
    c = p.get()
    assert (c.access_key, c.secret_key, c.token) == ("ASIASTS", SECRET, TOKEN)
    assert c.expiry == ac.parse_time("2027-01-15T09:00:00Z", "x")
    form = dict(urllib.parse.parse_qsl(ep.seen[0]["body"]))
    assert form == {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleSessionName": "pod-a",
                    "RoleArn": "arn:aws:iam::111122223333:role/model-reader", "WebIdentityToken": "eyJhbGciOi.jwt-1.sig"}
    assert ep.seen[0]["auth"] is None  # unsigned, as AWS SDKs send it
    (tmp_path / "token").write_text("eyJhbGciOi.jwt-2.sig")
    assert c.expiry is not None
    clock.now = c.expiry - 60
    p.get()
    assert dict(urllib.parse.parse_qsl(ep.seen[1]["body"]))["WebIdentityToken"] == "eyJhbGciOi.jwt-2.sig"


def test_sts_refusing_names_its_code_and_message_never_the_token(tmp_path: Path, endpoint: Any) -> None:
    ep = endpoint(lambda req: (400, STS_DENIED))
    with pytest.raises(ac.CredentialsError) as e:
        _irsa(tmp_path, ep.url).get()
    text = str(e.value)
    assert "InvalidIdentityToken: No OpenIDConnect provider" in text and "model-reader" in text
    assert "jwt" not in text


@pytest.mark.parametrize(("body", "match"), [
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>', "DOCTYPE"),
    ("<a>" + "b" * ac.RESPONSE_MAX + "</a>", "larger than"),
    ("<<<", "not XML"),
    (STS_OK.format(secret="", token=TOKEN, exp="2027-01-15T09:00:00Z"), "lacks SecretAccessKey"),
    (STS_OK.format(secret=SECRET, token=TOKEN, exp="tomorrow"), "not an ISO 8601 time"),
])
def test_a_bad_sts_answer_is_refused(tmp_path: Path, endpoint: Any, body: str, match: str) -> None:
    ep = endpoint(lambda req: (200, body))
    with pytest.raises(ac.CredentialsError, match=match):
        _irsa(tmp_path, ep.url).get()


def test_credentials_already_expired_are_an_error(tmp_path: Path, endpoint: Any) -> None:
    ep = endpoint(lambda req: (200, STS_OK.format(secret=SECRET, token=TOKEN, exp=_iso(T0 - 5))))
    with pytest.raises(ac.CredentialsError, match="expired 5s ago"):
        _irsa(tmp_path, ep.url).get()


def test_sts_endpoint_is_regional_unless_overridden() -> None:
    assert ac.sts_endpoint({"AWS_REGION": "eu-west-1"}) == "https://sts.eu-west-1.amazonaws.com/"
    assert ac.sts_endpoint({"AWS_DEFAULT_REGION": "ap-south-1"}) == "https://sts.ap-south-1.amazonaws.com/"
    assert ac.sts_endpoint({"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:5000"}) == \
        "http://127.0.0.1:5000/"


@pytest.mark.parametrize(("text", "epoch"), [
    ("2026-12-01T17:00:00Z", 1796144400.0), ("2026-12-01T17:00:00.250Z", 1796144400.25),
    ("2026-12-01T18:00:00+01:00", 1796144400.0), ("2026-12-01T17:00:00", 1796144400.0),
])
def test_expiration_times_parse_on_python_3_10(text: str, epoch: float) -> None:
    assert ac.parse_time(text, "x") == epoch


# --- SigV4 with temporary credentials equals botocore's --------------------------------------------------

@pytest.mark.parametrize("url", [
    "https://models.s3.eu-west-1.amazonaws.com/fleet/channels/stable.json",
    "http://127.0.0.1:5000/models/fleet/blobs/sha256/ab%20cd~e%2Bf?versionId=1&a=b%20c",
])
def test_sigv4_with_a_session_token_equals_botocore(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    import botocore.auth
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    now = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now.replace(tzinfo=None))  # its clock
    creds = ac.Credentials("ASIAEXAMPLE", SECRET, TOKEN, T0)
    ours = sigv4_headers(url, "eu-west-1", now=now, credentials=creds, env={})
    req = AWSRequest(method="GET", url=url)
    req.context["payload_signing_enabled"] = True  # sha256 of the empty body, as the agent sends
    S3SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key, creds.token), "s3", "eu-west-1").add_auth(req)
    assert ours["Authorization"] == req.headers["Authorization"]
    assert ours["x-amz-security-token"] == req.headers["X-Amz-Security-Token"] == TOKEN
    assert ours["x-amz-date"] == req.headers["X-Amz-Date"]
    assert "x-amz-security-token" in ours["Authorization"].split("SignedHeaders=")[1]
    static = sigv4_headers(url, "eu-west-1", now=now, env={"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"})
    assert "x-amz-security-token" not in static


def test_concurrent_first_use_fetches_once(endpoint: Any) -> None:
    clock, tokens = Clock(), {"current": "t"}
    ep = endpoint(_container_reply(tokens, clock))
    p = _chain({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ep.url, "AWS_CONTAINER_AUTHORIZATION_TOKEN": "t"}, clock)
    got: list[ac.Credentials] = []
    threads = [threading.Thread(target=lambda: got.append(p.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ep.seen) == 1 and len({id(c) for c in got}) == 1


def test_a_missing_token_file_names_its_variable(tmp_path: Path) -> None:
    p = _chain({"AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "gone"), "AWS_ROLE_ARN": "arn:aws:iam::1:role/r",
                "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"}, Clock())
    with pytest.raises(ac.CredentialsError, match=r"^AWS_WEB_IDENTITY_TOKEN_FILE .*gone: not found"):
        p.get()


def test_the_credentials_module_is_standard_library_only() -> None:
    import ast
    import sys

    tree = ast.parse(Path(ac.__file__).read_text())
    absolute = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    absolute |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
    assert absolute - {"__future__"} <= set(sys.stdlib_module_names)
