"""Triton's command line is built once (tritonops.triton.args): the edge unit (the triton_server role's
templates through the collection's ``tritonserver_args`` lookup) and the pod spec (``tritonops render``)
from one setting carry the same flags, except those listed below with why.

The edge side is a real ansible-playbook run rendering the role's templates with its defaults; the pod
side is the triton stack's dev render.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleLookupError
from tritonops.cli import app
from tritonops.core.triton_cli import GRPC_PORT, HTTP_PORT, METRICS_PORT
from tritonops.core.triton_http import DEFAULT_HEADER
from tritonops.triton.args import _OPTIONS, RESTRICTED, RESTRICTED_APIS, Listener, TritonSettings, triton_args
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "triton_server"
SECRET = "edge-admin-secret-0"

# The one setting, as the triton_server role's variables: what the dev stack's pods serve (a release in
# explicit mode, everything it holds; Triton's ports; the p95 summaries; a GPU node).
EDGE_SETTING = {
    "triton_server_install_method": "container",
    "triton_server_model_control_mode": "explicit",
    "triton_server_startup_models": ["*"],
    "triton_server_metrics_config": {"summary_latencies": "true"},
    "triton_server_admin_secret": SECRET,
    "ansible_local": {"gpu": {"platform": "nvidia_gpu"}},
}
# Flags only the edge sets, and why the pods leave them at Triton's default.
EDGE_ONLY = {
    "--backend-directory",  # where the edge's install method put the backends; the image's own default
    "--allow-http", "--allow-grpc",  # the role can turn a protocol off; pods serve both (Triton's default)
    "--http-address", "--grpc-address", "--metrics-address",  # a node's interfaces; a pod's network is its own
    "--log-verbose",  # a role variable; pods log at Triton's default (0)
}
# Flags only the pods set, and why the edge does not (yet): a hardening flag belongs on both unless listed.
POD_ONLY = {
    "--strict-model-config",  # pods refuse auto-complete; edge repositories may rely on it
    "--exit-on-error",  # pods state Triton's default (true); the edge leaves it
    "--log-format",  # pods log ISO8601 for the cluster's collector; journald stamps the edge's lines
    "--cuda-memory-pool-byte-size", "--pinned-memory-pool-byte-size", "--model-load-gpu-limit",  # the pod's
    # GPU budget sizes them; the edge passes them in triton_server_extra_args
}
# Flags both set, whose values legitimately differ.
VALUE_DIFFERS = {"--model-repository", "--http-restricted-api", "--grpc-restricted-protocol"}


def _plugin() -> ModuleType:
    path = REPO / "plugins" / "lookup" / "tritonserver_args.py"
    spec = importlib.util.spec_from_file_location("tritonops_tritonserver_args_lookup", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flags(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for arg in argv:
        key, _, value = arg.partition("=")
        out.setdefault(key, []).append(value)
    return out


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The role's rendered args template and environment file, and its restricted-API default."""
    tmp = tmp_path_factory.mktemp("edge")
    collections = tmp / "collections" / "ansible_collections" / "tritonops"
    collections.mkdir(parents=True)
    (collections / "triton").symlink_to(REPO)
    (tmp / "setting.json").write_text(json.dumps(EDGE_SETTING))
    render = [{"name": f"Render {name}", "ansible.builtin.copy": {
        "dest": str(tmp / name), "mode": "0600", "content": f"{{{{ lookup('ansible.builtin.template', '{src}') }}}}"}}
        for name, src in (("args", ROLE / "templates" / "tritonserver-args.j2"),
                          ("env", ROLE / "templates" / "tritonserver.env.j2"))]
    apis = {"name": "The restricted APIs", "ansible.builtin.copy": {
        "dest": str(tmp / "apis.json"), "mode": "0600", "content": "{{ triton_server_restricted_apis | to_json }}"}}
    (tmp / "play.yml").write_text(json.dumps([{
        "name": "Render the edge unit's arguments", "hosts": "localhost", "connection": "local",
        "gather_facts": False, "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                                              str(tmp / "setting.json")],
        "tasks": [*render, apis]}]))
    env = os.environ | {"ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections"), "ANSIBLE_LOCALHOST_WARNING": "false",
                        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    res = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "play.yml"],
                         capture_output=True, text=True, env=env, timeout=180, cwd=tmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return {"args": (tmp / "args").read_text(), "env": (tmp / "env").read_text(),
            "apis": json.loads((tmp / "apis.json").read_text())}


def _edge_argv(edge: dict[str, Any]) -> list[str]:
    """The process's arguments as systemd builds them: the unit's, the env file's admin arguments in place."""
    (admin,) = [ln.partition("=")[2] for ln in edge["env"].splitlines() if ln.startswith("TRITON_SERVER_ADMIN_ARGS=")]
    words = [w for w in edge["args"].split() if w != "\\"]
    assert words[-1] == "$TRITON_SERVER_ADMIN_ARGS"
    return words[:-1] + admin.split()


