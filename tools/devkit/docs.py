"""Docs examples: find the command-and-output blocks in the Markdown docs, run them, compare or rewrite.

The one job of this module: keep the docs' examples true. ``python -m devkit docs --check`` runs every
checked block of README.md and docs/*.md and exits 1 with a diff naming ``file:line`` when a block's shown
output is no longer what its command prints; ``--update`` rewrites the stale outputs in place.

What is checked: a fenced block whose info string is ``console``. Its lines that start with ``$ `` are
commands (a line ending in ``\\`` continues on the next); the lines after a command, up to the next command
or the fence, are its expected output (stdout and stderr together). Transcripts of long or
non-deterministic runs (``make demo``, ``make test``, bench, molecule) are ``text`` blocks, with their date
in the prose: they are never run.

How a block runs: its commands, in order, in one ``bash`` (so ``cd``, variables and ``echo $?`` carry from
one command to the next), cwd the repository root, stdin empty, a clean environment: the venv's bin first
on PATH, ``COLUMNS=100``, ``LANG=C.UTF-8``, HOME a fresh folder, nothing else inherited. ``/tmp/`` in a
command is a fresh scratch folder per block (``/tmp/tdXXXX/``: passed as that folder, shown as ``/tmp/``
again in the output; keep such paths short, six characters more can wrap a line). The checkout's own
absolute path is dropped from the output (``/work/main/stacks/x`` reads ``stacks/x``). Blocks run side by
side, each in its own shell and scratch folder.

Normalisation before comparing, the same on both sides: trailing spaces and trailing blank lines are
dropped; ISO-8601 timestamps (``2026-11-30T19:56:07Z``) read ``<timestamp>``; durations (a number followed
by ``ms`` or ``s``: ``7.4s``, ``0.5 s``, ``12 ms``) read ``<duration>``; a run of spaces, or of one of the
table rules ``─━═``, reads as one (a scratch path longer than the one shown widens a column or moves a
centred title without changing what the table says). A line of the expected output that is exactly
``...`` matches any number of lines, zero included. ``--update`` leaves a block that matches untouched and
replaces a stale command's output with the whole new output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILES = ("README.md", "docs/*.md")
FENCE = re.compile(r"^(\s*)(`{3,})console\s*$")
PROMPT = "$ "
ELLIPSIS = "..."
TIMEOUT_S = 120
JOBS = max(2, min(4, os.cpu_count() or 1))  # blocks run side by side: mostly Python start-up time

_TIMESTAMP = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s)\b")
_SPACES = re.compile(r" {2,}")
_RULES = re.compile(r"([─━═])\1+")


@dataclass
class Command:
    """One ``$ `` command of a block: its text (continuations joined), its first line and shown output."""

    text: str
    line: int
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    """A ``console`` block: the file, its line range (the lines between the fences, 0-based) and commands."""

    path: Path
    start: int
    end: int
    indent: str
    commands: list[Command]


@dataclass
class Result:
    """One command's outcome: the output it printed now, and whether that matches the shown output."""

    block: Block
    command: Command
    actual: list[str]

    @property
    def ok(self) -> bool:
        return matches(self.command.expected, self.actual)


def parse(path: Path, text: str) -> list[Block]:
    """The console blocks of a Markdown text."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        blocks.append(Block(path, i + 1, j, indent, _commands(body, i + 2)))
        i = j + 1
    return blocks


def _commands(body: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    k = 0
    while k < len(body):
        ln = body[k]
        if ln.startswith(PROMPT) or ln == PROMPT.strip():
            parts = [ln[len(PROMPT):]]
            number = first_line + k
            while parts[-1].endswith("\\") and k + 1 < len(body):
                k += 1
                parts.append(body[k].strip())
            commands.append(Command("\n".join(parts), number))
        elif commands:
            commands[-1].expected.append(ln)
        k += 1
    return commands


def normalise(lines: Iterable[str]) -> list[str]:
    """The documented masking: trailing spaces and blank lines, timestamps, durations."""
    out = [_RULES.sub(r"\1", _SPACES.sub(" ", _DURATION.sub("<duration>", _TIMESTAMP.sub("<timestamp>", ln.rstrip()))))
           for ln in lines]
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether ``actual`` is ``expected`` after normalisation, a ``...`` line matching any run of lines."""
    exp, act = normalise(expected), normalise(actual)

    def go(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i] == ELLIPSIS:
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and exp[i] == act[j] and go(i + 1, j + 1)

    return go(0, 0)


def _env(home: Path) -> dict[str, str]:
    venv_bin = ROOT / ".venv" / "bin"
    path = os.pathsep.join([str(venv_bin), "/usr/local/bin", "/usr/bin", "/bin"])
    return {"PATH": path, "HOME": str(home), "COLUMNS": "100", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "TERM": "dumb", "NO_COLOR": "1", "TMPDIR": str(home)}


def _scratch() -> Path:
    """A fresh folder with a short name (``/tmp/tdXXXX``): a scratch path only a few characters longer than
    ``/tmp`` keeps rich's wrapping and column widths as they are for the path the docs show."""
    for _ in range(100):
        path = Path("/tmp") / f"td{os.urandom(2).hex()}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    return Path(tempfile.mkdtemp(prefix="td"))


