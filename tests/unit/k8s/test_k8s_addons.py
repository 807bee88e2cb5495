"""What cluster-aws provides its workloads (issue 33, Deliver-2): the EBS CSI driver as an EKS add-on
with its IRSA role, the default gp3 StorageClass prod's Prometheus PVC names, and the VPC CNI with
NetworkPolicy enforcement on."""

from __future__ import annotations

import json

import pytest
from k8s_harness import as_ints, committed, envs
from tritonops.k8s import eks, platform
from tritonops.k8s.config import PlatformConfig
from tritonops.k8s.stack_file import load_stack_config


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
