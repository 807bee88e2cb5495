"""The release agent's IRSA policy (eks.s3_read_policy) judged by an IAM evaluator, not by reading it.

A moto_server of its own (``/moto-api/reset-auth``: IAM enforced once the bucket, the users and their
policies exist) holds a store under ``vision/``; the agent's own S3 code (SigV4 GET, the report's PUT)
signs with the access key of a user carrying exactly the policy the stack attaches to the role. With
``reports``: its status report is written, and nothing else is (a pointer, a blob, another prefix).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonops.core.errors import StoreError
from tritonops.core.keys import report_key
from tritonops.k8s.stacks.cluster_aws import eks
from tritonops.stores import Store, open_store

pytestmark = pytest.mark.integration  # a real server (moto_server) on loopback

BUCKET, PREFIX = "models", "vision"


@pytest.fixture(scope="module")
def iam_s3() -> Iterator[dict[str, object]]:
    """moto_server with IAM enforced; users ``reader`` (Get/List) and ``reporter`` (also reports/*)."""
    import socket

    import boto3
    from local_servers import serving

    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]', in the dev extra)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with serving([str(exe), "-H", "127.0.0.1", "-p", str(port)], url, "moto_server"):
        admin = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "admin",
                 "aws_secret_access_key": "admin"}
        s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
        s3.create_bucket(Bucket=BUCKET)
        for key in ("vision/channels/stable.json", "other/channels/stable.json"):
            s3.put_object(Bucket=BUCKET, Key=key, Body=b'{"signed": {}}')
        users = {}
        for name, reports in (("reader", False), ("reporter", True)):
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName="s3",
                                PolicyDocument=eks.s3_read_policy(BUCKET, PREFIX, reports=reports))
            k = iam.create_access_key(UserName=name)["AccessKey"]
            users[name] = (k["AccessKeyId"], k["SecretAccessKey"])
        req = urllib.request.Request(f"{url}/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})  # not a form: moto reads the body
        urllib.request.urlopen(req, timeout=10).close()  # from now on every request is judged by IAM
        yield {"url": url, "users": users}


def _as(monkeypatch: pytest.MonkeyPatch, iam_s3: dict[str, object], user: str, prefix: str = PREFIX) -> Store:
    for k in ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_SESSION_TOKEN",
              "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    key_id, secret = iam_s3["users"][user]  # type: ignore[index]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return open_store(f"s3://{BUCKET}/{prefix}", s3_endpoint=str(iam_s3["url"]))


REPORT = json.dumps({"signed": {"type": "report"}, "signatures": [], "unsigned": True}).encode()


def test_the_reporting_role_writes_its_report_and_nothing_else(iam_s3: dict[str, object],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = _as(monkeypatch, iam_s3, "reporter")
    assert store.get("channels/stable.json") == b'{"signed": {}}'  # reads as before
    store.put(report_key("stable", "node-1"), REPORT)  # allowed: <prefix>/reports/*
    assert store.get("reports/stable/node-1.json") == REPORT
    for key in ("channels/stable.json", "blobs/sha256/" + "0" * 64, "ids/r9.json", "reportsX/stable/a.json"):
        with pytest.raises(StoreError, match="PUT answered HTTP 403"):
            store.put(key, b"{}")  # a pointer, a blob, an id, a look-alike folder: denied
    other = _as(monkeypatch, iam_s3, "reporter", prefix="other")
    with pytest.raises(StoreError, match="HTTP 403"):
        other.put(report_key("stable", "node-1"), REPORT)  # another prefix's reports
    with pytest.raises(StoreError, match="HTTP 403"):
        other.get("channels/stable.json")


def test_the_read_only_role_cannot_write_a_report(iam_s3: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    store = _as(monkeypatch, iam_s3, "reader")
    assert store.get("channels/stable.json") == b'{"signed": {}}'
    with pytest.raises(StoreError, match="PUT answered HTTP 403"):
        store.put(report_key("stable", "node-2"), REPORT)