def run_block(block: Block) -> list[Result]:
    """Run a block's commands in one bash and split the output per command."""
    scratch = _scratch()
    try:
        token = os.urandom(6).hex()
        script = []
        for n, cmd in enumerate(block.commands):
            # the marker keeps $? of the command before it, so `$ echo $?` shows that command's status
            script.append(f"__docs_rc=$?; echo '@@docs-{token}-{n}@@'; (exit $__docs_rc)")
            script.append("{ " + cmd.text.replace("/tmp/", f"{scratch}/") + "\n} 2>&1")
        script.append(f"echo '@@docs-{token}-end@@'")
        home = scratch / ".home"
        home.mkdir()
        (scratch / ".script.sh").write_text("\n".join(script) + "\n")
        try:
            proc = subprocess.run(["bash", "--noprofile", "--norc", str(scratch / ".script.sh")], cwd=ROOT,
                                  env=_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=TIMEOUT_S, check=False)
            output = proc.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            output = (e.stdout or b"").decode("utf-8", "replace") + f"\n(timed out after {TIMEOUT_S} s)\n"
        output = output.replace(f"{scratch}/", "/tmp/").replace(str(scratch), "/tmp")
        output = output.replace(f"{ROOT}/", "")
        chunks = re.split(rf"@@docs-{token}-(?:\d+|end)@@\n", output)
        results = []
        for n, cmd in enumerate(block.commands):
            text = chunks[n + 1] if n + 1 < len(chunks) else ""
            results.append(Result(block, cmd, text.splitlines()))
        return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def files(patterns: Sequence[str]) -> list[Path]:
    """The Markdown files named by paths or globs relative to the repository root (missing ones raise)."""
    found: list[Path] = []
    for pattern in patterns:
        matched = sorted(ROOT.glob(pattern)) if any(c in pattern for c in "*?[") else [ROOT / pattern]
        for p in matched:
            if not p.is_file():
                raise FileNotFoundError(f"{pattern}: no such file")
            found.append(p)
    return found


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def report(result: Result) -> str:
    """``file:line: $ command`` and a diff of the shown and the actual output: lines that differ only in
    what the normalisation masks are context, not changes."""
    head = f"{_rel(result.block.path)}:{result.command.line}: $ {result.command.text.splitlines()[0]}"
    shown, actual = result.command.expected, result.actual
    out = [head, "--- shown", "+++ actual"]
    ops = SequenceMatcher(None, normalise(shown), normalise(actual), autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            out += [" " + ln for ln in actual[j1:j2]]
        else:
            out += ["-" + ln for ln in shown[i1:i2]] + ["+" + ln for ln in actual[j1:j2]]
    return "\n".join(out)


def _run_all(blocks: Sequence[Block]) -> list[list[Result]]:
    """Run blocks side by side (each has its own scratch folder and shell), results in the blocks' order."""
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        return list(pool.map(run_block, blocks))


def check(paths: Sequence[Path]) -> list[Result]:
    """Every stale command of the files' console blocks (empty: the docs are current)."""
    blocks = [b for path in paths for b in parse(path, path.read_text())]
    return [r for results in _run_all(blocks) for r in results if not r.ok]


def update(paths: Sequence[Path]) -> list[Result]:
    """Rewrite the output of every stale command in place; returns what was rewritten."""
    texts = {path: path.read_text() for path in paths}
    blocks = [b for path in paths for b in parse(path, texts[path])]
    ran = dict(zip((id(b) for b in blocks), _run_all(blocks), strict=True))
    changed: list[Result] = []
    for path in paths:
        text = texts[path]
        lines = text.splitlines()
        edits: list[tuple[int, int, list[str]]] = []
        for block in (b for b in blocks if b.path == path):
            results = ran[id(block)]
            stale = [r for r in results if not r.ok]
            if not stale:
                continue
            changed += stale
            body: list[str] = []
            for r in results:
                first, *rest = r.command.text.splitlines()
                body += [PROMPT + first, *(("    " + ln) for ln in rest)]
                body += r.command.expected if r.ok else normalise_trailing(r.actual)
            edits.append((block.start, block.end, [(block.indent + ln).rstrip() for ln in body]))
        for start, end, new in reversed(edits):
            lines[start:end] = new
        if edits:
            path.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
    return changed


def normalise_trailing(lines: Sequence[str]) -> list[str]:
    """Output as written back: trailing spaces and trailing blank lines dropped, nothing masked."""
    out = [ln.rstrip() for ln in lines]
    while out and not out[-1]:
        out.pop()
    return out


def main(argv: Sequence[str], *, write: bool) -> int:
    """Check (or update) the given files, default README.md and docs/*.md; 0 current, 1 stale, 2 usage."""
    try:
        paths = files(argv or DEFAULT_FILES)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = update(paths) if write else check(paths)
    for r in results:
        print(report(r))
    blocks = sum(len(parse(p, p.read_text())) for p in paths)
    verb = "rewrote" if write else "stale"
    print(f"{len(paths)} files, {blocks} console blocks, {verb}: {len(results)} commands")
    return 1 if results and not write else 0
