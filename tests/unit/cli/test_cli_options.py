"""One name for one thing on the command line: the renamed options, their deprecated old spellings, --version,
human output next to --json, and the publish counts that say what each file cost.

Renamed (the old spelling still works for one release and warns once on stderr, naming the new one):
``release * --to`` -> ``--store`` (the agent's name), ``release status --target`` -> ``--agent-url``
(``--target`` is hardware everywhere else), ``release publish --version`` -> ``--release`` (as rollback
and the agent name the release id), ``plan --stacks-dir`` -> ``--project-dir`` (as render and drift); ``plan --env`` is required, as in render (stacks may be named anything: there is no default env).
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest
from tritonops.cli import app
from tritonops.release_format import manifest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "model_repository"
BENCH = ROOT / "examples" / "capacity" / "bench-mlp_batched-cpu.json"


def run(*args: str) -> object:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    res = run("release", "keygen", str(tmp_path / "release.key"), str(tmp_path / "release.pub"))
    assert res.exit_code == 0, res.output
    return tmp_path / "release.key"


def test_version_prints_the_installed_distribution_version() -> None:
    res = run("--version")
    assert (res.exit_code, res.stdout) == (0, f"tritonops {version('tritonops')}\n")


def test_keygen_prints_lines_and_json_on_request(tmp_path: Path) -> None:
    human = run("release", "keygen", str(tmp_path / "a.key"), str(tmp_path / "a.pub"))
    assert human.exit_code == 0, human.output
    assert f"private key {tmp_path / 'a.key'} (0600, keep it secret)" in human.stdout
    assert f"public key  {tmp_path / 'a.pub'}" in human.stdout and "{" not in human.stdout
    machine = run("release", "keygen", str(tmp_path / "b.key"), str(tmp_path / "b.pub"), "--json")
    assert json.loads(machine.stdout) == {"private_key": str(tmp_path / "b.key"), "public_key": str(tmp_path / "b.pub")}


def test_agent_build_prints_a_line_and_json_on_request(tmp_path: Path) -> None:
    human = run("agent", "build", str(tmp_path / "a.pyz"))
    assert human.exit_code == 0, human.output
    size = (tmp_path / "a.pyz").stat().st_size
    assert human.stdout.startswith(f"wrote {tmp_path / 'a.pyz'} ({size} bytes)")
    machine = run("agent", "build", str(tmp_path / "b.pyz"), "--json")
    assert json.loads(machine.stdout) == {"path": str(tmp_path / "b.pyz"), "bytes": (tmp_path / "b.pyz").stat().st_size}


def test_publish_counts_say_what_each_file_cost(tmp_path: Path, keys: Path) -> None:
    """A new store: every distinct content uploaded once, a file with another's content is not 'already there'."""
    files = manifest.tree_files(SAMPLE)
    distinct = len(set(files.values()))
    assert distinct < len(files)  # the sample has files with equal content (mlp and mlp_batched)
    store = tmp_path / "store"
    first = run("release", "publish", str(SAMPLE), "--store", str(store), "--key", str(keys), "--for-channel", "stable")
    assert first.exit_code == 0, first.output
    assert f"{len(files)} files: {distinct} uploaded, {len(files) - distinct} duplicates of another file\n" in first.stdout
    assert "already in" not in first.stdout
    again = run("release", "publish", str(SAMPLE), "--store", str(store), "--key", str(keys), "--for-channel", "stable",
                "--json")
    doc = json.loads(again.stdout)
    assert (doc["uploaded"], doc["already_there"], doc["duplicates"]) == (0, distinct, len(files) - distinct)


def test_the_old_store_spelling_works_and_warns(tmp_path: Path, keys: Path) -> None:
    store = tmp_path / "store"
    old = run("release", "publish", str(SAMPLE), "--to", str(store), "--key", str(keys), "--channel", "stable",
              "--json")
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout)["store"] == str(store)
    assert old.stderr.strip().splitlines()[-1] == (
        "warning: --to is deprecated, use --store (the old spelling goes in the next release)")
    new = run("release", "status", "--store", str(store), "--channel", "stable", "--json")
    assert new.exit_code == 0, new.output
    assert json.loads(new.stdout)["channels"]["stable"]["release"] and "deprecated" not in new.stderr
    for cmd in (("rollback", "stable"), ("promote", "stable", "canary")):
        res = run("release", *cmd, "--to", str(store))
        assert "warning: --to is deprecated, use --store" in res.stderr


