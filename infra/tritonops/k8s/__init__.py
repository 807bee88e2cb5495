"""Kubernetes side: pure builders of Kubernetes objects, thin Pulumi components, stack programs.

Builders (``tritonops.k8s.triton``, ``tritonops.k8s.platform``, ``tritonops.k8s.eks``) return plain dicts and
never import Pulumi, so ``tritonops render`` writes the very objects ``pulumi up`` creates.
"""
