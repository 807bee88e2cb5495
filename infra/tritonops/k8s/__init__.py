"""Kubernetes side: pure builders of Kubernetes objects, thin Pulumi components, stack programs.

Grouped by what it builds. At the top, what all three stacks share: the config models (``config``)
and their parser (``parse``, ``keys``), stack files (``stack_file``, ``contract``), ``labels``,
``catalog``, ``waits``, ``helm`` and ``gitops``, ``render`` (with ``rendered`` and ``programs``), the
Pulumi engine side (``engine``), the cluster contract and ``preflight``. ``stacks.<stack>`` holds each
stack's builders, its rules across config fields (``checks``), its Pulumi ComponentResources
(``components``, over ``tritonops.k8s.component``) and its program (``program``). Builders return plain
dicts and never import Pulumi, so ``tritonops render`` writes the very objects ``pulumi up`` creates;
only ``program.program`` imports the stack's ``components``.
"""

STACKS = ("cluster-aws", "platform", "triton")  # the stacks under a project's stacks/
