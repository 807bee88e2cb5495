"""The Pulumi engine side every stack program shares: refusing to run without the engine, the stack's
config through the same parser ``tritonops render`` uses, the cluster-aws StackReference and the
Kubernetes provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tritonops.k8s.config import ClusterSource, ConfigError, StackConfig, config_keys, project_name
from tritonops.k8s.parse import parse_config


def _decode(raw: str, is_str: bool) -> Any:
    if is_str:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw  # let the model report the type error with the key


class PulumiEngineMissing(RuntimeError):
    """A stack program was started without the Pulumi engine (e.g. `python stacks/x/__main__.py`)."""


def require_engine(stack: str) -> None:
    """Fail clearly when the program runs outside `pulumi up/preview` (or Pulumi's test mocks)."""
    import shutil

    from pulumi.runtime.settings import get_monitor

    if get_monitor() is not None:
        return
    cli = shutil.which("pulumi")
    how = (
        f"run it with the Pulumi CLI ({cli}): cd stacks/{stack} && pulumi up"
        if cli
        else "the Pulumi CLI is not installed here (https://www.pulumi.com/docs/install/)"
    )
    raise PulumiEngineMissing(
        f"stacks/{stack}/__main__.py is a Pulumi program and needs the Pulumi engine: {how}. "
        f"Without Pulumi, `tritonops render --stack {stack} --env ENV --out DIR` writes the same objects as YAML."
    )


def pulumi_config(stack: str) -> StackConfig:
    """The stack's config from the Pulumi engine, through the same parser render uses."""
    import pulumi

    require_engine(stack)

    project = pulumi.get_project()
    if project != project_name(stack):
        raise ConfigError("name", f"Pulumi project is {project!r}, expected {project_name(stack)!r} (Pulumi.yaml)")
    cfg = pulumi.Config()
    raw = {}
    for key, is_str in config_keys(stack).items():
        value = cfg.get(key)
        if value is not None:
            raw[key] = _decode(value, is_str)
    return parse_config(stack, raw, source=f"Pulumi.{pulumi.get_stack()}.yaml", env=pulumi.get_stack())


def stack_reference_name(cluster_stack: str, organization: str | None) -> str:
    """The StackReference name of ``cluster.clusterStack``. ``<project>/<stack>`` (or ``<stack>``: the
    cluster-aws project) is the backend-neutral form: the program adds the organization it runs under,
    yours on Pulumi Cloud and the literal ``organization`` on a self-managed (DIY) backend, which alone
    accepts ``organization/<project>/<stack>``. ``<org>/<project>/<stack>`` is used as given."""
    parts = cluster_stack.split("/")
    if len(parts) == 3:
        return cluster_stack
    if len(parts) == 1:
        parts = [project_name("cluster-aws"), *parts]
    return "/".join([organization or "organization", *parts])


def cluster_reference(name: str, source: ClusterSource) -> Any:
    """The cluster-aws stack named by ``cluster.clusterStack`` (a StackReference), or None."""
    import pulumi

    if not source.cluster_stack:
        return None
    return pulumi.StackReference(f"{name}-cluster",
                                 stack_name=stack_reference_name(source.cluster_stack, pulumi.get_organization()))


def kube_provider(name: str, source: ClusterSource, ref: Any = None) -> Any:
    """An explicit Kubernetes provider: cluster-aws's kubeconfig output, a kubeconfig file, or ambient.
    ``ref``: the stack's :func:`cluster_reference`, when it already made one."""
    import pulumi_kubernetes as k8s

    kubeconfig: Any = None
    if source.cluster_stack:
        ref = ref if ref is not None else cluster_reference(name, source)
        kubeconfig = ref.require_output("kubeconfig")
    elif source.kubeconfig:
        path = Path(source.kubeconfig).expanduser()
        if not path.is_file():
            raise ConfigError("cluster.kubeconfig", f"no kubeconfig file at {path}")
        kubeconfig = path.read_text()
    return k8s.Provider(f"{name}-k8s", kubeconfig=kubeconfig, context=source.context)
