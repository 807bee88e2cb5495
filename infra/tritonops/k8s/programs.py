"""The three stack programs, and the same objects as data for ``tritonops render``.

``stacks/<name>/__main__.py`` calls :func:`run` with its folder; :func:`render_set` builds what that
program would create, from the same parsed configuration and the same builders, without Pulumi. Each
stack's own ``render`` and ``program`` live in ``tritonops.k8s.stacks.<stack>.program``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tritonops.k8s.config import ClusterAwsConfig, PlatformConfig, StackConfig, TritonStackConfig, project_name
from tritonops.k8s.engine import require_engine
from tritonops.k8s.rendered import RenderSet
from tritonops.k8s.stacks.cluster_aws import program as cluster_aws
from tritonops.k8s.stacks.platform import program as platform
from tritonops.k8s.stacks.triton import program as triton


def render_set(stack: str, env: str, cfg: StackConfig, reader_arns: Mapping[str, str] | None = None,
               dashboards: bool = True) -> RenderSet:
    """``reader_arns``: modelReader roleName -> ARN (cluster-aws's output); None: a placeholder ARN.
    ``dashboards``: see :func:`tritonops.k8s.stacks.triton.objects.namespace_objects`."""
    out = RenderSet(stack, env)
    if isinstance(cfg, TritonStackConfig):
        triton.render(out, cfg, reader_arns, dashboards)
    elif isinstance(cfg, PlatformConfig):
        platform.render(out, cfg)
    elif isinstance(cfg, ClusterAwsConfig):
        cluster_aws.render(out, cfg)
    return out


PROGRAMS: dict[str, Callable[[], dict[str, Any]]] = {
    "cluster-aws": cluster_aws.program, "platform": platform.program, "triton": triton.program,
}


def run(stack_dir: Path | str) -> dict[str, Any]:
    """Entry point of ``stacks/<stack>/__main__.py``, which passes its own folder. The stack is the
    folder's name in this checkout, else the Pulumi project's (``tritonops-<stack>``): a stack folder
    copied anywhere under any name runs the same program."""
    stack = Path(stack_dir).name
    if stack not in PROGRAMS:
        import pulumi

        require_engine(stack)
        project = pulumi.get_project()
        found = [s for s in PROGRAMS if project_name(s) == project]
        if not found:
            known = ", ".join(project_name(s) for s in PROGRAMS)
            raise ValueError(f"{stack_dir}: Pulumi project {project!r} is not a tritonops stack (known: {known})")
        stack = found[0]
    return PROGRAMS[stack]()
