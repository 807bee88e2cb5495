"""The lab's SSH connection: one set of connection variables for the local inventory and molecule's
nodes, naming the key and the node-side sshd the image really has (devkit.hosts.lab_ssh)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from devkit.hosts import images, lab_ssh
from devkit.hosts.images import ImageSpec

REPO = Path(__file__).resolve().parents[3]
CONNECTION_VARS = ("ansible_connection", "ansible_user", "ansible_ssh_pipelining", "ansible_ssh_private_key_file",
                   "ansible_ssh_common_args")


def local_vars() -> dict[str, object]:
    doc = yaml.safe_load((REPO / "ansible/inventories/local/hosts.yml").read_text())
    return {k: doc["all"]["vars"][k] for k in CONNECTION_VARS}


def molecule_vars() -> dict[str, object]:
    doc = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text())
    (host_vars,) = doc["provisioner"]["inventory"]["host_vars"].values()
    assert doc["platforms"][0]["name"] in doc["provisioner"]["inventory"]["host_vars"]
    return {k: host_vars[k] for k in CONNECTION_VARS}


def test_local_inventory_and_molecule_reach_nodes_the_same_way() -> None:
    assert local_vars() == molecule_vars()


def test_the_connection_names_the_lab_key_and_the_images_sshd() -> None:
    v = local_vars()
    assert v["ansible_connection"] == "ssh" and v["ansible_ssh_pipelining"] is True
    assert v["ansible_ssh_private_key_file"] == str(lab_ssh.LAB_KEY)
    assert f'ProxyCommand="podman exec -i %n {lab_ssh.NODE_SSHD_STDIO}"' in str(v["ansible_ssh_common_args"])
    assert lab_ssh.NODE_SSHD_STDIO in ImageSpec(mirror="http://deb.example/debian").containerfile()
    assert "openssh-server" in images.BASE_PACKAGES


def test_every_node_gets_the_lab_key_and_the_image_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # molecule's platforms mount the file devkit's nodes get.
    mount = f"${{HOME}}/{lab_ssh.LAB_KEY.relative_to('~')}.pub:{lab_ssh.AUTHORIZED_KEYS}:ro"
    monkeypatch.setattr(lab_ssh, "LAB_KEY", tmp_path / "ssh" / "id_ed25519")
    before = ImageSpec(mirror="http://deb.example/debian").inputs_hash()
    pub = lab_ssh.lab_public_key()
    key = tmp_path / "ssh" / "id_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and pub.read_text().startswith("ssh-ed25519 ")
    mtime = key.stat().st_mtime_ns
    assert lab_ssh.lab_public_key() == pub and key.stat().st_mtime_ns == mtime, "an existing key is kept"
    assert ImageSpec(mirror="http://deb.example/debian").inputs_hash() == before, "the image holds no key"
    for f in (".config/molecule/config.yml", *map(str, REPO.glob("roles/*/molecule/*/molecule.yml"))):
        doc = yaml.safe_load((REPO / f).read_text())
        for platform in doc.get("platforms", []):
            assert mount in platform.get("volumes", []), f"{f}: {platform['name']} lacks the lab key"
