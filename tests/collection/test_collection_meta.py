"""The collection's metadata as Galaxy users and tools read it, checked from the checkout (unit tier: no
build, no servers):

- LICENSE is the Apache License 2.0 text that galaxy.yml and pyproject.toml declare;
- the changelog fragments pass ``antsibull-changelog lint`` (and a broken one does not);
- meta/execution-environment.yml points ansible-builder at requirements.txt, which names every Python
  package the controller imports for the collection (tritonops of this release, with a range);
- the roles' ``min_ansible_version`` is meta/runtime.yml's ``requires_ansible``, which this venv satisfies;
- galaxy.yml depends on exactly the collections the content names by FQCN;
- the filters live in plugins/filter, documented for ansible-doc, and the roles call them by FQCN.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the text as the ASF publishes it.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
# What the content may call without declaring it: ansible-core itself, and this collection.
IMPLICIT = {"ansible.builtin", "ansible.legacy", f"{GALAXY['namespace']}.{GALAXY['name']}"}


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


# --- LICENSE -----------------------------------------------------------------------------------------

def test_license_is_the_apache_2_0_text_that_galaxy_and_pyproject_declare() -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256, "LICENSE: not the Apache License 2.0 text"
    assert GALAXY["license"] == ["Apache-2.0"], "galaxy.yml: license"
    assert "license_file" not in GALAXY, "galaxy.yml: license and license_file are exclusive"
    assert PYPROJECT["project"]["license"] == "Apache-2.0", "pyproject.toml: project.license"


# --- changelog fragments -----------------------------------------------------------------------------

def _changelog_tree(tmp_path: Path) -> Path:
    """galaxy.yml and changelogs/ copied, so that a test may add a fragment."""
    root = tmp_path / "collection"
    root.mkdir()
    shutil.copy(REPO / "galaxy.yml", root)
    shutil.copytree(REPO / "changelogs", root / "changelogs")
    return root


def _antsibull_changelog() -> str:
    exe = BIN / "antsibull-changelog"
    assert exe.exists(), f"{exe}: missing; antsibull-changelog is in pyproject.toml's dev extra"
    return str(exe)


def test_changelog_config_and_fragments_lint_clean(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "changelogs" / "config.yaml").read_text())
    assert config["notesdir"] == "fragments" and config["changes_file"] == "changelog.yaml"
    assert list((REPO / "changelogs" / "fragments").glob("*.yml")), "changelogs/fragments: no fragment"
    root = _changelog_tree(tmp_path)
    res = _run([_antsibull_changelog(), "lint"], cwd=root)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
    res = _run([_antsibull_changelog(), "lint-changelog-yaml", "changelogs/changelog.yaml"], cwd=root)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


@pytest.mark.parametrize(("body", "says"), [
    ("minor_change:\n  - a section that does not exist\n", "invalid section: minor_change"),
    ("minor_changes: a string, not a list\n", 'section "minor_changes" must be type list'),
])
def test_changelog_lint_refuses_a_broken_fragment(tmp_path: Path, body: str, says: str) -> None:
    root = _changelog_tree(tmp_path)
    (root / "changelogs" / "fragments" / "broken.yml").write_text("---\n" + body)
    res = _run([_antsibull_changelog(), "lint"], cwd=root)
    assert res.returncode != 0
    assert "changelogs/fragments/broken.yml" in res.stdout and says in res.stdout, res.stdout + res.stderr


def _plugin_docs() -> list[tuple[str, str, str]]:
    """(changelog kind, name, version_added) of each documented plugin: modules, lookups, filters."""
    found = []
    for kind in ("modules", "lookup", "action"):
        for path in sorted((REPO / "plugins" / kind).glob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if (isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["DOCUMENTATION"]
                        and isinstance(node.value, ast.Constant)):
                    doc = yaml.safe_load(str(node.value.value))
                    found.append((kind, doc.get("module") or doc["name"], str(doc["version_added"])))
    for path in sorted((REPO / "plugins" / "filter").glob("*.yml")):
        doc = yaml.safe_load(path.read_text())["DOCUMENTATION"]
        found.append(("filter", doc["name"], str(doc["version_added"])))
    return found


@pytest.mark.parametrize(("kind", "name", "added"), _plugin_docs())
def test_changelog_yaml_records_a_plugin_in_the_release_that_added_it(kind: str, name: str, added: str) -> None:
    releases = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"]
    if added not in releases:  # not released yet: then it comes with the next release
        latest = max(map(Version, releases))
        assert Version(added) > latest, f"{kind} {name}: version_added {added}, not a release after {latest}"
        return
    release = releases[added]
    listed = release.get("modules", []) if kind == "modules" else release.get("plugins", {}).get(kind, [])
    assert name in [p["name"] for p in listed], f"changelogs/changelog.yaml: release {added} lacks {kind} {name}"


# --- the controller's Python: requirements.txt and meta/execution-environment.yml ----------------------

def _requirements() -> dict[str, Requirement]:
    reqs = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            reqs[req.name] = req
    return reqs


# `ansible_playbook_python -m <module>` in a task's argv: a flow list, a Jinja list or a block list.
_PYTHON_M = re.compile(r"ansible_playbook_python(?:\s*}})?[\"']?\s*[,\n]\s*(?:-\s+)?[\"']?-m[\"']?\s*[,\n]\s*"
                       r"(?:-\s+)?[\"']?([A-Za-z_][\w.]*)")


def _controller_imports() -> dict[str, str]:
    """Top-level Python packages the collection makes the controller import, each with where: the
    plugins' imports (ast, importlib.import_module) and the roles' `ansible_playbook_python -m X` commands."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "plugins").rglob("*.py")):
        if path.parent.name in ("modules", "module_utils"):
            continue  # these run on the node (module_utils with them), not on the controller
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
                names = [str(node.args[0].value)]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        for m in _PYTHON_M.finditer(path.read_text()):
            found.setdefault(m.group(1).split(".")[0], str(path.relative_to(REPO)))
    # pip: part of every venv and execution environment (ansible-builder installs it).
    skip = set(sys.stdlib_module_names) | {"ansible", "ansible_collections", "__future__", "pip"}
    return {k: v for k, v in found.items() if k not in skip}


