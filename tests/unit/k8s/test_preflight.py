"""``tritonops preflight`` against a fake Kubernetes API on 127.0.0.1: the one mocked part of the check.

The fake serves recorded responses (data/fake_cluster/complete.json: discovery documents, a StorageClass,
an IngressClass, a Gateway and its GatewayClass, the aws-node DaemonSet, Secrets as metadata), each checked
here against the Kubernetes OpenAPI schemas kubernetes-validate carries, and the real API's 404 Status for
anything else. A complete cluster exits 0; with three prerequisites removed, exactly those three are listed.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource
from tritonops.cli import app
from typer.testing import CliRunner

runner = CliRunner()
RECORDED = json.loads((Path(__file__).parent / "data" / "fake_cluster" / "complete.json").read_text())
TOKEN = "k8s-aws-v1.fake-bearer-token-never-printed"
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / "v1.30.0-local-strict"


def _not_found(path: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"the server could not find the requested resource ({path})", "reason": "NotFound",
            "details": {}, "code": 404}


class FakeApi:
    def __init__(self, responses: dict[str, Any], tls: tuple[Path, Path] | None = None) -> None:
        self.responses = responses
        self.requests: list[tuple[str, str, str]] = []  # path, Accept, Authorization
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0]
                api.requests.append((path, self.headers.get("Accept", ""), self.headers.get("Authorization", "")))
                body = api.responses.get(path)
                status = 200 if body is not None else 404
                data = json.dumps(body if body is not None else _not_found(path)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(autouse=True)
def _no_store_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel probes read the release stores (tests/unit/k8s/test_channel_keys.py runs them on a folder
    store); here the cluster's side alone."""
    monkeypatch.setenv("TRITONOPS_CHANNEL_CHECK", "off")


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi(copy.deepcopy(RECORDED))
    yield api
    api.server.shutdown()
    api.server.server_close()


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "users": [{"name": "fake", "user": {"token": TOKEN}}],
    }))
    return path


def _preflight(tmp_path: Path, server: str, stack: str, env: str, project_dir: Path | None = None) -> tuple[int, str]:
    where = ["--project-dir", str(project_dir)] if project_dir is not None else []
    result = runner.invoke(app, ["preflight", "--stack", stack, "--env", env, "--json", *where,
                                 "--kubeconfig", str(_kubeconfig(tmp_path, server))])
    return result.exit_code, result.output


def _legacy_ingress_project(tmp_path: Path) -> Path:
    """A project folder whose dev triton file uses the legacy ingress-nginx mode (dev ships in gateway mode)."""
    import shutil

    from k8s_harness import STACKS_DIR

    dest = tmp_path / "legacy"
    shutil.copytree(STACKS_DIR, dest / "stacks", ignore=shutil.ignore_patterns("venv", "__pycache__"))
    path = dest / "stacks" / "triton" / "Pulumi.dev.yaml"
    text = path.read_text()
    assert "    mode: gateway\n" in text
    text = text.replace("    mode: gateway\n", "    mode: ingress\n    className: nginx\n"
                        "    tlsSecret: dev-tritonops-example-com-tls\n", 1)
    path.write_text(text.replace("    gatewayName: inference\n", "", 1).replace("    gatewayNamespace: gateway\n", "", 1))
    return dest


def _missing(output: str) -> set[str]:
    return {c["what"] for c in json.loads(output)["checks"] if not c["ok"]}


def _schema_valid(doc: dict[str, Any], name: str) -> None:
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    defs = Resource.from_contents(json.loads((SCHEMAS / "_definitions.json").read_text()))
    registry = defs @ (Resource.from_contents(schema) @ Registry())
    jsonschema.Draft202012Validator(schema, registry=registry).validate(doc)


def test_the_recorded_responses_are_shaped_as_the_real_apis() -> None:
    for path, doc in RECORDED.items():
        if doc.get("kind") == "APIResourceList":
            _schema_valid(doc, "apiresourcelist-meta-v1")
            assert path == f"/apis/{doc['groupVersion']}"
        elif doc.get("apiVersion") in ("v1", "apps/v1", "storage.k8s.io/v1", "networking.k8s.io/v1"):  # all but CRs
            kubernetes_validate.validate(doc, "1.30", strict=True)
    _schema_valid(_not_found("/x"), "status-meta-v1")


@pytest.mark.parametrize(("stack", "env"), [("triton", "dev"), ("platform", "prod"), ("platform", "dev")])
def test_a_complete_cluster_exits_0(fake: FakeApi, tmp_path: Path, stack: str, env: str) -> None:
    code, out = _preflight(tmp_path, fake.url, stack, env)
    assert code == 0, out
    assert _missing(out) == set() and json.loads(out)["checks"]


