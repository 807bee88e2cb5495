"""The package's import graph: no circles, nothing importing upward, the agent standard-library only, no huge module.

The graph is read from the sources with ``ast`` (every ``import``, at module level or inside a function,
relative ones resolved), so a function-level import is no way around a circle. Layers, lowest first:

* 0: ``core`` (the plumbing every package shares: errors, exit codes, bounded file I/O, release file
  names, store keys; standard library only), ``tritonops`` itself, ``versions``, ``project``
* 1: ``agent`` (the node's release agent: it runs on devices with nothing else installed, so it imports
  the standard library and ``core`` only, and ships with ``core`` in one zipapp)
* 2: ``model_repo`` (model formats: config.pbtxt, the repository layout, validate, golden files)
* 3: ``triton`` (a Triton server, smoke, bench, tune), ``observability`` (metrics, rules, dashboards)
* 4: ``release`` (the controller's release lifecycle), ``k8s``, ``drift``, ``capacity``
* 5: ``cli`` (the ``tritonops`` command line)

A module may import from its own layer or below; two packages of one layer may import each other, but no
module-level circle may form (a circle of modules is one thing split in two files).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "infra"
LAYERS = {
    "tritonops.core": 0, "tritonops": 0, "tritonops.versions": 0, "tritonops.project": 0,
    "tritonops.agent": 1,
    "tritonops.model_repo": 2,
    "tritonops.triton": 3, "tritonops.observability": 3,
    "tritonops.release": 4, "tritonops.k8s": 4, "tritonops.drift": 4, "tritonops.capacity": 4,
    "tritonops.cli": 5,
}
# What a package that ships to nodes may import besides the standard library: the agent runs on devices
# with nothing else installed (its zipapp holds it and core), core is everyone's ground floor.
NODE_IMPORTS = {"tritonops.agent": ("tritonops.agent", "tritonops.core"), "tritonops.core": ("tritonops.core",)}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted((ROOT / "tritonops").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports (tritonops ones resolved to a module of MODULES, others by top name)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in MODULES else module)
    return {m if not m.startswith("tritonops") else _own(m) for m in found}


def _own(module: str) -> str:
    while module not in MODULES and "." in module:
        module = module.rpartition(".")[0]
    return module


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return LAYERS[".".join(parts[:n])]
    raise KeyError(module)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root] & graph.keys())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child] & graph.keys()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_every_package_has_a_layer() -> None:
    missing = [m for m in MODULES if not _has_layer(m)]
    assert not missing, f"modules of no layer (add their package to LAYERS): {missing}"


def _has_layer(module: str) -> bool:
    try:
        _layer(module)
    except KeyError:
        return False
    return True


def test_no_import_circles() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_runs_up_a_layer() -> None:
    upward = sorted(f"{name} ({_layer(name)}) imports {dep} ({_layer(dep)})"
                    for name, deps in GRAPH.items() for dep in deps
                    if dep.startswith("tritonops") and _layer(dep) > _layer(name))
    assert upward == []


def _foreign(graph: dict[str, set[str]]) -> list[str]:
    """Imports of the node's packages (NODE_IMPORTS) that are neither the standard library nor allowed to them."""
    out = []
    for name, deps in graph.items():
        for package, allowed in NODE_IMPORTS.items():
            if name == package or name.startswith(package + "."):
                out += [f"{name} imports {dep}" for dep in deps
                        if not any(dep == a or dep.startswith(a + ".") for a in allowed)
                        and dep.split(".")[0] not in sys.stdlib_module_names and dep != "__future__"]
    return sorted(out)


def test_the_agent_imports_only_the_standard_library_and_core() -> None:
    assert _foreign(GRAPH) == []
    assert any(dep.startswith("tritonops.core") for dep in GRAPH["tritonops.agent.store"])  # the rule is live


def test_the_node_rule_refuses_anything_else() -> None:
    graph = {"tritonops.agent.pull": {"json", "tritonops.core.errors", "tritonops.agent.store", "tritonops.model_repo",
                                      "tritonops"},
             "tritonops.agent.store": {"yaml"},
             "tritonops.core.fsio": {"os", "tritonops.agent.store"},
             "tritonops.release.push": {"yaml", "tritonops.model_repo"}}
    assert _foreign(graph) == ["tritonops.agent.pull imports tritonops", "tritonops.agent.pull imports tritonops.model_repo",
                               "tritonops.agent.store imports yaml", "tritonops.core.fsio imports tritonops.agent.store"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_huge(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]}: {lines} lines; split it by job (at most {MAX_LINES})"


@pytest.mark.parametrize("path", sorted((ROOT.parent / "policies").rglob("*.py")), ids=lambda p: p.name)
def test_no_policy_pack_module_is_huge(path: Path) -> None:
    """The CrossGuard packs (policies/) are held to infra/'s limit too."""
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path}: {lines} lines; split it by what it checks (at most {MAX_LINES})"


def test_every_module_has_a_docstring() -> None:
    bare = sorted(str(p.relative_to(ROOT)) for p in MODULES.values()
                  if p.read_text().strip() and ast.get_docstring(ast.parse(p.read_text())) is None)
    assert bare == []