def test_the_execution_environment_takes_requirements_txt() -> None:
    ee = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())
    assert ee["dependencies"]["python"] == "requirements.txt", "meta/execution-environment.yml: dependencies.python"
    assert (REPO / ee["dependencies"]["python"]).is_file()
    assert set(ee["dependencies"]) <= {"python", "system", "galaxy"}, ee


def test_requirements_txt_names_every_package_the_controller_imports() -> None:
    imports = _controller_imports()
    assert "tritonops" in imports, imports  # the pin lookup; the scan would be blind without it
    reqs = _requirements()
    missing = {pkg: where for pkg, where in imports.items() if pkg.replace("_", "-") not in reqs}
    assert not missing, f"requirements.txt: no line for the controller's imports {missing}"


def test_requirements_txt_takes_tritonops_of_this_release_with_a_range() -> None:
    spec = _requirements()["tritonops"].specifier
    assert Version(GALAXY["version"]) in spec, f"requirements.txt: tritonops{spec} excludes galaxy.yml version"
    assert any(s.operator == "<" for s in spec), f"requirements.txt: tritonops{spec} has no upper bound"
    assert Version(PYPROJECT["project"]["version"]) in spec, "requirements.txt: tritonops vs pyproject.toml version"


def test_requirements_txt_ranges_are_pyprojects() -> None:
    declared: dict[str, SpecifierSet] = {}
    for line in [*PYPROJECT["project"]["dependencies"],
                 *(d for deps in PYPROJECT["project"]["optional-dependencies"].values() for d in deps)]:
        req = Requirement(line)
        declared[req.name] = req.specifier
    for name, req in _requirements().items():
        if name != "tritonops":
            assert name in declared, f"requirements.txt: {name} is not a dependency in pyproject.toml"
            assert req.specifier == declared[name], f"requirements.txt: {name}{req.specifier} vs pyproject's"


# --- Ansible versions ---------------------------------------------------------------------------------