def test_three_gateway_prerequisites_removed_are_exactly_those_listed(fake: FakeApi, tmp_path: Path) -> None:
    """dev (gateway mode): the contract's Gateway, Envoy Gateway's BackendTrafficPolicy CRD (the wake routing)
    and the CNI's network-policy option, each with the command that provides it."""
    del fake.responses["/apis/gateway.networking.k8s.io/v1/namespaces/gateway/gateways/inference"]
    del fake.responses["/apis/gateway.envoyproxy.io/v1alpha1"]
    agent = fake.responses["/apis/apps/v1/namespaces/kube-system/daemonsets/aws-node"]["spec"]["template"]["spec"]
    agent["containers"][1]["args"][1] = "--enable-network-policy=false"  # the add-on's default
    code, out = _preflight(tmp_path, fake.url, "triton", "dev")
    assert code == 1, out
    missing = _missing(out)
    assert "CRD backendtrafficpolicies.gateway.envoyproxy.io v1alpha1" in missing
    assert "VPC CNI network policy (aws-eks-nodeagent --enable-network-policy=true)" in missing
    # Without the Gateway, its GatewayClass cannot be read either: both named, one command.
    assert {"Gateway gateway/inference", "GatewayClass of Gateway gateway/inference"} <= missing
    assert len(missing) == 4, missing
    commands = {c["what"]: c["command"] for c in json.loads(out)["checks"] if not c["ok"]}
    assert commands["CRD backendtrafficpolicies.gateway.envoyproxy.io v1alpha1"].startswith(
        "helm upgrade --install eg oci://docker.io/envoyproxy/gateway-helm")


def test_three_prerequisites_removed_are_exactly_the_three_listed(fake: FakeApi, tmp_path: Path) -> None:
    """The legacy ingress-nginx mode: its IngressClass and the Ingresses' TLS Secret."""
    del fake.responses["/apis/networking.k8s.io/v1/ingressclasses/nginx"]
    del fake.responses["/api/v1/namespaces/triton/secrets/dev-tritonops-example-com-tls"]
    agent = fake.responses["/apis/apps/v1/namespaces/kube-system/daemonsets/aws-node"]["spec"]["template"]["spec"]
    agent["containers"][1]["args"][1] = "--enable-network-policy=false"  # the add-on's default
    code, out = _preflight(tmp_path, fake.url, "triton", "dev", _legacy_ingress_project(tmp_path))
    assert code == 1, out
    assert _missing(out) == {
        "IngressClass nginx",
        "Secret triton/dev-tritonops-example-com-tls",
        "VPC CNI network policy (aws-eks-nodeagent --enable-network-policy=true)",
    }
    commands = {c["what"]: c["command"] for c in json.loads(out)["checks"] if not c["ok"]}
    assert commands["IngressClass nginx"].startswith("helm upgrade --install ingress-nginx")
    assert "enableNetworkPolicy" in commands["VPC CNI network policy (aws-eks-nodeagent --enable-network-policy=true)"]
    assert commands["Secret triton/dev-tritonops-example-com-tls"].startswith("kubectl create secret tls")


def test_before_the_stacks_first_up_its_namespaces_secrets_are_later_not_missing(fake: FakeApi,
                                                                                 tmp_path: Path) -> None:
    """One creator per name: namespace triton is the triton stack's, so the TLS Secret the user makes in it
    comes after that stack's first up; preflight says so (exit 0), as the walkthrough runs it."""
    del fake.responses["/api/v1/namespaces/triton"]
    del fake.responses["/api/v1/namespaces/triton/secrets/dev-tritonops-example-com-tls"]
    code, out = _preflight(tmp_path, fake.url, "triton", "dev", _legacy_ingress_project(tmp_path))  # legacy mode
    assert code == 0, out
    later = {c["what"]: c for c in json.loads(out)["checks"] if c["later"]}
    assert set(later) == {"Secret triton/dev-tritonops-example-com-tls"}
    assert later["Secret triton/dev-tritonops-example-com-tls"]["later"] == (
        "after the first `pulumi up` of stack triton has created namespace triton")
    assert later["Secret triton/dev-tritonops-example-com-tls"]["command"].startswith("kubectl create secret tls")


