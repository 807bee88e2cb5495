"""Host checks for the model_repository role: the release layout, checksums and what Triton serves.

Run by the role's molecule verify step, or against any inventory::

    pytest tests/infra/model_repository --hosts=ansible://edge --ansible-inventory=ansible/inventories/local

Variables (admin secret, paths, the source folder) come from the Ansible inventory the run uses
(molecule's, or --ansible-inventory), with the roles' defaults otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mr_nodeinfo import node_address, node_vars, repository_api, run_agent
from tritonops.core.names import MANIFEST_FILE, STATE_FILE, check_release_id
from tritonops.release import push as rel
from tritonops.release_format import manifest


@pytest.fixture(scope="module")
def mr(host: Any, request: pytest.FixtureRequest) -> dict[str, Any]:
    return node_vars(host, request.config)


@pytest.fixture(scope="module")
def active(host: Any, mr: dict[str, Any]) -> str:
    link = host.file(mr["link"])
    assert link.is_symlink, f"{mr['link']} is not a symlink (kind: {link.exists and 'file or dir'})"
    target = link.linked_to
    assert str(Path(target).parent) == mr["releases"], f"{mr['link']} -> {target} is not under {mr['releases']}"
    return Path(target).name


def test_link_points_at_a_release(active: str, mr: dict[str, Any]) -> None:
    assert check_release_id(active) == active


def test_active_release_is_marked_current(host: Any, active: str, mr: dict[str, Any]) -> None:
    state = json.loads(host.file(f"{mr['releases']}/{STATE_FILE}").content_string)
    assert state["current"] == active
    assert state["history"][-1]["release"] == active


def test_release_matches_its_manifest_on_the_node(host: Any, active: str, mr: dict[str, Any]) -> None:
    out = run_agent(host, "verify", f"{mr['releases']}/{active}")
    assert out.rc == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["files"] == len(json.loads(
        host.file(f"{mr['releases']}/{active}/{MANIFEST_FILE}").content_string)["files"])


def test_release_is_the_source_repository(host: Any, active: str, mr: dict[str, Any]) -> None:
    """The node holds exactly the files of the source the inventory names (checksums included).

    (After test_rollout.py has published its own releases to a node, the node serves those instead.)
    """
    if not mr["source"]:
        pytest.skip("model_repository_local_path is not set for this host")
    on_node = json.loads(host.file(f"{mr['releases']}/{active}/{MANIFEST_FILE}").content_string)["files"]
    assert on_node == manifest.tree_files(Path(mr["source"]))


@pytest.mark.parametrize(("path", "mode"), [("releases", 0o750), ("release", 0o750), ("config", 0o640)])
def test_release_permissions(host: Any, active: str, mr: dict[str, Any], path: str, mode: int) -> None:
    paths = {"releases": mr["releases"], "release": f"{mr['releases']}/{active}",
             "config": f"{mr['releases']}/{active}/mlp/config.pbtxt"}
    f = host.file(paths[path])
    assert (f.user, f.group, f.mode) == ("root", mr["group"], mode)


def test_service_user_cannot_write_the_release(host: Any, active: str, mr: dict[str, Any]) -> None:
    out = host.run(f"runuser -u {mr['user']} -- touch {mr['releases']}/{active}/mlp/x")
    assert out.rc != 0


def test_releases_kept(host: Any, mr: dict[str, Any]) -> None:
    names = [n for n in host.file(mr["releases"]).listdir() if not n.startswith(".") and n != STATE_FILE]
    assert 1 <= len(names) <= mr["keep"], names


def test_every_model_of_the_release_is_ready(host: Any, active: str, mr: dict[str, Any]) -> None:
    models = json.loads(host.file(f"{mr['releases']}/{active}/{MANIFEST_FILE}").content_string)["files"]
    want = sorted({k.split("/")[0] for k in models if k.endswith("/config.pbtxt") and k.count("/") == 1})
    index = repository_api(host, mr, "index")
    ready = sorted({m["name"] for m in index if m.get("state") == "READY"})
    assert ready == want


def test_repository_api_refuses_without_the_header(host: Any, mr: dict[str, Any]) -> None:
    """The role loads through the admin header; without it the repository API is refused."""
    out = repository_api(host, {**mr, "secret": ""}, "index", check=False)
    assert "error" in out and "header" in str(out).lower(), out


def test_golden_inference_from_the_controller(host: Any, active: str, mr: dict[str, Any]) -> None:
    if not mr["source"]:
        pytest.skip("model_repository_local_path is not set for this host")
    result = rel.golden(f"http://{node_address(host)}:{mr['port']}", Path(mr["source"]), timeout=30)
    assert result["ok"], result["failed"]
