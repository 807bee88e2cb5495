"""The stack contract as the Pulumi engine enforces it, and the JSON Schema of the stack files.

:func:`check_project` and :func:`check_stack_file` apply the rules the Pulumi CLI applies to a
project's ``Pulumi.yaml`` (``Project.Validate``) and to a stack file before a program runs
(``pkg/workspace/config.go``: a project-namespaced key declared without ``default`` or ``value`` must be
set in every stack file, whether the program reads it or not; a declared ``type`` is checked with
Pulumi's rules, strings ``"true"``/``"42"`` pass as boolean/integer; a ``secret`` key must be set
encrypted), plus this project's own: every declared key has a ``type``, and a stack file sets no key
of the project's namespace that ``Pulumi.yaml`` does not declare. Secrets the user must set
(``secret: true``, no default) are not expected in a committed file: :func:`user_secrets` lists them
with the ``pulumi config set --secret`` command that sets each. So are the plain values only the user
can give (their subnets, their addresses): declared without a default (the engine still refuses to
start until they are set) and listed under ``template.config`` of Pulumi.yaml (what ``pulumi new``
asks for); :func:`user_values` gives each one's ``pulumi config set`` command, and
:func:`missing_user_values` those a stack file lacks.

:func:`stack_schema` is the JSON Schema (2020-12) of a stack's ``Pulumi.<env>.yaml``, generated from
the pydantic models (``model_json_schema(by_alias=True)``); ``stacks/<stack>/schema/`` holds it for
editors. :func:`locate` finds the line of a config key in a stack file (yaml compose marks), so an
error names ``file:line``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tritonops import project
from tritonops.k8s.config import MODELS, STACKS, TritonStackConfig, project_name
from tritonops.k8s.stack_file import load_stack_config, read_config_map, stack_file
from tritonops.k8s.stacks.triton import required

# Pulumi's SimpleConfigType (sdk/go/common/workspace/project.json; "object" since CLI v3.187.0).
CONFIG_TYPES = ("string", "integer", "boolean", "array", "object")
SCHEMA_DIR = "schema"
SCHEMA_FILE = "stack.schema.json"


@dataclass(frozen=True)
class Problem:
    """One broken rule: ``file`` (and ``line`` when known), the full config ``key``, what is wrong."""

    file: str
    key: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}"


def project_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or project.stacks_dir()) / stack / "Pulumi.yaml"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def project_config(stack: str, stacks_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """``config:`` of the stack's Pulumi.yaml, each declaration as a dict (a bare value is ``{value: V}``)."""
    doc = _load(project_file(stack, stacks_dir)) or {}
    out = {}
    for key, spec in (doc.get("config") or {}).items():
        out[str(key)] = spec if isinstance(spec, dict) else {"value": spec}
    return out


def _namespaced_by(project_name_: str, key: str) -> bool:
    return ":" not in key or key.startswith(project_name_ + ":")


def _short(project_name_: str, key: str) -> str:
    return key[len(project_name_) + 1 :] if key.startswith(project_name_ + ":") else key


