"""An unsupported L4T release stops the jetson role in preflight with a clear message, changing nothing.

The check rewrites the node's /etc/nv_tegra_release to L4T R32.7.4 (JetPack 4.6.4, which no Triton
build here supports) for the duration of one ansible-playbook run, then restores it.
"""

from __future__ import annotations

from typing import Any

import pytest
from preflight_runs import podman_node, run_roles, snapshot

RELEASE = "/etc/nv_tegra_release"
WATCHED = ["/etc/apt", "/etc/systemd/system", "/etc/default", "/usr/local/lib/tritonops", "/var/lib/nvpmodel"]
R32 = "# R32 (release), REVISION: 7.4, GCID: 33514132, BOARD: t186ref, EABI: aarch64, DATE: Fri Jun  9 04:25:08 UTC 2023"


@pytest.fixture()
def old_release(host: Any) -> Any:
    if not host.file(RELEASE).exists:
        pytest.skip("not a Jetson")
    saved = host.file(RELEASE).content_string
    host.run(f"cp {RELEASE} {RELEASE}.saved && printf '%s\\n' '{R32}' > {RELEASE}")
    yield
    host.run(f"mv {RELEASE}.saved {RELEASE}")
    assert host.file(RELEASE).content_string == saved


def test_unsupported_l4t_release(host: Any, old_release: Any) -> None:
    before = snapshot(host, WATCHED)
    run = run_roles(podman_node(host), ["jetson"], {"jetson_apt_enabled": False})
    assert run.rc != 0, run.output
    assert run.stats.get("failures") == 1, run.output
    assert run.changed_tasks == [], run.changed_tasks
    assert [f["task"] for f in run.failed] == ["Stop on an unsupported L4T release"], run.failed
    msg = run.failed[0]["msg"]
    for words in ("L4T R32.7.4", "JetPack 4.6.4", "is not supported", "36.4.0", "Nothing was changed"):
        assert words in msg, msg
    assert snapshot(host, WATCHED) == before, "the failed run changed files on the node"
