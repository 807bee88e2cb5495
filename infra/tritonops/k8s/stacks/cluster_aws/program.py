"""The cluster-aws stack's program: what it creates, as data for ``tritonops render`` (:func:`render`)
and as the Pulumi program ``stacks/cluster-aws/__main__.py`` runs (:func:`program`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tritonops.k8s.config import ClusterAwsConfig
from tritonops.k8s.engine import pulumi_config
from tritonops.k8s.registry_source import ecr_read_policy
from tritonops.k8s.rendered import RenderSet
from tritonops.k8s.stacks.cluster_aws import autoscaler, buckets, eks, karpenter
from tritonops.k8s.stacks.triton import outputs

Obj = dict[str, Any]


def render(out: RenderSet, cfg: ClusterAwsConfig) -> RenderSet:
    """The AWS resources, chart releases and Kubernetes objects of the cluster-aws stack, into ``out``."""
    out.aws.append({"type": "aws:eks/cluster:Cluster", "spec": eks.cluster_spec(cfg)})
    out.aws += _access_specs(cfg)
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
        out.releases += [karpenter.crd_release(), karpenter.release(cfg, role)]
        out.release_deps["karpenter"] = ["karpenter-crd"]
        out.objects += karpenter.objects(cfg)
    out.objects.append(eks.storage_class())
    out.aws += [{"type": "aws:s3/bucket:Bucket", "spec": buckets.bucket_spec(b)}
                for b in buckets.release_buckets(cfg)]
    return out


def _access_specs(cfg: ClusterAwsConfig) -> list[Obj]:
    """Who reaches the cluster, as render writes it: access entries with their policy associations, and
    the cluster security group's rules for the API endpoint."""
    out: list[Obj] = []
    for e in eks.access_entries(cfg):
        out.append({"type": "aws:eks/accessEntry:AccessEntry",
                    "spec": {"name": e["name"], "principal_arn": e["principal_arn"], "type": e["type"]}})
        out += [{"type": "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
                 "spec": {k: a[k] for k in ("name", "principal_arn", "policy_arn", "access_scope")}}
                for a in e["associations"]]
    out += [{"type": "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
             "spec": {"security_group_id": "<cluster security group>", **{k: v for k, v in r.items() if k != "tags"}}}
            for r in eks.api_access_rules(cfg)]
    return out


def _access(cfg: ClusterAwsConfig, cluster: Any) -> dict[str, Any]:
    """The access entries (each with its policy associations) and the API endpoint's ingress rules."""
    import pulumi_aws as aws

    entries: dict[str, Any] = {}
    for e in eks.access_entries(cfg):
        entry = aws.eks.AccessEntry(e["name"], cluster_name=cluster.name, principal_arn=e["principal_arn"],
                                    type=e["type"], tags=e["tags"])
        for a in e["associations"]:
            aws.eks.AccessPolicyAssociation(
                a["name"], cluster_name=cluster.name, principal_arn=entry.principal_arn, policy_arn=a["policy_arn"],
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(**a["access_scope"]))
        entries[e["principal_arn"]] = entry
    group = cluster.vpc_config.apply(lambda v: v.cluster_security_group_id)
    rules = [aws.vpc.SecurityGroupIngressRule(r["name"], security_group_id=group,
                                              **{k: v for k, v in r.items() if k != "name"})
             for r in eks.api_access_rules(cfg)]
    return {"access_entries": entries, "api_access_rules": rules}


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


def _reader_trust(namespace: str, service_account: str) -> Callable[[list[Any]], str]:
    def build(values: list[Any]) -> str:
        return eks.irsa_trust_policy(values[0], values[1], namespace, service_account)

    return build


def _reader_roles(cfg: ClusterAwsConfig, oidc_arn: Any, issuer: Any, tags: dict[str, str]) -> dict[str, Any]:
    """Each ``modelReaders`` entry's IRSA role (trusting its ServiceAccount) with its S3 read policy."""
    import pulumi
    import pulumi_aws as aws

    readers: dict[str, Any] = {}
    for r in cfg.model_readers:
        trust = pulumi.Output.all(oidc_arn, issuer).apply(_reader_trust(r.namespace, r.service_account))
        role_ = aws.iam.Role(f"reader-{r.role_name}", name=r.role_name, assume_role_policy=trust, tags=tags,
                             opts=pulumi.ResourceOptions(delete_before_replace=True))  # a fixed name
        aws.iam.RolePolicy(f"reader-{r.role_name}-s3", role=role_.id,
                          policy=eks.s3_read_policy(r.bucket, r.prefix, reports=r.reports))
        if r.ecr_stores:  # oci:// release stores on ECR
            aws.iam.RolePolicy(f"reader-{r.role_name}-ecr", role=role_.id, policy=ecr_read_policy(r.ecr_stores))
        readers[r.role_name] = role_
    return readers


