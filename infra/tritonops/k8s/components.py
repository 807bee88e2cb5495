"""Thin Pulumi ComponentResources around the pure builders.

Each component takes a typed args dataclass, validates it before creating anything, creates its
children with ``parent=self`` from the builders' dicts, and registers its outputs. No resource is
ever created inside ``Output.apply``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from tritonops.k8s import autoscaler, buckets, eks, platform, triton, waits
from tritonops.k8s.config import (
    ClusterAwsConfig,
    GpuNodePoolConfig,
    ModelService,
    PlatformConfig,
    TritonStackConfig,
)
from tritonops.k8s.labels import name_of
from tritonops.k8s.platform import HelmRelease

Obj = dict[str, Any]

# Core kinds get their typed resource class; everything else (CRDs) is an apiextensions.CustomResource
# with the type token kubernetes:<group>/<version>:<Kind>.
_CORE: dict[tuple[str, str], Any] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("networking.k8s.io/v1", "Ingress"): k8s.networking.v1.Ingress,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("storage.k8s.io/v1", "StorageClass"): k8s.storage.v1.StorageClass,
}
_TOP_LEVEL = {  # top-level fields of core kinds -> Python argument names
    "stringData": "string_data",
    "binaryData": "binary_data",
    "automountServiceAccountToken": "automount_service_account_token",
    "globalDefault": "global_default",
    "preemptionPolicy": "preemption_policy",
    "imagePullSecrets": "image_pull_secrets",
    "roleRef": "role_ref",
    "reclaimPolicy": "reclaim_policy",
    "volumeBindingMode": "volume_binding_mode",
    "allowVolumeExpansion": "allow_volume_expansion",
}


def resource_name(obj: Obj) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{obj['kind'].lower()}-{ns + '-' if ns else ''}{meta['name']}"


def k8s_object(obj: Obj, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The Pulumi resource for one builder dict (a typed class for core kinds, CustomResource otherwise)."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    cls = _CORE.get((obj["apiVersion"], obj["kind"]))
    name = resource_name(obj)
    if cls is not None:
        kwargs = {_TOP_LEVEL.get(k, k): v for k, v in body.items()}
        return cls(name, opts=opts, **kwargs)  # type: ignore[no-any-return,unused-ignore]
    unknown = set(body) - {"metadata", "spec"}
    if unknown:
        raise ValueError(
            f"{obj['kind']} {obj['metadata']['name']}: custom resources carry only metadata and spec, "
            f"got {sorted(unknown)}"
        )
    return k8s.apiextensions.CustomResource(
        name,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=body["metadata"],
        spec=body.get("spec"),
        opts=opts,
    )


def apply_objects(
    parent: pulumi.Resource,
    objs: Sequence[Obj],
    depends_on: Sequence[pulumi.Resource] = (),
    ignore_replicas: bool = False,
) -> list[pulumi.CustomResource]:
    """Namespaces first, then everything else depending on them; each object that waits gets the
    timeouts tritonops.k8s.waits derives for it."""
    created: list[pulumi.CustomResource] = []
    planned = waits.plan(list(objs))
    namespaces = [
        k8s_object(o, pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)))
        for o in objs
        if o["kind"] == "Namespace"
    ]
    created += namespaces
    for o in objs:
        if o["kind"] == "Namespace":
            continue
        ignore = ["spec.replicas"] if ignore_replicas and o["kind"] == "Deployment" else None
        wait = planned.get(waits.key(o))
        timeouts = wait.custom_timeouts() if wait is not None else None
        created.append(
            k8s_object(
                o,
                pulumi.ResourceOptions(
                    parent=parent,
                    depends_on=[*namespaces, *depends_on],
                    ignore_changes=ignore,
                    custom_timeouts=pulumi.CustomTimeouts(**timeouts) if timeouts else None,
                ),
            )
        )
    return created


def helm_release(
    rel: HelmRelease,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
    values: pulumi.Input[Obj] | None = None,
) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        f"{rel.name}-release",
        name=rel.name,
        chart=rel.chart,
        version=rel.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=rel.repo),
        namespace=rel.namespace,
        create_namespace=False,
        values=values if values is not None else rel.values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=900,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


# --- AWS -----------------------------------------------------------------------------------------


@dataclass
class GpuNodePoolArgs:
    cluster: ClusterAwsConfig
    pool: GpuNodePoolConfig
    cluster_name: pulumi.Input[str]

    def __post_init__(self) -> None:
        if self.pool not in self.cluster.gpu_node_pools:
            raise ValueError(f"pool: {self.pool.name!r} is not one of cluster.gpu_node_pools")


class GpuNodePool(pulumi.ComponentResource):
    """EKS managed node group of GPU instances, tainted nvidia.com/gpu=true:NoSchedule and labelled."""

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:aws:GpuNodePool", name, None, opts)
        spec = eks.node_group_spec(args.cluster, args.pool)
        self.role, self.node_group = managed_node_group(name, f"{name}-nodes", spec, args.cluster_name, parent=self)
        self.register_outputs({"nodeGroupName": self.node_group.node_group_name, "roleArn": self.role.arn})


def managed_node_group(prefix: str, group_name: str, spec: dict[str, Any], cluster_name: pulumi.Input[str],
                       parent: pulumi.Resource | None = None) -> tuple[aws.iam.Role, aws.eks.NodeGroup]:
    """An EKS managed node group from an ``eks.*node_group_spec`` dict, with its IAM role and policies."""
    role = aws.iam.Role(
        f"{prefix}-role",
        assume_role_policy=eks.assume_role_policy("ec2.amazonaws.com"),
        tags=spec["tags"],
        opts=pulumi.ResourceOptions(parent=parent),
    )
    attachments = [
        aws.iam.RolePolicyAttachment(f"{prefix}-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn,
                                     opts=pulumi.ResourceOptions(parent=parent))
        for arn in eks.NODE_POLICIES
    ]
    group = aws.eks.NodeGroup(
        group_name,
        cluster_name=cluster_name,
        node_role_arn=role.arn,
        node_group_name=spec["node_group_name"],
        subnet_ids=spec["subnet_ids"],
        instance_types=spec["instance_types"],
        ami_type=spec["ami_type"],
        capacity_type=spec["capacity_type"],
        disk_size=spec["disk_size"],
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(**spec["scaling_config"]),
        update_config=aws.eks.NodeGroupUpdateConfigArgs(**spec["update_config"]),
        labels=spec["labels"],
        tags=spec["tags"],
        taints=[aws.eks.NodeGroupTaintArgs(**t) for t in spec["taints"]] if spec.get("taints") else None,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=attachments,
                                    ignore_changes=["scalingConfig.desiredSize"]),
    )
    return role, group


# --- platform ------------------------------------------------------------------------------------


@dataclass
class GpuOperatorArgs:
    config: PlatformConfig

    def __post_init__(self) -> None:
        if not self.config.gpu_operator.enabled:
            raise ValueError("config.gpu_operator.enabled: GpuOperator created while disabled")


class GpuOperator(pulumi.ComponentResource):
    """NVIDIA GPU Operator (pinned chart): device plugin, DCGM exporter + ServiceMonitor, time-slicing/MIG."""

    def __init__(
        self,
        name: str,
        args: GpuOperatorArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:platform:GpuOperator", name, None, opts)
        objs = apply_objects(self, platform.gpu_operator_objects(args.config))
        self.release = helm_release(platform.gpu_operator_release(args.config), self, [*objs, *depends_on])
        self.register_outputs({"status": self.release.status})


@dataclass
class MonitoringArgs:
    config: PlatformConfig
    secrets: pulumi.Input[dict[str, str]]  # secretKey -> webhook URL / routing key (a Pulumi secret)
    grafana_password: pulumi.Input[str]  # Grafana's admin password (a Pulumi secret)

    def __post_init__(self) -> None:
        if not self.config.monitoring.enabled:
            raise ValueError("config.monitoring.enabled: Monitoring created while disabled")


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack (pinned): Prometheus, Grafana with dashboards from ConfigMaps, Alertmanager."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:platform:Monitoring", name, None, opts)
        cfg = args.config
        objs = apply_objects(self, platform.monitoring_objects(cfg))
        # Derived from secrets, so it stays a secret; the Secret is created here, not inside apply.
        config_yaml = pulumi.Output.secret(args.secrets).apply(
            lambda s: _yaml(platform.alertmanager_config(cfg, dict(s or {})))
        )
        secrets = [
            k8s_object(
                obj,
                pulumi.ResourceOptions(parent=self, depends_on=objs, additional_secret_outputs=["stringData", "data"]),
            )
            for obj in (
                platform.alertmanager_secret(cfg, config_yaml),
                platform.grafana_admin_secret(cfg, pulumi.Output.secret(args.grafana_password)),
            )
        ]
        self.release = helm_release(platform.monitoring_release(cfg), self, [*objs, *secrets])
        self.register_outputs({"status": self.release.status})


def _yaml(doc: Obj) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class KedaArgs:
    config: PlatformConfig

    def __post_init__(self) -> None:
        if not self.config.keda.enabled:
            raise ValueError("config.keda.enabled: Keda created while disabled")


class Keda(pulumi.ComponentResource):
    """KEDA (pinned chart): scales Triton Deployments on Prometheus queries."""

    def __init__(
        self,
        name: str,
        args: KedaArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:platform:Keda", name, None, opts)
        objs = apply_objects(self, platform.keda_objects(args.config))
        self.release = helm_release(platform.keda_release(args.config), self, [*objs, *depends_on])
        self.register_outputs({"status": self.release.status})


# --- triton --------------------------------------------------------------------------------------


@dataclass
class TritonNamespaceArgs:
    config: TritonStackConfig
    admin_token: pulumi.Input[str]  # Pulumi secret: the header value guarding Triton's admin APIs


class TritonNamespace(pulumi.ComponentResource):
    """What all model services share: Namespace, PriorityClass, PrometheusRule, dashboards, admin Secret."""

    def __init__(self, name: str, args: TritonNamespaceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:triton:TritonNamespace", name, None, opts)
        cfg = args.config
        self.objects = apply_objects(self, triton.namespace_objects(cfg))
        ns = [r for r in self.objects if isinstance(r, k8s.core.v1.Namespace)]
        token = pulumi.Output.secret(args.admin_token)
        self.admin_secret = k8s_object(
            triton.admin_secret(cfg, token),
            pulumi.ResourceOptions(parent=self, depends_on=ns, additional_secret_outputs=["stringData", "data"]),
        )
        self.register_outputs({"namespace": cfg.namespace})


@dataclass
class TritonServiceArgs:
    config: TritonStackConfig
    service: ModelService
    # IRSA role of service.model_reader (the cluster-aws stack's modelReaders output, through a StackReference)
    role_arn: pulumi.Input[str] | None = None

    def __post_init__(self) -> None:
        if (self.role_arn is None) != (self.service.model_reader is None):
            raise ValueError(
                f"role_arn: model service {self.service.name!r} needs the ARN of its modelReader, and only then"
            )
        if self.service not in self.config.model_services:
            raise ValueError(f"service: {self.service.name!r} is not one of config.model_services")
        if not self.service.models:
            raise ValueError(f"service.models: model service {self.service.name!r} has no models")


class TritonService(pulumi.ComponentResource):
    """One Triton model service: Deployment, Service, PDB, NetworkPolicy, monitoring, ScaledObject, routes."""

    def __init__(
        self,
        name: str,
        args: TritonServiceArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:triton:TritonService", name, None, opts)
        svc = args.service
        self.objects = apply_objects(
            self,
            triton.service_objects(args.config, svc, args.role_arn),
            depends_on,
            ignore_replicas=svc.autoscaling.enabled,
        )
        self.register_outputs({"deployment": name_of(svc), "namespace": args.config.namespace})


# --- cluster-autoscaler (cluster-aws) ------------------------------------------------------------


@dataclass
class ClusterAutoscalerArgs:
    cluster: ClusterAwsConfig
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer: pulumi.Input[str]
    region: str

    def __post_init__(self) -> None:
        if not autoscaler.managed_gpu_pools(self.cluster):
            raise ValueError("cluster.gpu_node_pools: no managed pool can grow (maxSize > minSize)")


class ClusterAutoscaler(pulumi.ComponentResource):
    """IRSA role (kube-system:cluster-autoscaler) and the pinned chart that grows the managed GPU groups.
    The release uses the Kubernetes provider given in ``opts.providers``."""

    def __init__(
        self,
        name: str,
        args: ClusterAutoscalerArgs,
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:aws:ClusterAutoscaler", name, None, opts)
        cfg = args.cluster
        trust = pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
            lambda v: eks.irsa_trust_policy(v[0], v[1], autoscaler.NAMESPACE, autoscaler.SERVICE_ACCOUNT)
        )
        self.role = aws.iam.Role(
            f"{name}-role", name=autoscaler.role_name(cfg), assume_role_policy=trust, tags=eks.tags(cfg),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),  # a fixed name
        )
        policy = aws.iam.RolePolicy(f"{name}-policy", role=self.role.id, policy=autoscaler.policy(cfg.cluster_name),
                                    opts=pulumi.ResourceOptions(parent=self))
        rel = autoscaler.release(cfg, self.role.arn, args.region)
        self.release = helm_release(rel, self, [policy, *depends_on])
        self.register_outputs({"roleArn": self.role.arn})


# --- cluster add-ons (cluster-aws) ---------------------------------------------------------------


class ClusterAddons(pulumi.ComponentResource):
    """The EKS add-ons the workloads need: the VPC CNI with NetworkPolicy enforcement on, the EBS CSI
    driver with its IRSA role, and the default gp3 StorageClass (through the provider in ``opts``)."""

    def __init__(
        self,
        name: str,
        cfg: ClusterAwsConfig,
        cluster_name: pulumi.Input[str],
        oidc: tuple[pulumi.Input[str], pulumi.Input[str]],  # the OIDC provider's ARN and issuer URL
        opts: pulumi.ResourceOptions | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("tritonops:aws:ClusterAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(depends_on))
        self.vpc_cni = aws.eks.Addon(
            f"{name}-vpc-cni", cluster_name=cluster_name, addon_name=eks.VPC_CNI_ADDON,
            configuration_values=eks.vpc_cni_configuration(), resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE", tags=eks.tags(cfg), opts=child,
        )
        ns, sa = eks.EBS_CSI_SERVICE_ACCOUNT
        trust = pulumi.Output.all(*oidc).apply(lambda v: eks.irsa_trust_policy(v[0], v[1], ns, sa))
        self.ebs_role = aws.iam.Role(
            f"{name}-ebs-csi-role", name=eks.ebs_csi_role_name(cfg), assume_role_policy=trust, tags=eks.tags(cfg),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),  # a fixed name
        )
        attach = aws.iam.RolePolicyAttachment(f"{name}-ebs-csi-policy", role=self.ebs_role.name,
                                              policy_arn=eks.EBS_CSI_POLICY, opts=pulumi.ResourceOptions(parent=self))
        self.ebs_csi = aws.eks.Addon(
            f"{name}-ebs-csi", cluster_name=cluster_name, addon_name=eks.EBS_CSI_ADDON,
            service_account_role_arn=self.ebs_role.arn, resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE", tags=eks.tags(cfg),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach, *depends_on]),
        )
        self.storage_class = k8s_object(eks.storage_class(), pulumi.ResourceOptions(parent=self,
                                                                                     depends_on=[self.ebs_csi]))
        self.register_outputs({"ebsCsiRoleArn": self.ebs_role.arn})


class ReleaseBucket(pulumi.ComponentResource):
    """One release bucket (tritonops.k8s.buckets): private, versioned, SSE-S3 encrypted, owner-enforced,
    and its publisher role."""

    def __init__(self, name: str, bucket: str, cfg: ClusterAwsConfig, account_id: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tritonops:aws:ReleaseBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = aws.s3.Bucket(name, bucket=bucket, tags=eks.tags(cfg),
                                      opts=pulumi.ResourceOptions(parent=self, protect=cfg.tier == "production"))
        aws.s3.BucketPublicAccessBlock(f"{name}-public-access", bucket=self.bucket.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=child)
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership", bucket=self.bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"), opts=child)
        aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=self.bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse", bucket=self.bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.
                BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="AES256"))],
            opts=child)
        self.publisher = aws.iam.Role(
            f"{name}-publisher", name=buckets.publisher_role_name(bucket),
            assume_role_policy=pulumi.Output.from_input(account_id).apply(buckets.publisher_trust),
            tags=eks.tags(cfg), opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        aws.iam.RolePolicy(f"{name}-publisher-s3", role=self.publisher.id, policy=buckets.publisher_policy(bucket),
                           opts=child)
        self.register_outputs({"bucket": self.bucket.bucket, "publisherRoleArn": self.publisher.arn})
