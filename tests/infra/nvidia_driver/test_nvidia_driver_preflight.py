"""Bad input stops nvidia_driver in preflight with a clear message, and nothing on the node changes.

Runs ansible-playbook against the converged molecule node (Podman connection) with bad variables.
"""

from __future__ import annotations

from typing import Any

import pytest
from preflight_runs import podman_node, run_roles, snapshot

WATCHED = ["/etc/apt", "/etc/modprobe.d", "/etc/dkms", "/var/lib/dkms", "/var/lib/dpkg/status", "/run/reboot-required"]
FAKE_MOKUTIL = "/usr/local/sbin/mokutil"


@pytest.fixture()
def node(host: Any) -> str:
    return podman_node(host)


def _assert_stopped(host: Any, run: Any, before: str, task: str, words: list[str]) -> None:
    assert run.rc != 0, run.output
    assert run.stats.get("failures") == 1, run.output
    assert run.changed_tasks == [], run.changed_tasks
    assert [f["task"] for f in run.failed] == [task], run.failed
    msg = run.failed[0]["msg"]
    for w in words:
        assert w in msg, msg
    assert snapshot(host, WATCHED) == before, "the failed run changed files on the node"


def test_invalid_branch_for_the_os(host: Any, node: str) -> None:
    before = snapshot(host, WATCHED)
    run = run_roles(node, ["nvidia_driver"], {"nvidia_driver_branch": "570", "nvidia_driver_install_without_gpu": True})
    _assert_stopped(host, run, before, "Check the driver branch for this OS",
                    ["driver branch 570 is not available on Debian 12", "valid branches here: 535", "Nothing was changed"])


def test_secure_boot_without_key(host: Any, node: str) -> None:
    # mokutil is what the role asks first; this one reports what a Secure Boot host prints.
    host.run(f"printf '#!/bin/sh\\necho \"SecureBoot enabled\"\\n' > {FAKE_MOKUTIL} && chmod 0755 {FAKE_MOKUTIL}")
    try:
        assert host.check_output("mokutil --sb-state") == "SecureBoot enabled"
        before = snapshot(host, WATCHED)
        run = run_roles(node, ["nvidia_driver"], {"nvidia_driver_install_without_gpu": True})
        _assert_stopped(host, run, before, "Stop when Secure Boot is on and there is no key to sign the module with",
                        ["Secure Boot is enabled", "nvidia_driver_mok_key", "mokutil --import", "Nothing was changed"])
    finally:
        host.run(f"rm -f {FAKE_MOKUTIL}")
