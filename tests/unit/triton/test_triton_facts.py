"""Triton's facts live once: the ports, the admin header and the restricted APIs (``tritonops.core``),
the flags each deployment kind sets (``tritonops.triton.args.PROFILES``), and one parser that reads a
command line back for the node's effective-state check and the CrossGuard pack.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tritonops.agent import effective
from tritonops.core.triton_cli import (
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    RESTRICTED_APIS,
    RESTRICTED_FLAGS,
    restricted_groups,
    value_of,
    values_of,
)
from tritonops.core.triton_http import DEFAULT_HEADER
from tritonops.triton.args import PROFILES, settings, triton_args

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
# The literals that must not be typed again in a role's defaults or argument specs.
LITERALS = re.compile(rf"(?<![\d.])({HTTP_PORT}|{GRPC_PORT}|{METRICS_PORT})(?!\d)|{DEFAULT_HEADER}")


def _pod(**site: Any) -> list[str]:
    return triton_args(settings("pod", model_repository="/m", restricted_apis=RESTRICTED_APIS,
                                admin_header=DEFAULT_HEADER, admin_key_ref="$(KEY)", **site))


def test_each_kind_sets_its_own_flags() -> None:
    pod = _pod()
    assert {"--strict-model-config=true", "--exit-on-error=true", "--log-format=ISO8601",
            f"--http-port={HTTP_PORT}", f"--grpc-port={GRPC_PORT}", f"--metrics-port={METRICS_PORT}"} <= set(pod)
    assert triton_args(settings("edge", model_repository="/m")) == ["--model-repository=/m"]
    assert "--exit-on-error=true" in triton_args(settings("serve", model_repository="/m"))
    assert "--exit-on-error=false" in triton_args(settings("serve-explicit", model_repository="/m"))


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_site_cannot_override_what_its_profile_sets(profile: str) -> None:
    for name in PROFILES[profile]:
        with pytest.raises(ValueError, match=f"profile '{profile}' sets {name} itself"):
            settings(profile, model_repository="/m", **{name: PROFILES[profile][name]})


def test_one_parser_reads_both_spellings_and_the_last_value() -> None:
    argv = ["--http-port=1", "--grpc-port", "2", "--http-port=3", "--log-verbose"]
    assert values_of(argv, "--http-port") == ["1", "3"] and value_of(argv, "--http-port") == "3"
    assert value_of(argv, "--grpc-port") == "2" and value_of(argv, "--log-verbose", "x") == "x"
    assert restricted_groups(["--http-restricted-api", "trace:h=v"], RESTRICTED_FLAGS[0]) == {"trace"}
    assert restricted_groups(["--http-restricted-api=trace:h="], RESTRICTED_FLAGS[0]) == set()  # no value


def test_effective_state_and_the_policy_pack_read_the_pods_command_line_alike() -> None:
    sys.path.insert(0, str(REPO / "policies" / "tritonops"))
    try:
        import policy_workloads
    finally:
        sys.path.remove(str(REPO / "policies" / "tritonops"))
    argv = _pod()
    assert policy_workloads.restricted_groups is restricted_groups  # the pack's parser is core's
    posture = effective.expected_posture(argv)
    assert posture["http_url"] == f"http://127.0.0.1:{HTTP_PORT}" and posture["grpc"] == ("127.0.0.1", GRPC_PORT)
    assert posture["restricted_http"] and posture["restricted_grpc"]
    for flag in RESTRICTED_FLAGS:
        assert restricted_groups(argv, flag) == set(RESTRICTED_APIS)


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir() if (p / "defaults" / "main.yml").is_file()))
def test_roles_read_the_facts_through_the_lookup(role: str) -> None:
    for name in ("defaults/main.yml", "meta/argument_specs.yml"):
        path = ROLES / role / name
        text = path.read_text() if path.is_file() else ""
        typed = [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                 if LITERALS.search(line) and not line.lstrip().startswith("#")]
        assert typed == [], "read it with lookup('tritonops.triton.tritonserver_args', FACT)"


@pytest.mark.parametrize("module", ["release", "triton_model"])
def test_the_modules_defaults_are_the_facts(module: str) -> None:
    """Modules run on the managed node without the package, so they keep the values; they must agree."""
    text = (REPO / "plugins" / "modules" / f"{module}.py").read_text()
    doc = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])["options"]
    assert doc["admin_header"]["default"] == DEFAULT_HEADER
    if "url" in doc:
        assert doc["url"]["default"] == f"http://127.0.0.1:{HTTP_PORT}"
