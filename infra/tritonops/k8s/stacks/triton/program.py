"""The triton stack's program: its objects, as data for ``tritonops render`` (:func:`render`) and as
the Pulumi program ``stacks/triton/__main__.py`` runs (:func:`program`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonops.k8s.config import ConfigError, TritonStackConfig, project_name
from tritonops.k8s.engine import cluster_reference, kube_provider, pulumi_config, stack_reference_name
from tritonops.k8s.rendered import RenderSet, secret_ref
from tritonops.k8s.stacks.triton import bootstrap, required
from tritonops.k8s.stacks.triton import objects as triton
from tritonops.k8s.stacks.triton import outputs as stack_outputs
from tritonops.k8s.stacks.triton.budget import check_budget

Obj = dict[str, Any]
ADMIN_TOKEN_KEY = "adminApiToken"


def render(out: RenderSet, cfg: TritonStackConfig, reader_arns: Mapping[str, str] | None = None,
           dashboards: bool = True) -> RenderSet:
    """The triton stack's objects, exports and Secrets to supply, into ``out``. ``reader_arns`` and
    ``dashboards``: see :func:`tritonops.k8s.programs.render_set`."""
    stack = out.stack
    out.objects += triton.namespace_objects(cfg, dashboards)
    for svc in cfg.model_services:
        arn = (reader_arns or {}).get(svc.model_reader) if svc.model_reader else None
        out.objects += triton.service_objects(cfg, svc, arn)
    out.outputs = exports(cfg)
    out.secrets.append(secret_ref(triton.admin_secret(cfg, None), project_name(stack) + ":" + ADMIN_TOKEN_KEY))
    out.secrets += required.user_secrets(cfg)
    out.prerequisites += required.prerequisites(cfg)
    return out


def exports(cfg: TritonStackConfig) -> Obj:
    """The triton stack's exports (``pulumi stack output``), the same as ``render``'s stack-outputs.yaml."""
    plan = check_budget(cfg)
    return {
        "namespace": cfg.namespace,
        "services": stack_outputs.triton_services(cfg),
        "gpuBudget": {
            b.service: {
                "pool": b.node_pool,
                "needMiB": b.need_mib,
                "capacityMiB": b.capacity_mib,
                "modelLoadGpuLimit": b.load_limit_fraction,
            }
            for bs in plan.values()
            for b in bs
        },
    }


def program() -> dict[str, Any]:
    """The triton Pulumi program: the namespace's objects, then one TritonService per model service."""
    import pulumi

    from tritonops.k8s.stacks.triton import components  # Pulumi's: only here, never in render

    cfg = pulumi_config("triton")
    assert isinstance(cfg, TritonStackConfig)
    token = pulumi.Config().get_secret(ADMIN_TOKEN_KEY)
    if token is None:
        raise ConfigError(
            f"{project_name('triton')}:{ADMIN_TOKEN_KEY}",
            f"set the admin API header value: pulumi config set --secret {ADMIN_TOKEN_KEY} VALUE",
        )
    for key, command in required.user_values(cfg).items():  # inside a key: no Pulumi.yaml can require it
        raise ConfigError(f"{project_name('triton')}:{key}", f"not set: only you can give it; {command}",
                          f"Pulumi.{pulumi.get_stack()}.yaml")
    for i, svc in enumerate(cfg.model_services):
        if svc.image_placeholder:  # only as the example file's explicit opt-in (checks._check_digest)
            pulumi.log.warn(f"modelServices[{i}].image: placeholder digest: {svc.name}'s pods cannot pull it")
    if bootstrap.enabled():  # at preview and up, before anything is created: each pull-mode channel exists
        bootstrap.check_channels(cfg, source=f"Pulumi.{pulumi.get_stack()}.yaml")
    ref = cluster_reference("triton", cfg.cluster)
    provider = kube_provider("triton", cfg.cluster, ref)
    opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    ns = components.TritonNamespace("triton", components.TritonNamespaceArgs(cfg, token), opts)
    services = [
        components.TritonService(
            svc.name, components.TritonServiceArgs(cfg, svc, _reader_arn(cfg, i, ref)), opts, depends_on=[ns]
        )
        for i, svc in enumerate(cfg.model_services)
    ]
    for key, value in exports(cfg).items():
        pulumi.export(key, value)
    return {"namespace": ns, "services": services}


def _reader_arn(cfg: TritonStackConfig, index: int, ref: Any) -> Any:
    """Model service ``index``'s modelReader role ARN from cluster-aws's ``modelReaders`` output
    (an Output), or None when the service names no modelReader. The config parser already refused
    a modelReader without ``cluster.clusterStack``."""
    if cfg.model_services[index].model_reader is None:
        return None
    import pulumi

    assert ref is not None and cfg.cluster.cluster_stack is not None
    stack = stack_reference_name(cfg.cluster.cluster_stack, pulumi.get_organization())
    return ref.require_output(stack_outputs.MODEL_READERS).apply(
        lambda readers: stack_outputs.reader_arn(cfg, index, readers, stack)
    )
