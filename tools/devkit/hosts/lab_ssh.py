"""The lab SSH key: how Ansible reaches the disposable nodes over SSH, as it reaches a fleet.

One key pair per user (``~/.cache/tritonops/ssh/id_ed25519``, made on first use, 0600), shared by every
checkout: its public half is mounted read-only as a node's ``/root/.ssh/authorized_keys`` when the node
starts (``devkit hosts up``; molecule's platforms in ``.config/molecule/config.yml``), so the image
holds no key. The inventories (``ansible/inventories/local`` and ``.config/molecule/config.yml``)
connect with ``ansible_connection: ssh``, pipelining and ControlPersist. The nodes have no stable
address, so ssh's ProxyCommand carries the session over ``podman exec -i NODE`` to the node's own sshd
(``sshd -i``, its inetd mode): authentication, the session and every module run are the real sshd's,
only the master connection's transport is Podman's stdio instead of TCP.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from devkit.hosts.podman import HostsError

LAB_KEY = Path("~/.cache/tritonops/ssh/id_ed25519")  # the inventories name this path, ~ and all
# Run by ProxyCommand in the node: sshd's privilege separation folder lives on /run, a tmpfs that
# systemd may not have filled yet when the first connection comes right after boot.
NODE_SSHD_STDIO = "/usr/local/sbin/tritonops-sshd-stdio"


AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"


def lab_public_key() -> Path:
    """The lab key's public half (a file), making the pair first when it does not exist."""
    key = LAB_KEY.expanduser()
    pub = key.with_suffix(".pub")
    if not key.is_file():
        key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        res = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tritonops-lab",
                              "-f", str(key)], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise HostsError(f"ssh-keygen could not make the lab key {key}: {res.stderr.strip()} "
                             "(make apt installs openssh-client)")
    if not pub.is_file():
        raise HostsError(f"{pub} is missing next to {key}: remove {key} to make a new pair")
    return pub
