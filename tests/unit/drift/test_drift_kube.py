"""The drift CronJob's pod checks (infra/tritonops/agent/kube.py): pods vs the Deployment the stack renders, each
pod's release vs its channel, and the Kubernetes API call itself.

No API server can run here: the pods are the API's JSON for pods of the rendered Deployment (what
`kubectl get pods -o json` returns: the spec as written plus the fields the API server defaults and the
status), and the API call goes to a local HTTPS server (standard library, a throwaway CA made with
openssl) that checks the bearer token and the label selector as the API server would.
"""

from __future__ import annotations

import copy
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from tritonops.agent import kube
from tritonops.core.errors import ReleaseError
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.triton import drift_cronjob as drift

TOKEN = "unit-test.sa-token-9f3e"
DIGEST_A, DIGEST_B = "a" * 64, "b" * 64


def _cfg(env: str) -> TritonStackConfig:
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _api_pod(dep: dict[str, Any], name: str, ip: str) -> dict[str, Any]:
    """A pod of ``dep`` as the API returns it: the template's spec with the API server's defaults and a status."""
    pod_spec = copy.deepcopy(dep["pod_spec"])
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.update({"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"})
    pod_spec.update({"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "nodeName": "ip-10-0-1-7"})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "triton", "labels": dep["selector"], "uid": f"uid-{name}",
                         "ownerReferences": [{"kind": "ReplicaSet", "name": f"{dep['name']}-5d9c7"}]},
            "spec": pod_spec, "status": {"phase": "Running", "podIP": ip}}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    """dev's vision service (release agent sidecar, a canary): the expected pods, two API pods of the stable
    Deployment and one of the canary's."""
    cfg = _cfg("dev")
    svc = next(s for s in cfg.model_services if s.release is not None)
    from tritonops.k8s.stacks.triton.workload import deployment

    expected = drift.expected_pods(cfg, svc)
    stable, canary = expected["deployments"]
    assert (stable["selector"]["track"], canary["selector"]["track"]) == ("stable", "canary")
    pods = []
    for dep, track, n in ((stable, "stable", 2), (canary, "canary", 1)):
        rendered_dep = {**dep, "pod_spec": deployment(cfg, svc, None, track)["spec"]["template"]["spec"]}
        pods += [_api_pod(rendered_dep, f"{dep['name']}-5d9c7-x{i}", f"10.0.{len(pods) + i}.{i}")
                 for i in range(1, n + 1)]
    return {"expected": expected, "dep": stable, "pods": pods[:2], "all_pods": pods}


def test_pods_as_rendered_are_clean(rendered: dict[str, Any]) -> None:
    assert kube.compare_pods(rendered["dep"], rendered["pods"]) == []


def test_pod_with_other_args_and_image_is_reported(rendered: dict[str, Any]) -> None:
    pods = copy.deepcopy(rendered["pods"])
    triton = next(c for c in pods[1]["spec"]["containers"] if c["name"] == "triton")
    triton["args"] = [a for a in triton["args"] if "restricted" not in a] + ["--model-control-mode=poll"]
    triton["image"] = "nvcr.io/nvidia/tritonserver:24.09-py3"
    found = kube.compare_pods(rendered["dep"], pods)
    name = pods[1]["metadata"]["name"]
    assert [f["resource"] for f in found] == [f"pod:{name}/triton:image", f"pod:{name}/triton:args"]
    assert "24.09" in found[0]["detail"]


