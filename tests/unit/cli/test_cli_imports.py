"""``tritonops --help``, every command's and group's ``--help``, and ``validate`` of the sample repository load
only what they use (issue 45): Triton's client (grpc, numpy), tune, bench, drift, Pulumi, boto3 and the
plotting libraries are loaded by the commands that run them, never to print a help text.

The commands run one after the other in one fresh interpreter (this test process has imported everything
already); each module that appears in ``sys.modules`` is charged to the command that loaded it. The
assertion is on that import graph, never on a time: tests/benchmarks/bench_cli_start.py measures the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_help import COMMANDS

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "model_repository"

# Runs each argv through the CLI in turn; writes {argv: {"exit": code, "new": [modules it loaded]}} as JSON.
PROBE = r"""
import json, sys
out, before = {}, set(sys.modules)
from tritonops.cli import app
out["import tritonops.cli"] = {"exit": 0, "new": sorted(set(sys.modules) - before)}
for argv in json.loads(sys.argv[2]):
    before, code = set(sys.modules), None
    try:
        app(argv, prog_name="tritonops")
    except SystemExit as e:
        code = e.code
    out[" ".join(argv)] = {"exit": code, "new": sorted(set(sys.modules) - before)}
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
"""

# Loaded by no --help (module prefixes: the name itself or anything under it).
NOT_FOR_HELP = (
    "tritonclient", "grpc", "numpy", "gevent", "pulumi", "pulumi_kubernetes", "pulumi_aws", "boto3", "botocore",
    "matplotlib", "grafana_foundation_sdk", "google.protobuf", "prometheus_client",
    "tritonops.triton.tune", "tritonops.triton.bench", "tritonops.triton.smoke", "tritonops.triton.server",
    "tritonops.triton.steady", "tritonops.drift.",  # the package's names (SOURCES) are fine, its modules are not
    "tritonops.model_repo.validate", "tritonops.model_repo.pbtxt", "tritonops.k8s.config", "tritonops.capacity.plan",
    "tritonops.release.publish", "tritonops.release.rollout", "tritonops.agent.cli",
)
# validate parses config.pbtxt with Triton's protobuf (tritonclient.grpc.model_config_pb2, loaded by itself)
# and checks golden files without numpy.
NOT_FOR_VALIDATE = (
    "tritonclient.grpc", "tritonclient.http", "tritonclient.utils", "grpc", "numpy", "gevent", "pulumi", "boto3",
    "matplotlib", "tritonops.triton.", "tritonops.drift.", "tritonops.k8s.config", "tritonops.release.",
)
VALIDATE_NEEDS = {"tritonops.model_repo.validate", "tritonops.model_repo.pbtxt", "tritonclient.grpc.model_config_pb2"}


HELPS = [[*p, "--help"] for p in COMMANDS]
VALIDATE = ["validate", str(SAMPLE)]


def _matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module.startswith(p) if p.endswith(".") else module == p or module.startswith(p + ".")
               for p in prefixes)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("imports") / "loaded.json"
    res = subprocess.run([sys.executable, "-c", PROBE, str(out), json.dumps([*HELPS, VALIDATE])],
                         capture_output=True, text=True, cwd=ROOT, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def test_the_walk_covers_every_command_and_group() -> None:
    names = {" ".join(h[:-1]) for h in HELPS}
    assert {"", "tune", "bench", "drift", "render", "plan", "release", "release publish", "release rollout",
            "release rollout start", "observability export", "agent build"} <= names


@pytest.mark.parametrize("argv", [["import", "tritonops.cli"], *HELPS], ids=lambda a: " ".join(a))
def test_help_loads_no_heavy_module(loaded: dict[str, dict], argv: list[str]) -> None:
    got = loaded[" ".join(argv)]
    assert got["exit"] in (0, None), got
    heavy = [m for m in got["new"] if _matches(m, NOT_FOR_HELP)]
    assert heavy == [], f"`tritonops {' '.join(argv)}` loaded {heavy}"


def test_validate_of_the_sample_loads_the_validator_only(loaded: dict[str, dict]) -> None:
    got = loaded[" ".join(VALIDATE)]
    assert got["exit"] == 0, got
    new = set(got["new"])
    assert new >= VALIDATE_NEEDS  # the probe sees what a command loads: the validator itself is there
    heavy = sorted(m for m in new - VALIDATE_NEEDS if _matches(m, NOT_FOR_VALIDATE))
    assert heavy == [], f"`tritonops validate {SAMPLE}` loaded {heavy}"


def test_the_rules_catch_a_heavy_import() -> None:
    assert _matches("tritonclient.grpc", NOT_FOR_HELP) and _matches("tritonops.drift.run", NOT_FOR_HELP)
    assert not _matches("tritonops.drift", NOT_FOR_HELP) and not _matches("grpcio_tools", NOT_FOR_HELP)
    assert _matches("numpy.core", NOT_FOR_VALIDATE) and not _matches("tritonops.triton", NOT_FOR_VALIDATE)
