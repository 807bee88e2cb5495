"""An independent judge of the rendered objects: checkov's Kubernetes checks on `tritonops render`.

The triton and platform stacks, dev and prod, are rendered with the CLI and scanned with checkov
(pinned in the Makefile, installed by `make checkov` in a venv of its own). Every failed check must be
in SKIPS, each with the reason it does not apply; a skip that no longer matches anything fails too, so
the list cannot outlive its reasons.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ROOT, envs, user_stacks
from tritonops.k8s.stack_file import load_stack_config

CHECKOV = ROOT / ".cache" / "checkov-venv" / "bin" / "checkov"
STACKS = ("triton", "platform")

# (check id, tier or None for every stack) -> why the check does not apply. By tier (the stack's config),
# never by stack name: a staging or qa stack of tier non-production is skipped like dev.
SKIPS: dict[tuple[str, str | None], str] = {
    ("CKV_K8S_11", None): (
        "no CPU limits on purpose: CFS quota throttles Triton's and the agent's threads mid-request and "
        "adds tail latency; CPU is requested (scheduling) and memory is limited"
    ),
    ("CKV_K8S_35", None): (
        "Triton takes the admin header value only on its command line (kubelet fills $(TRITON_ADMIN_KEY) "
        "from the Secret); the release agent and drift check read it, and S3 keys, from their environment "
        "(infra/tritonops/agent has no file option)"
    ),
    ("CKV_K8S_40", None): (
        "uid 1000 is the NGC image's own triton-server user; the pods run non-root, no privilege "
        "escalation, all capabilities dropped, read-only root, seccomp RuntimeDefault"
    ),
    ("CKV_K8S_43", "non-production"): (
        "non-production follows image tags; production pins digests (policy triton-pinned-images)"
    ),
    ("CKV_K8S_15", "non-production"): (
        "IfNotPresent with a tag in non-production, so nodes keep starting pods without the registry; "
        "production pins digests, which this check accepts with IfNotPresent"
    ),
}


def _env_of(file_path: str) -> str:
    """``/<stack>-<env>/NN-....yaml`` -> env."""
    return file_path.strip("/").split("/", 1)[0].rsplit("-", 1)[1]


@functools.cache
def _tier(env: str) -> str:
    return load_stack_config("triton", env).tier


def _skip_for(check_id: str, env: str) -> tuple[str, str | None] | None:
    for key in ((check_id, _tier(env)), (check_id, None)):
        if key in SKIPS:
            return key
    return None


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not CHECKOV.is_file():
        pytest.skip(f"checkov is not installed at {CHECKOV}: run `make checkov`")
    out = tmp_path_factory.mktemp("render")
    tritonops = Path(sys.executable).parent / "tritonops"
    for stack in STACKS:
        for env in envs(stack):
            cmd = [str(tritonops), "render", "--stack", stack, "--env", env, "--out", str(out / f"{stack}-{env}"),
                   "--project-dir", str(user_stacks().parent)]
            subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    proc = subprocess.run(
        [str(CHECKOV), "--directory", str(out), "--framework", "kubernetes", "--skip-download", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: some check failed
    report = json.loads(proc.stdout)
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    return report


def test_checkov_finds_nothing_outside_the_skip_list(scan: dict[str, Any]) -> None:
    results = scan["results"]
    failed = results["failed_checks"]
    unexpected = [
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']})"
        for c in failed
        if _skip_for(c["check_id"], _env_of(c["file_path"])) is None
    ]
    passed = Counter(_env_of(c["file_path"]) for c in results["passed_checks"])
    skipped = Counter(_env_of(c["file_path"]) for c in failed)
    for env in envs("triton"):
        print(f"checkov {env}: {passed[env]} passed, {skipped[env]} failed but skipped (reasons in SKIPS)")
    print(f"checkov total: {scan['summary']}")
    assert passed["dev"] and passed["prod"], "checkov judged nothing: did the render or the scan change?"
    assert unexpected == [], "\n".join(unexpected)


def test_every_skip_still_matches(scan: dict[str, Any]) -> None:
    used = {_skip_for(c["check_id"], _env_of(c["file_path"])) for c in scan["results"]["failed_checks"]}
    assert set(SKIPS) - used == set(), "stale skips: remove them"


def test_checkov_catches_what_we_fixed(scan: dict[str, Any]) -> None:
    """Checks that failed before this project's fixes pass now: the release agent's liveness probe
    (CKV_K8S_8) and prod's digests (CKV_K8S_43)."""
    failed = {(c["check_id"], _env_of(c["file_path"])) for c in scan["results"]["failed_checks"]}
    passed = {(c["check_id"], _env_of(c["file_path"])) for c in scan["results"]["passed_checks"]}
    assert ("CKV_K8S_8", "dev") in passed and ("CKV_K8S_8", "dev") not in failed
    assert ("CKV_K8S_43", "prod") in passed and ("CKV_K8S_43", "prod") not in failed
