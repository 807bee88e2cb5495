"""Checks for roles/triton_server on a converged host: install, user, unit hardening, sockets, a real
inference, and the admin-API restriction (refused without the header over HTTP and gRPC, allowed with it).

Settings come from the host's inventory variables over the role's defaults. The admin secret may be
given as TRITONOPS_ADMIN_SECRET when the inventory keeps it in ansible-vault.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from gpuhost_helpers import role_defaults
from node_helpers import assert_hardened, journal, podman_container
from tritonclient.utils import InferenceServerException

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
# A model in the sample repository that the checks load and unload again (not loaded at startup).
SPARE_MODEL = "mlp_batched"


@pytest.fixture(scope="module")
def cfg(host_vars: dict[str, Any]) -> dict[str, Any]:
    merged = role_defaults("triton_server")
    merged.update({k: v for k, v in host_vars.items() if k.startswith("triton_server_")})
    if os.environ.get("TRITONOPS_ADMIN_SECRET"):
        merged["triton_server_admin_secret"] = os.environ["TRITONOPS_ADMIN_SECRET"]
    return merged


@pytest.fixture(scope="module")
def unit(cfg: dict[str, Any]) -> str:
    return f"{cfg['triton_server_service_name']}.service"


@pytest.fixture(scope="module")
def args(host: Any, unit: str) -> dict[str, list[str]]:
    """tritonserver's command-line options as systemd runs them (name -> values)."""
    line = host.check_output(f"systemctl show -p ExecStart --value {unit}")
    m = re.search(r"argv\[\]=(.*?) ;", line)
    assert m, f"cannot read ExecStart of {unit}: {line}"
    out: dict[str, list[str]] = {}
    for word in shlex.split(m.group(1)):
        if word.startswith("--") and "=" in word:
            name, value = word[2:].split("=", 1)
            out.setdefault(name, []).append(value)
    return out


@pytest.fixture(scope="module")
def address(host: Any, host_vars: dict[str, Any]) -> str:
    """Where the controller reaches the node: its own address for Podman nodes, else ansible_host."""
    if os.environ.get("TRITONOPS_NODE_ADDRESS"):
        return os.environ["TRITONOPS_NODE_ADDRESS"]
    if podman_container(host_vars):
        return str(host.check_output("hostname -I").split()[0])
    return str(host_vars.get("ansible_host") or host_vars.get("inventory_hostname") or host.backend.get_hostname())


def _http(cfg: dict[str, Any], address: str) -> Any:
    return httpclient.InferenceServerClient(f"{address}:{cfg['triton_server_http_port']}", network_timeout=120)


def _grpc(cfg: dict[str, Any], address: str) -> Any:
    return grpcclient.InferenceServerClient(f"{address}:{cfg['triton_server_grpc_port']}")


# --- install and user ------------------------------------------------------------------------


def test_system_user(host: Any, cfg: dict[str, Any]) -> None:
    user = host.user(cfg["triton_server_user"])
    assert user.exists
    assert user.uid < 1000, "expected a system user"
    assert user.shell == "/usr/sbin/nologin"
    assert user.group == cfg["triton_server_group"]


def test_venv_packages(host: Any, cfg: dict[str, Any]) -> None:
    if cfg["triton_server_install_method"] != "wheel":
        pytest.skip("wheel method only")
    arch = host.check_output("uname -m")
    pins = cfg["triton_server_wheels"][arch]
    pip = f"{cfg['triton_server_install_dir']}/bin/pip"
    frozen = {line.lower() for line in host.check_output(f"{pip} freeze --all").splitlines()}
    missing = sorted(p for p in pins if p.lower().replace("_", "-") not in
                     {f.replace("_", "-") for f in frozen})
    assert not missing, f"not installed in the venv: {missing}"


def test_python_backend_assembled(host: Any, cfg: dict[str, Any]) -> None:
    if cfg["triton_server_install_method"] != "wheel":
        pytest.skip("wheel method only")
    backend = f"{cfg['triton_server_install_dir']}/backends/python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"):
        assert host.file(f"{backend}/{name}").is_file, name


def test_environment_file_is_root_only(host: Any) -> None:
    f = host.file("/etc/tritonserver/tritonserver.env")
    assert f.user == "root"
    assert f.mode == 0o600


def test_secret_not_in_unit_file(host: Any, cfg: dict[str, Any], unit: str) -> None:
    secret = cfg["triton_server_admin_secret"]
    if not secret:
        pytest.skip("no admin secret configured")
    assert secret not in host.file(f"/etc/systemd/system/{unit}").content_string


# --- service and hardening -------------------------------------------------------------------


def test_service_running(host: Any, unit: str) -> None:
    svc = host.service(unit)
    assert svc.is_running, journal(host, unit)
    assert svc.is_enabled


