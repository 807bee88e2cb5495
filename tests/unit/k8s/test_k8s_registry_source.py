"""An ``oci://REGISTRY/REPO`` release store for a model service's pods (tritonops.k8s.registry_source): the
agents' auth Secret, CA and ECR region, the user's objects, the egress port, and the refusals."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_harness import ROOT
from tritonops.agent.cli import parser as agent_parser
from tritonops.cli import app
from tritonops.k8s import registry_source
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import read_stack_file
from tritonops.k8s.stacks.triton import exposure, workload
from tritonops.k8s.stacks.triton.required import user_secrets
from tritonops.stores.oci_api import Registry
from typer.testing import CliRunner

STORE = "oci://registry.example.com:5000/tritonops/vision"
ECR = "oci://111122223333.dkr.ecr.eu-west-1.amazonaws.com/tritonops/vision"


def _raw(**release: Any) -> dict[str, Any]:
    """dev's triton config, vision's release on an oci:// store (the s3-only fields dropped) plus ``release``."""
    raw = copy.deepcopy(read_stack_file("triton", "dev")[0])
    raw["modelServices"][0].pop("modelReader", None)  # dev's IRSA role reads its S3 bucket, not a registry
    rel = raw["modelServices"][0]["release"]
    for s3_only in ("region", "credentialsSecret"):
        rel.pop(s3_only, None)
    rel.update({"store": STORE, "registryAuthSecret": "vision-registry", "registryCaConfigMap": "vision-registry-ca"})
    rel.update(release)
    for k in [k for k, v in rel.items() if v is None]:
        del rel[k]
    return raw