def valid_value(type_name: str, items: Any, value: Any) -> bool:
    """Pulumi's ValidateConfigValue: strings that parse as integers/booleans pass as such."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value == int(value)):
            return True
        if isinstance(value, str):
            try:
                int(value)
            except ValueError:
                return False
            return True
        return False
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or not isinstance(items, dict):
        return False
    return all(valid_value(str(items.get("type")), items.get("items"), v) for v in value)


def _full_type(type_name: str, items: Any) -> str:
    if isinstance(items, dict):
        return f"array<{_full_type(str(items.get('type')), items.get('items'))}>"
    return type_name


def _items_problem(items: Any) -> str | None:
    if not isinstance(items, dict) or items.get("type") not in CONFIG_TYPES:
        return f"items needs a type ({' | '.join(CONFIG_TYPES)})"
    if items["type"] == "array":
        return _items_problem(items.get("items"))
    return None


def check_project(stack: str, stacks_dir: Path | None = None) -> list[Problem]:
    """Pulumi.yaml's config declarations against Pulumi's Project.Validate and this project's rules."""
    path = project_file(stack, stacks_dir)
    name = project_name(stack)
    out: list[Problem] = []
    doc = _load(path) or {}
    if doc.get("name") != name:
        out.append(Problem(str(path), "name", f"is {doc.get('name')!r}, expected {name!r}"))
    for key, spec in project_config(stack, stacks_dir).items():

        def bad(msg: str, key: str = key) -> None:
            out.append(Problem(str(path), key, msg, locate_line(path, ("config", key))))

        if "default" in spec and "value" in spec:
            bad("cannot have both a 'default' and a 'value' attribute")
        unknown = set(spec) - {"type", "items", "description", "secret", "default", "value"}
        if unknown:
            bad(f"unknown attribute(s) {', '.join(sorted(unknown))} (Pulumi's ConfigTypeDeclaration)")
        if not _namespaced_by(name, key):
            if "type" in spec:
                bad("is not namespaced by the project and should not define a type")
            if "default" in spec:
                bad("is not namespaced by the project and should not define a default value: use 'value'")
            if spec.get("value") is None:
                bad("is not namespaced by the project and must provide an attribute 'value'")
            continue
        if "value" in spec:
            bad("is namespaced by the project: give it a 'default' (a stack file overrides it), not a 'value'")
        type_name = spec.get("type")
        if type_name not in CONFIG_TYPES:
            bad(f"declares no type ({' | '.join(CONFIG_TYPES)}); got {type_name!r}")
            continue
        if type_name == "array":
            problem = _items_problem(spec.get("items"))
            if problem:
                bad(f"an array: {problem}")
                continue
        if spec.get("default") is not None and not valid_value(type_name, spec.get("items"), spec["default"]):
            bad(f"the default is not of the declared type {_full_type(type_name, spec.get('items'))}")
        if spec.get("secret") and spec.get("default") is not None:
            bad("a secret with a default: Pulumi refuses the plaintext default ('must be encrypted')")
        if not spec.get("description"):
            bad("has no description")
    return out + _template_problems(stack, stacks_dir)


def _template_problems(stack: str, stacks_dir: Path | None) -> list[Problem]:
    """Each ``template.config`` key (a value only the user gives) is a plain required declaration."""
    path = project_file(stack, stacks_dir)
    out = []
    for key in template_keys(stack, stacks_dir):
        if _user_value(stack, key, stacks_dir) is None:
            out.append(Problem(str(path), f"template.config.{key}", "a value the user gives must be declared under "
                               "config, not secret, without a default (so Pulumi refuses to start without it)",
                               locate_line(path, ("template", "config", key))))
    return out


def _secure(value: Any) -> bool:
    """Set with ``pulumi config set --secret`` (``secure:``), or an object of such values (``--path``)."""
    if isinstance(value, dict) and set(value) == {"secure"}:
        return True
    return isinstance(value, dict) and bool(value) and all(_secure(v) for v in value.values())


def _set_command(short: str, spec: dict[str, Any], secret: bool) -> str:
    """The ``pulumi config set`` command of a key: ``--path`` into an object (KEY) or a list (index 0, 1...)."""
    flag = "--secret " if secret else ""
    if spec.get("type") == "object":
        return f"pulumi config set {flag}--path '{short}.KEY' VALUE"
    if spec.get("type") == "array":
        return f"pulumi config set {flag}--path '{short}[0]' VALUE"
    return f"pulumi config set {flag}{short} VALUE"


def _required(spec: dict[str, Any]) -> bool:
    return spec.get("default") is None and spec.get("value") is None


def user_secrets(stack: str, stacks_dir: Path | None = None) -> dict[str, str]:
    """Secret keys the user must set (``secret: true``, no default) -> the command that sets one."""
    name = project_name(stack)
    return {_short(name, key): _set_command(_short(name, key), spec, secret=True)
            for key, spec in project_config(stack, stacks_dir).items() if spec.get("secret") and _required(spec)}


