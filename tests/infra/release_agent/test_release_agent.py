"""Host checks for the release_agent role: the service, its sandbox, its secrets, its keys, the deadman.

Run by the role's molecule verify step, or against any inventory::

    pytest tests/infra/release_agent/test_release_agent.py --hosts=ansible://edge --ansible-inventory=INVENTORY

test_pull.py (same folder) proves the behaviour: releases published to the store arrive by themselves.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from node_helpers import assert_hardened, journal
from ra_node import PYZ, SERVICE, agent_argv, inventory_vars, options
from tritonops import agent_bundle as bundle

UNIT = f"/etc/systemd/system/{SERVICE}.service"
ENV_FILE = f"/etc/default/{SERVICE}"
SECRET_ENV = "TRITONOPS_ADMIN_SECRET"


@pytest.fixture(scope="module")
def argv(host: Any) -> list[str]:
    return agent_argv(host)


@pytest.fixture(scope="module")
def opts(argv: list[str]) -> dict[str, list[str]]:
    return options(argv)


def _show(host: Any, unit: str, *props: str) -> dict[str, str]:
    out = host.check_output(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_service_active_and_enabled(host: Any) -> None:
    svc = host.service(SERVICE)
    assert svc.is_running, journal(host, SERVICE)
    assert svc.is_enabled, journal(host, SERVICE)


def test_service_restarts_always(host: Any) -> None:
    props = _show(host, SERVICE, "Restart", "User")
    assert props["Restart"] == "always", props


def test_service_is_sandboxed(host: Any) -> None:
    props = _show(host, SERVICE, "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
                  "PrivateDevices", "CapabilityBoundingSet", "SystemCallFilter", "ReadWritePaths")
    assert props["NoNewPrivileges"] == "yes", props
    assert props["ProtectSystem"] == "strict", props
    assert props["ProtectHome"] == "yes" and props["PrivateTmp"] == "yes" and props["PrivateDevices"] == "yes"
    assert set(props["CapabilityBoundingSet"].split()) <= {"cap_chown", "cap_fowner", "cap_dac_override"}, props
    assert props["SystemCallFilter"], props


@pytest.mark.parametrize("unit", [SERVICE, "tritonserver"])  # Triton with the agent's deadman drop-in
def test_unit_exposure(host: Any, unit: str) -> None:
    assert_hardened(host, unit)


def test_runs_the_projects_agent(host: Any, argv: list[str]) -> None:
    f = host.file(PYZ)
    assert f.user == "root" and f.mode == 0o755
    assert f.sha256sum == hashlib.sha256(bundle.build_bytes()).hexdigest()
    assert argv[1:3] == [PYZ, "pull"], argv


@pytest.fixture(scope="module")
def secret(host: Any) -> str:
    """The admin header's value as the running agent has it (systemd read it from the environment file)."""
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    environ = host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    return next((line.split("=", 1)[1] for line in environ.splitlines() if line.startswith(SECRET_ENV + "=")), "")


def test_agent_gets_the_secret_from_its_environment_file(host: Any, secret: str) -> None:
    assert secret, f"the agent has no {SECRET_ENV}"
    assert f"{SECRET_ENV}=" in host.file(ENV_FILE).content_string


def test_secret_never_on_the_command_line_or_in_the_unit(host: Any, argv: list[str], secret: str) -> None:
    # Booleans first: a failure message must not print the secret it found.
    on_argv = any(secret in word for word in argv)
    in_unit = secret in host.file(UNIT).content_string
    assert not on_argv, "the admin secret is on the agent's command line"
    assert not in_unit, f"the admin secret is in {UNIT}"


def test_secret_file_is_root_only(host: Any) -> None:
    f = host.file(ENV_FILE)
    assert f.user == "root" and f.group == "root" and f.mode == 0o600


def test_store_url_reaches_the_agent_unmangled(host: Any, opts: dict[str, list[str]],
                                                pytestconfig: pytest.Config) -> None:
    """The unit quotes data (systemd would read '%20' as a specifier): the agent gets the URL as written."""
    store = opts["store"]
    assert len(store) == 1 and store[0].startswith(("http://", "https://", "s3://", "/")), store
    wanted = str(inventory_vars(host, pytestconfig).get("release_agent_store_url", ""))
    if not wanted:
        pytest.skip("the inventory does not say which store the node follows")
    if "{{" not in wanted:
        assert store[0] == wanted
    else:  # templated in the inventory (molecule: the gateway): the literal tail must arrive as written
        assert store[0].endswith(wanted.split("}}")[-1]), (store, wanted)


def test_trusted_keys_installed_and_only_those(host: Any, opts: dict[str, list[str]]) -> None:
    keys = opts.get("trusted-key", [])
    assert keys, "the agent trusts no key"
    folder = os.path.dirname(keys[0])
    present = sorted(host.check_output(f"find {folder} -maxdepth 1 -name '*.pub' -printf '%p\\n'").split())
    assert present == sorted(keys)
    for k in keys:
        f = host.file(k)
        assert f.user == "root" and f.mode == 0o644
        assert f.content_string.startswith("-----BEGIN PUBLIC KEY-----"), k


def test_trusted_key_is_the_scenarios_public_key(host: Any, opts: dict[str, list[str]]) -> None:
    eph = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    pub = Path(eph or "/nonexistent") / "release-keys" / "release.pub"
    if not pub.is_file():
        pytest.skip("no molecule scenario key pair here")
    contents = [host.file(k).content_string for k in opts["trusted-key"]]
    assert pub.read_text() in contents


def test_metrics_go_to_the_textfile_folder(host: Any, opts: dict[str, list[str]]) -> None:
    (folder,) = opts["textfile"]
    f = host.file(f"{folder}/tritonops_release.prom")
    assert f.exists, journal(host, SERVICE)
    assert "tritonops_release_last_poll_timestamp_seconds" in f.content_string


def test_deadman_runs_before_triton(host: Any, opts: dict[str, list[str]]) -> None:
    out = host.check_output("systemctl show tritonserver -p ExecStartPreEx")
    assert f"argv[]=/usr/bin/python3 {PYZ} recover --link {opts['link'][0]} --releases {opts['releases'][0]}" in out
    # "+": root, outside Triton's sandbox (which makes the link read-only for Triton).
    assert "flags=privileged" in out, out
