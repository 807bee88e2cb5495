"""How long ``pulumi up`` waits for each object that waits on something outside itself.

The Kubernetes provider waits after it creates or updates some kinds: a Deployment until its rollout
is available, a Service until its Endpoints have a ready address, an Ingress until it has a load
balancer and its backends have endpoints. Left alone, each wait ends at the provider's 10 minutes,
which a first GPU node, a multi-GB image pull and a model load do not fit. :func:`plan` is the one
pure function that derives every wait from the rendered objects themselves (what the pod has to get
through before it is Ready), and decides where the wait is skipped because readiness is proven
elsewhere: a canary track's pods are judged by the release's canary gate (``tritonops release``),
so ``pulumi up`` does not wait for them (the ``pulumi.com/skipAwait`` annotation).

One Triton pod's way to Ready, in seconds (:func:`pod_ready_budget`)::

    GPU node (Karpenter or the cluster-autoscaler launches it, it joins, the device plugin advertises GPUs)
  + image pull (every distinct image of the pod, at PULL_MIB_S)
  + release sync (the init container fills the releases emptyDir from S3, at S3_MIB_S)
  + startup probe (initialDelaySeconds + periodSeconds x failureThreshold: the model load)
  + release gate (the agent's golden run, when the pod has the release agent)
  + one readiness period + SLACK_S

A Deployment's create waits for one such pod (its pods start in parallel); its update replaces pods
one step at a time (``maxSurge + maxUnavailable`` per step) up to the ScaledObject's maximum. The same
budget is the Deployment's ``progressDeadlineSeconds``: Kubernetes marks a rollout failed when one
step takes longer, and the provider stops waiting then, before the whole timeout.

A Job's pod (the drift CronJob's) gets the same kind of budget, :func:`job_budget`: its images' pull
at PULL_MIB_S, its calls at CHECK_CALL_S each, SLACK_S; their sum is its ``activeDeadlineSeconds``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tritonops.k8s.labels import GPU_RESOURCE, TRACK_LABEL, Obj
from tritonops.k8s.stacks.triton.release_agent import AGENT_GOLDEN_TIMEOUT_S
from tritonops.observability.metrics import CANARY

SKIP_AWAIT = "pulumi.com/skipAwait"
# Assumptions, each one a figure a user can read and change here (seconds, MiB/s, GiB).
GPU_NODE_S = 420  # EC2 GPU launch ~90 s + kubelet join ~90 s + GPU Operator device plugin/toolkit ~120 s, x1.4
PULL_MIB_S = 50  # containerd pull + unpack from NGC/ECR to a fresh EC2 node
S3_MIB_S = 100  # the release agent's single-stream S3 download
LOAD_BALANCER_S = 300  # an AWS NLB/ALB: provisioned and its address in the controller's Ingress status
SLACK_S = 60
# Compressed size of an image the pod pulls; the NGC Triton images are the large ones.
IMAGE_GIB = {"nvcr.io/nvidia/tritonserver": 8.0}
DEFAULT_IMAGE_GIB = 1.0
RELEASE_GATE_S = AGENT_GOLDEN_TIMEOUT_S  # the release gate: the agent's golden run before /ready
# The drift check (the agent's `check --url`): each of its calls carries a deadline of at most this
# (agent.drift.index_or_error, agent.posture, agent.kube: Triton's index and statistics, the admin probes,
# each pod list, each pod's /status).
CHECK_CALL_S = 10
WAITING_KINDS = ("Deployment", "Service", "Ingress")  # what the provider waits for, of the kinds we render


@dataclass(frozen=True)
class Wait:
    """``skip``: the object carries pulumi.com/skipAwait; otherwise create/update in seconds."""

    create_s: int = 0
    update_s: int = 0
    skip: bool = False
    why: str = ""

    def custom_timeouts(self) -> dict[str, str] | None:
        if self.skip:
            return None
        return {"create": f"{self.create_s}s", "update": f"{self.update_s}s"}


_QUANTITY = re.compile(r"^(?P<n>[0-9.]+)(?P<unit>Ki|Mi|Gi|Ti|k|M|G|T)?$")
_MIB = {None: 1 / 2**20, "Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 2**20, "k": 1e3 / 2**20, "M": 1e6 / 2**20,
        "G": 1e9 / 2**20, "T": 1e12 / 2**20}


def quantity_mib(q: str) -> float:
    m = _QUANTITY.match(str(q))
    if m is None:
        raise ValueError(f"{q!r} is not a Kubernetes quantity")
    return float(m["n"]) * _MIB[m["unit"]]


def image_pull_s(image: str) -> int:
    repo = image.split("@", 1)[0].rsplit(":", 1)[0]
    return math.ceil(IMAGE_GIB.get(repo, DEFAULT_IMAGE_GIB) * 1024 / PULL_MIB_S)


def _probe_s(probe: Obj | None) -> int:
    if not probe:
        return 0
    return int(probe.get("initialDelaySeconds", 0)) + int(probe.get("periodSeconds", 10)) * int(
        probe.get("failureThreshold", 3)
    )


def pod_ready_budget(pod: Obj) -> dict[str, int]:
    """Seconds, per step, one pod of this pod spec takes to become Ready at worst (see the module)."""
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    gpu = any(GPU_RESOURCE in c.get("resources", {}).get("requests", {}) for c in pod["containers"])
    init_names = {c["name"] for c in pod.get("initContainers", [])}
    sync_mib = sum(
        quantity_mib(v["emptyDir"].get("sizeLimit", "0"))
        for v in pod.get("volumes", [])
        if "emptyDir" in v and v["name"] == "releases" and init_names
    )
    names = {c["name"] for c in pod["containers"]}
    parts = {
        "node": GPU_NODE_S if gpu else 0,
        "pull": sum(image_pull_s(i) for i in sorted({c["image"] for c in containers})),
        "sync": math.ceil(sync_mib / S3_MIB_S),
        "startup": max(_probe_s(c.get("startupProbe")) for c in pod["containers"]),
        "gate": RELEASE_GATE_S if "release-agent" in names else 0,
        "ready": max(int((c.get("readinessProbe") or {}).get("periodSeconds", 0)) for c in pod["containers"]),
        "slack": SLACK_S,
    }
    return parts


def job_budget(pod: Obj, calls: int) -> dict[str, int]:
    """Seconds, per step, one run-to-completion pod of this spec takes at worst on a CPU node (no GPU
    node to wait for): every distinct image pulled, ``calls`` network calls of CHECK_CALL_S each, and
    SLACK_S. Their sum is a Job's ``activeDeadlineSeconds`` (the drift CronJob's)."""
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    return {"pull": sum(image_pull_s(i) for i in sorted({c["image"] for c in containers})),
            "run": calls * CHECK_CALL_S, "slack": SLACK_S}


def _steps(deploy: Obj, max_replicas: int) -> int:
    spec = deploy["spec"]
    rolling = spec.get("strategy", {}).get("rollingUpdate", {})
    per_step = max(int(rolling.get("maxSurge", 1)) + int(rolling.get("maxUnavailable", 0)), 1)
    return math.ceil(max(int(spec.get("replicas", 1)), max_replicas) / per_step)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def plan(objs: list[Obj]) -> dict[tuple[str, str, str], Wait]:
    """(kind, namespace, name) -> its Wait, for every object of a WAITING_KIND in ``objs``."""
    scaled = {
        (o["metadata"].get("namespace", ""), o["spec"]["scaleTargetRef"]["name"]): int(o["spec"]["maxReplicaCount"])
        for o in objs
        if o["kind"] == "ScaledObject"
    }
    out: dict[tuple[str, str, str], Wait] = {}
    deploys = [o for o in objs if o["kind"] == "Deployment"]
    for d in deploys:
        ns, name = d["metadata"].get("namespace", ""), d["metadata"]["name"]
        out[("Deployment", ns, name)] = _deployment_wait(d, scaled.get((ns, name), 0))
    for s in (o for o in objs if o["kind"] == "Service"):
        ns = s["metadata"].get("namespace", "")
        backing = [
            out[("Deployment", ns, d["metadata"]["name"])]
            for d in deploys
            if d["metadata"].get("namespace", "") == ns
            and _selects(s["spec"].get("selector", {}), d["spec"]["template"]["metadata"]["labels"])
        ]
        out[("Service", ns, s["metadata"]["name"])] = _service_wait(s, backing)
    for i in (o for o in objs if o["kind"] == "Ingress"):
        ns = i["metadata"].get("namespace", "")
        backends = {
            p["backend"]["service"]["name"]
            for rule in i["spec"].get("rules", [])
            for p in rule.get("http", {}).get("paths", [])
        }
        waits = [w for (k, n, name), w in out.items() if k == "Service" and n == ns and name in backends]
        if waits and all(w.skip for w in waits):
            out[("Ingress", ns, i["metadata"]["name"])] = Wait(skip=True, why="its backends are the canary's")
            continue
        create = max([LOAD_BALANCER_S + SLACK_S, *(w.create_s for w in waits if not w.skip)])
        out[("Ingress", ns, i["metadata"]["name"])] = Wait(
            create, create, why="load balancer, and its backends' endpoints (the Service waits)"
        )
    return out


def _deployment_wait(d: Obj, max_replicas: int) -> Wait:
    pod = d["spec"]["template"]
    if pod["metadata"].get("labels", {}).get(TRACK_LABEL) == CANARY:
        return Wait(skip=True, why="the canary gate judges the canary's pods (tritonops release)")
    step = sum(pod_ready_budget(pod["spec"]).values())
    steps = _steps(d, max_replicas)
    return Wait(step, step * steps, why=f"one pod {step}s ({_why(pod['spec'])}); update: {steps} steps")


def first_serve_s(deploy: Obj) -> int:
    """Seconds, at worst, from the creation of ``deploy`` until ``pulumi up`` has seen its first pod
    Ready (the release gate's golden run passed): its create wait, which is also its
    ``progressDeadlineSeconds``. A ScaledObject that may scale to zero holds its first scale-in that
    long (KEDA ``initialCooldownPeriod``), so the first up proves a replica serves before KEDA may
    remove it."""
    return _deployment_wait(deploy, 0).create_s


def _why(pod: Obj) -> str:
    return " + ".join(f"{k} {v}" for k, v in pod_ready_budget(pod).items() if v)


def _service_wait(s: Obj, backing: list[Wait]) -> Wait:
    if s["spec"].get("type") == "ExternalName" or not s["spec"].get("selector"):
        return Wait(LOAD_BALANCER_S, LOAD_BALANCER_S, why="no endpoints to wait for")
    if backing and all(w.skip for w in backing):
        return Wait(skip=True, why="its pods' readiness is the canary gate's")
    create = max([w.create_s for w in backing if not w.skip] or [SLACK_S])
    if s["spec"].get("type") == "LoadBalancer":
        create = max(create, LOAD_BALANCER_S + SLACK_S)
    return Wait(create, create, why="endpoints: a ready pod of the Deployment it selects")


def annotate(objs: list[Obj]) -> list[Obj]:
    """``objs`` with pulumi.com/skipAwait on each object whose wait :func:`plan` skips (in place)."""
    waits = plan(objs)
    for o in objs:
        w = waits.get((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        if w is not None and w.skip:
            o["metadata"]["annotations"] = {**o["metadata"].get("annotations", {}), SKIP_AWAIT: "true"}
    return objs


def key(obj: Obj) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