def test_extra_and_missing_containers_and_no_pods(rendered: dict[str, Any]) -> None:
    pods = copy.deepcopy(rendered["pods"][:1])
    spec = pods[0]["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] != "release-agent"]
    spec["containers"].append({"name": "debug", "image": "busybox:1.36", "command": ["sleep", "1d"]})
    name = pods[0]["metadata"]["name"]
    assert {f["resource"]: f["detail"] for f in kube.compare_pods(rendered["dep"], pods)} == {
        f"pod:{name}/release-agent": "container missing", f"pod:{name}/debug": "container not in the Deployment"}
    assert kube.compare_pods(rendered["dep"], []) == [
        {"resource": f"deployment:{rendered['dep']['name']}", "detail": "no pod matches its selector"}]


def _status(current: str, digest: str, pointer: str, refused: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"channel": "stable", "current": current, "digest": digest, "refused": {d: "golden" for d in refused},
            "pointer": {"release": "r2" if pointer == DIGEST_B else "r1", "digest": pointer}}


def test_pod_behind_its_channel_is_reported_and_a_refused_release_is_not(rendered: dict[str, Any]) -> None:
    pods = rendered["pods"]
    answers = {"10.0.1.1": _status("r2", DIGEST_B, DIGEST_B), "10.0.2.2": _status("r1", DIGEST_A, DIGEST_B)}
    found = kube.release_findings(pods, answers.__getitem__)
    assert [f["resource"] for f in found] == [f"pod:{pods[1]['metadata']['name']}:release"]
    assert "serves r1" in found[0]["detail"] and "names r2" in found[0]["detail"]
    answers["10.0.2.2"] = _status("r1", DIGEST_A, DIGEST_B, refused=(DIGEST_B,))
    assert kube.release_findings(pods, answers.__getitem__) == []


def test_pod_whose_agent_does_not_answer_is_reported(rendered: dict[str, Any]) -> None:
    def status(ip: str) -> dict[str, Any]:
        raise ReleaseError(f"http://{ip}:8003/status: connection refused")

    assert {f["detail"].split(":")[0] for f in kube.release_findings(rendered["pods"], status)} == {
        "release agent status unavailable"}


# --- the API call -----------------------------------------------------------------------------------


class FakeApiServer(BaseHTTPRequestHandler):
    pods: list[dict[str, Any]] = []
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        type(self).seen.append((url.path, parse_qs(url.query).get("labelSelector", [""])[0]))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            code, body = 401, {"kind": "Status", "message": "Unauthorized", "code": 401}
        elif url.path == "/api/v1/namespaces/triton/pods":
            want = dict(kv.split("=", 1) for kv in parse_qs(url.query)["labelSelector"][0].split(","))
            items = [p for p in self.pods if want.items() <= p["metadata"]["labels"].items()]
            code, body = 200, {"kind": "PodList", "apiVersion": "v1", "items": items}
        else:
            code, body = 403, {"kind": "Status", "message": f"forbidden: {url.path}", "code": 403}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, rendered: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """An HTTPS server on 127.0.0.1 with a certificate from its own CA, and a service account folder."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    tmp = tmp_path_factory.mktemp("kube-api")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
                    "-keyout", tmp / "ca.key", "-out", tmp / "ca.crt"], check=True, capture_output=True)
    (tmp / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kubernetes",
                    "-keyout", tmp / "server.key", "-out", tmp / "server.csr"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", tmp / "server.csr", "-CA", tmp / "ca.crt", "-CAkey",
                    tmp / "ca.key", "-CAcreateserial", "-days", "1", "-extfile", tmp / "ext", "-out",
                    tmp / "server.crt"], check=True, capture_output=True)
    sa = tmp / "serviceaccount"
    sa.mkdir()
    shutil.copy(tmp / "ca.crt", sa / "ca.crt")
    (sa / "token").write_text(TOKEN + "\n")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp / "server.crt", tmp / "server.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    FakeApiServer.pods = rendered["all_pods"]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"url": f"https://127.0.0.1:{server.server_address[1]}", "sa": sa, "tmp": tmp}
    finally:
        server.shutdown()


def test_api_call_lists_the_deployments_pods_with_the_token(api: dict[str, Any], rendered: dict[str, Any]) -> None:
    client = kube.Kube(api["url"], api["sa"])
    sel = rendered["dep"]["selector"]
    assert client.pods("triton", sel) == rendered["pods"]
    assert FakeApiServer.seen[-1] == ("/api/v1/namespaces/triton/pods",
                                      ",".join(f"{k}={v}" for k, v in sorted(sel.items())))
    assert client.pods("triton", {**sel, "track": "canary"}) == rendered["all_pods"][2:]
    assert client.pods("triton", {**sel, "track": "none"}) == []


def test_check_end_to_end_against_the_api(api: dict[str, Any], rendered: dict[str, Any]) -> None:
    ok = _status("r1", DIGEST_A, DIGEST_A)
    client = kube.Kube(api["url"], api["sa"])
    assert kube.check(rendered["expected"], client, lambda ip: ok) == []
    # The canary's pod runs the stable Deployment's arguments (another channel): reported.
    canary_pod = rendered["all_pods"][2]
    FakeApiServer.pods = [*rendered["pods"], copy.deepcopy(canary_pod)]
    agent = next(c for c in FakeApiServer.pods[2]["spec"]["containers"] if c["name"] == "release-agent")
    agent["command"] = next(c for c in rendered["pods"][0]["spec"]["containers"] if c["name"] == "release-agent")[
        "command"]
    try:
        found = kube.check(rendered["expected"], client, lambda ip: ok)
    finally:
        FakeApiServer.pods = rendered["all_pods"]
    assert [f["resource"] for f in found] == [f"pod:{canary_pod['metadata']['name']}/release-agent:command"]


def test_api_errors_are_clear(api: dict[str, Any]) -> None:
    with pytest.raises(ReleaseError, match="HTTP 401: .*Unauthorized"):
        bad = api["tmp"] / "bad-sa"
        bad.mkdir(exist_ok=True)
        shutil.copy(api["sa"] / "ca.crt", bad / "ca.crt")
        (bad / "token").write_text("wrong")
        kube.Kube(api["url"], bad).pods("triton", {"a": "b"})
    with pytest.raises(ReleaseError, match="no service account token"):
        kube.Kube(api["url"], api["tmp"] / "missing").pods("triton", {"a": "b"})
    other_ca = api["tmp"] / "other-ca"
    other_ca.mkdir(exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", other_ca / "k", "-out", other_ca / "ca.crt"], check=True, capture_output=True)
    (other_ca / "token").write_text(TOKEN)
    with pytest.raises(ReleaseError, match="CERTIFICATE_VERIFY_FAILED"):  # the cluster CA is enforced
        kube.Kube(api["url"], other_ca).pods("triton", {"a": "b"})
