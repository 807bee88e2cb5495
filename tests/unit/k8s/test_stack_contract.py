"""The stack contract as the Pulumi engine enforces it, for every Pulumi.yaml and committed stack file.

Pulumi's rules (pkg/workspace/config.go, sdk/go/common/workspace/project.go): a project-namespaced key
declared without ``default`` must be set in every stack file (pulumi/pulumi#21797), a declared type
is checked, a secret key is set encrypted, project keys take ``default`` and provider keys ``value``.
This project adds: every key has a type, no stack file sets an undeclared project key, Pulumi.yaml's
defaults are the models' defaults, the committed JSON Schema is what the models generate. Any stack
name works: behaviour comes from ``tier``.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer
import yaml
from k8s_harness import ROOT, STACK_FILES, STACKS_DIR, configured_stacks, envs, run_program, user_stacks
from pulumi.automation import ProjectSettings
from pydantic import TypeAdapter
from tritonops.cli.k8s import render as render_cmd
from tritonops.k8s import contract
from tritonops.k8s.config import MODELS, STACKS, ClusterAwsConfig, ConfigError, PlatformConfig, TritonStackConfig
from tritonops.k8s.labels import TIER_LABEL
from tritonops.k8s.parse import parse_config
from tritonops.k8s.stack_file import load_stack_config, read_stack_file
from tritonops.k8s.stacks.cluster_aws import karpenter
from tritonops.k8s.stacks.platform import charts as platform
from tritonops.k8s.stacks.triton import workload
from typer.testing import CliRunner

runner = CliRunner()
app = typer.Typer()
app.command("render")(render_cmd)
app.command("noop")(lambda: None)  # two commands: typer keeps the `render` subcommand name

PACK = ROOT / "policies" / "tritonops"
sys.path.insert(0, str(PACK))
import policy_common as pc  # noqa: E402


def test_every_stack_has_committed_files_and_staging_is_one() -> None:
    assert {s for s, _ in STACK_FILES} == set(STACKS)
    for stack in STACKS:
        assert {"dev", "prod", "staging"} <= set(envs(stack)), stack


# --- Pulumi's rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_project_file_follows_pulumis_rules(stack: str) -> None:
    assert contract.check_project(stack) == []


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_stack_file_is_what_pulumi_accepts(stack: str, env: str) -> None:
    assert [str(p) for p in contract.check_stack_file(stack, env)] == []


def _project(tmp_path: Path, config: dict[str, Any], stack_config: dict[str, Any], name: str = "triton") -> Path:
    """A stacks/ folder holding one project (tritonops-<name>) and its stack file Pulumi.x.yaml."""
    folder = tmp_path / "stacks" / name
    folder.mkdir(parents=True)
    (folder / "Pulumi.yaml").write_text(yaml.safe_dump({"name": f"tritonops-{name}", "runtime": "python",
                                                        "config": config}))
    (folder / "Pulumi.x.yaml").write_text(yaml.safe_dump({"config": stack_config}))
    return tmp_path / "stacks"


P = "tritonops-triton:"
D = "a key"


@pytest.mark.parametrize(
    ("declared", "stack_config", "words"),
    [
        # A key without default must be in every stack file (whether the program reads it or not).
        ({"adminApi": {"type": "object", "description": D}}, {}, "Stack 'x' is missing configuration value 'adminApi'"),
        ({"n": {"type": "integer", "description": D}}, {P + "n": "many"}, "must be of type 'integer'"),
        ({"b": {"type": "boolean", "description": D}}, {P + "b": "yes"}, "must be of type 'boolean'"),
        ({"o": {"type": "object", "description": D}}, {P + "o": [1]}, "must be of type 'object'"),
        ({"a": {"type": "array", "items": {"type": "string"}, "description": D}}, {P + "a": [1]},
         "must be of type 'array<string>'"),
        ({"a": {"type": "array", "items": {"type": "object"}, "description": D}}, {P + "a": {"k": 1}},
         "must be of type 'array<object>'"),
        ({"s": {"type": "string", "secret": True, "description": D}}, {P + "s": "plain"}, "set it encrypted"),
        ({}, {P + "typo": 1}, "not declared in"),
        ({}, {"bare": 1}, "needs a namespace"),
    ],
)
def test_stack_file_rules_fire(tmp_path: Path, declared: dict, stack_config: dict, words: str) -> None:
    stacks = _project(tmp_path, declared, stack_config)
    problems = [str(p) for p in contract.check_stack_file("triton", "x", stacks)]
    assert len(problems) == 1 and words in problems[0], problems
    assert str(stacks / "triton" / "Pulumi.x.yaml") in problems[0]


@pytest.mark.parametrize(
    ("declared", "words"),
    [
        ({"aws:region": {"default": "us-west-2"}}, "should not define a default value: use 'value'"),
        ({"aws:region": {"type": "string", "value": "us-west-2"}}, "should not define a type"),
        ({"aws:region": {"description": D}}, "must provide an attribute 'value'"),
        ({"k": {"type": "string", "value": "v", "description": D}}, "give it a 'default'"),
        ({"k": {"description": D}}, "declares no type"),
        ({"k": {"type": "map", "description": D}}, "declares no type"),
        ({"k": {"type": "array", "description": D}}, "items needs a type"),
        ({"k": {"type": "integer", "default": "x", "description": D}}, "default is not of the declared type integer"),
        ({"k": {"type": "string", "default": "a", "value": "b", "description": D}}, "both a 'default' and a 'value'"),
        ({"k": {"type": "string", "secret": True, "default": "pw", "description": D}}, "a secret with a default"),
        ({"k": {"type": "string", "required": True, "description": D}}, "unknown attribute(s) required"),
        ({"k": {"type": "string"}}, "has no description"),
    ],
)
def test_project_file_rules_fire(tmp_path: Path, declared: dict, words: str) -> None:
    stacks = _project(tmp_path, declared, {})
    problems = [str(p) for p in contract.check_project("triton", stacks)]
    assert any(words in p for p in problems), problems
    assert all(p.startswith(f"{stacks / 'triton' / 'Pulumi.yaml'}:") for p in problems)  # file:line


def test_pulumis_loose_values_pass_as_pulumi_passes_them(tmp_path: Path) -> None:
    """Strings that parse as integers/booleans, provider keys by value, encrypted values: accepted."""
    declared = {
        "n": {"type": "integer", "description": D},
        "b": {"type": "boolean", "description": D},
        "t": {"type": "string", "secret": True, "description": D},
        "o": {"type": "object", "secret": True, "description": D},
        "aws:region": {"value": "us-west-2"},
    }
    stack_config = {P + "n": "42", P + "b": "true", P + "t": {"secure": "v1:abc"},
                    P + "o": {"slack": {"secure": "v1:def"}}, "aws:region": "eu-west-1"}
    stacks = _project(tmp_path, declared, stack_config)
    assert contract.check_project("triton", stacks) == []
    assert contract.check_stack_file("triton", "x", stacks) == []


def _copy_stacks(tmp_path: Path) -> Path:
    stacks = tmp_path / "stacks"
    for stack in STACKS:
        shutil.copytree(STACKS_DIR / stack, stacks / stack, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    return stacks


def test_the_failures_issue_20_names_come_back_without_the_defaults(tmp_path: Path) -> None:
    """Pulumi refused the stack files: triton dev lacked adminApi and networkPolicy, triton prod lacked
    adminApi. Their defaults are what makes them pass. cluster-aws's subnetIds and publicAccessCidrs have
    none on purpose (the user gives them): only their template.config entry keeps check-config from
    demanding them in a shipped file, as Pulumi's engine demands them before `pulumi up`."""
    stacks = _copy_stacks(tmp_path)
    path = stacks / "triton" / "Pulumi.yaml"
    doc = yaml.safe_load(path.read_text())
    for key in ("adminApi", "networkPolicy"):
        del doc["config"][key]["default"]
    path.write_text(yaml.safe_dump(doc))
    path = stacks / "cluster-aws" / "Pulumi.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["template"]
    path.write_text(yaml.safe_dump(doc))
    missing = {(Path(p.file).parent.name, Path(p.file).name, p.key.split(":")[1])
               for stack in ("triton", "cluster-aws") for env in ("dev", "prod")
               for p in contract.check_stack_file(stack, env, stacks)}
    assert missing == {("triton", "Pulumi.dev.yaml", "adminApi"), ("triton", "Pulumi.dev.yaml", "networkPolicy"),
                       ("triton", "Pulumi.prod.yaml", "adminApi"), ("cluster-aws", "Pulumi.dev.yaml", "subnetIds"),
                       ("cluster-aws", "Pulumi.dev.yaml", "publicAccessCidrs"),
                       ("cluster-aws", "Pulumi.prod.yaml", "subnetIds")}


