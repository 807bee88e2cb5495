"""What the stacks export, as plain data built from the parsed configuration (no Pulumi).

The triton stack exports :func:`triton_services` as its ``services`` output: per model service its
in-cluster endpoints (Service DNS names and ports), ingress hosts and release channels.
``tritonops render`` writes the same dict to ``stack-outputs.yaml``, so ``pulumi stack output`` and a
GitOps user read one thing. :func:`model_readers` is the shape of the cluster-aws stack's
``modelReaders`` output, which the triton stack reads back through a StackReference
(:func:`reader_arn` picks one role out of it, checking it was made for that ServiceAccount).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonops.k8s.config import ClusterAwsConfig, ConfigError, ModelService, TritonStackConfig, project_name
from tritonops.k8s.labels import GRPC_PORT, HTTP_PORT, METRICS_PORT, name_of, track_name
from tritonops.k8s.stacks.triton.exposure import hosts
from tritonops.observability.metrics import CANARY, STABLE

Obj = dict[str, Any]
MODEL_READERS = "modelReaders"  # the cluster-aws output the triton stack reads


def endpoints(cfg: TritonStackConfig, svc: ModelService, track: str = STABLE) -> Obj:
    """The track's Service as in-cluster clients reach it (``<service>.<namespace>.svc``)."""
    host = f"{track_name(svc, track)}.{cfg.namespace}.svc"
    return {
        "http": {"host": host, "port": HTTP_PORT, "url": f"http://{host}:{HTTP_PORT}"},
        "grpc": {"host": host, "port": GRPC_PORT, "target": f"{host}:{GRPC_PORT}"},
        "metrics": {"host": host, "port": METRICS_PORT, "url": f"http://{host}:{METRICS_PORT}/metrics"},
    }


def ingress_hosts(cfg: TritonStackConfig, svc: ModelService) -> Obj:
    """The hosts the Ingress or Gateway API routes answer on; none when ``ingress.mode`` is none."""
    if cfg.ingress.mode == "none":
        return {}
    http, grpc = hosts(cfg, svc)
    return {"mode": cfg.ingress.mode, "http": http, "grpc": grpc}


def source(svc: ModelService) -> Obj:
    """Where the pods' models come from: the release channel(s) they follow, or Triton's own repository."""
    rel = svc.release
    if rel is not None:
        out: Obj = {"store": rel.store, "channel": rel.channel}
        if rel.canary is not None:
            out["canary"] = {
                "channel": rel.canary.channel,
                "weight": rel.canary.weight,
                "endpoints": None,  # filled by triton_services (needs the stack's namespace)
            }
        return {"release": out}
    repo = svc.model_repository
    assert repo is not None  # the config parser refuses a service with neither
    if repo.type == "s3":
        return {"modelRepository": {"type": "s3", "uri": repo.uri}}
    return {"modelRepository": {"type": "pvc", "claimName": repo.claim_name, "subPath": repo.sub_path}}


def triton_services(cfg: TritonStackConfig) -> Obj:
    """The triton stack's ``services`` output: model service name -> endpoints, hosts, channels."""
    out: Obj = {}
    for svc in cfg.model_services:
        entry: Obj = {
            "namespace": cfg.namespace,
            "deployment": name_of(svc),
            "endpoints": endpoints(cfg, svc),
            "ingressHosts": ingress_hosts(cfg, svc),
            **source(svc),
        }
        canary = entry.get("release", {}).get("canary")
        if canary is not None:
            canary["endpoints"] = endpoints(cfg, svc, CANARY)
        out[svc.name] = entry
    return out


def model_readers(cfg: ClusterAwsConfig, arns: Mapping[str, Any]) -> Obj:
    """The cluster-aws stack's ``modelReaders`` output: roleName -> its ARN (``arns``, Pulumi Outputs
    in the stack) and the namespace/ServiceAccount its trust policy admits."""
    return {
        r.role_name: {
            "arn": arns[r.role_name],
            "namespace": r.namespace,
            "serviceAccount": r.service_account,
            "bucket": r.bucket,
            "prefix": r.prefix,
        }
        for r in cfg.model_readers
    }


def reader_arn(cfg: TritonStackConfig, index: int, readers: Mapping[str, Any] | None, stack: str) -> str:
    """The ARN of model service ``index``'s ``modelReader`` out of cluster-aws's ``modelReaders``
    output; refused, naming the key, when that stack has no such role or made it for another
    namespace or ServiceAccount (IRSA would refuse the pods' token)."""
    svc = cfg.model_services[index]
    key = f"{project_name('triton')}:modelServices[{index}].modelReader"
    name = svc.model_reader
    assert name is not None
    entry = (readers or {}).get(name)
    if entry is None:
        known = ", ".join(sorted(readers or {})) or "none"
        raise ConfigError(key, f"{stack} has no model reader {name!r} in its {MODEL_READERS} output (has: {known})")
    want = (cfg.namespace, name_of(svc))
    got = (entry.get("namespace"), entry.get("serviceAccount"))
    if got != want:
        raise ConfigError(
            key,
            f"{stack}'s role {name!r} trusts system:serviceaccount:{got[0]}:{got[1]}, but this service runs as "
            f"system:serviceaccount:{want[0]}:{want[1]}: fix the cluster-aws modelReaders entry",
        )
    store = _store_of(svc)
    if store is not None and entry.get("bucket") is not None:
        bucket, _, path = store.partition("/")
        prefix = str(entry.get("prefix") or "").strip("/")
        if bucket != entry["bucket"] or not (not prefix or path == prefix or path.startswith(prefix + "/")):
            raise ConfigError(
                key,
                f"this service reads s3://{store}, but {stack}'s role {name!r} reads "
                f"s3://{entry['bucket']}/{prefix}: the IRSA role and the bucket must be the same "
                "(fix the release store or the cluster-aws modelReaders entry)",
            )
    return str(entry["arn"])


def _store_of(svc: ModelService) -> str | None:
    """``bucket/prefix`` of the S3 location the service reads (its release store or s3 repository)."""
    uri = svc.release.store if svc.release is not None else (
        svc.model_repository.uri if svc.model_repository is not None and svc.model_repository.type == "s3" else None)
    if not uri or not uri.startswith("s3://"):
        return None
    return str(uri[len("s3://"):].strip("/"))