def template_keys(stack: str, stacks_dir: Path | None = None) -> list[str]:
    """The keys under ``template.config`` of Pulumi.yaml (what ``pulumi new`` asks the user for)."""
    doc = _load(project_file(stack, stacks_dir)) or {}
    template = doc.get("template") if isinstance(doc, dict) else None
    config = template.get("config") if isinstance(template, dict) else None
    return [str(k) for k in (config or {})] if isinstance(config, dict) else []


def _user_value(stack: str, key: str, stacks_dir: Path | None) -> dict[str, Any] | None:
    """The declaration of a ``template.config`` key when it is plain and required, else None."""
    declared = project_config(stack, stacks_dir)
    spec = declared.get(key) or declared.get(f"{project_name(stack)}:{key}")
    return spec if spec is not None and not spec.get("secret") and _required(spec) else None


def user_values(stack: str, stacks_dir: Path | None = None) -> dict[str, str]:
    """Plain keys only the user can give (``template.config``, declared without default) -> their command."""
    name = project_name(stack)
    out = {}
    for key in template_keys(stack, stacks_dir):
        spec = _user_value(stack, key, stacks_dir)
        if spec is not None:
            out[_short(name, key)] = _set_command(_short(name, key), spec, secret=False)
    return out


def missing_user_values(stack: str, env: str, stacks_dir: Path | None = None) -> dict[str, str]:
    """The :func:`user_values` that ``Pulumi.<env>.yaml`` does not set yet -> their command; then the values
    inside a key that only the user gives (a property path, set with ``--path``: a triton service's trusted
    public key, tritonops.k8s.stacks.triton.required.user_values), which no Pulumi.yaml can declare required."""
    config = read_config_map(stack_file(stack, env, stacks_dir))
    name = project_name(stack)
    out = {k: cmd for k, cmd in user_values(stack, stacks_dir).items() if f"{name}:{k}" not in config}
    if stack == "triton":  # parsed by the caller already (check-config, render): a bad file raised there
        cfg = load_stack_config(stack, env, stacks_dir)
        assert isinstance(cfg, TritonStackConfig)
        out.update(required.user_values(cfg))
    return out


def check_stack_file(stack: str, env: str, stacks_dir: Path | None = None) -> list[Problem]:
    """A Pulumi.<env>.yaml against its Pulumi.yaml as the engine checks it before the program runs."""
    path = stack_file(stack, env, stacks_dir)
    name = project_name(stack)
    declared = project_config(stack, stacks_dir)
    config = read_config_map(path)
    users = {**user_secrets(stack, stacks_dir), **user_values(stack, stacks_dir)}
    out: list[Problem] = []

    def bad(key: str, msg: str) -> None:
        out.append(Problem(str(path), key, msg, locate_line(path, ("config", key))))

    for key, spec in declared.items():
        full = key if ":" in key else f"{name}:{key}"
        has = full in config
        if not has and _required(spec) and _namespaced_by(name, key):
            if _short(name, key) in users:
                continue  # the user sets it (pulumi config set [--secret]); not committed
            out.append(Problem(str(path), full, f"Stack '{env}' is missing configuration value '{key}': "
                               f"Pulumi.yaml declares it without a default (pulumi config set {key} VALUE)"))
            continue
        if not has or not _namespaced_by(name, key):
            continue
        value = config[full]
        if spec.get("secret"):
            if not _secure(value):
                bad(full, "is secret (Pulumi.yaml): set it encrypted, pulumi config set --secret")
            continue
        if isinstance(value, dict) and set(value) == {"secure"}:
            continue  # encrypted: only the engine can read (and type-check) it
        type_name = spec.get("type")
        if type_name and not valid_value(type_name, spec.get("items"), value):
            bad(full, f"must be of type '{_full_type(type_name, spec.get('items'))}' (Pulumi.yaml), "
                f"got {type(value).__name__}")
    known = {key if ":" in key else f"{name}:{key}" for key in declared}
    for full in config:
        if ":" not in str(full):
            bad(str(full), "a stack file key needs a namespace (PROJECT:KEY or PROVIDER:KEY)")
        elif str(full).startswith(name + ":") and full not in known:
            bad(str(full), f"not declared in {project_file(stack, stacks_dir)}: Pulumi would hand the program "
                "a key it never reads (a typo?)")
    return out


