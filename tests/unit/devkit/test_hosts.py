"""devkit.hosts: what decides a rebuild (input hashes), argument checks, and the cache decision,
without touching Podman (the real builds run in `make molecule` / `python -m devkit hosts build`)."""

from __future__ import annotations

import pytest
from devkit.hosts import images, nodes
from devkit.hosts.images import ImageSpec
from devkit.hosts.podman import HostsError


def spec(**kw: object) -> ImageSpec:
    return ImageSpec(**({"arch": "amd64", "mirror": "http://deb.example/debian"} | kw))  # type: ignore[arg-type]


def test_hashes_are_stable() -> None:
    assert spec().inputs_hash() == spec().inputs_hash()
    assert spec().rootfs_hash() == spec().rootfs_hash()


@pytest.mark.parametrize("change", [
    {"arch": "arm64"},
    {"mirror": "http://other.example/debian"},
    {"packages": (*images.BASE_PACKAGES, "curl")},
])
def test_rootfs_inputs_change_both_hashes(change: dict[str, object]) -> None:
    a, b = spec(), spec(**change)
    assert a.rootfs_hash() != b.rootfs_hash()
    assert a.inputs_hash() != b.inputs_hash()


def test_a_dpkg_path_exclude_changes_the_rootfs(monkeypatch: pytest.MonkeyPatch) -> None:
    before = spec().rootfs_hash()
    monkeypatch.setattr(images, "DPKG_PATH_EXCLUDES", images.DPKG_PATH_EXCLUDES[:-1])
    assert spec().rootfs_hash() != before


def test_package_order_does_not_matter() -> None:
    assert spec(packages=tuple(reversed(images.BASE_PACKAGES))).rootfs_hash() == spec().rootfs_hash()


def test_containerfile_change_keeps_the_rootfs(monkeypatch: pytest.MonkeyPatch) -> None:
    before = spec()
    rootfs, inputs, tarball = before.rootfs_hash(), before.inputs_hash(), before.rootfs_tarball
    monkeypatch.setattr(images, "CONTAINERFILE", images.CONTAINERFILE + "LABEL x=y\n")
    after = spec()
    assert after.rootfs_hash() == rootfs
    assert after.inputs_hash() != inputs
    assert after.rootfs_tarball == tarball


def test_names_carry_arch_and_hash() -> None:
    s = spec(arch="arm64")
    assert s.image == "localhost/tritonops-debian-bookworm:systemd-arm64"
    assert s.rootfs_hash() in s.base_image
    assert s.rootfs_tarball.name == f"rootfs-bookworm-arm64-{s.rootfs_hash()}.tar"


def test_unknown_arch_is_refused() -> None:
    with pytest.raises(HostsError, match="arch"):
        spec(arch="riscv64")


def test_cached_image_is_not_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    s = spec()
    monkeypatch.setattr(images, "image_label", lambda image, label=images.INPUTS_LABEL: s.inputs_hash())
    monkeypatch.setattr(images, "build_rootfs", lambda *_: pytest.fail("must not build the rootfs"))
    assert images.build_image(s) is False


def test_stale_label_means_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    s = spec()
    monkeypatch.setattr(images, "image_label", lambda image, label=images.INPUTS_LABEL: "0000")
    assert images.image_is_current(s) is False


def test_mirror_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONOPS_DEBIAN_MIRROR", "http://mirror.example/debian")
    assert images.debian_mirror() == "http://mirror.example/debian"


@pytest.mark.parametrize("name", ["edge-1", "tritonops-edge-1", "a", "n0.de_x"])
def test_node_names_accepted(name: str) -> None:
    nodes._check_name(name)


@pytest.mark.parametrize("name", ["", "Edge", "-x", "a b", "x" * 70, "../x"])
def test_node_names_refused(name: str) -> None:
    with pytest.raises(HostsError, match="node name"):
        nodes._check_name(name)


def test_the_product_cli_has_no_development_kit_commands() -> None:
    """Podman hosts and the demo are the development kit's (python -m devkit), not the wheel's."""
    import typer.main
    from devkit.__main__ import app as devkit_app
    from tritonops.cli import app

    product = typer.main.get_command(app)
    kit = typer.main.get_command(devkit_app)
    assert {"hosts", "demo"}.isdisjoint(product.commands)  # type: ignore[attr-defined]
    assert {"hosts", "demo", "role-docs"} <= set(kit.commands)  # type: ignore[attr-defined]
