"""The GPU memory budget (tritonops.k8s.stacks.triton.budget): figures, overflow, time-slicing."""

from __future__ import annotations

import copy

import pytest
from tritonops.k8s.config import ConfigError, TritonStackConfig
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.triton.budget import BudgetError, budgets, check_budget


def _triton(env: str = "prod") -> TritonStackConfig:
    cfg = load_stack_config("triton", env)
    assert isinstance(cfg, TritonStackConfig)
    return cfg


# --- GPU memory budget ---------------------------------------------------------------------------


def test_budget_figures() -> None:
    cfg = _triton("prod")
    plan = check_budget(cfg)
    vision = plan["gpu-a10g"][0]
    assert vision.models_mib == 4 * 350 + 2 * 200
    assert vision.overhead_mib == 600 + 256 + 512
    assert vision.capacity_mib == 23028 and vision.fits
    dev = budgets(_triton("dev"))["gpu-l4"][0]
    assert dev.capacity_mib == 23034 // 2  # time-sliced in two


def test_budget_overflow_names_the_model_service() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][1]["models"][0]["instanceCount"] = 40  # 40 x 1400 MiB on one L40S
    with pytest.raises(ConfigError) as exc:
        parse_config("triton", raw)
    assert exc.value.key == "tritonops-triton:modelServices[1].models"
    assert "'embeddings' does not fit node pool 'gpu-l40s'" in str(exc.value)


def test_time_slicing_shrinks_the_budget() -> None:
    raw = copy.deepcopy(read_stack_file("triton", "prod")[0])
    raw["modelServices"][1]["models"][0]["instanceCount"] = 4  # 4 x 1400 + 1368 MiB overhead = 6968 MiB
    parse_config("triton", raw)  # fits a whole 46068 MiB L40S
    raw["nodePools"]["gpu-l40s"]["gpuSlices"] = 8  # 46068 / 8 = 5758 MiB per pod
    with pytest.raises(ConfigError, match="embeddings.*needs 6968 MiB.*offers 5758 MiB"):
        parse_config("triton", raw)


def test_budget_error_type() -> None:
    err = BudgetError("k", "m")
    assert isinstance(err, ValueError) and err.key == "k"
