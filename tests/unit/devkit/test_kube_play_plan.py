"""``devkit.kube_play.plan``: what ``podman kube play`` gets is the rendered dev Deployment, changed only where it says.

The played pod (tests/infra/kube_play) proves behaviour; this proves the object it plays is the one
``tritonops render --stack triton --env dev`` writes, with exactly the images, the store URL, the
trusted key's data and the restart policy substituted. No Podman needed.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from devkit import kube_play as kp
from devkit.triton_image import IMAGE
from tritonops.k8s.programs import render_set
from tritonops.k8s.stack_file import load_stack_config

STORE = "http://10.88.0.9:8080/releases"
KEY = b"-----BEGIN PUBLIC KEY-----\ntest\n-----END PUBLIC KEY-----\n"


@pytest.fixture(scope="module")
def rendered() -> dict:
    objects = render_set("triton", "dev", load_stack_config("triton", "dev")).objects  # as kp.plan renders it
    return next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "triton-vision")


@pytest.fixture(scope="module")
def pod() -> kp.PodPlan:
    return kp.plan(STORE, {"release.pub": KEY})


def _undo(pod: kp.PodPlan, rendered: dict) -> dict:
    """The planned Deployment with the documented substitutions put back."""
    dep = copy.deepcopy(pod.deployment)
    spec = dep["spec"]["template"]["spec"]
    orig = rendered["spec"]["template"]["spec"]
    originals = {c["name"]: c for c in [*orig.get("initContainers", []), *orig["containers"]]}
    store = next(a for c in originals.values() for i, a in enumerate(c.get("command", [])[1:])
                 if c["command"][i] == "--store")
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        assert c["image"] == IMAGE
        c["image"] = originals[c["name"]]["image"]
        if "command" in c:
            c["command"] = [store if a == STORE else a for a in c["command"]]
    assert spec.pop("restartPolicy") == "OnFailure"
    if "restartPolicy" in orig:
        spec["restartPolicy"] = orig["restartPolicy"]
    return dep


def test_only_the_documented_fields_differ_from_the_render(pod: kp.PodPlan, rendered: dict) -> None:
    assert _undo(pod, rendered) == rendered


def test_the_agents_read_the_local_store(pod: kp.PodPlan) -> None:
    assert pod.agent_arg("--store", "release-sync") == pod.agent_arg("--store") == STORE
    assert pod.agent_arg("--channel") == "dev"


def test_every_mounted_config_map_is_played_and_the_trusted_one_holds_the_given_key(pod: kp.PodPlan) -> None:
    mounted = {v["configMap"]["name"] for v in pod.pod_spec["volumes"] if "configMap" in v}
    played = {cm["metadata"]["name"]: cm for cm in pod.config_maps}
    assert set(played) == mounted
    keys = next(v["configMap"] for v in pod.pod_spec["volumes"] if v["name"] == "trusted-keys")
    assert played[keys["name"]]["data"] == {"release.pub": KEY.decode()}
    assert "binaryData" in played["tritonops-agent"]  # the agent zipapp, as rendered


def test_the_secrets_the_pod_reads_are_listed_with_their_keys(pod: kp.PodPlan) -> None:
    assert pod.secrets["triton-admin-api"] == {"token": False}
    assert set(pod.secrets) == {"triton-admin-api"}  # dev reads its bucket with cluster-aws's IRSA role: no key Secret


def test_a_missing_secret_value_is_refused_naming_the_secret_and_key(pod: kp.PodPlan) -> None:
    with pytest.raises(kp.PlayError, match=r"Secret triton-admin-api: the pod reads token"):
        kp.create_secrets(pod, {})


def test_a_trusted_key_the_pod_mounts_must_be_given() -> None:
    with pytest.raises(kp.PlayError, match=r"volume trusted-keys wants keys release.pub"):
        kp.plan(STORE, {"other.pub": KEY})


def test_the_yaml_is_the_config_maps_then_the_deployment(pod: kp.PodPlan) -> None:
    docs = list(yaml.safe_load_all(pod.yaml()))
    assert [d["kind"] for d in docs] == ["ConfigMap"] * len(pod.config_maps) + ["Deployment"]
    assert pod.volume_names() == [v.get("configMap", {}).get("name", v["name"]) for v in pod.pod_spec["volumes"]
                                  if "emptyDir" in v or "configMap" in v]


def test_a_registry_pod_mounts_the_users_auth_and_ca_as_config_maps(tmp_path: Path) -> None:
    """An oci:// store: the CA ConfigMap and the auth Secret the user creates play from ``user_objects``; the
    Secret volume becomes a ConfigMap volume of the same name and items (podman 4.3 panics on secret volumes)."""
    store = "oci://10.88.0.1:5000/tritonops/vision"
    stacks = kp.registry_stacks(tmp_path, store, "vision-registry", "vision-registry-ca")
    users = {"vision-registry": {".dockerconfigjson": '{"auths": {}}'}, "vision-registry-ca": {"ca.crt": "PEM"}}
    pod = kp.plan(store, {"release.pub": KEY}, stacks_dir=stacks, user_objects=users)
    assert pod.agent_arg("--store", "release-sync") == store and pod.agent_arg("--interval") == "5"
    vols = {v["name"]: v for v in pod.pod_spec["volumes"]}
    assert "secret" not in vols["registry-auth"]
    assert vols["registry-auth"]["configMap"] == {"name": "vision-registry",
                                                  "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}
    maps = {m["metadata"]["name"]: m.get("data") for m in pod.config_maps}
    assert maps["vision-registry"] == users["vision-registry"] and maps["vision-registry-ca"] == {"ca.crt": "PEM"}
    assert any(s.startswith("volume registry-auth: Secret vision-registry -> a ConfigMap") for s in pod.substituted)
    with pytest.raises(kp.PlayError, match="mounts ConfigMap vision-registry-ca, which"):
        kp.plan(store, {"release.pub": KEY}, stacks_dir=stacks, user_objects={"vision-registry": {}})
