"""Kubernetes side: pure builders of Kubernetes objects, thin Pulumi components, stack programs.

Builders (``infra.k8s.triton``, ``infra.k8s.platform``, ``infra.k8s.eks``) return plain dicts and
never import Pulumi, so ``tritonops render`` writes the very objects ``pulumi up`` creates.
"""
