"""Kubernetes side: pure builders of Kubernetes objects, thin Pulumi components, stack programs.

Configuration: ``config`` (the pydantic models and ``ConfigError``), ``parse`` (the rules across
fields), ``stack_file`` (reading ``Pulumi.<env>.yaml``). Builders return plain dicts and never import
Pulumi, so ``tritonops render`` writes the very objects ``pulumi up`` creates: for the triton stack
``labels``, ``workload``, ``release_agent``, ``exposure``, ``scaling``, ``monitoring`` and ``drift``,
assembled by ``triton``; ``platform``, ``eks`` and ``karpenter`` for the others. ``components`` and
``stacks`` hold the Pulumi side.
"""
