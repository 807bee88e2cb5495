"""Build Debian bookworm systemd images with mmdebstrap, cached until their inputs change.

Two layers of cache:

* the root filesystem, as a tarball under ``.cache/hosts/`` named by the hash of the mmdebstrap inputs
  (suite, arch, mirror, package list, the builder's revision), so wiping Podman's storage does not redo
  mmdebstrap (the slow part, especially for arm64 under qemu);
* the final image, labelled with the hash of *all* inputs (the rootfs hash plus the
  Containerfile); it is rebuilt only when the label differs from what the code would build now.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devkit.hosts import lab_ssh
from devkit.hosts.podman import HostsError, podman, podman_env, run_logged

SUITE = "bookworm"
ARCHES = ("amd64", "arm64")
IMAGE_REPO = "localhost/tritonops-debian-bookworm"
INPUTS_LABEL = "io.tritonops.inputs"
# Bump when the build changes in a way the hashed inputs (mmdebstrap's arguments, the mirror) do not capture.
BUILDER_REVISION = "2"  # 2: mmdebstrap

# Installed by mmdebstrap itself (cached in the rootfs tarball): what Ansible and systemd need.
BASE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-apt",
    "sudo",
    "ca-certificates",
    "iproute2",
    "procps",
    "openssh-server",
)

# Not unpacked into the node images: dpkg skips them at build time and, through the rootfs's dpkg.cfg.d,
# for every package a role installs later (the licences stay). Less to unpack under qemu.
DPKG_PATH_EXCLUDES = ("/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*", "/usr/share/doc/*")
DPKG_PATH_INCLUDES = ("/usr/share/doc/*/copyright",)


# The Containerfile turns the imported rootfs into a bootable systemd image. The apt lists are emptied
# and dated 1970, so Ansible's apt cache_valid_time refreshes them on first use, as on a stale host.
# sshd takes keys only: a node gets the lab key as /root/.ssh/authorized_keys, mounted when it starts
# (devkit.hosts.lab_ssh), so the image holds no key. Every node of one image shares the host keys
# mmdebstrap made, which is why the inventories do not check them.
CONTAINERFILE = """\
FROM {base}
ENV container=podman
RUN install -d -m 700 /root/.ssh \\
 && printf 'PasswordAuthentication no\\nKbdInteractiveAuthentication no\\n' > /etc/ssh/sshd_config.d/lab.conf \\
 && printf 'PermitRootLogin prohibit-password\\nUseDNS no\\n' >> /etc/ssh/sshd_config.d/lab.conf \\
 && printf '#!/bin/sh\\nmkdir -p -m 0755 /run/sshd\\nexec /usr/sbin/sshd -i\\n' > {sshd_stdio} \\
 && chmod 755 {sshd_stdio}
RUN printf 'APT::Install-Recommends "false";\\nAPT::Install-Suggests "false";\\n' \\
      > /etc/apt/apt.conf.d/90tritonops-no-recommends \\
 && printf 'deb {mirror} {suite} main\\ndeb {mirror} {suite}-updates main\\n' > /etc/apt/sources.list \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial \\
 && touch -d @0 /var/lib/apt/lists \\
 && systemctl mask getty@.service console-getty.service systemd-udevd.service \\
      systemd-udev-trigger.service systemd-remount-fs.service sys-kernel-debug.mount \\
      sys-kernel-tracing.mount dev-hugepages.mount systemd-firstboot.service \\
 && systemctl set-default multi-user.target \\
 && : > /etc/machine-id
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""


def repo_root() -> Path:
    """The checkout this package lives in (editable install), or the current directory."""
    here = Path(__file__).resolve().parents[3]
    if (here / "pyproject.toml").is_file():
        return here
    return Path.cwd()


