"""The release agent on EKS identities, against moto_server with authentication ON.

moto_server (moto[server], the stand-in for AWS STS, IAM and S3 here) runs with its request
authentication switched on after setup (``/moto-api/reset-auth``): every S3 read must carry a SigV4
signature moto recomputes, by an access key it issued, with the session token of that key, for a role
whose policy allows it. Static test keys are refused (a control in the first test), so a release that
arrives was read with the credentials the agent got from STS. One moto gap is closed in its launcher:
moto asks for a signature on every action once auth is on, but AWS never signs
AssumeRoleWithWebIdentity (the web identity token is the credential), so that action is exempted.

* IRSA: ``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN`` -> moto's STS -> S3 reads (in-process agent,
  and the shipped zipapp's ``sync`` as the init container runs it);
* EKS Pod Identity: a credentials endpoint on 127.0.0.1 that checks the token from the token file and
  hands out moto STS credentials that expire in seconds: the agent fetches again before expiry, with the
  token file read again; when the endpoint refuses, the pod keeps serving and the metrics count it;
* STS refusing: ``sync`` and ``pull --once`` exit 3 (retry later) with no traceback, the gated release
  stays active and ready, ``tritonops_release_credentials_errors_total`` counts the failure.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_servers import serving
from tritonops import agent_bundle as bundle
from tritonops.agent import releases
from tritonops.agent.pull import Agent
from tritonops.release import publish as pub
from tritonops.release_format import signing
from tritonops.stores import open_store

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
BUCKET = "models"
STORE = f"s3://{BUCKET}/fleet"
ACCOUNT = "123456789012"  # moto's default account
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/model-reader"
# moto_server, with AssumeRoleWithWebIdentity unsigned as on AWS (see the module's docstring).
LAUNCHER = """
import sys
from moto.core.authorization import ActionAuthenticatorMixin
_check = ActionAuthenticatorMixin._authenticate_and_authorize_action
def _check_unless_web_identity(self, cls, resource="*"):
    if self._get_action() == "AssumeRoleWithWebIdentity":
        return None
    return _check(self, cls, resource)
ActionAuthenticatorMixin._authenticate_and_authorize_action = _check_unless_web_identity
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Moto:
    def __init__(self, url: str, tmp: Path, publisher: dict[str, str]) -> None:
        self.url, self.tmp, self.publisher = url, tmp, publisher
        self.key, self.pub = signing.keygen(tmp / "release.key", tmp / "release.pub")

    def publish(self, channel: str, version: str, note: str = "") -> dict[str, Any]:
        """Publish the sample as release ``<channel>-<version>`` with the publisher's IAM user keys."""
        src = self.tmp / "src" / f"{channel}-{version}"
        shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
        with (src / "mlp" / "1" / "model.py").open("a") as f:
            f.write(f"\n# {channel} {version} {note}\n")
        old = {k: os.environ.get(k) for k in self.publisher}
        os.environ.update(self.publisher)
        try:
            return pub.publish(src, STORE, channel, self.key, target="cpu", version=f"{channel}-{version}",
                               s3_endpoint=self.url)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def sts_credentials(self, session: str) -> dict[str, str]:
        """AssumeRoleWithWebIdentity at moto, as an identity broker (the Pod Identity agent) does."""
        import urllib.parse

        body = urllib.parse.urlencode({"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                                       "RoleArn": ROLE_ARN, "RoleSessionName": session,
                                       "WebIdentityToken": "broker-token"}).encode()
        req = urllib.request.Request(self.url + "/", data=body, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        return {k: re.search(rf"<{k}>([^<]+)</{k}>", text).group(1)  # type: ignore[union-attr]
                for k in ("AccessKeyId", "SecretAccessKey", "SessionToken")}


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    import boto3

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with serving([sys.executable, "-c", LAUNCHER, str(port)], url, "moto_server"):
        setup = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
        iam = boto3.client("iam", **setup)
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity",
            "Principal": {"Federated": f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.example/id/X"}}]}
        iam.create_role(RoleName="model-reader", AssumeRolePolicyDocument=json.dumps(trust))
        iam.put_role_policy(RoleName="model-reader", PolicyName="read-models", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"],
                                                    "Resource": f"arn:aws:s3:::{BUCKET}/fleet/*"}]}))
        iam.create_user(UserName="publisher")
        iam.put_user_policy(UserName="publisher", PolicyName="publish", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        k = iam.create_access_key(UserName="publisher")["AccessKey"]
        publisher = {"AWS_ACCESS_KEY_ID": k["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": k["SecretAccessKey"],
                     "AWS_DEFAULT_REGION": "us-east-1"}
        # From here on moto checks every request's signature, key, token and policy.
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset-auth", data=b"0", method="POST",
                                                      headers={"Content-Type": "text/plain"}), timeout=10).close()
        yield Moto(url, tmp_path_factory.mktemp("irsa"), publisher)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return monkeypatch


