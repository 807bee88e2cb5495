"""The pins (infra/tritonops/versions.py) and how the roles read them: each role default that is a pin is
the collection's lookup ``tritonops.triton.pin`` (plugins/lookup/pin.py), never a copy of the value.

The lookup is exercised three ways: called directly (errors), through a real ansible-playbook run that
loads every role's defaults on localhost (what a play sees equals the pin; the inventory still wins),
and by scanning the defaults for a pin's value written out by hand.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleLookupError
from tritonops import versions

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())
LOOKUP = re.compile(r"\{\{ lookup\('tritonops\.triton\.pin', '(\w+)'\) \}\}")


def _defaults(role: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {})


def _pinned_defaults() -> dict[str, str]:
    """Role variable -> the pin its default reads."""
    out = {}
    for role in ROLES:
        for name, value in _defaults(role).items():
            if isinstance(value, str) and (m := LOOKUP.fullmatch(value)):
                out[name] = m.group(1)
    return out


PINNED = _pinned_defaults()


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tritonops_pin_lookup", REPO / "plugins" / "lookup" / "pin.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the pins themselves ----------------------------------------------------------------------


def test_pin_returns_a_copy() -> None:
    wheels = versions.pin("TRITON_WHEELS")
    wheels["x86_64"].clear()
    assert versions.pin("TRITON_WHEELS")["x86_64"] == versions.TRITON_WHEELS["x86_64"] != {}


def test_unknown_pin_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"no pin 'TRITON_IMAGES' in tritonops.versions; pins: .*TRITON_IMAGE,"):
        versions.pin("TRITON_IMAGES")


def test_pins_are_the_public_constants() -> None:
    assert "TRITON_WHEELS" in versions.pins() and "pin" not in versions.pins() and "Any" not in versions.pins()


def test_wheel_pins_name_the_versions() -> None:
    for arch, pins in versions.TRITON_WHEELS.items():
        assert f"nvidia-pytriton=={versions.PYTRITON_VERSION}" in pins, arch
        assert f"onnxruntime=={versions.ONNXRUNTIME_VERSION}" in pins, arch
        assert f"numpy=={versions.NUMPY_VERSION}" in pins, arch
        assert all(re.fullmatch(r"[0-9a-f]{64}", sha) for sha in pins.values()), arch


def test_the_packages_triton_extra_installs_the_pinned_pytriton() -> None:
    # pyproject.toml is static TOML and cannot read versions.py: this keeps its one copy equal to the pin.
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["triton"]
    assert [d for d in extra if d.startswith("nvidia-pytriton")] == [f"nvidia-pytriton=={versions.PYTRITON_VERSION}"]


@pytest.mark.parametrize("image", [versions.TRITON_IMAGE, versions.TRITON_IMAGE_IGPU, versions.DCGM_EXPORTER_IMAGE])
def test_images_are_not_floating(image: str) -> None:
    assert not image.endswith(":latest") and ":" in image.rsplit("/", 1)[-1]


def test_triton_images_are_the_release() -> None:
    assert versions.TRITON_RELEASE in versions.TRITON_IMAGE and versions.TRITON_RELEASE in versions.TRITON_IMAGE_IGPU


def test_jetpack_map_covers_every_tarball() -> None:
    jetpacks = set(_defaults(REPO / "roles" / "gpu_facts")["gpu_facts_jetpack_map"].values())
    assert set(versions.TRITON_JETSON_TARBALLS) <= jetpacks


def test_supported_l4t_releases_have_a_triton_build() -> None:
    jetpack = _defaults(REPO / "roles" / "gpu_facts")["gpu_facts_jetpack_map"]
    for l4t in versions.JETSON_L4T_APT_REPOS:
        assert jetpack[l4t] in versions.TRITON_JETSON_TARBALLS, l4t


def test_driver_branch_is_valid_for_debian() -> None:
    debian = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "vars" / "Debian-12.yml").read_text())
    assert versions.NVIDIA_DRIVER_BRANCH in debian["_nvidia_driver_branches"]


# --- the lookup plugin ------------------------------------------------------------------------


def test_lookup_returns_each_pin() -> None:
    lookup = _plugin().LookupModule()
    assert lookup.run(["TRITON_IMAGE", "TRITON_WHEELS"]) == [versions.TRITON_IMAGE, versions.TRITON_WHEELS]


def test_lookup_unknown_pin_is_a_clear_error() -> None:
    with pytest.raises(AnsibleLookupError, match=r"tritonops.triton.pin: no pin 'NOPE' .*pins: .*DCGM_EXPORTER_IMAGE"):
        _plugin().LookupModule().run(["NOPE"])


def test_lookup_without_the_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tritonops.versions", None)  # what a Python without tritonops sees
    with pytest.raises(AnsibleLookupError, match=rf"not importable by {re.escape(sys.executable)} .*install the "
                                                 r"tritonops wheel"):
        _plugin().LookupModule().run(["TRITON_IMAGE"])


# --- the roles read the pins, never copy them ---------------------------------------------------


def test_roles_read_pins() -> None:
    # The role variables that are pins today; a new pin default is found by the lookup expression.
    assert {"triton_server_wheels", "triton_server_container_image", "container_runtime_nvidia_toolkit_version",
            "node_monitoring_dcgm_exporter_image", "jetson_supported_l4t", "nvidia_driver_branch"} <= set(PINNED)


def _values(node: Any) -> list[Any]:
    """A value and everything nested in it."""
    out = [node]
    if isinstance(node, dict):
        for v in node.values():
            out += _values(v)
    elif isinstance(node, list):
        for v in node:
            out += _values(v)
    return out


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_defaults_copy_no_pin(role: Path) -> None:
    pins = versions.pins()
    copied = {name: pin for name, value in _defaults(role).items() for v in _values(value)
              for pin, pinned in pins.items() if v == pinned and not isinstance(v, bool)
              and len(str(v)) > 4}  # short strings ("535", "1.30") are common words, not copies
    assert copied == {}, "use \"{{ lookup('tritonops.triton.pin', NAME) }}\" instead of the pin's value"


@pytest.fixture(scope="module")
def collections_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A collections folder where tritonops.triton is this checkout (what an installed collection is)."""
    root = tmp_path_factory.mktemp("collections")
    (root / "ansible_collections" / "tritonops").mkdir(parents=True)
    (root / "ansible_collections" / "tritonops" / "triton").symlink_to(REPO)
    return root