HARDENING = [
    ("NoNewPrivileges", "yes"),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectControlGroups", "yes"),
    ("RestrictNamespaces", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("LockPersonality", "yes"),
    ("Restart", "on-failure"),
    ("UMask", "0027"),
]


@pytest.mark.parametrize(("prop", "expected"), HARDENING, ids=[p for p, _ in HARDENING])
def test_unit_hardening(host: Any, unit: str, prop: str, expected: str) -> None:
    assert host.check_output(f"systemctl show -p {prop} --value {unit}") == expected


def test_unit_exposure(host: Any, unit: str) -> None:
    assert_hardened(host, unit)


def test_unit_user(host: Any, cfg: dict[str, Any], unit: str) -> None:
    if cfg["triton_server_install_method"] == "container":
        pytest.skip("the container runs as the user's ids")
    assert host.check_output(f"systemctl show -p User --value {unit}") == cfg["triton_server_user"]
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}")
    assert host.check_output(f"ps -o user= -p {pid}") == cfg["triton_server_user"]


def test_model_repository_read_only(host: Any, cfg: dict[str, Any], unit: str) -> None:
    repo = cfg["triton_server_model_repository"]
    assert repo in host.check_output(f"systemctl show -p ReadOnlyPaths --value {unit}")
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}")
    # Even root, inside the service's mount namespace, cannot write the repository.
    probe = host.run(f"nsenter --target {pid} --mount -- touch {repo}/.tritonops-write-probe")
    assert probe.rc != 0
    assert "Read-only file system" in probe.stderr


def test_explicit_model_control(args: dict[str, list[str]], cfg: dict[str, Any]) -> None:
    assert args["model-control-mode"] == [cfg["triton_server_model_control_mode"]]
    assert args.get("load-model", []) == list(cfg["triton_server_startup_models"])


# --- sockets ---------------------------------------------------------------------------------


def test_http_listening(host: Any, cfg: dict[str, Any], args: dict[str, list[str]]) -> None:
    assert args["http-address"] == [cfg["triton_server_http_address"]]
    assert host.socket(f"tcp://{cfg['triton_server_http_address']}:{cfg['triton_server_http_port']}").is_listening


def test_grpc_listening(host: Any, cfg: dict[str, Any], args: dict[str, list[str]]) -> None:
    assert args["grpc-address"] == [cfg["triton_server_grpc_address"]]
    assert host.socket(f"tcp://{cfg['triton_server_grpc_address']}:{cfg['triton_server_grpc_port']}").is_listening


def test_metrics_bound_to_chosen_address(host: Any, cfg: dict[str, Any], args: dict[str, list[str]]) -> None:
    port = cfg["triton_server_metrics_port"]
    (bound,) = args["metrics-address"]
    if "{{" not in str(cfg["triton_server_metrics_address"]):
        assert bound == cfg["triton_server_metrics_address"]
    assert host.socket(f"tcp://{bound}:{port}").is_listening
    listeners = {s for s in host.socket.get_listening_sockets() if s.endswith(f":{port}")}
    assert listeners == {f"tcp://{bound}:{port}"}, f"metrics must listen only on {bound}: {listeners}"


# --- a real inference and the admin restriction ----------------------------------------------


def _golden_case(model: str) -> dict[str, Any]:
    golden = json.loads((EXAMPLES / model / "golden.json").read_text())
    return dict(golden["cases"][0]) | {"rtol": golden["rtol"], "atol": golden["atol"]}


def _infer(client: Any, mod: Any, model: str) -> None:
    case = _golden_case(model)
    inputs = []
    for name, t in case["inputs"].items():
        arr = np.asarray(t["data"], dtype=np.float32).reshape(t["shape"])
        inp = mod.InferInput(name, list(arr.shape), t["datatype"])
        inp.set_data_from_numpy(arr)
        inputs.append(inp)
    result = client.infer(model, inputs)
    for name, t in case["outputs"].items():
        want = np.asarray(t["data"], dtype=np.float32).reshape(t["shape"])
        np.testing.assert_allclose(result.as_numpy(name), want, rtol=case["rtol"], atol=case["atol"])


@pytest.fixture(scope="module")
def served_model(cfg: dict[str, Any]) -> str:
    startup = list(cfg["triton_server_startup_models"])
    if startup == ["*"]:
        startup = sorted(p.parent.name for p in EXAMPLES.glob("*/golden.json"))
    models = [m for m in startup if (EXAMPLES / m / "golden.json").is_file() and m != SPARE_MODEL]
    if not models:
        pytest.skip("no startup model with a golden.json in examples/model_repository")
    return str(models[0])


