"""The docs' console examples (README.md, docs/*.md) print what they show; a stale one fails with file:line.

``python -m devkit docs --update`` rewrites a stale output; tools/devkit/docs.py says how blocks run and
what is masked before comparing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from devkit import docs

DOCS = docs.files(docs.DEFAULT_FILES)
ROOT = Path(__file__).resolve().parents[2]
# A path into the code or the tests (where moves happen), as the docs name one: tests/unit/k8s/test_x.py.
CODE_PATH = re.compile(r"(?<![\w/.-])((?:tests|infra|tools)/[\w./*-]*\w)")


def test_there_are_checked_examples_in_the_readme_and_every_area_doc() -> None:
    counted = {p.name: len(docs.parse(p, p.read_text())) for p in DOCS}
    assert counted["README.md"] >= 1
    for name in ("validate-bench-tune.md", "releases.md", "kubernetes.md", "observability.md", "capacity.md",
                 "drift.md", "development.md"):
        assert counted.get(name, 0) >= 1, name


def test_docs_examples_are_current() -> None:
    stale = docs.check(DOCS)
    assert not stale, "\n\n".join(docs.report(r) for r in stale) + "\n(python -m devkit docs --update rewrites them)"


def test_every_code_and_test_path_the_docs_name_exists() -> None:
    missing = [f"{p.relative_to(ROOT)}:{n}: {m}" for p in [*DOCS, *ROOT.glob("roles/*/README.md")]
               for n, line in enumerate(p.read_text().splitlines(), 1)
               for m in CODE_PATH.findall(line) if not next(ROOT.glob(m), None)]
    assert missing == []


STALE = """# doc

text

