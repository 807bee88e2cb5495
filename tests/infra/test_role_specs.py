"""Every role under roles/: defaults/main.yml and meta/argument_specs.yml agree, variables are
prefixed, tasks are named and use fully qualified modules, rendered templates carry ansible_managed,
README variable tables are generated from the specs. (Pins: tests/unit/test_versions.py.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from devkit.role_docs import BEGIN, defaults, render_readme, role_dirs, spec_options

# Offline, on this machine: the unit tier (molecule's verify runs only the host checks beside it).
pytestmark = pytest.mark.unit

ROLES = role_dirs()
ROLE_IDS = [r.name for r in ROLES]
SPEC_ROLES = [r for r in ROLES if (r / "meta" / "argument_specs.yml").is_file()]


def test_roles_found() -> None:
    assert {"gpu_facts", "triton_server"} <= set(ROLE_IDS)


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_role_has_argument_specs(role: Path) -> None:
    assert (role / "meta" / "argument_specs.yml").is_file()


@pytest.mark.parametrize("role", SPEC_ROLES, ids=[r.name for r in SPEC_ROLES])
def test_specs_cover_exactly_the_defaults(role: Path) -> None:
    d, s = set(defaults(role)), set(spec_options(role))
    assert (sorted(d - s), sorted(s - d)) == ([], []), "(undocumented defaults, specs without a default)"


@pytest.mark.parametrize("role", SPEC_ROLES, ids=[r.name for r in SPEC_ROLES])
def test_spec_defaults_equal_defaults(role: Path) -> None:
    d, s = defaults(role), spec_options(role)
    assert {k: (d[k], s[k].get("default")) for k in d if k in s and s[k].get("default") != d[k]} == {}


@pytest.mark.parametrize("role", SPEC_ROLES, ids=[r.name for r in SPEC_ROLES])
def test_specs_have_type_and_description(role: Path) -> None:
    bad = [k for k, v in spec_options(role).items() if not v.get("type") or not v.get("description")]
    assert bad == []


@pytest.mark.parametrize("role", SPEC_ROLES, ids=[r.name for r in SPEC_ROLES])
def test_spec_choices_hold_the_default(role: Path) -> None:
    bad = {k: v["default"] for k, v in spec_options(role).items()
           if "choices" in v and v.get("default") not in v["choices"] and "{{" not in str(v.get("default"))}
    assert bad == {}


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_public_variables_are_prefixed(role: Path) -> None:
    assert [k for k in defaults(role) if not k.startswith(f"{role.name}_")] == []


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_internal_variables_are_underscored(role: Path) -> None:
    vars_main = role / "vars" / "main.yml"
    if not vars_main.is_file():
        pytest.skip("no vars/main.yml")
    data = yaml.safe_load(vars_main.read_text()) or {}
    assert [k for k in data if not k.startswith(f"_{role.name}_")] == []


def _tasks(node: Any) -> list[dict[str, Any]]:
    """Every task in a task list, including those inside block/rescue/always."""
    out: list[dict[str, Any]] = []
    for t in node or []:
        out.append(t)
        for key in ("block", "rescue", "always"):
            out.extend(_tasks(t.get(key)))
    return out


TASK_KEYWORDS = {
    "name", "when", "tags", "register", "loop", "loop_control", "notify", "listen", "become", "become_user",
    "changed_when", "failed_when", "delegate_to", "run_once", "check_mode", "no_log", "vars", "until",
    "retries", "delay", "block", "rescue", "always", "environment", "ignore_errors", "throttle", "args",
    "with_items", "with_dict", "delegate_facts", "async", "poll", "diff", "any_errors_fatal", "timeout",
    "local_action", "ignore_unreachable", "module_defaults", "collections", "debugger",
}


def _task_files(role: Path) -> list[Path]:
    return sorted([*(role / "tasks").glob("*.yml"), *(role / "handlers").glob("*.yml")])


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_tasks_named_and_fully_qualified(role: Path) -> None:
    problems = []
    for f in _task_files(role):
        for t in _tasks(yaml.safe_load(f.read_text())):
            if not t.get("name"):
                problems.append(f"{f.name}: unnamed task {sorted(t)}")
            modules = [k for k in t if k not in TASK_KEYWORDS]
            problems += [f"{f.name}: {t.get('name')}: module {m!r} is not fully qualified"
                         for m in modules if "." not in m]
    assert problems == []


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_commands_declare_changed_when(role: Path) -> None:
    cmd_modules = {"ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw"}
    bad = []
    for f in _task_files(role):
        for t in _tasks(yaml.safe_load(f.read_text())):
            if cmd_modules & set(t) and "changed_when" not in t:
                args = next(t[m] for m in cmd_modules if m in t)
                args = args if isinstance(args, dict) else dict(t.get("args") or {})
                if not ("creates" in args or "removes" in args):
                    bad.append(f"{f.name}: {t.get('name')}")
    assert bad == []


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_rendered_templates_carry_ansible_managed(role: Path) -> None:
    templates = sorted((role / "templates").glob("*.j2"))
    texts = {t.name: t.read_text() for t in templates}
    included = {m for text in texts.values() for m in re.findall(r"{%-?\s*include\s+['\"]([^'\"]+)['\"]", text)}
    missing = [n for n, text in texts.items() if n not in included and "ansible_managed | comment" not in text]
    assert missing == []


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_readme_sections(role: Path) -> None:
    readme = (role / "README.md").read_text()
    for section in ("Requirements", "Role Variables", "Dependencies", "Example Playbook"):
        assert re.search(rf"^#+ {section}", readme, re.M), f"{role.name}/README.md lacks '{section}'"


@pytest.mark.parametrize("role", [r for r in ROLES if BEGIN in (r / "README.md").read_text()],
                         ids=lambda r: r.name)
def test_readme_variables_table_is_current(role: Path) -> None:
    text = (role / "README.md").read_text()
    assert render_readme(role, text) == text, f"run `python -m devkit role-docs` to regenerate {role.name}"
