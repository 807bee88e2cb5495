"""Pure builders for a Triton model service on Kubernetes: every object as a plain dict.

``service_objects`` returns what one model service needs (ServiceAccount, Deployment, Service,
PodDisruptionBudget, NetworkPolicy, ServiceMonitor, ScaledObject, Ingress or Gateway API routes);
``namespace_objects`` what the stack needs once (Namespace, PriorityClass, PrometheusRule,
dashboards ConfigMap). Alert rules, dashboards and the KEDA query come from
``infra.observability``: one source for Kubernetes and edge hosts.
"""

from __future__ import annotations

import json
from typing import Any

from infra.k8s.budget import ServiceBudget, service_budget, triton_memory_args
from infra.k8s.config import ModelService, TritonStackConfig
from infra.observability.dashboards import dashboards
from infra.observability.keda import ScalingPolicy, prometheus_trigger
from infra.observability.rules import RuleSettings, rule_groups
from infra.triton.admin import RESTRICTED, client_headers

Obj = dict[str, Any]

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
SCRAPE_JOB = "triton"  # the `job` label infra.observability's rules and dashboards select on
JOB_LABEL = "tritonops.io/scrape-job"
GPU_RESOURCE = "nvidia.com/gpu"
NODE_POOL_LABEL = "tritonops.io/node-pool"
PRIORITY_CLASS = "triton-serving"
TRITON_UID = 1000  # triton-server user of the NGC image
MODEL_DIR = "/models"
ADMIN_ENV = "TRITON_ADMIN_KEY"


def admin_headers(cfg: TritonStackConfig, token: str) -> dict[str, dict[str, str]]:
    """What a client sends to reach the restricted APIs, per protocol."""
    h = {cfg.admin_api.header: token}
    return {"http": client_headers("http", h), "grpc": client_headers("grpc", h)}


def name_of(svc: ModelService) -> str:
    return f"triton-{svc.name}"


def labels(cfg: TritonStackConfig, svc: ModelService | None = None) -> dict[str, str]:
    out = {
        "app.kubernetes.io/part-of": "tritonops",
        "app.kubernetes.io/managed-by": "tritonops",
        "tritonops.io/environment": cfg.environment,
    }
    if svc is not None:
        out |= selector(svc) | {"app.kubernetes.io/version": svc.image.rsplit(":", 1)[1]}
    return out


def selector(svc: ModelService) -> dict[str, str]:
    """The server pods of one model service (other pods of the service, e.g. jobs, set another component)."""
    return {
        "app.kubernetes.io/name": "triton",
        "app.kubernetes.io/instance": name_of(svc),
        "app.kubernetes.io/component": "inference-server",
    }


def _meta(name: str, cfg: TritonStackConfig, svc: ModelService | None = None, **extra: Any) -> Obj:
    return {"name": name, "namespace": cfg.namespace, "labels": labels(cfg, svc), **extra}


# --- the Triton container ------------------------------------------------------------------------


def triton_args(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget) -> list[str]:
    repo = svc.model_repository
    location = repo.uri if repo.type == "s3" else MODEL_DIR
    header = f"{cfg.admin_api.header}=$({ADMIN_ENV})"  # kubelet expands $(VAR) from the container env
    args = [
        "tritonserver",
        f"--model-repository={location}",
        f"--model-control-mode={svc.model_control_mode}",
    ]
    if svc.model_control_mode == "explicit":
        args += [f"--load-model={m.name}" for m in svc.models]
    if svc.model_control_mode == "poll":
        args.append(f"--repository-poll-secs={svc.repository_poll_secs}")
    args += [
        "--strict-model-config=true",  # every model ships a complete config.pbtxt; no auto-complete
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--allow-metrics=true",
        "--allow-gpu-metrics=true",
        "--allow-cpu-metrics=true",
        f"--http-restricted-api={RESTRICTED}:{header}",
        f"--grpc-restricted-protocol={RESTRICTED}:{header}",
        "--exit-timeout-secs=30",
        "--log-format=ISO8601",
        *triton_memory_args(svc, budget),
    ]
    return args


