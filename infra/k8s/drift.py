"""Drift CronJob for a Triton model service: is the live Triton serving the models the stack says?

Pure builders (dicts), added to each model service's objects by ``infra.k8s.triton.service_objects``,
so ``pulumi up`` and ``tritonops render`` create the same CronJob. Every run calls the Service's
repository index (a restricted API: the admin header comes from the stack's Secret) with the release
agent's ``check`` command (``infra/agent/drift.py``, the same code the edge nodes' timer runs), from
the agent zipapp in the namespace's ``tritonops-agent`` ConfigMap, and fails the Job when a desired
model is not READY or an undesired one is: exit 1 (3 when the check could not run), which
kube-prometheus-stack's ``KubeJobFailed`` alert reports. It runs in the Triton image on the service's
own node pool (the image is already on those nodes; no GPU is requested).
"""

from __future__ import annotations

from typing import Any

from infra.agent.triton import SECRET_ENV
from infra.k8s.config import ModelService, TritonStackConfig
from infra.k8s.triton import (
    AGENT_PATH,
    GPU_RESOURCE,
    HTTP_PORT,
    NODE_POOL_LABEL,
    TRITON_UID,
    _meta,
    agent_mount,
    agent_volume,
    container_security_context,
    name_of,
)

Obj = dict[str, Any]
SCHEDULE = "*/15 * * * *"


def drift_name(svc: ModelService) -> str:
    return f"{name_of(svc)}-drift"


def check_args(cfg: TritonStackConfig, svc: ModelService) -> list[str]:
    """``python3 tritonops-agent.pyz check --url <Service> --expect <model> ...`` (no secret in argv)."""
    url = f"http://{name_of(svc)}.{cfg.namespace}.svc:{HTTP_PORT}"
    args = [
        "python3",
        AGENT_PATH,
        "check",
        "--url",
        url,
        "--header",
        cfg.admin_api.header,
        "--source",
        "triton",
        "--host",
        f"{cfg.environment}/{cfg.namespace}/{name_of(svc)}",
    ]
    for model in sorted(m.name for m in svc.models):
        args += ["--expect", model]
    return args


def cron_job(cfg: TritonStackConfig, svc: ModelService, schedule: str = SCHEDULE) -> Obj:
    """Compare the live Triton's READY models with ``svc.models`` every ``schedule``."""
    meta = _meta(drift_name(svc), cfg, svc)
    pod_labels = {**meta["labels"], "app.kubernetes.io/component": "drift-check"}
    secret_ref = {"name": cfg.admin_api.secret_name, "key": cfg.admin_api.secret_key}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta,
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 300,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": 120,
                    "ttlSecondsAfterFinished": 86400,
                    "template": {
                        "metadata": {"labels": pod_labels},
                        "spec": {
                            "restartPolicy": "Never",
                            "automountServiceAccountToken": False,
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": TRITON_UID,
                                "runAsGroup": TRITON_UID,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "nodeSelector": {NODE_POOL_LABEL: svc.node_pool},
                            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                            "containers": [
                                {
                                    "name": "drift-check",
                                    "image": svc.image,
                                    "command": check_args(cfg, svc),
                                    "env": [{"name": SECRET_ENV, "valueFrom": {"secretKeyRef": secret_ref}}],
                                    "resources": {
                                        "requests": {"cpu": "50m", "memory": "64Mi"},
                                        "limits": {"memory": "128Mi"},
                                    },
                                    "securityContext": container_security_context(),
                                    "volumeMounts": [agent_mount()],
                                }
                            ],
                            "volumes": [agent_volume()],
                        },
                    },
                },
            },
        },
    }


def drift_objects(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """The CronJob (it runs the agent from the namespace's ``tritonops-agent`` ConfigMap)."""
    return [cron_job(cfg, svc)]
