"""Stack configuration: committed files parse; invalid config fails naming the config key."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from k8s_harness import STACK_FILES, STACKS_DIR, envs
from tritonops.k8s.config import STACKS, ConfigError, config_keys
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.cluster_aws.eks import node_pools_summary


def _own(stack: str, env: str) -> dict[str, Any]:
    return copy.deepcopy(read_stack_file(stack, env)[0])


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_committed_config_parses(stack: str, env: str) -> None:
    cfg = load_stack_config(stack, env)
    assert cfg.environment == env  # set to the stack's name, or left unset: the stack's name
    assert cfg.tier in ("production", "non-production")


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
        # Pulumi's project schema (sdk/go/common/workspace/project.json, SimpleConfigType): string,
        # integer, boolean, array (with items) and object (CLI 3.187+); test_stack_contract.py checks more.
        assert spec.get("type") in ("string", "integer", "boolean", "array", "object"), key
        if spec.get("type") == "array":
            assert spec["items"]["type"] in ("string", "integer", "boolean", "object"), key
        if str_keys.get(key):
            assert spec.get("type") == "string", f"{key} is a string in the model"


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_stack_files_use_only_declared_keys(stack: str, env: str) -> None:
    own, other = read_stack_file(stack, env)
    assert set(own) <= set(config_keys(stack))
    assert set(other) <= {"aws:region"}


def test_prod_is_more_available_than_dev() -> None:
    dev, prod = load_stack_config("triton", "dev"), load_stack_config("triton", "prod")
    assert max(s.replicas for s in prod.model_services) > max(s.replicas for s in dev.model_services)
    assert all(s.spread and s.pdb_min_available for s in prod.model_services)
    assert all(s.replicas >= 2 for s in prod.model_services)


@pytest.mark.parametrize("env", envs("triton"))
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
    raw = _own("triton", "prod")
    del raw["modelServices"][0]["release"]
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].modelRepository"
    assert "modelRepository" in str(exc.value) and "release" in str(exc.value)


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
    with pytest.raises(ConfigError, match=r"--env: no stack config file .*triton/Pulumi\.qa\.yaml; .*\(stacks with one: dev, prod, staging\)"):
        read_stack_file("triton", "qa")
    for bad in ("../prod", "a/b", ".hidden", "", "x" * 101):
        with pytest.raises(ConfigError, match="--env: .* is not a stack name"):
            read_stack_file("triton", bad)


@pytest.mark.parametrize("env", envs("triton"))
def test_s3_model_services_use_a_cluster_irsa_role(env: str) -> None:
    """Each S3 repository's roleArn is a cluster-aws modelReaders role for that very ServiceAccount and bucket."""
    cluster = load_stack_config("cluster-aws", env)
    triton = load_stack_config("triton", env)
    readers = {r.role_name: r for r in cluster.model_readers}  # type: ignore[union-attr]
    s3 = [
        (s, s.model_repository) for s in triton.model_services if s.model_repository and s.model_repository.type == "s3"
    ]
    assert s3 or all(s.release for s in triton.model_services)  # dev's, staging's pull signed releases instead
    for svc, repo in s3:
        assert repo.role_arn is not None
        reader = readers[repo.role_arn.rsplit("/", 1)[1]]
        assert (reader.namespace, reader.service_account) == (triton.namespace, f"triton-{svc.name}")
        assert repo.uri == f"s3://{reader.bucket}/{reader.prefix}"


# --- release (pull mode) -------------------------------------------------------------------------

RELEASE = "tritonops-triton:modelServices[0].release"


def test_dev_pulls_a_signed_channel() -> None:
    svc = load_stack_config("triton", "dev").model_services[0]  # type: ignore[union-attr]
    assert svc.model_repository is None and svc.release is not None
    assert (svc.release.store, svc.release.channel, svc.release.poll_seconds) == (
        "s3://tritonops-releases-dev/vision",
        "dev",
        30,
    )
    assert svc.release.trusted_keys.config_map and not svc.release.node_cache


def _release(**fields: Any) -> dict[str, Any]:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["release"].update(fields)
    return raw