def _probe(path: str, period: int, failures: int, timeout: int = 3) -> Obj:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def container(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget) -> Obj:
    res = svc.resources
    env: list[Obj] = [
        {
            "name": ADMIN_ENV,
            "valueFrom": {"secretKeyRef": {"name": cfg.admin_api.secret_name, "key": cfg.admin_api.secret_key}},
        }
    ]
    env.append({"name": "HOME", "value": "/tmp"})  # the root filesystem is read-only
    if svc.model_repository.type == "s3" and svc.model_repository.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": svc.model_repository.region})
    mounts: list[Obj] = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
    if svc.model_repository.type == "pvc":
        mounts.append(
            {
                "name": "models",
                "mountPath": MODEL_DIR,
                "readOnly": True,
                **({"subPath": svc.model_repository.sub_path} if svc.model_repository.sub_path else {}),
            }
        )
    gpus = str(svc.gpus)
    return {
        "name": "triton",
        "image": svc.image,
        "imagePullPolicy": "IfNotPresent",
        "args": triton_args(cfg, svc, budget),
        "env": env,
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": res.cpu, "memory": res.memory, GPU_RESOURCE: gpus},
            "limits": {"memory": res.memory, GPU_RESOURCE: gpus},
        },
        # Loading models (an S3 download, TensorRT engines) can take minutes: the startup probe
        # holds liveness off for up to 10 minutes; readiness is Triton's strict readiness.
        "startupProbe": _probe("/v2/health/ready", period=10, failures=60),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=3),
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": TRITON_UID,
            "runAsGroup": TRITON_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }


# --- per model service ---------------------------------------------------------------------------


def service_account(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    meta = _meta(name_of(svc), cfg, svc)
    if svc.model_repository.type == "s3":
        meta["annotations"] = {"eks.amazonaws.com/role-arn": svc.model_repository.role_arn}
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta,
        "automountServiceAccountToken": False,
    }


def _affinity(svc: ModelService) -> Obj:
    term = {"labelSelector": {"matchLabels": selector(svc)}, "topologyKey": "kubernetes.io/hostname"}
    if svc.spread:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }


def _spread(svc: ModelService) -> list[Obj]:
    hard = "DoNotSchedule" if svc.spread else "ScheduleAnyway"
    return [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(svc)},
        },
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": hard,
            "labelSelector": {"matchLabels": selector(svc)},
        },
    ]


def rollout_strategy(svc: ModelService) -> Obj:
    """Surge a pod when there may be room for it; with one pod per node required, replace in place.

    With required anti-affinity every node already runs a replica, so a surge pod would wait for a new
    GPU node; instead one pod at a time is replaced (config guarantees replicas > pdbMinAvailable, so
    the remaining pods still satisfy the PDB).
    """
    if svc.spread:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def deployment(cfg: TritonStackConfig, svc: ModelService, budget: ServiceBudget | None = None) -> Obj:
    budget = budget or service_budget(svc, cfg)
    res = svc.resources
    volumes: list[Obj] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": res.shm}},
        {"name": "tmp", "emptyDir": {"sizeLimit": res.tmp}},
    ]
    if svc.model_repository.type == "pvc":
        volumes.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": svc.model_repository.claim_name, "readOnly": True},
            }
        )
    pod_labels = labels(cfg, svc)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": {
            "replicas": svc.replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": selector(svc)},
            "strategy": rollout_strategy(svc),
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {"tritonops.io/gpu-budget-mib": f"{budget.need_mib}/{budget.capacity_mib}"},
                },
                "spec": {
                    "serviceAccountName": name_of(svc),
                    # IRSA's pod identity webhook projects its own web-identity token; no API token needed.
                    "automountServiceAccountToken": False,
                    "priorityClassName": PRIORITY_CLASS,
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": TRITON_UID,
                        "runAsGroup": TRITON_UID,
                        "fsGroup": TRITON_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "nodeSelector": {NODE_POOL_LABEL: svc.node_pool},
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": _affinity(svc),
                    "topologySpreadConstraints": _spread(svc),
                    "containers": [container(cfg, svc, budget)],
                    "volumes": volumes,
                },
            },
        },
    }