def _cfg(**release: Any) -> TritonStackConfig:
    cfg = parse_config("triton", _raw(**release))
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def _pod(cfg: TritonStackConfig) -> dict[str, Any]:
    return dict(workload.deployment(cfg, cfg.model_services[0])["spec"]["template"]["spec"])


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def test_both_agents_read_the_registry_with_the_mounted_auth_and_ca() -> None:
    pod = _pod(_cfg())
    sync, triton, agent = pod["initContainers"][0], pod["containers"][0], pod["containers"][1]
    for c in (sync, agent):
        args = agent_parser().parse_args(c["command"][2:])
        assert args.store == STORE
        env = _by_name(c["env"])
        assert env[registry_source.AUTH_ENV] == {"name": "TRITONOPS_REGISTRY_AUTH", "value": registry_source.AUTH_PATH}
        assert env[registry_source.CA_ENV]["value"] == registry_source.CA_PATH
        mounts = _by_name(c["volumeMounts"])
        assert mounts["registry-auth"] == {"name": "registry-auth", "mountPath": "/etc/tritonops/registry-auth",
                                           "readOnly": True}
        assert mounts["registry-ca"]["readOnly"] is True
        assert not any(e["name"].startswith("AWS_") for e in c["env"])
    assert {"registry-auth", "registry-ca"}.isdisjoint(_by_name(triton["volumeMounts"]))  # Triton never sees them
    vols = _by_name(pod["volumes"])
    assert vols["registry-auth"]["secret"] == {"secretName": "vision-registry", "defaultMode": 0o440,
                                               "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}
    assert vols["registry-ca"]["configMap"] == {"name": "vision-registry-ca",
                                                "items": [{"key": "ca.crt", "path": "ca.crt"}]}


def test_the_agent_reads_a_dockerconfigjson_secret_as_mounted(tmp_path: Path) -> None:
    """The mounted file (the Secret's .dockerconfigjson as kubectl writes it) gives the agent its login."""
    auth = tmp_path / registry_source.AUTH_FILE
    auth.write_text(json.dumps({"auths": {"registry.example.com:5000": {"username": "reader", "password": "pw"}}}))
    reg = Registry(STORE, auth=auth)
    assert (reg.host, reg.repo, reg.credentials, reg.ecr) == ("registry.example.com:5000", "tritonops/vision",
                                                              ("reader", "pw"), False)


def test_user_creates_the_auth_secret_and_the_ca_config_map() -> None:
    entries = {e["name"]: e for e in user_secrets(_cfg())}
    secret, ca = entries["vision-registry"], entries["vision-registry-ca"]
    assert (secret["kind"], secret["keys"]) == ("Secret", [".dockerconfigjson"])
    assert "--type=kubernetes.io/dockerconfigjson --from-file=.dockerconfigjson=./config.json" in secret["command"]
    assert (ca["kind"], ca["keys"]) == ("ConfigMap", ["ca.crt"]) and "--from-file=ca.crt=./ca.crt" in ca["command"]
    assert "registry.example.com:5000" in secret["note"]
    plain = {e["name"] for e in user_secrets(_cfg(registryAuthSecret=None, registryCaConfigMap=None))}
    assert {"vision-registry", "vision-registry-ca"}.isdisjoint(plain)


def _ecr_raw(**release: Any) -> dict[str, Any]:
    """An ECR store read with the service's modelReader role (IRSA, ARN from the cluster-aws stack)."""
    raw = _raw(**{"store": ECR, "registryAuthSecret": None, **release})
    raw["modelServices"][0]["modelReader"] = "vision-reader"
    raw["cluster"] = {"clusterStack": "org/tritonops-cluster-aws/dev"}
    return raw


@pytest.mark.parametrize(("store", "port"), [(STORE, 5000), ("oci://ghcr.io/acme/models", 443), (ECR, 443)])
def test_egress_opens_the_registrys_port_only(store: str, port: int) -> None:
    cfg = parse_config("triton", _ecr_raw() if store == ECR else _raw(store=store))
    assert isinstance(cfg, TritonStackConfig)
    (rule,) = exposure.network_policy(cfg, cfg.model_services[0])["spec"]["egress"]
    assert rule["ports"] == [{"port": port, "protocol": "TCP"}]


def test_an_ecr_registry_is_read_with_the_pods_role_in_its_region() -> None:
    cfg = parse_config("triton", _ecr_raw())
    assert isinstance(cfg, TritonStackConfig)
    sync = _pod(cfg)["initContainers"][0]
    env = _by_name(sync["env"])
    assert env["AWS_REGION"]["value"] == "eu-west-1" and registry_source.AUTH_ENV not in env
    assert Registry(ECR, auth=None).ecr  # no auth file: the agent asks ECR for a token with the pod's role
    assert registry_source.ECR_ACTIONS == ("ecr:GetAuthorizationToken", "ecr:BatchGetImage",
                                           "ecr:GetDownloadUrlForLayer")


@pytest.mark.parametrize(
    ("release", "field", "message"),
    [
        ({"region": "us-west-2"}, "region", "only for an s3:// store"),
        ({"credentialsSecret": "keys"}, "credentialsSecret", "only for an s3:// store"),
        ({"s3Endpoint": "http://minio:9000"}, "s3Endpoint", "only for an s3:// store"),
        ({"reports": True}, "reports", "only for an s3:// store"),
        ({"store": "https://mirror.example/r"}, "registryAuthSecret", "only for an oci:// store"),
        ({"store": "s3://b/p", "registryAuthSecret": None}, "registryCaConfigMap", "only for an oci:// store"),
        ({"store": "oci://registry.example.com/Upper/Case"}, "store", "expected oci://REGISTRY/REPOSITORY"),
        ({"store": "oci://registry.example.com"}, "store", "expected oci://REGISTRY/REPOSITORY"),
        ({"store": "ftp://x/y"}, "store", "oci://REGISTRY/REPO"),
        ({"registryAuthSecret": "Bad_Name"}, "registryAuthSecret", "not a valid Secret name"),
        ({"store": ECR, "registryAuthSecret": None}, "store", "modelReader role"),
    ],
)
def test_refusals_name_the_field(release: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _cfg(**release)
    assert err.value.key == f"tritonops-triton:modelServices[0].release.{field}"


def test_ecr_with_both_the_role_and_an_auth_secret_is_refused() -> None:
    raw = _ecr_raw(registryAuthSecret="vision-registry")
    with pytest.raises(ConfigError, match="not both") as err:
        parse_config("triton", raw)
    assert err.value.key.endswith("release.registryAuthSecret")


def test_check_config_names_file_line_and_key(tmp_path: Path) -> None:
    """`tritonops render --check-config`, an s3-only field on an oci:// store: exit 2, file:line: key."""
    shutil.copytree(ROOT / "stacks" / "triton", tmp_path / "stacks" / "triton",
                    ignore=shutil.ignore_patterns("venv", "__pycache__"))
    path = tmp_path / "stacks" / "triton" / "Pulumi.dev.yaml"
    text = path.read_text().replace("store: s3://tritonops-releases-dev/vision", f"store: {STORE}", 1)
    path.write_text(text)
    line = text.splitlines().index("        region: us-west-2") + 1
    res = CliRunner().invoke(app, ["render", "--check-config", "--stack", "triton", "--env", "dev",
                                   "--project-dir", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert (f"{path}:{line}: tritonops-triton:modelServices[0].release.region: only for an s3:// store"
            in " ".join(res.stderr.split())), res.stderr
    assert "Traceback" not in res.output


def test_the_ecr_policy_pulls_the_named_repositories_only() -> None:
    doc = json.loads(registry_source.ecr_read_policy([ECR, ECR, "oci://111122223333.dkr.ecr.cn-north-1.amazonaws.com.cn/m"]))
    token, pull = doc["Statement"]
    assert (token["Action"], token["Resource"]) == (["ecr:GetAuthorizationToken"], ["*"])  # ECR scopes it to nothing
    assert pull["Action"] == ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]  # no push, no listing
    assert pull["Resource"] == ["arn:aws-cn:ecr:cn-north-1:111122223333:repository/m",
                                "arn:aws:ecr:eu-west-1:111122223333:repository/tritonops/vision"]


def test_cluster_aws_gives_a_model_reader_its_ecr_policy() -> None:
    """cluster-aws modelReaders[].ecrStores: the reader role gets ecr_read_policy as a second inline policy."""
    from k8s_harness import run_program

    readers = yaml.safe_load((ROOT / "stacks/cluster-aws/Pulumi.dev.yaml").read_text())["config"][
        "tritonops-cluster-aws:modelReaders"]
    readers = [{**readers[0], "ecrStores": [ECR]}, *readers[1:]]
    mocks = run_program("cluster-aws", "dev", overrides={"modelReaders": readers})
    policies = {p.name: p for p in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("reader-")}
    ecr = policies[f"reader-{readers[0]['roleName']}-ecr"]
    assert json.loads(ecr.inputs["policy"]) == json.loads(registry_source.ecr_read_policy([ECR]))
    assert [n for n in policies if n.endswith("-ecr")] == [f"reader-{readers[0]['roleName']}-ecr"]
    with pytest.raises(ConfigError, match="ecrStores"):
        parse_config("cluster-aws", {**_cluster_raw(), "modelReaders": [{**readers[0], "ecrStores": [STORE]}]})


def _cluster_raw() -> dict[str, Any]:
    return dict(read_stack_file("cluster-aws", "dev")[0])