def _play(tmp_path: Path, collections_path: Path, inventory: str) -> dict[str, Any]:
    """What a play sees: the roles' own defaults/main.yml, at role-default precedence (roles with no tasks)."""
    for role in ROLES:
        (tmp_path / "roles" / role.name / "defaults").mkdir(parents=True)
        (tmp_path / "roles" / role.name / "defaults" / "main.yml").symlink_to(role / "defaults" / "main.yml")
    (tmp_path / "inventory.yml").write_text(inventory)
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Resolve the pinned role defaults", "hosts": "node", "connection": "local", "gather_facts": False,
        "roles": [r.name for r in ROLES],
        "tasks": [{"name": "Show them", "ansible.builtin.debug": {
            "msg": "{{ {" + ", ".join(f"'{v}': {v}" for v in PINNED) + "} }}"}}],
    }]))
    env = os.environ | {"ANSIBLE_COLLECTIONS_PATH": str(collections_path), "ANSIBLE_LOCALHOST_WARNING": "false",
                        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
                        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    res = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventory.yml", "play.yml"],
                         capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return dict(json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"]["node"]["msg"])


def test_a_play_sees_the_pins(tmp_path: Path, collections_path: Path) -> None:
    resolved = _play(tmp_path, collections_path, "all:\n  hosts:\n    node:\n      ansible_host: 127.0.0.1\n")
    assert resolved == {var: versions.pin(pin) for var, pin in PINNED.items()}


def test_the_inventory_still_wins(tmp_path: Path, collections_path: Path) -> None:
    inventory = ("all:\n  hosts:\n    node:\n      ansible_host: 127.0.0.1\n"
                 "      triton_server_container_image: registry.example/tritonserver:25.01-py3\n"
                 "      triton_server_wheels: {x86_64: {}}\n")
    resolved = _play(tmp_path, collections_path, inventory)
    assert resolved["triton_server_container_image"] == "registry.example/tritonserver:25.01-py3"
    assert resolved["triton_server_wheels"] == {"x86_64": {}}
    assert resolved["triton_server_container_image_igpu"] == versions.TRITON_IMAGE_IGPU
