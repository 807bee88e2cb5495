"""config.pbtxt <-> ModelSpec, through Triton's own protobuf.

Parsing and rendering are ``google.protobuf.text_format`` against ``tritonclient.grpc.model_config_pb2``
(Triton's ``ModelConfig``); the spec conversion goes through ``json_format`` with the protobuf's field
names, so round-trips are lossless. :func:`field_lines` maps field paths to the line they came from,
so semantic findings can name ``file:line`` just like parse errors do.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from pydantic import ValidationError

from tritonops.core.errors import ReleaseError
from tritonops.core.fsio import read_bounded
from tritonops.model_repo.spec import ModelSpec
from tritonops.model_repo.triton_names import DATATYPE_ALIASES, did_you_mean


def _model_config_pb2() -> Any:
    """Triton's generated ``tritonclient.grpc.model_config_pb2``, loaded by itself: the package's
    ``__init__`` imports grpc and numpy (some 0.3 s), which parsing a config never uses. It is registered
    under its own name, so a later ``import tritonclient.grpc`` reuses it (one registration in protobuf's pool).
    """
    name = "tritonclient.grpc.model_config_pb2"
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("tritonclient")  # its __init__ is empty
    if package is None or not package.submodule_search_locations:
        raise ModuleNotFoundError("tritonclient is not installed", name="tritonclient")
    path = Path(package.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ModelConfig = _model_config_pb2().ModelConfig
# Real configs are a few kB (large ensembles some tens of kB); protobuf's text parser is slow and greedy
# on huge inputs (50 MB: minutes and GBs), so refuse anything above this before parsing it.
MAX_CONFIG_BYTES = 1 << 20


class ModelConfigError(Exception):
    """A Triton model configuration (config.pbtxt) that cannot be parsed, checked or written: carries the
    file, line, column and the offending field. (Not ``tritonops.k8s``'s stack-configuration error.)"""

    def __init__(self, path: Path | str, message: str, line: int | None = None,
                 column: int | None = None, field: str | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        if self.line and self.column:
            where += f":{self.column}"
        field = f" [{self.field}]" if self.field else ""
        return f"{where}:{field} {self.message}"


_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "([^"]+)"')
_NO_VALUE = re.compile(r'Enum type "([\w.]+)" has no value named (\w+)')
_FIELD_BEFORE = re.compile(r"(\w+)\s*:?\s*[^:]*$")


def parse_proto(text: str, path: Path | str = "config.pbtxt") -> Any:
    """Parse config.pbtxt text into Triton's ModelConfig, or raise ModelConfigError with line:column."""
    msg = ModelConfig()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        line, column = e.GetLine(), e.GetColumn()
        detail = re.sub(r"^\d+:\d+ : ", "", str(e))
        detail = re.sub(r"^'.*?': ", "", detail)  # the parser repeats the whole line; we give line:col
        m = _NO_FIELD.search(detail)
        if m:
            field = m.group(2)
        else:  # the field whose value is wrong: the last name before the error column
            src = text.splitlines()[line - 1][: column - 1] if 0 < line <= len(text.splitlines()) else ""
            before = _FIELD_BEFORE.search(src)
            field = before.group(1) if before else None
        hint = _suggestion(detail)
        raise ModelConfigError(path, detail.rstrip(".") + hint if hint else detail, line, column, field) from None
    except ValueError as e:  # a value protobuf checks after tokenizing (an enum number out of range)
        value = str(e).rsplit(": ", 1)[-1]
        lines = text.splitlines()
        at = next((n for n, src in enumerate(lines, 1) if value and value in src), None)
        before = _FIELD_BEFORE.search(lines[at - 1].split(value)[0]) if at else None
        raise ModelConfigError(path, str(e), at, None, before.group(1) if before else None) from None
    return msg


def _suggestion(detail: str) -> str:
    """Did-you-mean for an unknown field or enum value, from the names Triton's protobuf declares there."""
    pool = ModelConfig.DESCRIPTOR.file.pool
    if m := _NO_FIELD.search(detail):
        with contextlib.suppress(KeyError):
            return did_you_mean(m.group(2), pool.FindMessageTypeByName(m.group(1)).fields_by_name)
    elif m := _NO_VALUE.search(detail):
        alias = DATATYPE_ALIASES.get(m.group(2).upper()) if m.group(1) == "inference.DataType" else None
        if alias:
            return f' (did you mean "{alias}"?)'
        with contextlib.suppress(KeyError):
            return did_you_mean(m.group(2), pool.FindEnumTypeByName(m.group(1)).values_by_name)
    return ""


def proto_to_spec(msg: Any) -> ModelSpec:
    data = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return ModelSpec.model_validate(data)


def spec_to_proto(spec: ModelSpec) -> Any:
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json_format.ParseDict(data, ModelConfig())


def render(spec: ModelSpec) -> str:
    """config.pbtxt text for a spec (Triton's canonical text format)."""
    return text_format.MessageToString(spec_to_proto(spec))


def parse(text: str, path: Path | str = "config.pbtxt") -> ModelSpec:
    msg = parse_proto(text, path)
    try:
        return proto_to_spec(msg)
    except ValidationError as e:  # a value the protobuf accepts but the spec forbids
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        message = f"must specify '{err['loc'][-1]}'" if err["type"] == "missing" else err["msg"]
        lines = field_lines(text)
        parent = field.rsplit(".", 1)[0] if "." in field else field
        raise ModelConfigError(path, message, lines.get(field) or lines.get(parent), field=field) from None


@dataclass
class LoadedConfig:
    path: Path
    text: str
    spec: ModelSpec

    @functools.cached_property
    def lines(self) -> dict[str, int]:
        return field_lines(self.text)

    def line(self, field: str) -> int | None:
        """Line of a dotted field path (``input.1.dims``); falls back to the nearest parent."""
        parts = field.split(".")
        while parts:
            key = ".".join(parts)
            if key in self.lines:
                return self.lines[key]
            parts.pop()
        return None


def read_text(path: Path, limit: int = MAX_CONFIG_BYTES) -> str:
    """A config file's text, read at most ``limit`` bytes deep: ModelConfigError if larger, binary or unreadable."""
    try:
        raw = read_bounded(path, limit)  # a FIFO or a device is refused, not waited on
    except ReleaseError as e:
        why = str(e).removeprefix(f"{path}: ")
        if "allowed" in why:
            why = f"the file is larger than {limit} bytes; a model configuration is a few kB (refused before parsing)"
        raise ModelConfigError(path, why) from None
    if b"\0" in raw:
        raise ModelConfigError(path, "the file is binary (it holds NUL bytes), not protobuf text format",
                          line=raw[: raw.index(b"\0")].count(b"\n") + 1)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ModelConfigError(path, f"the file is not UTF-8 text (byte {e.start})", line=line) from None


def load(path: Path) -> LoadedConfig:
    text = read_text(path)
    spec = parse(text, path)
    return LoadedConfig(path=path, text=text, spec=spec)


def field_lines(text: str) -> dict[str, int]:
    """Map dotted field paths to 1-based line numbers, using protobuf's own text tokenizer.

    Paths follow the spec: repeated fields get an index (``input.0.dims``,
    ``dynamic_batching.preferred_batch_size.1``) and map entries their key
    (``ensemble_scheduling.step.0.input_map.INPUT``). Call it on text that already parsed.
    """
    tok = text_format.Tokenizer(text.splitlines(keepends=True))
    lines: dict[str, int] = {}

    def line() -> int:
        return int(tok._line) + 1  # the tokenizer counts lines from 0

    def message(desc: Any, prefix: str, closer: str | None) -> dict[str, str]:
        counts: dict[str, int] = {}
        scalars: dict[str, str] = {}
        while not tok.AtEnd():
            if closer and tok.TryConsume(closer):
                break
            ln = line()
            name = tok.ConsumeIdentifier()
            field = desc.fields_by_name.get(name) if desc is not None else None
            tok.TryConsume(":")
            if tok.TryConsume("["):
                while not tok.TryConsume("]"):
                    if not tok.TryConsume(","):
                        value(field, prefix, name, counts, line(), scalars)
            else:
                value(field, prefix, name, counts, ln, scalars)
        return scalars

    def value(field: Any, prefix: str, name: str, counts: dict[str, int], ln: int,
              scalars: dict[str, str]) -> None:
        path = f"{prefix}{name}"
        lines.setdefault(path, ln)
        sub = field.message_type if field is not None else None
        is_map = sub is not None and sub.GetOptions().map_entry
        if field is not None and field.label == field.LABEL_REPEATED and not is_map:
            i = counts.get(name, 0)
            counts[name] = i + 1
            path = f"{path}.{i}"
            lines.setdefault(path, ln)
        if tok.token in ("{", "<"):
            closer = "}" if tok.token == "{" else ">"
            tok.NextToken()
            entry = message(sub, f"{path}.", closer)
            if is_map and "key" in entry:
                lines.setdefault(f"{path}.{entry['key']}", ln)
            return
        token = ""
        while tok.token == "-" or not token:  # a sign is its own token
            token += tok.token
            tok.NextToken()
        while tok.token[:1] in ("'", '"'):  # adjacent strings concatenate: "a" "b" is "ab"
            token = token[:-1] + tok.token[1:]
            tok.NextToken()
        scalars.setdefault(name, token.strip('"'))

    with contextlib.suppress(text_format.ParseError):  # a construct this walk does not follow: lines so far
        message(ModelConfig.DESCRIPTOR, "", None)
    return lines