# --- Pulumi.yaml against the models ----------------------------------------------------------------


def _fields(stack: str) -> dict[str, Any]:
    return {f.alias or name: f for name, f in MODELS[stack].model_fields.items()}


def _json_type(prop: dict[str, Any]) -> str:
    """The JSON type of a model property's schema (a $ref is an object; Optional is its non-null type)."""
    if "$ref" in prop:
        return "object"
    if "anyOf" in prop:
        (only,) = {_json_type(p) for p in prop["anyOf"] if p.get("type") != "null"}
        return only
    if "enum" in prop and "type" not in prop:
        return "string"
    return {"number": "integer"}.get(prop["type"], prop["type"])


@pytest.mark.parametrize("stack", STACKS)
def test_declared_types_and_defaults_are_the_models(stack: str) -> None:
    """Each key's Pulumi type is the model's JSON type; a default parses to the model's default; a key
    the model requires has no default (Pulumi then requires it in every stack file)."""
    schema = MODELS[stack].model_json_schema(by_alias=True)
    fields = _fields(stack)
    for key, spec in contract.project_config(stack).items():
        if key not in fields:
            assert spec.get("secret"), f"{key}: not in the model, so only a secret the program reads itself"
            continue
        prop = schema["properties"][key]
        assert spec["type"] == _json_type(prop), key
        if spec["type"] == "array":
            (arr,) = [p for p in prop.get("anyOf", [prop]) if p.get("type") == "array"]
            assert spec["items"]["type"] == _json_type(arr["items"]), key
        field = fields[key]
        if key in contract.user_values(stack):  # the model parses a file without it (check-config); Pulumi not
            assert spec.get("default") is None, f"{key}: a value the user gives has no default"
        elif field.is_required():
            assert spec.get("default") is None, f"{key}: the model requires it, Pulumi.yaml gives a default"
        else:
            assert spec.get("default") is not None, f"{key}: optional in the model, required by Pulumi"
            assert TypeAdapter(field.annotation).validate_python(spec["default"]) == field.get_default(), key