def _agent(moto: Moto, root: Path, channel: str) -> Agent:
    (root / "releases").mkdir(parents=True, exist_ok=True)
    return Agent(open_store(STORE, s3_endpoint=moto.url), channel, root / "models", root / "releases", [moto.pub],
                 log=lambda m: None)


def _irsa_env(moto: Moto, root: Path, sts: str | None = None) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "token").write_text("eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig\n")
    return {"AWS_WEB_IDENTITY_TOKEN_FILE": str(root / "token"), "AWS_ROLE_ARN": ROLE_ARN,
            "AWS_ROLE_SESSION_NAME": "triton-0", "AWS_ENDPOINT_URL_STS": sts or moto.url, "AWS_REGION": "us-east-1"}


def _metric(agent: Agent, text: str) -> float:
    m = re.search(rf"^{re.escape(text)} (\S+)$", agent.metrics.render(), re.M)
    return float(m.group(1)) if m else -1.0


def test_irsa_agent_reads_the_store_with_sts_credentials(moto: Moto, tmp_path: Path,
                                                         clean_env: pytest.MonkeyPatch) -> None:
    out = moto.publish("irsa", "r1")
    for k, v in _irsa_env(moto, tmp_path).items():
        clean_env.setenv(k, v)
    agent = _agent(moto, tmp_path / "pod", "irsa")
    result = agent.poll()
    assert result["result"] == "applied", result
    assert releases.state(agent.releases)["digest"] == out["digest"]
    creds = agent.store.credentials
    assert creds is not None and creds.source == "web_identity" and creds.refreshes == 1
    assert agent.store.requests > 3  # pointer, manifest, signature and the blobs, all signed with them
    assert _metric(agent, 'tritonops_release_credentials_errors_total{source="web_identity"}') == 0
    expiry = _metric(agent, 'tritonops_release_credentials_expiry_timestamp_seconds{source="web_identity"}')
    assert time.time() + 600 < expiry < time.time() + 7200  # moto's one-hour session
    # The control: keys moto never issued are refused, so the reads above were the STS credentials.
    clean_env.delenv("AWS_WEB_IDENTITY_TOKEN_FILE")
    clean_env.setenv("AWS_ACCESS_KEY_ID", "AKIANOTISSUED")
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    control = _agent(moto, tmp_path / "control", "irsa").poll()
    assert control["result"] == "error" and "403" in control["error"], control