def program() -> dict[str, Any]:
    """The cluster-aws Pulumi program: EKS, its node groups and add-ons, IRSA roles, release buckets."""
    import pulumi
    import pulumi_aws as aws

    from tritonops.k8s.stacks.cluster_aws import components  # Pulumi's: only here, never in render

    cfg = pulumi_config("cluster-aws")
    assert isinstance(cfg, ClusterAwsConfig)
    aws_config = pulumi.Config("aws")
    region = aws_config.require("region")
    # Who the kubeconfig's `aws eks get-token` runs as: the stack's own AWS identity (checked before any resource).
    profile, role_arn = eks.exec_identity(aws_config.get("profile"), aws_config.get("assumeRoles"),
                                          source=f"Pulumi.{pulumi.get_stack()}.yaml")
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
    _, system = components.managed_node_group("system-nodes", "system-nodes", sys_spec, cluster.name)
    pools = [components.GpuNodePool(f"gpu-{p.name}", components.GpuNodePoolArgs(cfg, p, cluster.name))
             for p in karpenter.managed_pools(cfg)]
    readers = _reader_roles(cfg, oidc.arn, issuer, spec["tags"])
    account = aws.get_caller_identity_output().account_id
    release_buckets = {b: components.ReleaseBucket(f"bucket-{b}", b, cfg, account)
                       for b in buckets.release_buckets(cfg)}
    access = _access(cfg, cluster)
    kubeconfig = pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority.data, region).apply(
        lambda a: eks.kubeconfig(a[0], a[1], a[2], a[3], profile=profile, role_arn=role_arn)
    )
    import pulumi_kubernetes as k8s

    # Its resources go through the API endpoint: after the rules that let this runner reach a private one.
    provider = k8s.Provider("cluster-aws-k8s", kubeconfig=kubeconfig,
                            opts=pulumi.ResourceOptions(depends_on=access["api_access_rules"]))
    k8s_opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    out: dict[str, Any] = {"addons": components.ClusterAddons("addons", cfg, cluster.name, (oidc.arn, issuer),
                                                              k8s_opts, depends_on=[system])}
    if karpenter.karpenter_pools(cfg):
        out["karpenter"] = components.Karpenter(
            "karpenter", components.KarpenterArgs(cfg, cluster.name, cluster.arn, oidc.arn, issuer), k8s_opts,
            depends_on=[system],
        )
    if autoscaler.managed_gpu_pools(cfg):
        out["cluster_autoscaler"] = components.ClusterAutoscaler(
            "cluster-autoscaler", components.ClusterAutoscalerArgs(cfg, oidc.arn, issuer, region), k8s_opts,
            depends_on=[system],
        )
    pulumi.export("clusterName", cluster.name)
    pulumi.export("kubeconfig", pulumi.Output.secret(kubeconfig))
    pulumi.export("clusterSecurityGroupId", cluster.vpc_config.apply(lambda v: v.cluster_security_group_id))
    pulumi.export("oidcProviderArn", oidc.arn)
    pulumi.export("oidcIssuer", issuer)
    pulumi.export("nodePools", eks.node_pools_summary(cfg))
    pulumi.export("modelReaderRoleArns", {name: role_.arn for name, role_ in readers.items()})
    # What the triton stack reads (outputs.reader_arn): each role with the ServiceAccount it trusts.
    pulumi.export(outputs.MODEL_READERS, outputs.model_readers(cfg, {n: r.arn for n, r in readers.items()}))
    pulumi.export("releaseBuckets", {b: {"publisherRoleArn": r.publisher.arn} for b, r in release_buckets.items()})
    out["buckets"] = release_buckets
    return {"cluster": cluster, "oidc": oidc, "system": system, "pools": pools, "readers": readers, **access, **out}