def service(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    meta = _meta(name_of(svc), cfg, svc)
    meta["labels"] = {**meta["labels"], JOB_LABEL: SCRAPE_JOB}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": selector(svc),
            "ports": [
                {
                    "name": "http",
                    "port": HTTP_PORT,
                    "targetPort": "http",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
                {
                    "name": "metrics",
                    "port": METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
            ],
        },
    }


def pod_disruption_budget(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    spec: Obj = {"selector": {"matchLabels": selector(svc)}}
    if svc.pdb_min_available is not None:
        spec["minAvailable"] = svc.pdb_min_available
    else:
        spec["maxUnavailable"] = 1
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": spec,
    }


def _ns_selector(names: list[str]) -> Obj:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(names)}]}


def network_policy(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    callers = {cfg.namespace, *cfg.allowed_namespaces}
    if cfg.ingress.mode == "ingress":
        callers.add(cfg.ingress.controller_namespace)
    if cfg.ingress.mode == "gateway" and cfg.ingress.gateway_namespace:
        callers.add(cfg.ingress.gateway_namespace)
    tcp = "TCP"
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": {
            "podSelector": {"matchLabels": selector(svc)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": _ns_selector(sorted(callers))}],
                    "ports": [{"port": HTTP_PORT, "protocol": tcp}, {"port": GRPC_PORT, "protocol": tcp}],
                },
                {
                    # Metrics from Prometheus only (namespace AND pod selector in one peer).
                    "from": [
                        {
                            "namespaceSelector": _ns_selector([cfg.monitoring_namespace]),
                            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                        }
                    ],
                    "ports": [{"port": METRICS_PORT, "protocol": tcp}],
                },
            ],
        },
    }


def service_monitor(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": {
            "jobLabel": JOB_LABEL,
            "selector": {"matchLabels": selector(svc)},
            "namespaceSelector": {"matchNames": [cfg.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}],
        },
    }


def scaling_policy(svc: ModelService) -> ScalingPolicy:
    a = svc.autoscaling
    return ScalingPolicy(threshold=a.pending_per_replica, min_replicas=a.min_replicas, max_replicas=a.max_replicas)


def scaled_object(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """KEDA ScaledObject: pending requests per replica, summed over the service's models.

    When Prometheus is unreachable for ``fallback_failure_threshold`` polls, KEDA falls back with
    ``currentReplicasIfHigher``: the larger of the current count and minReplicas, so an outage of
    the metrics pipeline never scales serving down.
    """
    a = svc.autoscaling
    policy = scaling_policy(svc)
    triggers = []
    for m in svc.models:
        trig = prometheus_trigger(m.name, cfg.prometheus_url, policy=policy)
        triggers.append({**trig, "name": f"pending-{m.name}".lower().replace("_", "-")})
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _meta(name_of(svc), cfg, svc),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name_of(svc)},
            "pollingInterval": a.polling_interval,
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "fallback": {
                "failureThreshold": a.fallback_failure_threshold,
                "replicas": a.min_replicas,
                "behavior": "currentReplicasIfHigher",
            },
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleDown": {
                            "stabilizationWindowSeconds": 300,
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
                        },
                        "scaleUp": {
                            "stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                        },
                    }
                }
            },
            "triggers": triggers,
        },
    }


def _hosts(cfg: TritonStackConfig, svc: ModelService) -> tuple[str, str]:
    http = svc.ingress_host or f"{svc.name}.{cfg.ingress.host_suffix}"
    return http, f"grpc-{http}"


def ingresses(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """Two ingress-nginx Ingresses: HTTP/REST, and gRPC (backend-protocol GRPC, needs TLS for HTTP/2)."""
    http_host, grpc_host = _hosts(cfg, svc)
    out = []
    for kind, host, port, proto in (("http", http_host, "http", "HTTP"), ("grpc", grpc_host, "grpc", "GRPC")):
        spec: Obj = {
            "ingressClassName": cfg.ingress.class_name,
            "rules": [
                {
                    "host": host,
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": name_of(svc), "port": {"name": port}}},
                            }
                        ]
                    },
                }
            ],
        }
        if cfg.ingress.tls_secret:
            spec["tls"] = [{"hosts": [host], "secretName": cfg.ingress.tls_secret}]
        out.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": _meta(
                    f"{name_of(svc)}-{kind}",
                    cfg,
                    svc,
                    annotations={
                        "nginx.ingress.kubernetes.io/backend-protocol": proto,
                        "nginx.ingress.kubernetes.io/proxy-body-size": "64m",
                    },
                ),
                "spec": spec,
            }
        )
    return out


