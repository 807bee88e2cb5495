"""The package's import graph: no circles, nothing importing upward, the agent standard-library only, no huge module.

The graph is read from the sources with ``ast`` (every ``import``, at module level or inside a function,
relative ones resolved), so a function-level import is no way around a circle. Layers, lowest first:

* 0: ``core`` (the plumbing every package shares: errors, exit codes, bounded file and HTTP I/O, the
  node's lock, release file names, store keys, Triton's HTTP API; standard library only), ``tritonops``
  itself, ``versions``, ``project``, ``world``, ``agent_bundle`` (writes the zipapp from the sources)
* 1: ``release_format`` (the release format and its checks) and ``stores`` (the store kinds): standard
  library and ``core`` only (stores: boto3 inside write functions), shipped to nodes in the zipapp
* 2: ``agent`` (the node program: it runs on devices with nothing else installed, so it imports the
  standard library and the packages below only; only ``cli`` imports it), ``model_repo`` (model formats:
  config.pbtxt, the repository layout, validate, golden files)
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
    "tritonops.core": 0, "tritonops": 0, "tritonops.versions": 0, "tritonops.project": 0, "tritonops.world": 0,
    "tritonops.agent_bundle": 0,
    "tritonops.release_format": 1, "tritonops.stores": 1,
    "tritonops.agent": 2, "tritonops.model_repo": 2,
    "tritonops.triton": 3, "tritonops.observability": 3,
    "tritonops.release": 4, "tritonops.k8s": 4, "tritonops.drift": 4, "tritonops.capacity": 4,
    "tritonops.cli": 5,
}
# What a package that ships to nodes may import besides the standard library: the agent runs on devices
# with nothing else installed (its zipapp holds these four packages), core is everyone's ground floor.
NODE = ("tritonops.agent", "tritonops.core", "tritonops.release_format", "tritonops.stores")
NODE_IMPORTS = {"tritonops.agent": NODE, "tritonops.core": ("tritonops.core",),
                "tritonops.release_format": ("tritonops.release_format", "tritonops.core"),
                "tritonops.stores": ("tritonops.stores", "tritonops.core", "tritonops.release_format")}
# Only the controller's writes need these; a store module imports them inside the function that writes.
LAZY_CONTROLLER_IMPORTS = {"tritonops.stores": ("boto3", "botocore")}
# Who may import the node program: the command line (``tritonops agent ...``) and the agent itself.
AGENT_IMPORTERS = ("tritonops.cli", "tritonops.agent")
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted((ROOT / "tritonops").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


MODULES = _modules()


def _top_level(tree: ast.AST) -> list[ast.AST]:
    """The nodes of a module outside its functions: what runs when it is imported."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        todo += [c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return out


def _imports(name: str, path: Path, top_only: bool = False) -> set[str]:
    """Every module ``name`` imports (tritonops ones resolved to a module of MODULES, others by top name);
    ``top_only``: those it imports when it is loaded (not inside a function)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in _top_level(tree) if top_only else ast.walk(tree):
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
LOADED = {name: _imports(name, path, top_only=True) for name, path in MODULES.items()}


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


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _foreign(graph: dict[str, set[str]], loaded: dict[str, set[str]] | None = None) -> list[str]:
    """Imports of the node's packages (NODE_IMPORTS) that are neither the standard library nor allowed to them;
    LAZY_CONTROLLER_IMPORTS are allowed where the module does not import them when it is loaded (``loaded``)."""
    out = []
    for name, deps in graph.items():
        for package, allowed in NODE_IMPORTS.items():
            if _under(name, (package,)):
                lazy = LAZY_CONTROLLER_IMPORTS.get(package, ())
                out += [f"{name} imports {dep}" for dep in deps
                        if not _under(dep, allowed) and dep.split(".")[0] not in sys.stdlib_module_names
                        and dep != "__future__"
                        and not (_under(dep, lazy) and dep not in (loaded or {}).get(name, set()))]
    return sorted(out)


def test_the_node_packages_import_only_the_standard_library_and_each_other() -> None:
    assert _foreign(GRAPH, LOADED) == []
    assert any(dep.startswith("tritonops.core") for dep in GRAPH["tritonops.stores.http"])  # the rule is live
    assert "boto3" in GRAPH["tritonops.stores.s3"] and "boto3" not in LOADED["tritonops.stores.s3"]


def test_a_store_module_may_import_boto3_only_inside_a_function() -> None:
    graph = {"tritonops.stores.s3": {"boto3", "json"}, "tritonops.agent.pull": {"boto3"}}
    assert _foreign(graph, {"tritonops.stores.s3": {"json"}, "tritonops.agent.pull": set()}) == [
        "tritonops.agent.pull imports boto3"]
    assert _foreign(graph, {"tritonops.stores.s3": {"boto3"}}) == [
        "tritonops.agent.pull imports boto3", "tritonops.stores.s3 imports boto3"]


def _agent_importers(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} imports {dep}" for name, deps in graph.items() for dep in deps
                  if _under(dep, ("tritonops.agent",)) and not _under(name, AGENT_IMPORTERS))


def test_only_the_command_line_imports_the_agent() -> None:
    """``agent/`` is the node program: the controller imports the format, the stores or core instead."""
    assert _agent_importers(GRAPH) == []
    assert any(_under(dep, ("tritonops.agent",)) for dep in GRAPH["tritonops.cli.output"])  # the rule is live
    assert _agent_importers({"tritonops.release.push": {"tritonops.agent.releases", "tritonops.agent_bundle"}}) == [
        "tritonops.release.push imports tritonops.agent.releases"]


def test_the_node_rule_refuses_anything_else() -> None:
    graph = {"tritonops.agent.pull": {"json", "tritonops.core.errors", "tritonops.stores.http", "tritonops.model_repo",
                                      "tritonops"},
             "tritonops.stores.http": {"yaml"},
             "tritonops.core.fsio": {"os", "tritonops.stores.http"},
             "tritonops.release.push": {"yaml", "tritonops.model_repo"}}
    assert _foreign(graph) == ["tritonops.agent.pull imports tritonops", "tritonops.agent.pull imports tritonops.model_repo",
                               "tritonops.core.fsio imports tritonops.stores.http", "tritonops.stores.http imports yaml"]


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
