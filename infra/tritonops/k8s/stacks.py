"""The three stack programs, and the same objects as data for ``tritonops render``.

``stacks/<name>/__main__.py`` calls :func:`run` with its name; ``render_set`` builds what that
program would create, from the same parsed configuration and the same builders, without Pulumi.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonops.k8s import autoscaler, bootstrap, buckets, eks, karpenter, outputs, platform, required, triton
from tritonops.k8s.budget import check_budget
from tritonops.k8s.config import (
    ClusterAwsConfig,
    ClusterSource,
    ConfigError,
    PlatformConfig,
    StackConfig,
    TritonStackConfig,
    config_keys,
    project_name,
)
from tritonops.k8s.parse import parse_config
from tritonops.k8s.platform import HelmRelease
from tritonops.k8s.registry_source import ecr_read_policy

Obj = dict[str, Any]
ADMIN_TOKEN_KEY = "adminApiToken"


# --- render (no Pulumi) --------------------------------------------------------------------------


@dataclass
class RenderSet:
    """What a stack creates, as data: Kubernetes objects, Helm releases, AWS resources, secrets to supply."""

    stack: str
    env: str
    objects: list[Obj] = field(default_factory=list)
    releases: list[HelmRelease] = field(default_factory=list)
    aws: list[Obj] = field(default_factory=list)
    secrets: list[Obj] = field(default_factory=list)  # Secrets whose values only the Pulumi engine holds ...
    # ... and (with `command`) the Secrets/ConfigMaps the user creates (tritonops.k8s.required)
    prerequisites: list[Obj] = field(default_factory=list)  # what the cluster must already run
    outputs: Obj = field(default_factory=dict)  # what the stack exports that its config alone decides
    # release name -> releases it waits for (the program's depends_on between charts)
    release_deps: dict[str, list[str]] = field(default_factory=dict)


def render_set(stack: str, env: str, cfg: StackConfig, reader_arns: Mapping[str, str] | None = None,
               dashboards: bool = True) -> RenderSet:
    """``reader_arns``: modelReader roleName -> ARN (cluster-aws's output); None: a placeholder ARN.
    ``dashboards``: see :func:`tritonops.k8s.triton.namespace_objects`."""
    out = RenderSet(stack, env)
    if isinstance(cfg, TritonStackConfig):
        out.objects += triton.namespace_objects(cfg, dashboards)
        for svc in cfg.model_services:
            arn = (reader_arns or {}).get(svc.model_reader) if svc.model_reader else None
            out.objects += triton.service_objects(cfg, svc, arn)
        out.outputs = triton_outputs(cfg)
        out.secrets.append(_secret_ref(triton.admin_secret(cfg, None), project_name(stack) + ":" + ADMIN_TOKEN_KEY))
        out.secrets += required.user_secrets(cfg)
        out.prerequisites += required.prerequisites(cfg)
    elif isinstance(cfg, PlatformConfig):
        if cfg.monitoring.enabled:
            out.objects += platform.monitoring_objects(cfg)
            out.releases.append(platform.monitoring_release(cfg))
            out.secrets.append(
                _secret_ref(platform.alertmanager_secret(cfg, None), project_name(stack) + ":" + platform.SECRETS_KEY)
            )
            out.secrets.append(
                _secret_ref(
                    platform.grafana_admin_secret(cfg, None), project_name(stack) + ":" + platform.GRAFANA_PASSWORD_KEY
                )
            )
        if cfg.gpu_operator.enabled:
            out.objects += platform.gpu_operator_objects(cfg)
            out.releases.append(platform.gpu_operator_release(cfg))
        if cfg.keda.enabled:
            out.objects += platform.keda_objects(cfg)
            out.releases.append(platform.keda_release(cfg))
        if cfg.monitoring.enabled:  # as platform_program: the others' ServiceMonitors need its CRDs
            first = out.releases[0].name
            out.release_deps = {r.name: [first] for r in out.releases[1:]}
    elif isinstance(cfg, ClusterAwsConfig):
        out.aws.append({"type": "aws:eks/cluster:Cluster", "spec": eks.cluster_spec(cfg)})
        out.aws += [
            {
                "type": "aws:iam/role:Role",
                "spec": {
                    "name": r.role_name,
                    "trust": f"IRSA (cluster OIDC): system:serviceaccount:{r.namespace}:{r.service_account}",
                    "policy": json.loads(eks.s3_read_policy(r.bucket, r.prefix, reports=r.reports)),
                    **({"ecrPolicy": json.loads(ecr_read_policy(r.ecr_stores))} if r.ecr_stores else {}),
                },
            }
            for r in cfg.model_readers
        ]
        out.aws.append({"type": "aws:eks/nodeGroup:NodeGroup", "spec": eks.system_node_group_spec(cfg)})
        out.aws += _addon_specs(cfg)
        out.aws += [
            {"type": "aws:eks/nodeGroup:NodeGroup", "spec": eks.node_group_spec(cfg, p)}
            for p in karpenter.managed_pools(cfg)
        ]
        if autoscaler.managed_gpu_pools(cfg):
            out.aws.append({
                "type": "aws:iam/role:Role",
                "spec": {
                    "name": autoscaler.role_name(cfg),
                    "trust": "IRSA (cluster OIDC): "
                    f"system:serviceaccount:{autoscaler.NAMESPACE}:{autoscaler.SERVICE_ACCOUNT}",
                    "policy": json.loads(autoscaler.policy(cfg.cluster_name)),
                },
            })
            role_arn = f"arn:aws:iam::<account-id>:role/{autoscaler.role_name(cfg)}"
            out.releases.append(autoscaler.release(cfg, role_arn, "<aws:region>"))
        if karpenter.karpenter_pools(cfg):
            out.aws += karpenter.aws_resources(cfg)
            role = f"arn:aws:iam::<account-id>:role/{karpenter.controller_role_name(cfg)}"
            out.releases.append(karpenter.release(cfg, role))
            out.objects += karpenter.objects(cfg)
        out.objects.append(eks.storage_class())
        out.aws += [{"type": "aws:s3/bucket:Bucket", "spec": buckets.bucket_spec(b)}
                    for b in buckets.release_buckets(cfg)]
    return out


def _addon_specs(cfg: ClusterAwsConfig) -> list[Obj]:
    """The EKS add-ons cluster-aws installs (and the EBS CSI driver's IRSA role), as render writes them."""
    ns, sa = eks.EBS_CSI_SERVICE_ACCOUNT
    return [
        {"type": "aws:eks/addon:Addon", "spec": {"name": eks.VPC_CNI_ADDON,
                                                  "configuration_values": json.loads(eks.vpc_cni_configuration())}},
        {"type": "aws:iam/role:Role", "spec": {"name": eks.ebs_csi_role_name(cfg),
                                               "trust": f"IRSA (cluster OIDC): system:serviceaccount:{ns}:{sa}",
                                               "policy_arn": eks.EBS_CSI_POLICY}},
        {"type": "aws:eks/addon:Addon", "spec": {"name": eks.EBS_CSI_ADDON,
                                                  "service_account_role": eks.ebs_csi_role_name(cfg)}},
    ]


def triton_outputs(cfg: TritonStackConfig) -> Obj:
    """The triton stack's exports (``pulumi stack output``), the same as ``render``'s stack-outputs.yaml."""
    plan = check_budget(cfg)
    return {
        "namespace": cfg.namespace,
        "services": outputs.triton_services(cfg),
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


def _secret_ref(obj: Obj, config_key: str) -> Obj:
    meta = obj["metadata"]
    return {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "keys": sorted(obj["stringData"]),
        "pulumiConfig": config_key,
    }


# --- Pulumi programs -----------------------------------------------------------------------------


def _decode(raw: str, is_str: bool) -> Any:
    if is_str:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw  # let the model report the type error with the key


class PulumiEngineMissing(RuntimeError):
    """A stack program was started without the Pulumi engine (e.g. `python stacks/x/__main__.py`)."""


def require_engine(stack: str) -> None:
    """Fail clearly when the program runs outside `pulumi up/preview` (or Pulumi's test mocks)."""
    import shutil

    from pulumi.runtime.settings import get_monitor

    if get_monitor() is not None:
        return
    cli = shutil.which("pulumi")
    how = (
        f"run it with the Pulumi CLI ({cli}): cd stacks/{stack} && pulumi up"
        if cli
        else "the Pulumi CLI is not installed here (https://www.pulumi.com/docs/install/)"
    )
    raise PulumiEngineMissing(
        f"stacks/{stack}/__main__.py is a Pulumi program and needs the Pulumi engine: {how}. "
        f"Without Pulumi, `tritonops render --stack {stack} --env ENV --out DIR` writes the same objects as YAML."
    )


def pulumi_config(stack: str) -> StackConfig:
    """The stack's config from the Pulumi engine, through the same parser render uses."""
    import pulumi

    require_engine(stack)

    project = pulumi.get_project()
    if project != project_name(stack):
        raise ConfigError("name", f"Pulumi project is {project!r}, expected {project_name(stack)!r} (Pulumi.yaml)")
    cfg = pulumi.Config()
    raw = {}
    for key, is_str in config_keys(stack).items():
        value = cfg.get(key)
        if value is not None:
            raw[key] = _decode(value, is_str)
    return parse_config(stack, raw, source=f"Pulumi.{pulumi.get_stack()}.yaml", env=pulumi.get_stack())


def stack_reference_name(cluster_stack: str, organization: str | None) -> str:
    """The StackReference name of ``cluster.clusterStack``. ``<project>/<stack>`` (or ``<stack>``: the
    cluster-aws project) is the backend-neutral form: the program adds the organization it runs under,
    yours on Pulumi Cloud and the literal ``organization`` on a self-managed (DIY) backend, which alone
    accepts ``organization/<project>/<stack>``. ``<org>/<project>/<stack>`` is used as given."""
    parts = cluster_stack.split("/")
    if len(parts) == 3:
        return cluster_stack
    if len(parts) == 1:
        parts = [project_name("cluster-aws"), *parts]
    return "/".join([organization or "organization", *parts])


def cluster_reference(name: str, source: ClusterSource) -> Any:
    """The cluster-aws stack named by ``cluster.clusterStack`` (a StackReference), or None."""
    import pulumi

    if not source.cluster_stack:
        return None
    return pulumi.StackReference(f"{name}-cluster",
                                 stack_name=stack_reference_name(source.cluster_stack, pulumi.get_organization()))


def kube_provider(name: str, source: ClusterSource, ref: Any = None) -> Any:
    """An explicit Kubernetes provider: cluster-aws's kubeconfig output, a kubeconfig file, or ambient.
    ``ref``: the stack's :func:`cluster_reference`, when it already made one."""
    import pulumi_kubernetes as k8s

    kubeconfig: Any = None
    if source.cluster_stack:
        ref = ref if ref is not None else cluster_reference(name, source)
        kubeconfig = ref.require_output("kubeconfig")
    elif source.kubeconfig:
        path = Path(source.kubeconfig).expanduser()
        if not path.is_file():
            raise ConfigError("cluster.kubeconfig", f"no kubeconfig file at {path}")
        kubeconfig = path.read_text()
    return k8s.Provider(f"{name}-k8s", kubeconfig=kubeconfig, context=source.context)


def _reader_trust(namespace: str, service_account: str) -> Callable[[list[Any]], str]:
    def build(values: list[Any]) -> str:
        return eks.irsa_trust_policy(values[0], values[1], namespace, service_account)

    return build


def cluster_aws_program() -> dict[str, Any]:
    import pulumi
    import pulumi_aws as aws

    from tritonops.k8s.components import GpuNodePool, GpuNodePoolArgs, managed_node_group

    cfg = pulumi_config("cluster-aws")
    assert isinstance(cfg, ClusterAwsConfig)
    region = pulumi.Config("aws").require("region")
    spec = eks.cluster_spec(cfg)
    role = aws.iam.Role(
        "cluster-role", assume_role_policy=eks.assume_role_policy("eks.amazonaws.com"), tags=spec["tags"]
    )
    attachments = [
        aws.iam.RolePolicyAttachment(f"cluster-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn)
        for arn in eks.CLUSTER_POLICIES
    ]
    cluster = aws.eks.Cluster(
        "cluster",
        name=spec["name"],
        version=spec["version"],
        role_arn=role.arn,
        vpc_config=aws.eks.ClusterVpcConfigArgs(**spec["vpc_config"]),
        access_config=aws.eks.ClusterAccessConfigArgs(**spec["access_config"]),
        enabled_cluster_log_types=spec["enabled_cluster_log_types"],
        tags=spec["tags"],
        opts=pulumi.ResourceOptions(depends_on=attachments),
    )
    issuer = cluster.identities.apply(lambda ids: ids[0]["oidcs"][0]["issuer"] if ids else "")
    oidc = aws.iam.OpenIdConnectProvider("oidc", url=issuer, client_id_lists=["sts.amazonaws.com"], tags=spec["tags"])
    sys_spec = eks.system_node_group_spec(cfg)
    _, system = managed_node_group("system-nodes", "system-nodes", sys_spec, cluster.name)
    pools = [GpuNodePool(f"gpu-{p.name}", GpuNodePoolArgs(cfg, p, cluster.name)) for p in karpenter.managed_pools(cfg)]
    readers: dict[str, aws.iam.Role] = {}
    for r in cfg.model_readers:
        trust = pulumi.Output.all(oidc.arn, issuer).apply(_reader_trust(r.namespace, r.service_account))
        role_ = aws.iam.Role(f"reader-{r.role_name}", name=r.role_name, assume_role_policy=trust, tags=spec["tags"],
                             opts=pulumi.ResourceOptions(delete_before_replace=True))  # a fixed name
        aws.iam.RolePolicy(f"reader-{r.role_name}-s3", role=role_.id,
                          policy=eks.s3_read_policy(r.bucket, r.prefix, reports=r.reports))
        if r.ecr_stores:  # oci:// release stores on ECR
            aws.iam.RolePolicy(f"reader-{r.role_name}-ecr", role=role_.id, policy=ecr_read_policy(r.ecr_stores))
        readers[r.role_name] = role_
    from tritonops.k8s.components import ReleaseBucket

    account = aws.get_caller_identity_output().account_id
    release_buckets = {b: ReleaseBucket(f"bucket-{b}", b, cfg, account) for b in buckets.release_buckets(cfg)}
    kubeconfig = pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority.data, region).apply(
        lambda a: eks.kubeconfig(*a)
    )
    import pulumi_kubernetes as k8s

    from tritonops.k8s.components import ClusterAddons

    provider = k8s.Provider("cluster-aws-k8s", kubeconfig=kubeconfig)
    k8s_opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    out: dict[str, Any] = {"addons": ClusterAddons("addons", cfg, cluster.name, (oidc.arn, issuer), k8s_opts,
                                                   depends_on=[system])}
    if karpenter.karpenter_pools(cfg):
        from tritonops.k8s.karpenter_stack import Karpenter, KarpenterArgs

        out["karpenter"] = Karpenter(
            "karpenter", KarpenterArgs(cfg, cluster.name, cluster.arn, oidc.arn, issuer), k8s_opts, depends_on=[system]
        )
    if autoscaler.managed_gpu_pools(cfg):
        from tritonops.k8s.components import ClusterAutoscaler, ClusterAutoscalerArgs

        out["cluster_autoscaler"] = ClusterAutoscaler(
            "cluster-autoscaler", ClusterAutoscalerArgs(cfg, oidc.arn, issuer, region), k8s_opts, depends_on=[system]
        )
    pulumi.export("clusterName", cluster.name)
    pulumi.export("kubeconfig", pulumi.Output.secret(kubeconfig))
    pulumi.export("oidcProviderArn", oidc.arn)
    pulumi.export("oidcIssuer", issuer)
    pulumi.export("nodePools", eks.node_pools_summary(cfg))
    pulumi.export("modelReaderRoleArns", {name: role_.arn for name, role_ in readers.items()})
    # What the triton stack reads (outputs.reader_arn): each role with the ServiceAccount it trusts.
    pulumi.export(outputs.MODEL_READERS, outputs.model_readers(cfg, {n: r.arn for n, r in readers.items()}))
    pulumi.export("releaseBuckets", {b: {"publisherRoleArn": r.publisher.arn} for b, r in release_buckets.items()})
    out["buckets"] = release_buckets
    return {"cluster": cluster, "oidc": oidc, "system": system, "pools": pools, "readers": readers, **out}


def _alertmanager_secrets(cfg: PlatformConfig) -> Any:
    """The secret config object, checked for every referenced key before anything is created."""
    import pulumi
    from pulumi.runtime.config import get_config

    key = f"{project_name('platform')}:{platform.SECRETS_KEY}"
    raw = get_config(key)
    values = json.loads(raw) if raw else {}
    if not isinstance(values, dict):
        raise ConfigError(key, "must be an object of secretKey -> value")
    platform.alertmanager_config(cfg, values)  # raises naming the missing key
    return pulumi.Output.secret(values)


def _grafana_password() -> Any:
    """Grafana's admin password from the secret config value; refused when unset (never a chart default)."""
    import pulumi

    password = pulumi.Config().get_secret(platform.GRAFANA_PASSWORD_KEY)
    if password is None:
        raise ConfigError(
            f"{project_name('platform')}:{platform.GRAFANA_PASSWORD_KEY}",
            f"set Grafana's admin password: pulumi config set --secret {platform.GRAFANA_PASSWORD_KEY} VALUE",
        )
    return password


def platform_program() -> dict[str, Any]:
    import pulumi

    from tritonops.k8s.components import GpuOperator, GpuOperatorArgs, Keda, KedaArgs, Monitoring, MonitoringArgs

    cfg = pulumi_config("platform")
    assert isinstance(cfg, PlatformConfig)
    # Checked before anything (the provider included) is created.
    secrets: Any = _alertmanager_secrets(cfg) if cfg.monitoring.enabled else {}
    grafana_password: Any = _grafana_password() if cfg.monitoring.enabled else None
    provider = kube_provider("platform", cfg.cluster)
    opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    out: dict[str, Any] = {}
    # Monitoring first: the others' ServiceMonitors need its CRDs.
    after: list[Any] = []
    if cfg.monitoring.enabled:
        out["monitoring"] = Monitoring("monitoring", MonitoringArgs(cfg, secrets, grafana_password), opts)
        after.append(out["monitoring"])
    if cfg.gpu_operator.enabled:
        out["gpu_operator"] = GpuOperator("gpu-operator", GpuOperatorArgs(cfg), opts, depends_on=after)
    if cfg.keda.enabled:
        out["keda"] = Keda("keda", KedaArgs(cfg), opts, depends_on=after)
    pulumi.export("releases", {r.name: f"{r.chart}@{r.version}" for r in render_set("platform", "", cfg).releases})
    return out


def triton_program() -> dict[str, Any]:
    import pulumi

    from tritonops.k8s.components import TritonNamespace, TritonNamespaceArgs, TritonService, TritonServiceArgs

    cfg = pulumi_config("triton")
    assert isinstance(cfg, TritonStackConfig)
    token = pulumi.Config().get_secret(ADMIN_TOKEN_KEY)
    if token is None:
        raise ConfigError(
            f"{project_name('triton')}:{ADMIN_TOKEN_KEY}",
            f"set the admin API header value: pulumi config set --secret {ADMIN_TOKEN_KEY} VALUE",
        )
    for i, svc in enumerate(cfg.model_services):
        if svc.image_placeholder:  # accepted only as the example file's explicit opt-in (parse._check_digest)
            pulumi.log.warn(f"modelServices[{i}].image: placeholder digest: {svc.name}'s pods cannot pull it")
    if bootstrap.enabled():  # at preview and up, before anything is created: each pull-mode channel exists
        bootstrap.check_channels(cfg, source=f"Pulumi.{pulumi.get_stack()}.yaml")
    ref = cluster_reference("triton", cfg.cluster)
    provider = kube_provider("triton", cfg.cluster, ref)
    opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    ns = TritonNamespace("triton", TritonNamespaceArgs(cfg, token), opts)
    services = [
        TritonService(
            svc.name, TritonServiceArgs(cfg, svc, _reader_arn(cfg, i, ref)), opts, depends_on=[ns]
        )
        for i, svc in enumerate(cfg.model_services)
    ]
    for key, value in triton_outputs(cfg).items():
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
    return ref.require_output(outputs.MODEL_READERS).apply(
        lambda readers: outputs.reader_arn(cfg, index, readers, stack)
    )


PROGRAMS = {"cluster-aws": cluster_aws_program, "platform": platform_program, "triton": triton_program}


def run(stack_dir: Path | str) -> dict[str, Any]:
    """Entry point of ``stacks/<stack>/__main__.py``, which passes its own folder. The stack is the
    folder's name in this checkout, else the Pulumi project's (``tritonops-<stack>``): a stack folder
    copied anywhere under any name runs the same program."""
    stack = Path(stack_dir).name
    if stack not in PROGRAMS:
        import pulumi

        require_engine(stack)
        project = pulumi.get_project()
        found = [s for s in PROGRAMS if project_name(s) == project]
        if not found:
            known = ", ".join(project_name(s) for s in PROGRAMS)
            raise ValueError(f"{stack_dir}: Pulumi project {project!r} is not a tritonops stack (known: {known})")
        stack = found[0]
    return PROGRAMS[stack]()