def test_publish_release_id_and_its_old_spelling(tmp_path: Path, keys: Path) -> None:
    store = tmp_path / "store"
    new = run("release", "publish", str(SAMPLE), "--store", str(store), "--key", str(keys), "--release", "r1",
              "--for-channel", "stable", "--json")
    assert new.exit_code == 0 and json.loads(new.stdout)["release"] == "r1" and "deprecated" not in new.stderr
    old = run("release", "publish", str(SAMPLE), "--store", str(store), "--key", str(keys), "--version", "r1",
              "--for-channel", "stable", "--json")
    assert old.exit_code == 0 and json.loads(old.stdout)["release"] == "r1", old.output
    assert "warning: --version is deprecated, use --release" in old.stderr


def test_store_is_required_and_both_spellings_must_agree(tmp_path: Path, keys: Path) -> None:
    none = run("release", "status", "--channel", "stable")
    assert none.exit_code == 2 and "--store" in none.output and "missing" in none.output
    both = run("release", "status", "--channel", "stable", "--store", str(tmp_path / "a"), "--to", str(tmp_path / "b"))
    assert both.exit_code == 2 and "--to is the old spelling of --store" in "".join(both.output.split("│"))


def test_status_agent_url_and_its_old_spelling(tmp_path: Path, keys: Path) -> None:
    store = tmp_path / "store"
    assert run("release", "publish", str(SAMPLE), "--store", str(store), "--key", str(keys), "--channel",
               "stable").exit_code == 0
    new = run("release", "status", "--store", str(store), "--channel", "stable", "--agent-url", "notaurl")
    assert new.exit_code == 2 and "--agent-url 'notaurl'" in new.stderr
    old = run("release", "status", "--store", str(store), "--channel", "stable", "--target", "notaurl")
    assert old.exit_code == 2 and "warning: --target is deprecated, use --agent-url" in old.stderr


def test_plan_needs_env_and_takes_project_dir(tmp_path: Path) -> None:
    args = ("plan", "vision", "--bench", str(BENCH), "--traffic", "consumer", "--peak-rps", "10")
    no_env = run(*args)
    assert no_env.exit_code == 2 and "--env" in no_env.output
    by_project = run(*args, "--env", "prod", "--project-dir", str(ROOT), "--json")
    assert by_project.exit_code == 0, by_project.output
    elsewhere = run(*args, "--env", "prod", "--project-dir", str(tmp_path))
    flat = "".join(elsewhere.output.split())
    assert elsewhere.exit_code == 2 and f"{tmp_path}/stacks/triton/Pulumi.prod.yaml" in flat
    old = run(*args, "--env", "prod", "--stacks-dir", str(ROOT / "stacks"), "--json")
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout) == json.loads(by_project.stdout)
    assert "warning: --stacks-dir is deprecated, use --project-dir" in old.stderr


def test_manifest_compare_prints_lines_and_json_on_request(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text("name: 'm'\n")
    (repo / "m" / "old.txt").write_text("old\n")
    saved = tmp_path / "saved.json"
    saved.write_text(run("manifest", str(repo)).stdout)
    (repo / "m" / "config.pbtxt").write_text("name: 'm2'\n")
    (repo / "m" / "old.txt").unlink()
    (repo / "m" / "new.txt").write_text("new\n")
    human = run("manifest", str(repo), "--compare", str(saved))
    assert human.exit_code == 1
    assert human.stdout.splitlines() == [f"added    {repo / 'm' / 'new.txt'}", f"removed  {repo / 'm' / 'old.txt'}",
                                         f"changed  {repo / 'm' / 'config.pbtxt'}",
                                         f"1 added, 1 removed, 1 changed against {saved}"]
    machine = run("manifest", str(repo), "--compare", str(saved), "--json")
    assert machine.exit_code == 1
    assert json.loads(machine.stdout) == {"added": ["m/new.txt"], "removed": ["m/old.txt"], "changed": ["m/config.pbtxt"]}
