"""Pulumi program of the triton stack: all logic lives in tritonops.k8s (see infra/tritonops/k8s/stacks.py)."""

from pathlib import Path

from tritonops.k8s.stacks import run

run(Path(__file__).parent)
