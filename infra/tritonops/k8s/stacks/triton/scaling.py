"""Autoscaling of a Triton model service: the KEDA ScaledObject of its stable Deployment and its triggers.

The queries come from ``tritonops.observability.keda_trigger`` (one source for Kubernetes and edge hosts); the
producer of every series they read is in ``tritonops.observability.producers``.

A service that may scale to zero still comes up with one replica that passed the golden gate: KEDA
scales a Deployment to zero as soon as its ScaledObject exists and no trigger is active (no traffic
yet), so the ScaledObject holds that first scale-in for ``initialCooldownPeriod`` seconds
(:func:`initial_cooldown_period`), the longest ``pulumi up`` waits for the Deployment's first Ready
pod (``tritonops.k8s.waits``). The ScaledObject is created beside the Deployment, not after it, so
``pulumi up`` ends (the pod Ready, or the wait failed) before KEDA may remove the pod.
"""

from __future__ import annotations

from tritonops.k8s import waits
from tritonops.k8s.config import ModelService, TritonStackConfig
from tritonops.k8s.labels import Obj, name_of, object_meta
from tritonops.k8s.stacks.triton.budget import service_budget
from tritonops.k8s.stacks.triton.exposure import gateway_routes, ingresses
from tritonops.k8s.stacks.triton.workload import deployment
from tritonops.observability import keda_trigger as keda
from tritonops.observability.keda_trigger import ScalingPolicy, prometheus_trigger


def scaling_policy(svc: ModelService) -> ScalingPolicy:
    a = svc.autoscaling
    return ScalingPolicy(threshold=a.pending_per_replica, min_replicas=a.min_replicas, max_replicas=a.max_replicas)


SCALE_TO_ZERO_ANNOTATION = "tritonops.io/allow-scale-to-zero"  # the policy pack's sign of prod's consent


def initial_cooldown_period(cfg: TritonStackConfig, svc: ModelService) -> int:
    """KEDA ``initialCooldownPeriod`` of a service that may scale to zero: the stable Deployment's create
    wait (:func:`tritonops.k8s.waits.first_serve_s`: GPU node, pulls, release sync, model load, golden
    gate), so no scale-in happens before ``pulumi up`` has seen a replica serve."""
    return waits.first_serve_s(deployment(cfg, svc, service_budget(svc, cfg)))


def _trigger_name(kind: str, model: str | None = None) -> str:
    return f"{kind}-{model}".lower().replace("_", "-").replace(".", "-").replace("~", "-") if model else kind


def scaling_triggers(cfg: TritonStackConfig, svc: ModelService) -> list[Obj]:
    """The ScaledObject's triggers: pending requests per model; optionally served requests/s and queue
    time per model and GPU utilisation of the service's pods; with minReplicas 0, the ingress wake-up
    trigger."""
    a = svc.autoscaling
    policy = scaling_policy(svc)
    url = cfg.prometheus_url
    triggers = []
    for m in svc.models:
        triggers.append({**prometheus_trigger(m.name, url, policy=policy), "name": _trigger_name("pending", m.name)})
    if a.requests_per_replica is not None:
        for m in svc.models:
            trig = keda.trigger(keda.request_rate_query(m.name, policy.window), url, threshold=a.requests_per_replica)
            triggers.append({**trig, "name": _trigger_name("rate", m.name)})
    if a.queue_ms_per_replica is not None:
        for m in svc.models:
            trig = keda.trigger(keda.queue_time_query(m.name, policy.window), url, threshold=a.queue_ms_per_replica)
            triggers.append({**trig, "name": _trigger_name("queue", m.name)})
    if a.gpu_utilization_per_replica is not None:
        expr = keda.gpu_utilization_query(cfg.namespace, name_of(svc), policy.window)
        # Activation at the target: a GPU idling at a few percent must not keep a service awake.
        # While pods run, DCGM always reports their GPUs: an empty result is an exporter outage, a scaler
        # error that counts towards the fallback (not "0 %"). At zero pods empty is normal.
        target = a.gpu_utilization_per_replica
        trig = keda.trigger(expr, url, threshold=target, activation_threshold=target,
                            ignore_null_values=a.min_replicas == 0)
        triggers.append({**trig, "name": "gpu"})
    if a.min_replicas == 0:
        # Triton's series vanish with its pods: the router's request counter is what wakes the service
        # (Envoy Gateway's per-route clusters in gateway mode, ingress-nginx's per-Ingress counter in legacy mode).
        if cfg.ingress.mode == "gateway":
            route_names = [o["metadata"]["name"] for o in gateway_routes(cfg, svc)]
            expr = keda.gateway_requests_query(cfg.namespace, route_names, policy.window)
        else:
            ingress_names = [o["metadata"]["name"] for o in ingresses(cfg, svc)]
            expr = keda.ingress_requests_query(cfg.namespace, ingress_names, policy.window)
        trig = keda.trigger(expr, url, threshold=keda.WAKE_TARGET, activation_threshold=a.activation_requests)
        triggers.append({**trig, "name": "wake"})
    return triggers


def scaled_object(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """KEDA ScaledObject: pending requests per replica, summed over the service's models, and the
    optional triggers of :func:`scaling_triggers`; KEDA follows whichever asks for the most replicas.

    When Prometheus is unreachable for ``fallback_failure_threshold`` polls, KEDA falls back with
    ``currentReplicasIfHigher``: the larger of the current count and ``max(1, minReplicas)``, so an
    outage of the metrics pipeline never scales serving down, nor to zero (KEDA 2.17 scales a
    ScaledObject to zero on trigger errors unless fallback.replicas is not 0).

    With ``minReplicas: 0`` it also holds KEDA's first scale-in for :func:`initial_cooldown_period`.
    """
    a = svc.autoscaling
    meta = object_meta(name_of(svc), cfg, svc)
    scale_to_zero: Obj = {}
    if a.min_replicas == 0:
        scale_to_zero["cooldownPeriod"] = a.cooldown_period
        scale_to_zero["initialCooldownPeriod"] = initial_cooldown_period(cfg, svc)
        if a.allow_scale_to_zero:
            meta["annotations"] = {**meta.get("annotations", {}), SCALE_TO_ZERO_ANNOTATION: "true"}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name_of(svc)},
            "pollingInterval": a.polling_interval,
            **scale_to_zero,
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "fallback": {
                "failureThreshold": a.fallback_failure_threshold,
                "replicas": max(1, a.min_replicas),
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
            "triggers": scaling_triggers(cfg, svc),
        },
    }
