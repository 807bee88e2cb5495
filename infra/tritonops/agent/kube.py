"""The drift CronJob's view of a model service's pods, with the standard library.

From inside the cluster: the Kubernetes API (the pod's service account token and CA file,
``https://kubernetes.default.svc``; the CronJob's Role grants get/list on pods only) lists the pods of
each Deployment, whose containers must run the images, commands and arguments the stack renders
(``expected``, written by ``tritonops.k8s.stacks.triton.drift_cronjob`` into the CronJob's ConfigMap from
the same builder as the Deployment). Each pod's release agent sidecar reports on ``/status`` the release it
serves and the channel pointer it last read: a pod serving another release than its channel names, and not because
it refused the channel's, is drift.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import netio
from ..core.errors import ReleaseError

API = "https://kubernetes.default.svc"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SPEC_FIELDS = ("image", "command", "args")
ANSWER_MAX = 64 << 20  # bytes of one API answer (a pod list) or one sidecar /status; every read is deadlined too

Finding = dict[str, str]


class Kube:
    """GET requests to the API server with the pod's service account."""

    def __init__(self, api: str = API, sa_dir: Path = SA_DIR, timeout: float = 10.0) -> None:
        self.api, self.sa_dir, self.timeout = api.rstrip("/"), Path(sa_dir), timeout

    def get(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            token = (self.sa_dir / "token").read_text().strip()
        except OSError as e:
            raise ReleaseError(f"{self.sa_dir / 'token'}: no service account token ({e.strerror})") from None
        ctx = None
        if self.api.startswith("https://"):
            try:
                ctx = ssl.create_default_context(cafile=str(self.sa_dir / "ca.crt"))
            except (OSError, ssl.SSLError) as e:
                raise ReleaseError(f"{self.sa_dir / 'ca.crt'}: cannot load the cluster CA ({e})") from None
        url = self.api + path + ("?" + urllib.parse.urlencode(query) if query else "")
        resp = netio.request(url, what=f"GET {url}", headers={"Authorization": f"Bearer {token}",
                                                             "Accept": "application/json"},
                             deadline=self.timeout, limit=ANSWER_MAX, context=ctx)
        if not 200 <= resp.status < 300:
            raise ReleaseError(f"GET {url}: HTTP {resp.status}: {resp.body.decode(errors='replace')[:300]}")
        try:
            return dict(json.loads(resp.body.decode()))
        except (ValueError, TypeError, RecursionError) as e:
            raise ReleaseError(f"GET {url}: {e}") from None

    def pods(self, namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        path = f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/pods"
        return list(self.get(path, {"labelSelector": sel}).get("items") or [])


def _spec(container: dict[str, Any]) -> dict[str, Any]:
    return {k: container.get(k) for k in SPEC_FIELDS}


def compare_pods(deployment: dict[str, Any], pods: list[dict[str, Any]]) -> list[Finding]:
    """Each running pod's containers (init containers too) against the Deployment as the stack renders it."""
    name = deployment["name"]
    live = [p for p in pods if (p.get("metadata") or {}).get("deletionTimestamp") is None]
    if not live:
        return [{"resource": f"deployment:{name}", "detail": "no pod matches its selector"}]
    findings: list[Finding] = []
    for pod in sorted(live, key=lambda p: str(p["metadata"].get("name"))):
        pod_name = str(pod["metadata"].get("name"))
        spec = pod.get("spec") or {}
        for kind in ("containers", "initContainers"):
            want = {c["name"]: _spec(c) for c in deployment.get(kind) or []}
            have = {c["name"]: _spec(c) for c in spec.get(kind) or []}
            for cname in sorted(want.keys() - have.keys()):
                findings.append({"resource": f"pod:{pod_name}/{cname}", "detail": "container missing"})
            for cname in sorted(have.keys() - want.keys()):
                findings.append({"resource": f"pod:{pod_name}/{cname}", "detail": "container not in the Deployment"})
            for cname in sorted(want.keys() & have.keys()):
                for field in SPEC_FIELDS:
                    if want[cname][field] != have[cname][field]:
                        findings.append({"resource": f"pod:{pod_name}/{cname}:{field}",
                                         "detail": f"{_short(have[cname][field])}, the stack says "
                                                   f"{_short(want[cname][field])}"})
    return findings


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 300 else text[:297] + "..."


def agent_status(ip: str, port: int) -> dict[str, Any]:
    """The release agent sidecar's /status (release served, channel pointer last read, refused digests)."""
    url = f"http://{ip}:{port}/status"
    resp = netio.request(url, deadline=10, limit=ANSWER_MAX)
    try:
        if not 200 <= resp.status < 300:
            raise ValueError(f"HTTP {resp.status}")
        return dict(json.loads(resp.body.decode()))
    except (ValueError, TypeError, RecursionError) as e:
        raise ReleaseError(f"{url}: {e}") from None


def release_findings(pods: list[dict[str, Any]], status: Callable[[str], dict[str, Any]]) -> list[Finding]:
    """A pod whose served release differs from its channel's pointer (and was not refused), or that cannot say."""
    findings: list[Finding] = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"].get("name"))):
        name, ip = str(pod["metadata"].get("name")), (pod.get("status") or {}).get("podIP")
        if not ip or (pod.get("metadata") or {}).get("deletionTimestamp") is not None:
            continue
        try:
            st = status(str(ip))
        except ReleaseError as e:
            findings.append({"resource": f"pod:{name}:release", "detail": f"release agent status unavailable: {e}"})
            continue
        pointer = st.get("pointer") or {}
        want, have = pointer.get("digest"), st.get("digest")
        if not want:
            findings.append({"resource": f"pod:{name}:release", "detail": "its agent has not read the channel yet"})
        elif have != want and want not in (st.get("refused") or {}):
            findings.append({"resource": f"pod:{name}:release",
                             "detail": f"serves {st.get('current') or 'nothing'} ({str(have)[:12]}), channel "
                                       f"{st.get('channel')} names {pointer.get('release')} ({str(want)[:12]})"})
    return findings


def check(expected: dict[str, Any], kube: Kube, status: Callable[[str], dict[str, Any]] | None = None
          ) -> list[Finding]:
    """Every Deployment of ``expected`` (``{"namespace", "deployments": [...], "agent_status_port"}``)."""
    findings: list[Finding] = []
    port = expected.get("agent_status_port")
    for dep in expected["deployments"]:
        pods = kube.pods(expected["namespace"], dep["selector"])
        findings += compare_pods(dep, pods)
        if port:
            findings += release_findings(pods, status or (lambda ip: agent_status(ip, int(port))))
    return findings