# --- secrets the user sets ------------------------------------------------------------------------


def test_user_secrets_are_declared_secret_and_listed_in_the_readme() -> None:
    secrets = {stack: contract.user_secrets(stack) for stack in STACKS}
    assert set(secrets["triton"]) == {"adminApiToken"}
    assert set(secrets["platform"]) == {"grafanaAdminPassword", "alertmanagerSecrets"}
    assert secrets["cluster-aws"] == {}
    readme = (ROOT / "docs" / "kubernetes.md").read_text()
    for stack, commands in secrets.items():
        for key, command in commands.items():
            assert contract.project_config(stack)[key]["secret"] is True
            assert command.replace(" VALUE", "") in readme, command


@pytest.mark.parametrize(("stack", "key"), [("triton", "tritonops-triton:adminApiToken"),
                                            ("platform", "tritonops-platform:grafanaAdminPassword")])
def test_the_programs_refuse_to_run_without_the_secret(stack: str, key: str) -> None:
    with pytest.raises(Exception, match=key.split(":")[1]):
        run_program(stack, "staging", omit=(key,))


# --- values only the user can give (their subnets, their addresses) ----------------------------------

# RFC 5737 / RFC 3849 documentation ranges: an address no real user runs `pulumi up` from.
DOC_RANGES = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")]