```console
$ echo hello; echo $?
goodbye
0
$ printf 'one\\ntwo\\nthree\\n'
one
...
three
```
"""


def test_a_doctored_block_fails_naming_file_and_line_and_update_rewrites_it(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(STALE)
    stale = docs.check([doc])
    assert [(r.command.line, r.actual) for r in stale] == [(6, ["hello", "0"])]
    assert docs.report(stale[0]).startswith(f"{doc}:6: $ echo hello; echo $?")
    assert "-goodbye" in docs.report(stale[0]) and "+hello" in docs.report(stale[0])

    assert len(docs.update([doc])) == 1
    assert doc.read_text() == STALE.replace("goodbye", "hello")
    assert docs.check([doc]) == []


def test_the_check_command_exits_1_on_a_stale_block_and_0_when_current(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```console\n$ echo a\nb\n```\n")
    assert docs.main([str(doc)], write=False) == 1
    assert f"{doc}:2: $ echo a" in capsys.readouterr().out
    assert docs.main([str(doc)], write=True) == 0
    assert doc.read_text() == "```console\n$ echo a\na\n```\n"
    assert docs.main([str(doc)], write=False) == 0
    assert docs.main([str(tmp_path / "missing.md")], write=False) == 2


def test_text_blocks_are_transcripts_and_never_run(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```text\n$ echo a\nnot a\n```\n\n```\n$ false\nwhatever\n```\n")
    assert docs.parse(doc, doc.read_text()) == []
    assert docs.check([doc]) == []


def test_commands_share_one_shell_cwd_is_the_checkout_and_the_env_is_clean(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONOPS_DOCS_LEAK", "leaked")
    doc = tmp_path / "doc.md"
    doc.write_text("```console\n$ X=1; cd infra\n$ echo $X $(basename $PWD) ${TRITONOPS_DOCS_LEAK:-clean} $COLUMNS\n"
                   "$ command -v tritonops\n$ echo err >&2 | cat\n```\n")
    results = docs.run_block(docs.parse(doc, doc.read_text())[0])
    assert [r.actual for r in results] == [[], ["1 infra clean 100"], [".venv/bin/tritonops"], ["err"]]


def test_tmp_is_a_scratch_folder_per_block_shown_as_tmp(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    block = "```console\n$ ls /tmp/ | wc -l; touch /tmp/mark && ls /tmp/mark\n0\n/tmp/mark\n```\n"
    doc.write_text(block + "\n" + block)
    assert docs.check([doc]) == []


@pytest.mark.parametrize(("shown", "printed"), [
    (["published 2026-11-30T19:56:07Z"], ["published 2026-12-01T08:00:00Z"]),
    (["serving after 7.4s", "took 12 ms"], ["serving after 1.5s", "took 3 ms"]),
    (["   title   ", "┏━━━━┓"], [" title", "┏━━┓"]),
    (["a", "...", "z"], ["a", "b", "c", "z"]),
    (["a", "...", "z"], ["a", "z"]),
    (["a", ""], ["a"]),
])
def test_what_the_normalisation_masks(shown: list[str], printed: list[str]) -> None:
    assert docs.matches(shown, printed)


@pytest.mark.parametrize(("shown", "printed"), [
    (["5 models, 0 errors"], ["5 models, 1 errors"]),
    (["exit 1"], ["exit 3"]),
    (["a", "...", "z"], ["a", "b"]),
    (["a b"], ["ab"]),
])
def test_what_it_does_not_mask(shown: list[str], printed: list[str]) -> None:
    assert not docs.matches(shown, printed)


def test_the_devkit_command_checks_and_updates(tmp_path: Path) -> None:
    from devkit.__main__ import app
    from typer.testing import CliRunner

    doc = tmp_path / "doc.md"
    doc.write_text("```console\n$ echo a\nb\n```\n")
    runner = CliRunner()
    assert runner.invoke(app, ["docs"]).exit_code == 2  # neither --check nor --update
    stale = runner.invoke(app, ["docs", "--check", str(doc)])
    assert stale.exit_code == 1 and f"{doc}:2: $ echo a" in stale.output
    assert runner.invoke(app, ["docs", "--update", str(doc)]).exit_code == 0
    assert runner.invoke(app, ["docs", "--check", str(doc)]).exit_code == 0


# --- docs/kubernetes.md's walkthrough: every command that can run here runs, and it matches the dev stacks ---

WALKTHROUGH = "## From an empty AWS account to a served model (dev)"
K8S_DOC = ROOT / "docs" / "kubernetes.md"


def _walkthrough() -> tuple[str, list[docs.Block]]:
    text = K8S_DOC.read_text()
    start = text.index(WALKTHROUGH)
    end = text.index("\n## ", start + 1)
    first, last = text[:start].count("\n"), text[:end].count("\n")
    return text[start:end], [b for b in docs.parse(K8S_DOC, text) if first <= b.start < last]


def test_the_walkthrough_runs_every_command_that_can_run_here() -> None:
    """validate, keygen, publish to a folder store, render --check-config of the three dev stacks and render."""
    _, blocks = _walkthrough()
    commands = [c.text for b in blocks for c in b.commands]
    for stack in ("cluster-aws", "platform", "triton"):
        assert f"tritonops render --check-config --stack {stack} --env dev" in commands
    for start in ("tritonops validate examples/model_repository", "tritonops release keygen",
                  "tritonops release publish examples/model_repository --store /tmp/store/vision --channel dev ",
                  "tritonops render --stack triton --env dev --project-dir /tmp/s --out"):
        assert any(c.startswith(start) for c in commands), start
    stale = [r for b in blocks for r in docs.run_block(b) if not r.ok]
    assert not stale, "\n\n".join(docs.report(r) for r in stale)


def test_the_walkthrough_the_example_repository_and_the_dev_stacks_name_the_same_things() -> None:
    from tritonops.k8s.programs import render_set
    from tritonops.k8s.stack_file import load_stack_config

    section, _ = _walkthrough()
    triton = load_stack_config("triton", "dev")
    svc = triton.model_services[0]  # type: ignore[union-attr]
    repo = sorted(p.parent.name for p in (ROOT / "examples" / "model_repository").glob("*/config.pbtxt"))
    assert sorted(m.name for m in svc.models) == repo  # routes, KEDA queries, drift --expect follow
    drift = next(o for o in render_set("triton", "dev", triton).objects if o["kind"] == "CronJob")
    assert sorted(re.findall(r"--expect', '(\w+)'", str(drift))) == repo
    store = svc.release.store
    published = re.findall(r"publish examples/model_repository --store (\S+) \\?\s*--channel (\S+)", section)
    assert {s for s, _ in published if s.startswith("s3://")} == {store}
    assert {c for s, c in published if s == store} == {svc.release.channel, svc.release.canary.channel}
    bucket, _, prefix = store.removeprefix("s3://").partition("/")
    readers = load_stack_config("cluster-aws", "dev").model_readers  # type: ignore[union-attr]
    assert [(r.bucket, r.prefix) for r in readers if r.service_account == f"triton-{svc.name}"] == [(bucket, prefix)]
    for stack in ("platform", "triton"):  # the backend-neutral StackReference name
        assert load_stack_config(stack, "dev").cluster.cluster_stack == "tritonops-cluster-aws/dev"  # type: ignore