def _pod_argv(tmp_path: Path, project: Path) -> list[str]:
    res = CliRunner().invoke(app, ["render", "--stack", "triton", "--env", "dev", "--out", str(tmp_path),
                                   "--project-dir", str(project)])
    assert res.exit_code == 0, res.output
    (dep,) = tmp_path.glob("*-deployment-triton-triton-vision.yaml")
    (triton,) = [c for c in yaml.safe_load(dep.read_text())["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "triton"]
    assert triton["args"][0] == "tritonserver"
    return list(triton["args"][1:])


def test_edge_unit_and_pod_spec_from_one_setting_carry_the_same_flags(edge: dict[str, Any], tmp_path: Path,
                                                                      user_project: Path) -> None:
    e, p = _flags(_edge_argv(edge)), _flags(_pod_argv(tmp_path, user_project))
    assert set(e) >= EDGE_ONLY and set(p) >= POD_ONLY, "a listed difference no longer exists: drop it from the list"
    assert sorted(set(e) - EDGE_ONLY) == sorted(set(p) - POD_ONLY)
    shared = set(e) - EDGE_ONLY - VALUE_DIFFERS
    assert {k: e[k] for k in shared} == {k: p[k] for k in shared}
    assert e["--load-model"] == ["*"] and e["--metrics-config"] == ["summary_latencies=true"]
    # What differs: the repository's path, and how each site passes the admin key (never a literal on the pod).
    assert e["--model-repository"] == ["/var/lib/triton/models"] and p["--model-repository"] == ["/var/lib/tritonops/models"]
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        assert e[flag] == [f"{RESTRICTED}:triton-admin-key={SECRET}"]  # from the root-only environment file
        assert p[flag] == [f"{RESTRICTED}:triton-admin-key=$(TRITON_ADMIN_KEY)"]  # the kubelet expands it
    assert SECRET not in edge["args"]  # the unit file (world-readable) holds no secret


def test_the_roles_restricted_apis_are_the_builders(edge: dict[str, Any]) -> None:
    assert tuple(edge["apis"]) == RESTRICTED_APIS
    assert "{{" in yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["triton_server_restricted_apis"]


def test_the_lookup_builds_what_the_builder_builds() -> None:
    got = _plugin().LookupModule().run([], model_repository="/m", http_enabled="yes", http_port="8000",
                                       grpc_enabled=False, grpc_port=8001, metrics_config={"a": 1})
    want = triton_args(TritonSettings("/m", http=Listener(True, port=8000), grpc=Listener(False, port=8001),
                                      metrics_config={"a": "1"}))
    assert got == want == ["--model-repository=/m", "--allow-http=true", "--http-port=8000", "--allow-grpc=false",
                           "--metrics-config=a=1"]
    admin = _plugin().LookupModule().run(["admin"], restricted_apis=["trace"], admin_header="h", admin_key="k",
                                         grpc_enabled=False)
    assert admin == ["--http-restricted-api=trace:h=k"]


def test_the_lookups_documented_options_are_the_builders() -> None:
    doc = yaml.safe_load(_plugin().DOCUMENTATION)["options"]
    kinds = {str: "str", int: "int", bool: "bool", list: "list", dict: "dict"}
    assert {k: v["type"] for k, v in doc.items() if k != "_terms"} == {k: kinds[t] for k, t in _OPTIONS.items()}


def test_the_lookup_gives_the_facts_the_roles_read() -> None:
    lookup = _plugin().LookupModule()
    got = [lookup.run([name])[0] for name in ("http_port", "grpc_port", "metrics_port", "admin_header")]
    assert got == [HTTP_PORT, GRPC_PORT, METRICS_PORT, DEFAULT_HEADER]
    assert lookup.run(["restricted_apis"]) == list(RESTRICTED_APIS)


@pytest.mark.parametrize(("terms", "options", "message"), [
    ([], {"model_repository": "/m", "http_port": "80x"}, "http_port: '80x' is not an integer"),
    ([], {"model_repository": "/m", "strict_readiness": "maybe"}, "strict_readiness: 'maybe' is not a boolean"),
    ([], {"model_repository": "/m", "load_models": "a"}, "load_models: 'a' is not a list of strings"),
    ([], {"model_repository": "/m", "http_adress": "x"}, "unknown option.s. http_adress"),
    ([], {}, "model_repository is required"),
    (["argv"], {}, "terms .'argv'.: expected none, 'admin' or one of http_port, grpc_port, metrics_port, admin_header, "
                   "restricted_apis"),
])
def test_bad_options_are_refused_by_name(terms: list[str], options: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleLookupError, match=f"tritonops.triton.tritonserver_args: {message}"):
        _plugin().LookupModule().run(terms, **options)


def test_without_the_package_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tritonops.triton.args", None)  # a Python without tritonops
    with pytest.raises(AnsibleLookupError, match=r"not importable by .*install the tritonops wheel"):
        _plugin().LookupModule().run(["restricted_apis"])