def _addresses(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [a for v in value.values() for a in _addresses(v)]
    if isinstance(value, list):
        return [a for v in value for a in _addresses(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_shipped_stack_files_hold_no_placeholder_cidr_or_subnet(stack: str, env: str) -> None:
    config = yaml.safe_load((STACKS_DIR / stack / f"Pulumi.{env}.yaml").read_text())["config"]
    for value in _addresses(config):
        assert not value.startswith(("subnet-", "vpc-", "sg-")), f"{stack}/{env}: placeholder id {value}"
        try:
            net = ipaddress.ip_network(value, strict=False)
        except ValueError:
            continue
        assert not any(net.version == d.version and net.subnet_of(d) for d in DOC_RANGES), f"{stack}/{env}: {value}"


def test_subnets_and_public_cidrs_are_required_user_values() -> None:
    """Declared without a default (the Pulumi engine refuses `pulumi up` until they are set) and listed
    under template.config; check-config skips them like the user's secrets, and the docs set them."""
    values = contract.user_values("cluster-aws")
    assert values == {"subnetIds": "pulumi config set --path 'subnetIds[0]' VALUE",
                      "publicAccessCidrs": "pulumi config set --path 'publicAccessCidrs[0]' VALUE"}
    declared = contract.project_config("cluster-aws")
    assert all("default" not in declared[k] and not declared[k].get("secret") for k in values)
    assert contract.user_values("triton") == {} and contract.user_values("platform") == {}
    # Pulumi's own reading of Pulumi.yaml (the Automation API's ProjectSettings) sees them as the template's config.
    settings = ProjectSettings.from_dict(yaml.safe_load(contract.project_file("cluster-aws").read_text()))
    assert settings.template is not None and set(settings.template.config or {}) == set(values)
    walkthrough = (ROOT / "docs" / "kubernetes.md").read_text()
    assert "pulumi config set --path 'subnetIds[0]' subnet-" in walkthrough
    assert "pulumi config set --path 'publicAccessCidrs[0]' " in walkthrough


def test_check_config_lists_the_commands_of_the_values_a_file_lacks(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "--check-config", "--stack", "cluster-aws", "--env", "dev"])
    assert result.exit_code == 0, result.output
    assert "before `pulumi up`: pulumi config set --path 'subnetIds[0]' VALUE" in result.output
    assert "before `pulumi up`: pulumi config set --path 'publicAccessCidrs[0]' VALUE" in result.output
    stacks = user_stacks()  # set, as `pulumi config set` writes them: nothing left to list
    done = runner.invoke(app, ["render", "--check-config", "--stack", "cluster-aws", "--env", "dev", "--json",
                               "--project-dir", str(stacks.parent)])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["valuesToSet"] == {}


def test_render_refuses_a_stack_file_without_the_users_values(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "--stack", "cluster-aws", "--env", "dev", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "tritonops-cluster-aws:subnetIds: not set" in text and "pulumi config set --path 'subnetIds[0]'" in text


@pytest.mark.parametrize(("value", "key"), [("not-a-cidr", "publicAccessCidrs[0]"), ("[]", "publicAccessCidrs")])
def test_a_wrong_user_value_still_fails_naming_file_line_and_key(tmp_path: Path, value: str, key: str) -> None:
    stacks = _copy_stacks(tmp_path)
    path = stacks / "cluster-aws" / "Pulumi.dev.yaml"
    set_as = f"\n    - {value}" if value != "[]" else " []"
    path.write_text(path.read_text() + f"  tritonops-cluster-aws:publicAccessCidrs:{set_as}\n")
    result = runner.invoke(app, ["render", "--check-config", "--stack", "cluster-aws", "--env", "dev",
                                 "--project-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    line = contract.locate(path, f"tritonops-cluster-aws:{key}")
    assert line and f"{path}:{line}: tritonops-cluster-aws:{key}:" in " ".join(result.output.split())


def test_a_user_value_with_a_default_is_refused(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    path = stacks / "cluster-aws" / "Pulumi.yaml"
    path.write_text(path.read_text().replace("      type: string\n    description: >-\n      Private subnets",
                                             "      type: string\n    default: []\n    description: >-\n      Private subnets"))
    problems = [str(p) for p in contract.check_project("cluster-aws", stacks)]
    assert any("template.config.subnetIds" in p and "without a default" in p for p in problems), problems


# --- JSON Schema ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_committed_schema_is_what_the_models_generate(stack: str) -> None:
    """Regenerate with `python -m tritonops.k8s.contract` when a model changes."""
    path = contract.schema_path(stack)
    assert path.read_text() == contract.schema_text(stack), f"{path} is stale: python -m tritonops.k8s.contract"
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_stack_files_validate_against_the_committed_schema(stack: str, env: str) -> None:
    schema = json.loads(contract.schema_path(stack).read_text())
    text = (STACKS_DIR / stack / f"Pulumi.{env}.yaml").read_text()
    # Editors (yaml-language-server) find the schema from the file's first line, relative to the file.
    assert text.splitlines()[0] == f"# yaml-language-server: $schema={contract.SCHEMA_DIR}/{contract.SCHEMA_FILE}"
    doc = yaml.safe_load(text)
    assert [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)] == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda c: c[P + "modelServices"][0].update({"replicaCount": 2}), ["config", P + "modelServices", 0]),
        (lambda c: c[P + "modelServices"][0]["models"][0].update({"sizeMib": "big"}),
         ["config", P + "modelServices", 0, "models", 0, "sizeMib"]),
        (lambda c: c.update({P + "tier": "prod"}), ["config", P + "tier"]),
        (lambda c: c.update({P + "ingres": {}}), ["config"]),
        (lambda c: c.pop(P + "tier"), ["config"]),
    ],
)
def test_the_schema_refuses_what_the_parser_refuses(change: Any, path: list) -> None:
    schema = json.loads(contract.schema_path("triton").read_text())
    doc = yaml.safe_load((STACKS_DIR / "triton" / "Pulumi.staging.yaml").read_text())
    change(doc["config"])
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert errors and [list(e.absolute_path) for e in errors][0] == path
    with pytest.raises(ConfigError):
        parse_config("triton", {k[len(P):]: v for k, v in doc["config"].items() if k.startswith(P)}, env="staging")


# --- tritonops render --check-config -----------------------------------------------------------------


@pytest.mark.parametrize(("stack", "env"), STACK_FILES)
def test_check_config_accepts_every_committed_file(stack: str, env: str) -> None:
    result = runner.invoke(app, ["render", "--check-config", "--stack", stack, "--env", env, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"].endswith(f"{stack}/Pulumi.{env}.yaml")
    assert out["secretsToSet"] == contract.user_secrets(stack)


def test_check_config_names_file_line_and_key(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    path = stacks / "triton" / "Pulumi.staging.yaml"
    text = path.read_text()
    path.write_text(text.replace("          sizeMib: 350\n", "          sizeMib: -1\n", 1))
    line = text.splitlines().index("          sizeMib: 350") + 1
    args = ["render", "--check-config", "--stack", "triton", "--env", "staging", "--project-dir", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert f"{path}:{line}: tritonops-triton:modelServices[0].models[0].sizeMib" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_check_config_applies_pulumis_rules(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    path = stacks / "triton" / "Pulumi.staging.yaml"
    path.write_text(path.read_text().replace("  tritonops-triton:tier: non-production\n", ""))
    result = runner.invoke(app, ["render", "--check-config", "--stack", "triton", "--env", "staging",
                                 "--project-dir", str(tmp_path), "--json"])
    assert result.exit_code == 2
    out = json.loads(result.output)
    assert out["key"] == "tritonops-triton:tier" and "Stack 'staging' is missing configuration value 'tier'" in out["error"]


def test_render_needs_out_unless_checking() -> None:
    result = runner.invoke(app, ["render", "--stack", "triton", "--env", "dev"])
    assert result.exit_code == 2 and "--out" in result.output


# --- any stack name: behaviour from tier ------------------------------------------------------------


def test_a_stack_of_any_name_renders_with_its_own_name(tmp_path: Path) -> None:
    stacks = configured_stacks(tmp_path)  # with the values only the user gives (the release public key)
    for stack in STACKS:
        shutil.copy(stacks / stack / "Pulumi.staging.yaml", stacks / stack / "Pulumi.team-a.yaml")
    out = tmp_path / "out"
    result = runner.invoke(app, ["render", "--stack", "triton", "--env", "team-a", "--out", str(out),
                                 "--project-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    dep = yaml.safe_load(next(out.glob("*-deployment-triton-triton-vision.yaml")).read_text())
    assert dep["metadata"]["labels"]["tritonops.io/environment"] == "team-a"  # unset: the stack's name
    assert dep["metadata"]["labels"][TIER_LABEL] == "non-production"
    missing = runner.invoke(app, ["render", "--stack", "triton", "--env", "qa", "--out", str(out),
                                  "--project-dir", str(tmp_path), "--json"])
    assert missing.exit_code == 2
    assert str(stacks / "triton" / "Pulumi.qa.yaml") in json.loads(missing.output)["error"]
    unsafe = runner.invoke(app, ["render", "--stack", "triton", "--env", "../triton/Pulumi", "--out", str(out),
                                 "--project-dir", str(tmp_path), "--json"])
    assert unsafe.exit_code == 2 and "is not a stack name" in json.loads(unsafe.output)["error"]


def _raw(stack: str, env: str, **changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(read_stack_file(stack, env)[0])
    raw.update(changes)
    return raw


def test_tier_not_name_selects_the_strict_rules() -> None:
    """The same file decides differently by tier alone: staging (scale to zero, one controller
    replica, agents on the implicit --trusted-key root) turned production needs a storeName and
    allowScaleToZero and runs two replicas; prod turned non-production runs one."""
    raw = _raw("triton", "staging", tier="production")
    with pytest.raises(ConfigError, match="tier production") as exc:
        parse_config("triton", raw, env="staging")
    assert exc.value.key == "tritonops-triton:modelServices[0].release.storeName"
    raw["modelServices"][0]["release"]["storeName"] = "vision-staging"
    with pytest.raises(ConfigError, match="tier production") as exc:
        parse_config("triton", raw, env="staging")
    assert exc.value.key == "tritonops-triton:modelServices[0].autoscaling.minReplicas"
    staging = parse_config("triton", _raw("triton", "staging"), env="staging")
    assert isinstance(staging, TritonStackConfig) and staging.model_services[0].autoscaling.min_replicas == 0

    def replicas(env: str, tier: str) -> tuple[int, int]:
        cluster = parse_config("cluster-aws", _raw("cluster-aws", env, tier=tier), env=env)
        plat = parse_config("platform", _raw("platform", env, tier=tier), env=env)
        assert isinstance(cluster, ClusterAwsConfig) and isinstance(plat, PlatformConfig)
        keda = platform.keda_release(plat).values["operator"]["replicaCount"]
        return karpenter.release(cluster, "arn:aws:iam::111122223333:role/k").values["replicas"], keda

    assert replicas("staging", "production") == (2, 2)
    assert replicas("prod", "non-production") == (1, 1)
    assert replicas("prod", "production") == (2, 2)


def test_the_builders_label_the_tier_the_pack_reads() -> None:
    prod = load_stack_config("triton", "prod")
    assert isinstance(prod, TritonStackConfig)
    dep = workload.deployment(prod, prod.model_services[0])
    assert dep["metadata"]["labels"][TIER_LABEL] == "production" and pc.is_production(dep)
    renamed = prod.model_copy(update={"environment": "dev", "tier": "non-production"})
    assert not pc.is_production(workload.deployment(renamed, renamed.model_services[0]))
    plat = load_stack_config("platform", "staging")
    assert isinstance(plat, PlatformConfig)
    assert platform.labels(plat)[TIER_LABEL] == "non-production"


@pytest.mark.parametrize("stack", STACKS)
def test_tier_is_required_and_environment_is_a_dns_label(stack: str) -> None:
    raw = _raw(stack, "staging")
    del raw["tier"]
    with pytest.raises(ConfigError) as exc:
        parse_config(stack, raw, env="staging")
    assert exc.value.key == f"tritonops-{stack}:tier"
    with pytest.raises(ConfigError, match="must be a DNS label") as exc:
        parse_config(stack, _raw(stack, "staging"), env="Team_A")  # unset: the stack's name, not a label
    assert exc.value.key == f"tritonops-{stack}:environment"
    assert parse_config(stack, _raw(stack, "staging", environment="eu-1"), env="Team_A").environment == "eu-1"


def test_staging_program_runs_under_mocks_with_its_name() -> None:
    mocks = run_program("triton", "staging")
    deps = mocks.of_type("kubernetes:apps/v1:Deployment")
    assert deps and all(d.inputs["metadata"]["labels"]["tritonops.io/environment"] == "staging" for d in deps)
    assert all(d.inputs["metadata"]["labels"][TIER_LABEL] == "non-production" for d in deps)


def test_plan_and_drift_take_any_stack_with_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tritonops.cli import app as tritonops_app
    from tritonops.drift import pulumi_check

    plan = runner.invoke(tritonops_app, ["plan", "vision", "--bench", str(tmp_path / "b.json"), "--traffic", "flat",
                                         "--env", "qa"])
    assert plan.exit_code == 2 and "Pulumi.qa.yaml" in "".join(plan.output.split())
    plan = runner.invoke(tritonops_app, ["plan", "vision", "--bench", str(tmp_path / "b.json"), "--traffic", "flat",
                                         "--env", "staging"])
    assert plan.exit_code == 2 and "b.json" in "".join(plan.output.split())  # past the stack file: the bench
    monkeypatch.setattr(pulumi_check.shutil, "which", lambda name: None)
    drift = runner.invoke(tritonops_app, ["drift", "--source", "pulumi", "--stack", "triton", "--env", "staging",
                                          "--json"])
    assert drift.exit_code == 3 and "triton/staging" in json.loads(drift.output)["errors"]["pulumi"]
    for env, words in (("qa", "triton/Pulumi.qa.yaml"), ("../x", "is not a stack name")):
        drift = runner.invoke(tritonops_app, ["drift", "--source", "pulumi", "--stack", "triton", "--env", env])
        assert drift.exit_code == 2 and words in "".join(drift.output.split()).replace("isnotastackname",
                                                                                        "is not a stack name")