# --- locating keys -------------------------------------------------------------------------------


# One step of a Pulumi property path: .name, [0] or ["name.with.dots"] (`pulumi config set --path`).
_PATH_STEP = re.compile(r'\.?([^.\[\]"]+)|\[(\d+)\]|\["([^"]*)"\]')


def path_parts(key: str) -> list[str | int]:
    """``tritonops-triton:modelServices[0].models`` -> ["tritonops-triton:modelServices", 0, "models"];
    ``...publicKeys["release.pub"]`` -> [..., "publicKeys", "release.pub"]."""
    ns, _, rest = key.partition(":")
    if not rest:
        return [key]
    parts: list[str | int] = []
    for m in _PATH_STEP.finditer(rest):
        name_, index, quoted = m.groups()
        parts.append(int(index) if index is not None else quoted if quoted is not None else name_)
    if parts and isinstance(parts[0], str):
        parts[0] = f"{ns}:{parts[0]}"
    return parts


def locate_line(path: Path, parts: tuple[str | int, ...] | list[str | int]) -> int | None:
    """1-based line of the node at ``parts`` (mapping keys, sequence indexes), or of its deepest
    existing ancestor; None when the file does not parse."""
    try:
        node: Any = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def locate(path: Path, key: str) -> int | None:
    """Line of a full config key (as a ConfigError names it) in a stack file."""
    parts = path_parts(key)
    return locate_line(path, ["config", *parts]) if ":" in key else None


# --- JSON Schema ---------------------------------------------------------------------------------


def _secure_schema() -> dict[str, Any]:
    leaf = {"type": "object", "properties": {"secure": {"type": "string"}}, "required": ["secure"],
            "additionalProperties": False}
    return {"description": "Set with `pulumi config set --secret` (encrypted).",
            "anyOf": [leaf, {"type": "object", "additionalProperties": leaf}]}


def stack_schema(stack: str, stacks_dir: Path | None = None) -> dict[str, Any]:
    """JSON Schema of stacks/<stack>/Pulumi.<env>.yaml, generated from the stack's pydantic model."""
    if stack not in MODELS:
        raise ValueError(f"unknown stack {stack!r} (known: {', '.join(STACKS)})")
    name = project_name(stack)
    model = MODELS[stack].model_json_schema(by_alias=True, mode="validation")
    defs = model.pop("$defs", {})
    props: dict[str, Any] = {f"{name}:{k}": v for k, v in model.get("properties", {}).items()}
    for key, spec in project_config(stack, stacks_dir).items():
        if spec.get("secret"):
            props[key if ":" in key else f"{name}:{key}"] = {**_secure_schema(), "title": key}
    config = {
        "type": "object",
        "description": f"Config of the {name} project. Keys of other namespaces (aws:region, ...) belong "
                       "to providers.",
        "properties": dict(sorted(props.items())),
        "required": [f"{name}:{k}" for k in model.get("required", [])],
        "patternProperties": {f"^(?!{name}:)[A-Za-z0-9_.-]+:": {}},
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"Pulumi.<stack>.yaml of {name}",
        "description": f"Generated from tritonops.k8s.config.{MODELS[stack].__name__} "
                       f"(`python -m tritonops.k8s.contract`): do not edit.",
        "type": "object",
        "properties": {"config": config},
        "required": ["config"],
        "$defs": dict(sorted(defs.items())),
    }


def schema_path(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or project.stacks_dir()) / stack / SCHEMA_DIR / SCHEMA_FILE


def schema_text(stack: str, stacks_dir: Path | None = None) -> str:
    return json.dumps(stack_schema(stack, stacks_dir), indent=2, sort_keys=False) + "\n"


def write_schemas(stacks_dir: Path | None = None) -> list[Path]:
    """(Re)write every stack's committed schema; the unit test keeps them equal to the models."""
    out = []
    for stack in STACKS:
        path = schema_path(stack, stacks_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(schema_text(stack, stacks_dir))
        out.append(path)
    return out


if __name__ == "__main__":  # pragma: no cover - `python -m tritonops.k8s.contract` regenerates the schemas
    for written in write_schemas():
        print(written)