def _requires_ansible() -> SpecifierSet:
    return SpecifierSet(yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"])


@pytest.mark.parametrize("role", sorted(p.parent.parent.name for p in REPO.glob("roles/*/meta/main.yml")))
def test_a_roles_min_ansible_version_is_requires_ansible(role: str) -> None:
    lower = [s.version for s in _requires_ansible() if s.operator == ">="]
    assert len(lower) == 1, "meta/runtime.yml: requires_ansible needs one >= bound"
    want = ".".join(lower[0].split(".")[:2])
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    got = str(meta["galaxy_info"]["min_ansible_version"])
    assert got == want, f"roles/{role}/meta/main.yml: min_ansible_version {got}, meta/runtime.yml requires {want}"


def test_this_venvs_ansible_core_satisfies_requires_ansible() -> None:
    from ansible.release import __version__

    assert Version(__version__) in _requires_ansible(), f"ansible-core {__version__} vs meta/runtime.yml"


# --- collection dependencies --------------------------------------------------------------------------

_NAME = r"[a-z][a-z0-9_]*"
_FQCN = rf"({_NAME})\.({_NAME})\.{_NAME}"
# Where YAML and Jinja name a plugin: a task's module key, a value that is a whole FQCN (connection,
# import_playbook, a role's name, a roles: list entry), lookup()/query(), a filter or test after | or is,
# map()/select()-style string arguments. Python: ansible_collections.<ns>.<name> imports.
_PLUGIN_KEYS = "connection|ansible_connection|import_playbook|name|role|strategy|become_method|callback"
_USES = [
    re.compile(rf"^\s*(?:-\s+)?{_FQCN}:(?:\s|$)", re.M),
    re.compile(rf"^\s*(?:-\s+)?(?:{_PLUGIN_KEYS}):\s+[\"']?{_FQCN}[\"']?\s*$", re.M),
    re.compile(rf"\b(?:lookup|query|q)\(\s*[\"']{_FQCN}[\"']"),
    re.compile(rf"(?:\||\bis)\s*(?:not\s+)?{_FQCN}\b"),
    re.compile(rf"\b(?:map|select|reject|selectattr|rejectattr)\(\s*(?:[\"']\w+[\"']\s*,\s*)?[\"']{_FQCN}[\"']"),
    re.compile(rf"\bansible_collections\.({_NAME})\.({_NAME})\b"),
]

_ROLES_LIST = re.compile(r"^(?P<indent>[ -]*)roles:[ \t]*\n(?:(?P=indent)[ \t]+.*\n?)+", re.M)
_LIST_ITEM = re.compile(rf"^\s*-\s+[\"']?{_FQCN}[\"']?\s*$", re.M)


def collections_used(root: Path) -> dict[str, str]:
    """Each collection (namespace.name) the collection content under root names, with a file naming it."""
    found: dict[str, str] = {}
    files = [p for d in ("roles", "playbooks", "plugins", "meta") for p in sorted((root / d).rglob("*"))
             if p.is_file() and p.suffix in (".yml", ".yaml", ".j2", ".py")
             and "molecule" not in p.relative_to(root).parts]  # molecule is not in the tarball
    for path in files:
        text = path.read_text()
        # A play's or a role's `roles:` list of bare names (other lists, such as argv, hold dotted words).
        blocks = [m.group(0) for m in _ROLES_LIST.finditer(text)]
        for pattern, where in [*((p, text) for p in _USES), *((_LIST_ITEM, b) for b in blocks)]:
            for m in pattern.finditer(where):
                found.setdefault(f"{m.group(1)}.{m.group(2)}", str(path.relative_to(root)))
    return found


def test_collections_used_finds_each_way_of_naming_a_plugin(tmp_path: Path) -> None:
    tasks = tmp_path / "roles" / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(
        "- name: A module\n  community.crypto.openssl_privatekey:\n    path: /k\n"
        "- name: A lookup\n  ansible.builtin.debug:\n    msg: \"{{ lookup('community.hashi_vault.vault_read', 'x') }}\"\n"
        "- name: A filter and a test\n  ansible.builtin.set_fact:\n"
        "    a: \"{{ b | community.general.json_query('c') }}\"\n    d: \"{{ e is ansible.utils.ipaddr }}\"\n"
        "- name: A role\n  ansible.builtin.include_role:\n    name: geerlingguy.mac.homebrew\n")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "p.yml").write_text(
        "- hosts: all\n  connection: containers.podman.podman\n  roles:\n    - devsec.hardening.os_hardening\n")
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    (tmp_path / "plugins" / "modules" / "m.py").write_text(
        "from ansible_collections.kubernetes.core.plugins.module_utils.k8s import x\n")
    (tmp_path / "roles" / "r" / "molecule").mkdir()
    (tmp_path / "roles" / "r" / "molecule" / "converge.yml").write_text("- amazon.aws.s3_object:\n")
    # Dotted names that are not plugins: facts and registered results, a label, a version.
    (tasks / "other.yml").write_text(
        "- name: Facts\n  ansible.builtin.debug:\n    msg: \"{{ ansible_local.gpu.count }} {{ r.stat.isdir }}\"\n"
        "  vars:\n    label: app.kubernetes.io/name\n    v: 1.2.3\n")
    assert set(collections_used(tmp_path)) == {
        "community.crypto", "community.hashi_vault", "community.general", "ansible.utils", "geerlingguy.mac",
        "containers.podman", "devsec.hardening", "kubernetes.core", "ansible.builtin"}


