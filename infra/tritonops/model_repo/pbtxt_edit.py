"""Change some top-level fields of an operator's config.pbtxt and keep everything else as written.

``tritonops tune`` writes its recommendation (dynamic batching, instance groups) into a config the
operator wrote by hand: a license header, comments, their own field order. Rendering the whole
message again would drop all of that, so :func:`set_fields` edits the text instead: protobuf's own
text tokenizer (the one ``text_format`` parses with) locates each top-level field's span; the spans of
the fields being set are replaced by the new values (in ``text_format``'s form), removed when the new
config has none, or appended when the old one had none. Everything outside those spans stays byte for
byte. The result is parsed again and must equal the intended configuration, else nothing is returned.
:func:`write` puts it on disk atomically, keeping the file's mode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from tritonops.core.fsio import write_atomic
from tritonops.model_repo.pbtxt import ModelConfig, ModelConfigError, parse_proto


@dataclass(frozen=True)
class Span:
    """One top-level field occurrence: ``text[start:end]`` (from its name to its last token or separator)."""

    name: str
    start: int
    end: int


def spans(text: str) -> list[Span]:
    """Every top-level field occurrence of config.pbtxt text, in order (call it on text that parses)."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    tok = text_format.Tokenizer(lines)
    tokens: list[tuple[int, str]] = []  # (offset, token)
    while not tok.AtEnd():
        tokens.append((offsets[tok._line] + tok._column, tok.token))
        tok.NextToken()

    out: list[Span] = []
    i = 0
    while i < len(tokens):
        start, name = tokens[i]
        i += 1
        if i < len(tokens) and tokens[i][1] == ":":
            i += 1
        if i < len(tokens) and tokens[i][1] in ("{", "<", "["):
            depth = 0
            while i < len(tokens):  # to the matching closer
                depth += tokens[i][1] in ("{", "<", "[")
                depth -= tokens[i][1] in ("}", ">", "]")
                i += 1
                if depth == 0:
                    break
        else:  # a scalar: an optional sign, then one token; adjacent strings concatenate
            i += tokens[i][1] == "-" if i < len(tokens) else 0
            i += 1
            while i < len(tokens) and tokens[i][1][:1] in ("'", '"') and tokens[i - 1][1][:1] in ("'", '"'):
                i += 1
        if i < len(tokens) and tokens[i][1] in (",", ";"):
            i += 1
        last_offset, last = tokens[i - 1]
        out.append(Span(name, start, last_offset + len(last)))
    return out


def _only(msg: Any, name: str) -> Any:
    """A ModelConfig holding just ``msg``'s field ``name``."""
    one = ModelConfig()
    one.CopyFrom(msg)
    for field, _ in one.ListFields():
        if field.name != name:
            one.ClearField(field.name)
    return one


def _cut(text: str, start: int, end: int) -> str:
    """Remove ``text[start:end]``, and its whole line when nothing else is on it."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if not text[line_start:start].strip() and not text[end:line_end].strip():
        return text[:line_start] + text[line_end + 1:]
    return text[:start] + text[end:]


def set_fields(text: str, new: Any, fields: Iterable[str], path: Path | str = "config.pbtxt") -> str:
    """``text`` with the top-level ``fields`` set to their values in ``new`` (a ModelConfig), nothing else changed.

    A field ``new`` lacks is removed; one ``text`` lacks is appended at the end. Raises ModelConfigError if
    ``text`` does not parse, ValueError for a name ModelConfig does not have, and RuntimeError if the
    edited text would not parse to exactly the intended configuration.
    """
    old = parse_proto(text, path)
    names = list(dict.fromkeys(fields))
    for name in names:
        if name not in ModelConfig.DESCRIPTOR.fields_by_name:
            raise ValueError(f"{name}: not a ModelConfig field")
    intended = ModelConfig()
    intended.CopyFrom(old)
    for name in names:
        intended.ClearField(name)
        intended.MergeFrom(_only(new, name))

    edited = text
    for name in names:
        if _only(old, name) == _only(intended, name):
            continue  # unchanged: leave the operator's text alone
        rendered = text_format.MessageToString(_only(intended, name)).rstrip("\n")
        occurrences = [s for s in spans(edited) if s.name == name]
        if not occurrences:
            if rendered:
                edited = edited + ("" if not edited or edited.endswith("\n") else "\n") + rendered + "\n"
            continue
        for s in reversed(occurrences[1:]):
            edited = _cut(edited, s.start, s.end)
        first = occurrences[0]
        edited = (edited[: first.start] + rendered + edited[first.end:] if rendered
                  else _cut(edited, first.start, first.end))
    if parse_proto(edited, path) != intended:
        raise RuntimeError(f"{path}: editing {', '.join(names)} would change other fields; nothing written")
    return edited


def write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (temp file in its folder, fsync, rename), keeping its mode.

    A symlink is refused rather than replaced or written through.
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as e:
        raise ModelConfigError(path, f"cannot write the file: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ModelConfigError(path, "is a symlink: refusing to replace it or write through it")
    try:
        write_atomic(path, text, mode=stat.S_IMODE(st.st_mode))
    except OSError as e:
        raise ModelConfigError(path, f"cannot write the file: {e.strerror or e}") from None