def test_the_shipped_agent_syncs_with_irsa(moto: Moto, tmp_path: Path) -> None:
    moto.publish("zipapp", "r1")
    pyz = bundle.build(tmp_path / "tritonops-agent.pyz")
    (tmp_path / "node" / "releases").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | _irsa_env(moto, tmp_path)
    run = subprocess.run([sys.executable, "-I", str(pyz), "sync", "--store", STORE, "--channel", "zipapp",
                          "--s3-endpoint", moto.url, "--link", str(tmp_path / "node" / "models"),
                          "--releases", str(tmp_path / "node" / "releases"), "--trusted-key", str(moto.pub)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["result"] == "synced"
    assert os.readlink(tmp_path / "node" / "models") == "releases/zipapp-r1"


class PodIdentity:
    """An EKS Pod Identity agent stand-in on 127.0.0.1: checks ``Authorization`` against the token it
    expects, then hands out moto STS credentials that expire ``life`` seconds later."""

    def __init__(self, moto: Moto, token: str, life: float) -> None:
        self.token, self.life, self.refuse = token, life, False
        self.seen: list[str | None] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.seen.append(self.headers.get("Authorization"))
                if outer.refuse or self.headers.get("Authorization") != outer.token:
                    code, body = 403, json.dumps({"Message": "invalid token"})
                else:
                    c = moto.sts_credentials(f"pod-{len(outer.seen)}")
                    exp = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=outer.life)
                    code, body = 200, json.dumps({"AccessKeyId": c["AccessKeyId"], "Token": c["SessionToken"],
                                                  "SecretAccessKey": c["SecretAccessKey"],
                                                  "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/credentials"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


def test_pod_identity_refreshes_before_expiry_and_keeps_serving_when_refused(
        moto: Moto, tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    life = 3.0  # seconds: refreshed from half its life, refused credentials fail from the last quarter
    endpoint = PodIdentity(moto, "pod-token-1", life)
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text("pod-token-1")
    clean_env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url)
    clean_env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token_file))
    try:
        moto.publish("pod", "r1")
        agent = _agent(moto, tmp_path / "pod", "pod")
        first = agent.poll()
        assert first["result"] == "applied", first
        assert endpoint.seen == ["pod-token-1"]
        token_file.write_text("pod-token-2")  # the kubelet rotates the token; the old one is refused now
        endpoint.token = "pod-token-2"
        moto.publish("pod", "r2", "second")
        assert agent.poll()["result"] == "applied"  # within the credentials' first half: no new fetch
        assert endpoint.seen == ["pod-token-1"]
        time.sleep(life / 2 + 0.2)
        moto.publish("pod", "r3", "third")
        third = agent.poll()
        assert third["result"] == "applied" and third["release"] == "pod-r3", third
        assert endpoint.seen == ["pod-token-1", "pod-token-2"]  # fetched again, with the file read again
        assert agent.store.credentials is not None and agent.store.credentials.refreshes == 2
        # Refused from now on: once the credentials are past use, polls fail, the pod keeps serving r3.
        endpoint.refuse = True
        time.sleep(life * 3 / 4 + 0.2)
        moto.publish("pod", "r4", "fourth")
        failed = agent.poll()
        assert failed["result"] == "error" and "HTTP 403" in failed["error"], failed
        assert "pod-token" not in failed["error"]
        assert os.readlink(agent.link) == "releases/pod-r3" and agent.ready()
        assert _metric(agent, 'tritonops_release_credentials_errors_total{source="container"}') >= 1
        assert _metric(agent, 'tritonops_release_polls_total{channel="pod",result="error"}') == 1
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()


@contextlib.contextmanager
def _sts_refusing() -> Iterator[str]:
    """An STS endpoint on 127.0.0.1 that answers every AssumeRoleWithWebIdentity with AccessDenied."""
    body = (b'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
            b"<Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message>"
            b"</Error><RequestId>r-1</RequestId></ErrorResponse>")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(403)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_sts_refusing_is_retry_later_and_the_served_release_stays(moto: Moto, tmp_path: Path,
                                                                  clean_env: pytest.MonkeyPatch) -> None:
    moto.publish("refused", "r1")
    node = tmp_path / "node"
    for k, v in _irsa_env(moto, tmp_path).items():
        clean_env.setenv(k, v)
    assert _agent(moto, node, "refused").poll()["result"] == "applied"  # served and gated
    moto.publish("refused", "r2", "second")
    pyz = bundle.build(tmp_path / "tritonops-agent.pyz")
    with _sts_refusing() as sts:
        clean_env.setenv("AWS_ENDPOINT_URL_STS", sts)
        agent = _agent(moto, node, "refused")
        out = agent.poll()
        assert out["result"] == "error" and "AccessDenied: Not authorized" in out["error"], out
        assert os.readlink(agent.link) == "releases/refused-r1" and agent.ready()
        assert _metric(agent, 'tritonops_release_credentials_errors_total{source="web_identity"}') == 1
        assert _metric(agent, 'tritonops_release_polls_total{channel="refused",result="error"}') == 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | _irsa_env(moto, tmp_path, sts)
        common = ["--store", STORE, "--channel", "refused", "--s3-endpoint", moto.url, "--link", str(node / "models"),
                  "--releases", str(node / "releases"), "--trusted-key", str(moto.pub)]
        for command in (["sync"], ["pull", "--once", "--triton", f"http://127.0.0.1:{_free_port()}"]):
            run = subprocess.run([sys.executable, "-I", str(pyz), *command, *common], env=env, capture_output=True,
                                 text=True, timeout=60)
            assert run.returncode == 3, (command, run.stdout, run.stderr)  # ExitCode.FAILED: retry later
            assert "Traceback" not in run.stderr and "AccessDenied" in run.stdout + run.stderr
            assert "projected-service-account-token" not in run.stdout + run.stderr
            assert os.readlink(node / "models") == "releases/refused-r1"