@pytest.mark.parametrize(
    ("raw", "key", "message"),
    [
        (_release(store="/srv/releases"), f"{RELEASE}.store", "http(s)://HOST/PATH or oci://REGISTRY/REPO"),
        (_release(store="s3:///prefix"), f"{RELEASE}.store", "s3://BUCKET/PREFIX"),
        (_release(channel="../prod"), f"{RELEASE}.channel", "use letters, digits"),
        (_release(trustedKeys={"configMap": "k", "secret": "k"}), f"{RELEASE}.trustedKeys", "one of configMap, secret"),
        (_release(trustedKeys={"keys": ["a.pem"]}), f"{RELEASE}.trustedKeys", "one of configMap, secret"),
        (_release(trustedKeys={"configMap": "Keys_1"}), f"{RELEASE}.trustedKeys.configMap", "not a valid ConfigMap"),
        (_release(trustedKeys={"secret": "k", "keys": ["ok.pem", "a/b"]}), f"{RELEASE}.trustedKeys.keys[1]", "'a/b'"),
        (_release(trustedKeys={"secret": "k", "keys": ["a", "a"]}), f"{RELEASE}.trustedKeys.keys[1]", "duplicate"),
        (_release(trustedKeys={"secret": "k", "keys": []}), f"{RELEASE}.trustedKeys.keys", "at least 1"),
        (_release(trustedKeys=None), f"{RELEASE}.trustedKeys", "valid dictionary"),
        (_release(store="https://mirror/r", s3Endpoint="http://m:9000", region=None, credentialsSecret=None),
         f"{RELEASE}.s3Endpoint", "only for an s3:// store"),
        (_release(store="https://mirror/r", region=None, credentialsSecret="tritonops-release-reader"),
         f"{RELEASE}.credentialsSecret", "only for an s3:// store"),
        (_release(s3Endpoint="minio:9000"), f"{RELEASE}.s3Endpoint", "expected http(s)://HOST"),
        (_release(credentialsSecret="AWS keys"), f"{RELEASE}.credentialsSecret", "not a valid Secret"),
        (_release(pollSeconds=1), f"{RELEASE}.pollSeconds", "greater than or equal to 5"),
        (_release(pollSecs=10), f"{RELEASE}.pollSecs", "Extra inputs"),
        (_release(volumeSize="20 GB"), f"{RELEASE}.volumeSize", "not a Kubernetes quantity"),
        ({**_own("triton", "dev"), "podSecurity": "open"}, "tritonops-triton:podSecurity", "'restricted'"),
    ],
)  # fmt: skip
def test_invalid_release_names_the_key(raw: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == key
    assert message in str(exc.value)


def test_release_and_model_repository_exclude_each_other() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["modelRepository"] = {"type": "pvc", "claimName": "models"}
    with pytest.raises(ConfigError, match=r"modelServices\[0\]\.release: set modelRepository or release, not both"):
        parse_config("triton", raw)


def test_release_needs_explicit_model_control() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["modelControlMode"] = "poll"
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[0].modelControlMode"
    assert "explicit" in str(exc.value)


def test_node_cache_accepted_with_the_stacks_node_cache_in_a_restricted_namespace() -> None:
    raw = _release(nodeCache=True)
    raw["nodeCache"] = {"quotaBytes": 50 << 30}
    cfg = parse_config("triton", raw)
    assert cfg.model_services[0].release.node_cache and cfg.pod_security == "restricted"  # type: ignore[union-attr]


# --- canary (release.canary) ---------------------------------------------------------------------

CANARY = f"{RELEASE}.canary"


def test_dev_runs_a_canary_on_its_own_channel() -> None:
    svc = load_stack_config("triton", "dev").model_services[0]  # type: ignore[union-attr]
    canary = svc.release.canary
    assert (canary.channel, canary.weight, canary.replicas) == ("dev-canary", 10, 1)
    assert canary.channel != svc.release.channel


def _canary(**fields: Any) -> dict[str, Any]:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["release"]["canary"].update(fields)
    return raw


def _ingress(mode: str) -> dict[str, Any]:
    raw = _own("triton", "dev")
    raw["ingress"] = {"mode": mode}
    return raw


def _service_level_canary() -> dict[str, Any]:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["canary"] = raw["modelServices"][0]["release"].pop("canary")
    return raw


@pytest.mark.parametrize(
    ("raw", "key", "message"),
    [
        (_canary(weight=0), f"{CANARY}.weight", "greater than or equal to 1"),
        (_canary(weight=100), f"{CANARY}.weight", "less than or equal to 99"),
        (_canary(weight="ten"), f"{CANARY}.weight", "valid integer"),
        (_canary(replicas=0), f"{CANARY}.replicas", "greater than or equal to 1"),
        (_canary(channel="../prod"), f"{CANARY}.channel", "use letters, digits"),
        (_canary(channel="dev"), f"{CANARY}.channel", "is the stable channel too"),
        (_canary(track="canary"), f"{CANARY}.track", "Extra inputs"),
        (_ingress("none"), f"{CANARY}.weight", "set ingress.mode to ingress"),
        (_service_level_canary(), "tritonops-triton:modelServices[0].canary", "Extra inputs"),
    ],
)  # fmt: skip
def test_invalid_canary_names_the_key(raw: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == key
    assert message in str(exc.value)


def test_canary_weight_is_required_and_replicas_default_to_one() -> None:
    raw = _own("triton", "dev")
    raw["modelServices"][0]["release"]["canary"] = {"channel": "canary"}
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert (exc.value.key, "Field required" in str(exc.value)) == (f"{CANARY}.weight", True)
    raw["modelServices"][0]["release"]["canary"] = {"channel": "canary", "weight": 5}
    cfg = parse_config("triton", raw)
    assert cfg.model_services[0].release.canary.replicas == 1  # type: ignore[union-attr]