def test_smoke(cfg: dict[str, Any], address: str, served_model: str, args: dict[str, list[str]]) -> None:
    """`tritonops smoke` from the controller: ready, model READY, golden inference, metrics families."""
    from tritonops.triton.smoke import smoke

    (metrics_bound,) = args["metrics-address"]
    metrics_host = address if metrics_bound in ("0.0.0.0", "::") else metrics_bound
    if metrics_host.startswith("127."):
        pytest.skip("metrics bind to the node's loopback; the controller cannot scrape them")
    report = smoke(f"http://{address}:{cfg['triton_server_http_port']}", models=[served_model],
                   repository=EXAMPLES,
                   metrics_url=f"http://{metrics_host}:{cfg['triton_server_metrics_port']}/metrics")
    failed = [c for c in report.checks if not c.ok]
    assert report.ok, f"smoke failed: {failed}"
    assert {c.check for c in report.checks} >= {"live", "ready", "model", "golden", "metrics"}


CLIENTS = {"http": (_http, httpclient), "grpc": (_grpc, grpcclient)}


def admin_headers(cfg: dict[str, Any], mod: Any, secret: str | None = None) -> dict[str, str]:
    """The admin header as each protocol wants it: tritonserver 2.51 matches gRPC metadata named
    ``triton-grpc-protocol-<header>`` (checked against the binary), HTTP the header itself."""
    name = cfg["triton_server_admin_header"]
    if mod is grpcclient:
        name = f"triton-grpc-protocol-{name}"
    return {name: cfg["triton_server_admin_secret"] if secret is None else secret}


@pytest.fixture(params=sorted(CLIENTS))
def client(request: Any, cfg: dict[str, Any], address: str) -> Iterator[tuple[Any, Any]]:
    make, mod = CLIENTS[request.param]
    c = make(cfg, address)
    yield c, mod
    c.close()


def _restricted(cfg: dict[str, Any]) -> None:
    if "model-repository" not in cfg["triton_server_restricted_apis"] or not cfg["triton_server_admin_secret"]:
        pytest.skip("the repository API is not restricted on this host")


def test_inference_without_header(client: tuple[Any, Any], served_model: str) -> None:
    c, mod = client
    _infer(c, mod, served_model)


def test_unload_refused_without_header(client: tuple[Any, Any], cfg: dict[str, Any], served_model: str) -> None:
    _restricted(cfg)
    c, mod = client
    with pytest.raises(InferenceServerException, match="restricted"):
        c.unload_model(served_model)
    assert c.is_model_ready(served_model)
    _infer(c, mod, served_model)


def test_load_refused_without_header(client: tuple[Any, Any], cfg: dict[str, Any]) -> None:
    _restricted(cfg)
    c, _ = client
    if not (EXAMPLES / SPARE_MODEL).is_dir():
        pytest.skip(f"{SPARE_MODEL} not in examples/model_repository")
    before = c.is_model_ready(SPARE_MODEL)
    with pytest.raises(InferenceServerException, match="restricted"):
        c.load_model(SPARE_MODEL)
    assert c.is_model_ready(SPARE_MODEL) == before


def _wait_ready(c: Any, model: str, want: bool, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while bool(c.is_model_ready(model)) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return bool(c.is_model_ready(model)) == want


def test_load_and_unload_with_header(client: tuple[Any, Any], cfg: dict[str, Any]) -> None:
    """With the header the repository API works; the model ends in the state it started in."""
    _restricted(cfg)
    c, mod = client
    if not (EXAMPLES / SPARE_MODEL).is_dir():
        pytest.skip(f"{SPARE_MODEL} not in examples/model_repository")
    headers = admin_headers(cfg, mod)
    if c.is_model_ready(SPARE_MODEL):  # e.g. --load-model=*: unload, then load it back
        c.unload_model(SPARE_MODEL, headers=headers)
        assert _wait_ready(c, SPARE_MODEL, False)
        c.load_model(SPARE_MODEL, headers=headers)
        assert _wait_ready(c, SPARE_MODEL, True)
        _infer(c, mod, SPARE_MODEL)
        return
    c.load_model(SPARE_MODEL, headers=headers)
    try:
        assert _wait_ready(c, SPARE_MODEL, True)
        _infer(c, mod, SPARE_MODEL)
    finally:
        c.unload_model(SPARE_MODEL, headers=headers)
    assert _wait_ready(c, SPARE_MODEL, False)


def test_wrong_secret_refused(client: tuple[Any, Any], cfg: dict[str, Any], served_model: str) -> None:
    _restricted(cfg)
    c, mod = client
    with pytest.raises(InferenceServerException, match="restricted"):
        c.unload_model(served_model, headers=admin_headers(cfg, mod, "not-the-secret"))
    assert c.is_model_ready(served_model)