def test_every_declared_dependency_is_used() -> None:
    used = collections_used(REPO)
    unused = sorted(set(GALAXY.get("dependencies") or {}) - set(used))
    assert not unused, f"galaxy.yml: dependencies {unused} are named nowhere in roles/, playbooks/, plugins/"


def test_every_collection_used_is_declared() -> None:
    undeclared = {c: where for c, where in collections_used(REPO).items()
                  if c not in IMPLICIT and c not in (GALAXY.get("dependencies") or {})}
    assert not undeclared, f"galaxy.yml: dependencies lack the collections used in {undeclared}"


# --- filter plugins -----------------------------------------------------------------------------------

def test_no_role_carries_its_own_plugins() -> None:
    own = sorted(str(p.relative_to(REPO)) for p in REPO.glob("roles/*/*_plugins")) + \
        sorted(str(p.relative_to(REPO)) for p in REPO.glob("roles/*/library"))
    assert not own, f"{own}: plugins belong in plugins/ (called by FQCN)"


def _filter_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_systemd_filters", REPO / "plugins" / "filter" / "systemd.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _filter_names() -> list[str]:
    names: list[str] = []
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_f_{path.stem}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        names += sorted(module.FilterModule().filters())
    return names


@pytest.mark.parametrize("name", _filter_names())
def test_a_filter_has_its_documentation(name: str) -> None:
    path = REPO / "plugins" / "filter" / f"{name}.yml"
    assert path.is_file(), f"{path.relative_to(REPO)}: missing (the filter {name}'s documentation)"
    doc = yaml.safe_load(path.read_text())
    assert doc["DOCUMENTATION"]["name"] == name, f"{path.relative_to(REPO)}: DOCUMENTATION.name"
    assert doc["EXAMPLES"].strip() and doc["RETURN"]["_value"]["type"], path


def test_ansible_doc_finds_the_filters_by_fqcn(tmp_path: Path) -> None:
    ns = tmp_path / "ansible_collections" / GALAXY["namespace"]
    ns.mkdir(parents=True)
    (ns / GALAXY["name"]).symlink_to(REPO)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "ANSIBLE_COLLECTIONS_PATH": str(tmp_path)}
    fqcns = [f"tritonops.triton.{n}" for n in _filter_names()]
    res = _run([str(BIN / "ansible-doc"), "--json", "-t", "filter", *fqcns], env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(json.loads(res.stdout)) == sorted(fqcns), res.stdout[:2000]


def test_the_roles_call_the_filters_by_fqcn() -> None:
    names = "|".join(_filter_names())
    bare = re.compile(rf"(?:\|\s*|map\(\s*[\"'])({names})\b")
    found = [f"{p.relative_to(REPO)}: {m.group(1)}" for p in sorted(REPO.glob("roles/*/templates/*"))
             + sorted(REPO.glob("roles/*/tasks/*.yml")) for m in bare.finditer(p.read_text())]
    assert not found, f"call the collection's filters as tritonops.triton.<name>: {found}"
    used = "".join(p.read_text() for p in REPO.glob("roles/release_agent/templates/*.j2"))
    assert "tritonops.triton.systemd_quote" in used and "tritonops.triton.systemd_env_quote" in used


@pytest.mark.parametrize(("word", "quoted"), [
    ("plain", '"plain"'),
    ("s3://bucket/100%", '"s3://bucket/100%%"'),
    ("$HOME ${X}", '"$$HOME $${X}"'),
    ('say "hi" \\o/', '"say \\"hi\\" \\\\o/"'),
])
def test_systemd_quote_keeps_a_word_literal(word: str, quoted: str) -> None:
    assert _filter_module().systemd_quote(word) == quoted


@pytest.mark.parametrize(("value", "quoted"), [
    ("s3cr$t", '"s3cr\\$t"'),
    ('a"b`c\\d', '"a\\"b\\`c\\\\d"'),
])
def test_systemd_env_quote_escapes_for_an_environment_file(value: str, quoted: str) -> None:
    assert _filter_module().systemd_env_quote(value) == quoted


@pytest.mark.parametrize("name", ["systemd_quote", "systemd_env_quote"])
def test_a_line_break_is_refused_without_showing_the_value(name: str) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError) as e:
        getattr(_filter_module(), name)("top-secret\nExecStart=/bin/sh")
    assert name in str(e.value) and "top-secret" not in str(e.value)
