"""Stack configuration: committed files parse; invalid config fails naming the config key."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from infra.k8s.config import (
    ENVIRONMENTS,
    STACKS,
    STACKS_DIR,
    ConfigError,
    config_keys,
    load_stack_config,
    parse_config,
    read_stack_file,
)
from infra.k8s.eks import node_pools_summary


def _own(stack: str, env: str) -> dict[str, Any]:
    return copy.deepcopy(read_stack_file(stack, env)[0])


@pytest.mark.parametrize("env", ENVIRONMENTS)
@pytest.mark.parametrize("stack", STACKS)
def test_committed_config_parses(stack: str, env: str) -> None:
    cfg = load_stack_config(stack, env)
    assert cfg.environment == env


@pytest.mark.parametrize("stack", STACKS)
def test_pulumi_yaml_declares_exactly_the_model_keys(stack: str) -> None:
    """Pulumi.yaml's config schema and the pydantic model list the same keys (plus secret-only ones)."""
    project = yaml.safe_load((STACKS_DIR / stack / "Pulumi.yaml").read_text())
    assert project["name"] == f"tritonops-{stack}"
    declared = set(project["config"])
    secret_only = {k for k, v in project["config"].items() if v.get("secret")}
    assert declared - secret_only == set(config_keys(stack))
    str_keys = config_keys(stack)
    for key, spec in project["config"].items():
        assert spec.get("description"), f"{key} has no description"
        # Pulumi's project schema knows string, integer, boolean and array (whose items are one of
        # those); object-valued keys (and arrays of objects) are declared without a type.
        assert spec.get("type") in ("string", "integer", "boolean", "array", None), key
        if spec.get("type") == "array":
            assert spec["items"]["type"] in ("string", "integer", "boolean"), key
        if str_keys.get(key):
            assert spec.get("type") == "string", f"{key} is a string in the model"


@pytest.mark.parametrize("env", ENVIRONMENTS)
@pytest.mark.parametrize("stack", STACKS)
def test_stack_files_use_only_declared_keys(stack: str, env: str) -> None:
    own, other = read_stack_file(stack, env)
    assert set(own) <= set(config_keys(stack))
    assert set(other) <= {"aws:region"}


def test_prod_is_more_available_than_dev() -> None:
    dev, prod = load_stack_config("triton", "dev"), load_stack_config("triton", "prod")
    assert max(s.replicas for s in prod.model_services) > max(s.replicas for s in dev.model_services)
    assert all(s.spread and s.pdb_min_available for s in prod.model_services)
    assert all(s.replicas >= 2 for s in prod.model_services)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_triton_node_pools_agree_with_cluster_aws(env: str) -> None:
    """The triton stack's nodePools name cluster-aws's GPU pools with the same GPU."""
    cluster = node_pools_summary(load_stack_config("cluster-aws", env))
    triton = load_stack_config("triton", env)
    platform = load_stack_config("platform", env)
    for name, pool in triton.node_pools.items():
        assert name in cluster
        assert pool.instance_type.split(".")[0] == cluster[name]["instanceType"].split(".")[0]
        sharing = cluster[name]["gpuSharing"]
        expected = platform.gpu_operator.time_slicing[sharing] if sharing else 1
        assert pool.gpu_slices == expected


# --- invalid config: the error names the key -----------------------------------------------------


def test_unknown_instance_family_names_the_key() -> None:
    raw = _own("cluster-aws", "dev")
    raw["gpuNodePools"][0]["instanceTypes"] = ["g6.xlarge", "m5.xlarge"]
    with pytest.raises(ConfigError) as exc:
        parse_config("cluster-aws", raw)
    assert exc.value.key == "tritonops-cluster-aws:gpuNodePools[0].instanceTypes[1]"
    assert "m5" in str(exc.value)


def test_unknown_instance_family_in_triton_node_pools() -> None:
    raw = _own("triton", "dev")
    raw["nodePools"]["gpu-l4"]["instanceType"] = "c7i.large"
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:nodePools.gpu-l4.instanceType"


def test_replicas_below_pdb_minimum_names_the_key() -> None:
    raw = _own("triton", "prod")
    raw["modelServices"][0]["replicas"] = 1  # pdbMinAvailable is 2
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].replicas"
    assert "pdbMinAvailable=2" in str(exc.value)


def test_autoscaling_floor_below_pdb_minimum_names_the_key() -> None:
    raw = _own("triton", "prod")
    raw["modelServices"][1]["autoscaling"]["minReplicas"] = 1  # pdbMinAvailable is 1
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[1].autoscaling.minReplicas"


def test_model_service_without_models_names_the_key() -> None:
    raw = _own("triton", "prod")
    raw["modelServices"][1]["models"] = []
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[1].models"
    assert "embeddings" in str(exc.value)


def test_missing_field_names_the_key() -> None:
    raw = _own("triton", "dev")
    del raw["modelServices"][0]["modelRepository"]
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].modelRepository"


def test_unknown_node_pool_reference() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["nodePool"] = "gpu-h100"
    with pytest.raises(ConfigError, match=r"modelServices\[0\]\.nodePool: unknown node pool 'gpu-h100'"):
        parse_config("triton", raw)


def test_latest_image_refused() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["image"] = "nvcr.io/nvidia/tritonserver:latest"
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].image"


def test_unknown_field_refused() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["replicaCount"] = 3
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].replicaCount"


def test_alertmanager_receiver_reference_checked() -> None:
    raw = _own("platform", "prod")
    raw["monitoring"]["alertmanager"]["criticalReceiver"] = "nobody"
    with pytest.raises(ConfigError) as exc:
        parse_config("platform", raw)
    assert exc.value.key == "tritonops-platform:monitoring.alertmanager.criticalReceiver"


def test_source_file_is_named() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["models"] = []
    with pytest.raises(ConfigError, match=r"^Pulumi\.dev\.yaml: tritonops-triton:modelServices\[0\]\.models"):
        parse_config("triton", raw, source="Pulumi.dev.yaml")


def test_unknown_stack_and_env() -> None:
    with pytest.raises(ConfigError, match="--stack"):
        read_stack_file("gke", "dev")
    with pytest.raises(ConfigError, match="--env"):
        read_stack_file("triton", "staging")


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_s3_model_services_use_a_cluster_irsa_role(env: str) -> None:
    """Each S3 repository's roleArn is a cluster-aws modelReaders role for that very ServiceAccount and bucket."""
    cluster = load_stack_config("cluster-aws", env)
    triton = load_stack_config("triton", env)
    readers = {r.role_name: r for r in cluster.model_readers}  # type: ignore[union-attr]
    s3 = [s for s in triton.model_services if s.model_repository.type == "s3"]  # type: ignore[union-attr]
    assert s3
    for svc in s3:
        role = svc.model_repository.role_arn.rsplit("/", 1)[1]
        reader = readers[role]
        assert (reader.namespace, reader.service_account) == (triton.namespace, f"triton-{svc.name}")
        assert svc.model_repository.uri == f"s3://{reader.bucket}/{reader.prefix}"
