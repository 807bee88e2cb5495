"""Pulumi program of the cluster-aws stack: all logic lives in tritonops.k8s (see infra/tritonops/k8s/programs.py)."""

from pathlib import Path

from tritonops.k8s.programs import run

run(Path(__file__).parent)