def gateway_routes(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    http_host, grpc_host = _hosts(cfg, svc)
    parent = {
        "name": cfg.ingress.gateway_name,
        **({"namespace": cfg.ingress.gateway_namespace} if cfg.ingress.gateway_namespace else {}),
    }
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": _meta(f"{name_of(svc)}-http", cfg, svc),
            "spec": {
                "parentRefs": [parent],
                "hostnames": [http_host],
                "rules": [{"backendRefs": [{"name": name_of(svc), "port": HTTP_PORT}]}],
            },
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GRPCRoute",
            "metadata": _meta(f"{name_of(svc)}-grpc", cfg, svc),
            "spec": {
                "parentRefs": [parent],
                "hostnames": [grpc_host],
                "rules": [{"backendRefs": [{"name": name_of(svc), "port": GRPC_PORT}]}],
            },
        },
    ]


def service_objects(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """Everything one model service needs, in apply order."""
    budget = service_budget(svc, cfg)
    objs = [
        service_account(cfg, svc),
        deployment(cfg, svc, budget),
        service(cfg, svc),
        pod_disruption_budget(cfg, svc),
        network_policy(cfg, svc),
        service_monitor(cfg, svc),
    ]
    if svc.autoscaling.enabled:
        objs.append(scaled_object(cfg, svc))
    if cfg.ingress.mode == "ingress":
        objs += ingresses(cfg, svc)
    elif cfg.ingress.mode == "gateway":
        objs += gateway_routes(cfg, svc)
    from infra.k8s.drift import drift_objects  # builds on this module: imported here, not at the top

    return objs + drift_objects(cfg, svc)  # CronJob: the live Triton vs svc.models (infra/k8s/drift.py)


# --- once per stack ------------------------------------------------------------------------------


def namespace(cfg: TritonStackConfig) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": cfg.namespace,
            "labels": {**labels(cfg), "pod-security.kubernetes.io/enforce": "restricted"},
        },
    }


def priority_class(cfg: TritonStackConfig) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS, "labels": labels(cfg)},
        "value": cfg.priority,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "Triton Inference Server pods: scheduled ahead of batch work on GPU nodes.",
    }


def _widest_policy(cfg: TritonStackConfig) -> ScalingPolicy:
    """The scaling bounds the shared alert rules use: the largest maxReplicas of any service."""
    widest = max(cfg.model_services, key=lambda s: s.autoscaling.max_replicas)
    return scaling_policy(widest)


def prometheus_rule(cfg: TritonStackConfig) -> Obj:
    groups = rule_groups(RuleSettings(job=SCRAPE_JOB, scaling=_widest_policy(cfg)))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("tritonops", cfg),
        "spec": {"groups": groups},
    }


def dashboards_config_map(cfg: TritonStackConfig) -> Obj:
    """Grafana's dashboard sidecar loads every ConfigMap carrying the dashboard label."""
    meta = _meta("tritonops-dashboards", cfg)
    meta["labels"] = {**meta["labels"], cfg.grafana_dashboard_label: "1"}
    data = {
        fname: json.dumps(d, sort_keys=True)
        for fname, d in sorted(dashboards(_widest_policy(cfg), job=SCRAPE_JOB).items())
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def admin_secret(cfg: TritonStackConfig, token: Any) -> Obj:
    """The header value guarding Triton's admin APIs (``token`` is a Pulumi secret under ``pulumi up``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(cfg.admin_api.secret_name, cfg),
        "type": "Opaque",
        "stringData": {cfg.admin_api.secret_key: token},
    }


def namespace_objects(cfg: TritonStackConfig) -> list[Obj]:
    return [namespace(cfg), priority_class(cfg), prometheus_rule(cfg), dashboards_config_map(cfg)]
