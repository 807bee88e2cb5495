"""What cluster-aws provides its workloads (issue 33, Deliver-2): the EBS CSI driver as an EKS add-on
with its IRSA role, the default gp3 StorageClass prod's Prometheus PVC names, and the VPC CNI with
NetworkPolicy enforcement on."""

from __future__ import annotations

import json

import pytest
from k8s_harness import as_ints, committed, envs, triton_config
from tritonops.k8s.config import ClusterAwsConfig, ConfigError, PlatformConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.cluster_aws import eks
from tritonops.k8s.stacks.platform import charts as platform
from tritonops.k8s.stacks.triton import outputs


def _addons(env: str) -> dict[str, dict]:
    return {a.inputs["addonName"]: a.inputs for a in committed("cluster-aws", env).of_type("aws:eks/addon:Addon")}


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_vpc_cni_enforces_network_policies(env: str) -> None:
    """Before: no stack turned the VPC CNI's network-policy agent on; EKS stored the NetworkPolicies
    of the triton stack and enforced none of them."""
    cni = _addons(env)[eks.VPC_CNI_ADDON]
    assert json.loads(cni["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert cni["resolveConflictsOnCreate"] == "OVERWRITE"  # adopts the aws-node EKS installed itself


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_ebs_csi_addon_runs_as_its_irsa_role(env: str) -> None:
    mocks = committed("cluster-aws", env)
    ebs = _addons(env)[eks.EBS_CSI_ADDON]
    (role,) = [r for r in mocks.of_type("aws:iam/role:Role") if r.inputs.get("name") == f"tritonops-{env}-ebs-csi"]
    assert ebs["serviceAccountRoleArn"] == f"arn:aws:iam::111122223333:role/{role.name}"
    cond = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert "system:serviceaccount:kube-system:ebs-csi-controller-sa" in cond.values()
    attached = {a.inputs["policyArn"] for a in mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if a.name.startswith("addons-ebs-csi")}
    assert attached == {eks.EBS_CSI_POLICY}


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_default_gp3_storage_class_serves_the_prometheus_pvc(env: str) -> None:
    """Before: prod's Prometheus PVC named storageClass gp3 and nothing created it (Pending for ever)."""
    (sc,) = [as_ints(r.inputs) for r in committed("cluster-aws", env).of_type("kubernetes:storage.k8s.io/v1:StorageClass")]
    assert sc == eks.storage_class()
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["provisioner"] == "ebs.csi.aws.com" and sc["parameters"] == {"type": "gp3", "encrypted": "true"}
    cfg = load_stack_config("platform", env)
    assert isinstance(cfg, PlatformConfig)
    values = platform.monitoring_release(cfg).values
    claim = values["prometheus"]["prometheusSpec"].get("storageSpec", {}).get("volumeClaimTemplate", {}).get("spec", {})
    assert claim.get("storageClassName", sc["metadata"]["name"]) == sc["metadata"]["name"]


# --- release buckets: one bucket, one IRSA role, the service reads exactly that ---------------------


@pytest.mark.parametrize("env", envs("cluster-aws"))
def test_release_buckets_private_versioned_encrypted_with_publisher(env: str) -> None:
    """Before: nothing created the buckets the modelReaders read; `release publish` had nowhere to write."""
    mocks = committed("cluster-aws", env)
    cfg = load_stack_config("cluster-aws", env)
    assert isinstance(cfg, ClusterAwsConfig)
    made = {b.inputs["bucket"]: b for b in mocks.of_type("aws:s3/bucket:Bucket")}
    assert set(made) == {r.bucket for r in cfg.model_readers} and made
    by_bucket = lambda typ: {r.name.split("-", 1)[1].rsplit("-", 1)[0]: r.inputs for r in mocks.of_type(typ)}  # noqa: E731
    for bucket in made:
        block = by_bucket("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")[f"{bucket}-public"]
        assert all(block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                      "restrictPublicBuckets"))
        assert by_bucket("aws:s3/bucketVersioning:BucketVersioning")[bucket]["versioningConfiguration"] == {
            "status": "Enabled"}
        (rule,) = by_bucket("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")[
            bucket]["rules"]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
        assert by_bucket("aws:s3/bucketOwnershipControls:BucketOwnershipControls")[bucket]["rule"] == {
            "objectOwnership": "BucketOwnerEnforced"}
        (pub,) = [r for r in mocks.of_type("aws:iam/role:Role") if r.inputs.get("name") == f"{bucket}-publisher"]
        assert json.loads(pub.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {
            "AWS": "arn:aws:iam::111122223333:root"}


@pytest.mark.parametrize("env", envs())
def test_a_model_service_reads_the_bucket_its_irsa_role_reads(env: str) -> None:
    """The role and the bucket are one: each service with a modelReader reads (its release store) inside
    that role's bucket/prefix, which cluster-aws creates and the role's policy grants."""
    triton = triton_config(env)
    cluster = load_stack_config("cluster-aws", env)
    assert isinstance(cluster, ClusterAwsConfig)
    readers = {r.role_name: r for r in cluster.model_readers}
    created = {b.inputs["bucket"] for b in committed("cluster-aws", env).of_type("aws:s3/bucket:Bucket")}
    for svc in triton.model_services:
        if svc.model_reader is None:
            continue
        r = readers[svc.model_reader]
        store = (svc.release.store if svc.release else svc.model_repository.uri) or ""  # type: ignore[union-attr]
        assert store.startswith(f"s3://{r.bucket}/{r.prefix}".rstrip("/")), (svc.name, store)
        assert r.bucket in created
        policy = json.loads(eks.s3_read_policy(r.bucket, r.prefix))
        assert f"arn:aws:s3:::{r.bucket}/{r.prefix}/*" in policy["Statement"][0]["Resource"]


def test_a_service_reading_another_bucket_than_its_role_is_refused() -> None:
    cfg = triton_config("prod")
    readers = outputs.model_readers(load_stack_config("cluster-aws", "prod"),  # type: ignore[arg-type]
                                    {r: f"arn:aws:iam::1:role/{r}" for r in ("tritonops-prod-model-reader",
                                                                            "tritonops-prod-embeddings-reader")})
    assert outputs.reader_arn(cfg, 0, readers, "org/tritonops-cluster-aws/prod").endswith("model-reader")
    readers["tritonops-prod-model-reader"]["bucket"] = "tritonops-releases-prod"
    with pytest.raises(ConfigError, match=r"modelServices\[0\]\.modelReader: this service reads "
                                          r"s3://tritonops-models-prod/vision, but .* the IRSA role and the bucket"):
        outputs.reader_arn(cfg, 0, readers, "org/tritonops-cluster-aws/prod")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"endpointPublicAccess": True, "publicAccessCidrs": []}, r"publicAccessCidrs: endpointPublicAccess is true"),
        ({"endpointPublicAccess": False, "publicAccessCidrs": ["10.0.0.0/8"]}, r"publicAccessCidrs: set only with"),
        ({"endpointPublicAccess": True, "publicAccessCidrs": ["10.0.0.0/33"]}, r"publicAccessCidrs\[0\]: '10.0.0.0/33'"),
    ],
)
def test_public_endpoint_names_who_may_reach_it(changes: dict, message: str) -> None:
    """Before: endpointPublicAccess without publicAccessCidrs passed, and EKS opened the API to 0.0.0.0/0."""
    raw = {**read_stack_file("cluster-aws", "dev")[0], **changes}
    with pytest.raises(ConfigError, match=message):
        parse_config("cluster-aws", raw)