def cache_dir() -> Path:
    path = Path(os.environ.get("TRITONOPS_HOSTS_CACHE", repo_root() / ".cache" / "hosts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def debian_mirror() -> str:
    """The machine's own Debian mirror (deb822 sources first, then sources.list), else deb.debian.org."""
    env = os.environ.get("TRITONOPS_DEBIAN_MIRROR")
    if env:
        return env
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.is_file():
        for line in deb822.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[1]
    return "http://deb.debian.org/debian"


def host_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def image_name(arch: str) -> str:
    return f"{IMAGE_REPO}:systemd-{arch}"


@dataclass(frozen=True)
class ImageSpec:
    """Everything that determines an image; its hashes decide what must be rebuilt."""

    arch: str = "amd64"
    mirror: str = field(default_factory=debian_mirror)
    packages: tuple[str, ...] = BASE_PACKAGES

    def __post_init__(self) -> None:
        if self.arch not in ARCHES:
            raise HostsError(f"arch: {self.arch!r} is not one of {', '.join(ARCHES)}")

    @property
    def foreign(self) -> bool:
        return self.arch != host_arch()

    def mmdebstrap_args(self) -> list[str]:
        """mmdebstrap's options and suite (the output and the mirror follow): what the rootfs hash covers."""
        return ["--mode=root", "--format=tar", "--variant=minbase", f"--arch={self.arch}",
                f"--include={','.join(sorted(self.packages))}",
                *(f"--dpkgopt=path-exclude={p}" for p in DPKG_PATH_EXCLUDES),
                *(f"--dpkgopt=path-include={p}" for p in DPKG_PATH_INCLUDES),
                SUITE]

    def rootfs_hash(self) -> str:
        doc = {"args": self.mmdebstrap_args(), "mirror": self.mirror, "rev": BUILDER_REVISION}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def containerfile(self) -> str:
        return CONTAINERFILE.format(base=self.base_image, mirror=self.mirror, suite=SUITE,
                                    sshd_stdio=lab_ssh.NODE_SSHD_STDIO)

    def inputs_hash(self) -> str:
        doc = {"rootfs": self.rootfs_hash(), "containerfile": self.containerfile()}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def base_image(self) -> str:
        return f"{IMAGE_REPO}:base-{self.arch}-{self.rootfs_hash()}"

    @property
    def image(self) -> str:
        return image_name(self.arch)

    @property
    def rootfs_tarball(self) -> Path:
        return cache_dir() / f"rootfs-{SUITE}-{self.arch}-{self.rootfs_hash()}.tar"


Step = Callable[[str], None]


def image_label(image: str, label: str = INPUTS_LABEL) -> str | None:
    """The label's value on a local image, or None when the image is absent."""
    res = podman(["image", "inspect", "--format", "{{ json .Labels }}", image], check=False)
    if res.returncode != 0:
        return None
    labels = json.loads(res.stdout.strip() or "null") or {}
    return labels.get(label)


def image_is_current(spec: ImageSpec) -> bool:
    return image_label(spec.image) == spec.inputs_hash()


def ensure_binfmt(arch: str) -> None:
    """Register qemu-user-static for a foreign arch (idempotent); fail clearly when it cannot be."""
    qemu = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}[arch]
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if not (binfmt / "status").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], check=False)
    if not (binfmt / qemu).exists():
        if shutil.which("update-binfmts") is None:
            raise HostsError(f"{arch} emulation needs qemu-user-static and binfmt-support (make apt)")
        subprocess.run(["update-binfmts", "--enable", qemu], check=False, capture_output=True)
    if not (binfmt / qemu).exists():
        raise HostsError(f"could not register {qemu} in {binfmt}; is qemu-user-static installed?")


def build_rootfs(spec: ImageSpec, step: Step) -> Path:
    """mmdebstrap the root filesystem straight into a tarball in the cache (skipped when it exists).

    mmdebstrap rather than debootstrap: it downloads with the machine's apt and installs with apt and dpkg
    in a few batches, where debootstrap's second stage is a shell script that handles one package at a time;
    under qemu every one of its commands is emulated. An arm64 rootfs took 177 s, debootstrap 585-862 s."""
    tarball = spec.rootfs_tarball
    if tarball.is_file():
        step(f"rootfs {tarball.name}: cached")
        return tarball
    if shutil.which("mmdebstrap") is None:
        raise HostsError("mmdebstrap is not installed (make apt)")
    if os.geteuid() != 0:
        raise HostsError("building host images needs root (mmdebstrap's chroot and rootful Podman)")
    if spec.foreign:
        ensure_binfmt(spec.arch)
    step(f"mmdebstrap {SUITE}/{spec.arch}{' under qemu' if spec.foreign else ''}")
    partial = tarball.with_suffix(".tar.partial")
    try:
        run_logged(["mmdebstrap", *spec.mmdebstrap_args(), str(partial), spec.mirror],
                   cache_dir() / "logs" / f"mmdebstrap-{spec.arch}.log")
        partial.rename(tarball)
    finally:
        partial.unlink(missing_ok=True)
    return tarball


def build_image(spec: ImageSpec, step: Step | None = None, force: bool = False) -> bool:
    """Make ``spec.image`` current. Returns True when something was built, False when cached."""
    say: Step = step or (lambda _msg: None)
    if not force and image_is_current(spec):
        say(f"{spec.image}: cached (inputs {spec.inputs_hash()})")
        return False
    if spec.foreign:
        ensure_binfmt(spec.arch)
    logs = cache_dir() / "logs"
    if force or image_label(spec.base_image, INPUTS_LABEL) != spec.rootfs_hash():
        tarball = build_rootfs(spec, say)
        say(f"podman import {spec.base_image}")
        run_logged(["podman", "import", "--arch", spec.arch,
                    "--change", f"LABEL {INPUTS_LABEL}={spec.rootfs_hash()}",
                    str(tarball), spec.base_image], logs / f"import-{spec.arch}.log", env=podman_env())
    say(f"podman build {spec.image}")
    with tempfile.TemporaryDirectory(prefix="ctx-", dir=cache_dir()) as ctx:
        (Path(ctx) / "Containerfile").write_text(spec.containerfile())
        run_logged(["podman", "build", "--arch", spec.arch, "--pull=never",
                    "--label", f"{INPUTS_LABEL}={spec.inputs_hash()}",
                    "-t", spec.image, "-f", str(Path(ctx) / "Containerfile"), ctx],
                   logs / f"build-{spec.arch}.log", env=podman_env())
    # Drop base images of older inputs so storage does not grow with every change.
    for old in list_images(f"{IMAGE_REPO}:base-{spec.arch}-"):
        if old != spec.base_image:
            podman(["rmi", old], check=False)
    return True


def list_images(prefix: str) -> list[str]:
    res = podman(["images", "--format", "{{.Repository}}:{{.Tag}}"], check=False)
    return [line for line in res.stdout.splitlines() if line.startswith(prefix)]


def image_status(arches: Sequence[str] = ARCHES) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for arch in arches:
        spec = ImageSpec(arch=arch)
        label = image_label(spec.image)
        rows.append({
            "arch": arch,
            "image": spec.image,
            "inputs": spec.inputs_hash(),
            "present": label is not None,
            "current": label == spec.inputs_hash(),
            "rootfs_cached": spec.rootfs_tarball.is_file(),
        })
    return rows