def test_a_storage_class_without_its_csi_driver_provisions_nothing(fake: FakeApi, tmp_path: Path) -> None:
    del fake.responses["/apis/storage.k8s.io/v1/csidrivers/ebs.csi.aws.com"]
    code, out = _preflight(tmp_path, fake.url, "platform", "prod")
    assert code == 1 and _missing(out) == {"the CSI driver of StorageClass gp3"}
    assert "aws-ebs-csi-driver" in next(c["command"] for c in json.loads(out)["checks"] if not c["ok"])
    del fake.responses["/apis/storage.k8s.io/v1/storageclasses/gp3"]
    assert _missing(_preflight(tmp_path, fake.url, "platform", "prod")[1]) == {"StorageClass gp3"}


def test_crd_versions_gateway_and_class_and_the_zero_digests(fake: FakeApi, tmp_path: Path) -> None:
    """prod: the Gateway API served without grpcroutes (an older CRD bundle), a GatewayClass missing, and
    the committed all-zero image digests, each named with what provides it."""
    gv = fake.responses["/apis/gateway.networking.k8s.io/v1"]
    gv["resources"] = [r for r in gv["resources"] if not r["name"].startswith("grpcroutes")]
    del fake.responses["/apis/gateway.networking.k8s.io/v1/gatewayclasses/eg"]
    code, out = _preflight(tmp_path, fake.url, "triton", "prod")
    assert code == 1
    missing = _missing(out)
    assert {"CRD grpcroutes.gateway.networking.k8s.io v1", "GatewayClass of Gateway gateway/inference"} <= missing
    digests = {m for m in missing if m.startswith("image digest of")}
    assert len(digests) == 2 and len(missing) == 4
    assert "CRD httproutes.gateway.networking.k8s.io v1" not in missing


def test_secrets_are_read_as_metadata_with_the_kubeconfigs_token_never_printed(fake: FakeApi, tmp_path: Path) -> None:
    code, out = _preflight(tmp_path, fake.url, "triton", "dev", _legacy_ingress_project(tmp_path))  # a TLS Secret
    assert code == 0
    secrets = [r for r in fake.requests if "/secrets/" in r[0]]
    assert secrets and all("as=PartialObjectMetadata" in accept for _, accept, _ in secrets)
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in fake.requests)
    assert TOKEN not in out


def test_no_reachable_cluster_says_so_and_exits_3(tmp_path: Path) -> None:
    api = FakeApi({})
    url = api.url
    api.server.shutdown()
    api.server.server_close()  # the port is closed: nothing answers
    code, out = _preflight(tmp_path, url, "triton", "dev")
    assert code == 3
    assert f"no cluster to check: the API server {url} did not answer" in " ".join(out.split())
    result = runner.invoke(app, ["preflight", "--stack", "triton", "--env", "dev",
                                 "--kubeconfig", str(tmp_path / "none")])
    assert result.exit_code == 3 and "no kubeconfig at" in result.output


def test_a_bad_stack_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["preflight", "--stack", "nope", "--env", "dev"])
    assert result.exit_code == 2 and "unknown stack 'nope'" in result.output


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA (openssl, as the release signing uses)."""
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return cert, key


def test_https_with_the_kubeconfigs_ca_and_an_exec_credential_plugin(tmp_path: Path) -> None:
    """As EKS's kubeconfig: certificate-authority-data and `aws eks get-token` (here a Python stand-in that
    prints an ExecCredential); a server whose certificate the CA did not sign is no cluster (exit 3)."""
    cert, key = _self_signed(tmp_path)
    api = FakeApi(copy.deepcopy(RECORDED), tls=(cert, key))
    try:
        plugin = ("import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', "
                  f"'kind': 'ExecCredential', 'status': {{'token': '{TOKEN}'}}}}))")
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "eks",
               "clusters": [{"name": "eks", "cluster": {"server": api.url, "certificate-authority-data":
                                                         base64.b64encode(cert.read_bytes()).decode()}}],
               "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
               "users": [{"name": "eks", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                           "command": sys.executable, "args": ["-c", plugin]}}}]}
        config = tmp_path / "eks.yaml"
        config.write_text(yaml.safe_dump(doc))
        args = ["preflight", "--stack", "platform", "--env", "prod", "--kubeconfig", str(config)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert api.requests and all(auth == f"Bearer {TOKEN}" for _, _, auth in api.requests)
        (tmp_path / "other").mkdir()
        other, _ = _self_signed(tmp_path / "other")
        doc["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(other.read_bytes()).decode()
        config.write_text(yaml.safe_dump(doc))
        result = runner.invoke(app, args)
        assert result.exit_code == 3 and "CERTIFICATE_VERIFY_FAILED" in result.output
    finally:
        api.server.shutdown()
        api.server.server_close()
