"""Pulumi program of the platform stack: all logic lives in infra.k8s (see infra/k8s/stacks.py)."""

from infra.k8s.stacks import run

run("platform")
