"""Validate a Triton model repository (or one model) before any server sees it.

Checks the layout Triton expects, parses every config.pbtxt with Triton's own protobuf, and runs the
semantic checks Triton would only report at load time (or never): batch sizes, dims, tensor names,
ensemble wiring, instance kinds against the target hardware, warmup, priorities, golden data.
Every finding names the file, line and field.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from infra.model_repo import pbtxt
from infra.model_repo.golden import GOLDEN_FILE, Golden, wire_datatype
from infra.model_repo.spec import ModelSpec, Tensor

CONFIG = "config.pbtxt"
ALT_CONFIGS = "configs"

# The file (or folder) each platform/backend loads from a version folder, by default.
MODEL_FILES: dict[str, str] = {
    "onnxruntime_onnx": "model.onnx",
    "onnxruntime": "model.onnx",
    "tensorrt_plan": "model.plan",
    "tensorrt": "model.plan",
    "pytorch_libtorch": "model.pt",
    "pytorch": "model.pt",
    "tensorflow_savedmodel": "model.savedmodel",
    "tensorflow_graphdef": "model.graphdef",
    "tensorflow": "model.savedmodel",
    "python": "model.py",
    "openvino": "model.xml",
    "fil": "xgboost.model",
}
TRT_PRECISIONS = {"FP32", "FP16", "INT8"}


class Target(StrEnum):
    """The hardware a repository is meant for."""

    cpu = "cpu"  # CPU-only gateways: no KIND_GPU
    gpu = "gpu"  # x86 servers with NVIDIA GPUs
    jetson = "jetson"  # Jetson (integrated GPU)

    @property
    def has_gpu(self) -> bool:
        return self is not Target.cpu


class Finding(BaseModel):
    severity: Literal["error", "warning"]
    path: str
    line: int | None = None
    field: str | None = None
    code: str
    message: str

    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


class Report(BaseModel):
    path: str
    target: Target | None
    models: list[str]
    errors: list[Finding]
    warnings: list[Finding]

    @property
    def ok(self) -> bool:
        return not self.errors


class UsageError(Exception):
    """The path given is not a model repository or a model folder."""


@dataclass
class Model:
    """One model folder with its active config (and alternative configs) loaded."""

    folder: Path
    config: pbtxt.LoadedConfig | None
    alternatives: list[pbtxt.LoadedConfig] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def spec(self) -> ModelSpec | None:
        return self.config.spec if self.config else None


class _Collector:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def add(self, severity: Literal["error", "warning"], code: str, path: Path, message: str,
            cfg: pbtxt.LoadedConfig | None = None, fld: str | None = None, line: int | None = None) -> None:
        if line is None and cfg is not None and fld is not None:
            line = cfg.line(fld)
        self.findings.append(Finding(severity=severity, path=str(path), line=line, field=fld,
                                     code=code, message=message))

    def error(self, code: str, path: Path, message: str, **kw: object) -> None:
        self.add("error", code, path, message, **kw)  # type: ignore[arg-type]

    def warning(self, code: str, path: Path, message: str, **kw: object) -> None:
        self.add("warning", code, path, message, **kw)  # type: ignore[arg-type]


def is_model_folder(path: Path) -> bool:
    return (path / CONFIG).is_file() or any(p.is_dir() and p.name.isdigit() for p in path.iterdir())


def model_folders(path: Path) -> list[Path]:
    """The model folders under ``path``: itself when it is one model, else its subfolders."""
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory")
    if is_model_folder(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def validate(path: Path, target: Target | None = None, config_name: str | None = None) -> Report:
    """Validate a repository or a single model folder; findings are sorted by file and line."""
    path = Path(path)
    folders = model_folders(path)
    out = _Collector()
    models: dict[str, Model] = {}
    for folder in folders:
        model = _load_model(folder, config_name, out)
        models[model.name] = model
    # A single model may reference its siblings (ensemble steps), so look at them too.
    siblings = models
    if len(folders) == 1 and folders[0] == path and path.parent.is_dir():
        siblings = dict(models)
        for other in model_folders(path.parent):
            if other.name not in siblings and (other / CONFIG).is_file():
                with contextlib.suppress(pbtxt.ConfigError):  # reported when that model is validated
                    siblings[other.name] = Model(other, pbtxt.load(other / CONFIG))
    for model in models.values():
        _check_model(model, siblings, target, out)
    findings = sorted(out.findings, key=lambda f: (f.path, f.line or 0))
    return Report(
        path=str(path),
        target=target,
        models=sorted(models),
        errors=[f for f in findings if f.severity == "error"],
        warnings=[f for f in findings if f.severity == "warning"],
    )


def _load_config(path: Path, out: _Collector) -> pbtxt.LoadedConfig | None:
    try:
        return pbtxt.load(path)
    except pbtxt.ConfigError as e:
        out.error("parse", path, e.message, fld=e.field, line=e.line)
        return None


def _load_model(folder: Path, config_name: str | None, out: _Collector) -> Model:
    alternatives: list[pbtxt.LoadedConfig] = []
    active_path = folder / CONFIG
    alt_dir = folder / ALT_CONFIGS
    if alt_dir.is_dir():
        for alt in sorted(alt_dir.glob("*.pbtxt")):
            if alt.stem == config_name:
                active_path = alt
            else:
                loaded = _load_config(alt, out)
                if loaded:
                    alternatives.append(loaded)
    if not active_path.is_file():
        out.error("layout.config", folder, f"model {folder.name!r} has no {CONFIG}")
        return Model(folder, None, alternatives)
    return Model(folder, _load_config(active_path, out), alternatives)


def _check_model(model: Model, repo: dict[str, Model], target: Target | None, out: _Collector) -> None:
    versions = _check_versions(model, out)
    if model.config is None:
        return
    configs = [(model.config, True), *[(alt, False) for alt in model.alternatives]]
    for cfg, active in configs:
        _check_config(model, cfg, versions, out)
        if active:
            if target is not None:
                _check_target(cfg, target, out)
            if cfg.spec.is_ensemble:
                _check_ensemble(cfg, repo, out)
    _check_golden(model, out)


def _check_versions(model: Model, out: _Collector) -> list[Path]:
    versions = sorted((p for p in model.folder.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name))
    for p in model.folder.iterdir():
        if p.is_dir() and not p.name.isdigit() and p.name != ALT_CONFIGS and not p.name.startswith("."):
            out.warning("layout.version", p, f"folder {p.name!r} is not a numeric version; Triton ignores it")
    if not versions:
        out.error("layout.version", model.folder,
                  f"model {model.name!r} has no numeric version folder (e.g. {model.folder / '1'})")
    return versions


def _check_config(model: Model, cfg: pbtxt.LoadedConfig, versions: list[Path], out: _Collector) -> None:
    spec, path = cfg.spec, cfg.path
    err = functools.partial(out.error, cfg=cfg)
    warn = functools.partial(out.warning, cfg=cfg)

    if spec.name and spec.name != model.name:
        err("name", path, f"name {spec.name!r} does not match its folder {model.name!r}", fld="name")
    if not spec.platform and not spec.backend:
        err("platform", path, "neither platform nor backend is set", fld="name")

    # The model file each version folder must hold.
    kind = spec.platform or spec.backend or ""
    expected = spec.default_model_filename or MODEL_FILES.get(kind) or MODEL_FILES.get(spec.backend or "")
    if not spec.is_ensemble and expected:
        for v in versions:
            if not (v / expected).exists():
                err("layout.model_file", v, f"version {v.name} of {model.name!r} has no {expected} "
                    f"(expected by {'platform' if spec.platform else 'backend'} {kind!r})")
    if spec.version_policy and spec.version_policy.specific:
        have = {int(v.name) for v in versions}
        for i, wanted in enumerate(spec.version_policy.specific.get("versions", [])):
            if int(wanted) not in have:
                err("version_policy", path, f"version_policy names version {wanted}, which has no folder",
                    fld=f"version_policy.specific.versions.{i}")

    mbs = spec.max_batch_size or 0
    if mbs < 0:
        err("max_batch_size", path, f"max_batch_size must be >= 0, got {mbs}", fld="max_batch_size")

    # Tensors: names unique, dims valid, reshape consistent.
    groups: tuple[tuple[str, Sequence[Tensor]], ...] = (("input", spec.input), ("output", spec.output))
    for kind_name, tensors in groups:
        seen: dict[str, int] = {}
        for i, t in enumerate(tensors):
            fld = f"{kind_name}.{i}"
            if t.name in seen:
                err("tensor.duplicate", path, f"{kind_name} name {t.name!r} is used twice "
                    f"({kind_name}[{seen[t.name]}] and {kind_name}[{i}])", fld=f"{fld}.name")
            seen.setdefault(t.name, i)
            if not t.dims and not (kind_name == "input" and getattr(t, "reshape", None)):
                err("tensor.dims", path, f"{kind_name} {t.name!r} has no dims", fld=fld)
            for j, d in enumerate(t.dims):
                if d == 0 or d < -1:
                    err("tensor.dims", path, f"{kind_name} {t.name!r} dim {d} is invalid "
                        "(use a positive size or -1 for variable)", fld=f"{fld}.dims.{j}")
            if mbs > 0 and t.dims and t.dims[0] == -1 and not spec.is_ensemble:
                warn("tensor.batch_dim", path, f"{kind_name} {t.name!r} starts with -1 while max_batch_size "
                     f"is {mbs}: dims exclude the batch dimension, so this adds a second variable dim",
                     fld=f"{fld}.dims")
            if (t.reshape is not None and -1 not in t.dims and -1 not in t.reshape.shape
                    and math.prod(t.dims) != math.prod(t.reshape.shape)):
                err("tensor.reshape", path, f"{kind_name} {t.name!r} reshape {t.reshape.shape} holds "
                    f"{math.prod(t.reshape.shape)} elements but dims {t.dims} hold {math.prod(t.dims)}",
                    fld=f"{fld}.reshape")

    # Batching.
    db = spec.dynamic_batching
    if db is not None:
        if mbs == 0:
            err("dynamic_batching", path, "dynamic_batching is set but max_batch_size is 0: "
                "this model cannot batch", fld="dynamic_batching")
        for i, p in enumerate(db.preferred_batch_size):
            if p <= 0 or (mbs and p > mbs):
                err("dynamic_batching.preferred_batch_size", path,
                    f"preferred_batch_size {p} must be between 1 and max_batch_size ({mbs})",
                    fld=f"dynamic_batching.preferred_batch_size.{i}")
        if db.priority_levels:
            if db.default_priority_level is not None and not 0 < db.default_priority_level <= db.priority_levels:
                err("dynamic_batching.priority", path, f"default_priority_level {db.default_priority_level} "
                    f"is outside 1..{db.priority_levels}", fld="dynamic_batching.default_priority_level")
            for level in db.priority_queue_policy:
                if not 0 < int(level) <= db.priority_levels:
                    err("dynamic_batching.priority", path, f"priority_queue_policy level {level} is outside "
                        f"1..{db.priority_levels}", fld=f"dynamic_batching.priority_queue_policy.{level}")
        elif db.default_priority_level or db.priority_queue_policy:
            err("dynamic_batching.priority", path, "priority settings need priority_levels > 0",
                fld="dynamic_batching")
    sb = spec.sequence_batching
    if sb is not None and sb.oldest is not None:
        for i, p in enumerate(sb.oldest.preferred_batch_size):
            if mbs and p > mbs:
                err("sequence_batching.preferred_batch_size", path,
                    f"preferred_batch_size {p} exceeds max_batch_size ({mbs})",
                    fld=f"sequence_batching.oldest.preferred_batch_size.{i}")

    # Instances.
    for i, g in enumerate(spec.instance_group):
        if g.count is not None and g.count < 1:
            err("instance_group.count", path, f"instance_group count must be >= 1, got {g.count}",
                fld=f"instance_group.{i}.count")
        if g.gpus and g.kind == "KIND_CPU":
            err("instance_group.gpus", path, "gpus are listed for a KIND_CPU instance group",
                fld=f"instance_group.{i}.gpus")

    # Warmup.
    input_names = {t.name for t in spec.input}
    for i, w in enumerate(spec.model_warmup):
        if w.batch_size and mbs and w.batch_size > mbs:
            err("model_warmup", path, f"warmup {w.name!r} batch_size {w.batch_size} exceeds max_batch_size "
                f"({mbs})", fld=f"model_warmup.{i}.batch_size")
        for name in w.inputs:
            if name not in input_names:
                err("model_warmup", path, f"warmup {w.name!r} feeds {name!r}, which is not an input",
                    fld=f"model_warmup.{i}.inputs.{name}")

    # Accelerators.
    acc = spec.optimization.execution_accelerators if spec.optimization else None
    for i, a in enumerate(acc.gpu_execution_accelerator if acc else []):
        precision = a.parameters.get("precision_mode")
        if a.name == "tensorrt" and precision is not None and precision not in TRT_PRECISIONS:
            err("optimization.precision_mode", path, f"precision_mode {precision!r} is not one of "
                f"{sorted(TRT_PRECISIONS)}",
                fld=f"optimization.execution_accelerators.gpu_execution_accelerator.{i}.parameters")


def _check_target(cfg: pbtxt.LoadedConfig, target: Target, out: _Collector) -> None:
    spec = cfg.spec
    if target.has_gpu:
        return
    for i, g in enumerate(spec.instance_group):
        if g.kind == "KIND_GPU" or g.gpus:
            out.error("target.gpu", cfg.path, f"instance_group {i} asks for GPUs but target {target.value!r} "
                      "has none (use KIND_CPU)", cfg=cfg, fld=f"instance_group.{i}.kind")
    acc = spec.optimization.execution_accelerators if spec.optimization else None
    if acc and acc.gpu_execution_accelerator:
        out.warning("target.gpu", cfg.path, f"GPU execution accelerators are ignored on target {target.value!r}",
                    cfg=cfg, fld="optimization.execution_accelerators")


def _dims_match(a: list[int], b: list[int]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _check_ensemble(cfg: pbtxt.LoadedConfig, repo: dict[str, Model], out: _Collector) -> None:
    spec, path = cfg.spec, cfg.path
    steps = spec.ensemble_scheduling.step if spec.ensemble_scheduling else []
    if not steps:
        out.error("ensemble.steps", path, "ensemble has no steps", cfg=cfg, fld="ensemble_scheduling")
        return
    # ensemble tensor -> (data_type, dims, where it comes from)
    available: dict[str, tuple[str, list[int], str]] = {
        t.name: (t.data_type, t.dims, "ensemble input") for t in spec.input
    }
    mbs = spec.max_batch_size or 0
    for s, step in enumerate(steps):
        base = f"ensemble_scheduling.step.{s}"
        target = repo.get(step.model_name)
        if target is None or target.spec is None:
            out.error("ensemble.model", path, f"step {s} uses model {step.model_name!r}, which is not in the "
                      "repository", cfg=cfg, fld=f"{base}.model_name")
            continue
        tspec = target.spec
        if mbs and (tspec.max_batch_size or 0) < mbs:
            out.error("ensemble.batch", path, f"ensemble max_batch_size {mbs} exceeds {step.model_name!r}'s "
                      f"max_batch_size {tspec.max_batch_size or 0}", cfg=cfg, fld=f"{base}.model_name")
        t_inputs = {t.name: t for t in tspec.input}
        t_outputs = {t.name: t for t in tspec.output}
        for model_input, tensor in step.input_map.items():
            fld = f"{base}.input_map.{model_input}"
            if model_input not in t_inputs:
                out.error("ensemble.input", path, f"step {s} maps {model_input!r}, which is not an input of "
                          f"{step.model_name!r} (inputs: {sorted(t_inputs)})", cfg=cfg, fld=fld)
                continue
            if tensor not in available:
                out.error("ensemble.dangling", path, f"step {s} reads tensor {tensor!r}, which no earlier "
                          "step produces and is not an ensemble input", cfg=cfg, fld=fld)
                continue
            dtype, dims, origin = available[tensor]
            want = t_inputs[model_input]
            if dtype != want.data_type:
                out.error("ensemble.datatype", path, f"tensor {tensor!r} is {dtype} ({origin}) but "
                          f"{step.model_name}.{model_input} expects {want.data_type}", cfg=cfg, fld=fld)
            elif not _dims_match(dims, want.dims):
                out.error("ensemble.dims", path, f"tensor {tensor!r} has dims {dims} ({origin}) but "
                          f"{step.model_name}.{model_input} expects {want.dims}", cfg=cfg, fld=fld)
        for model_input, t in t_inputs.items():
            if model_input not in step.input_map and not t.optional:
                out.error("ensemble.input", path, f"step {s} does not feed required input {model_input!r} of "
                          f"{step.model_name!r}", cfg=cfg, fld=f"{base}.input_map")
        for model_output, tensor in step.output_map.items():
            fld = f"{base}.output_map.{model_output}"
            if model_output not in t_outputs:
                out.error("ensemble.output", path, f"step {s} maps {model_output!r}, which is not an output "
                          f"of {step.model_name!r} (outputs: {sorted(t_outputs)})", cfg=cfg, fld=fld)
                continue
            if tensor in available:
                out.error("ensemble.output", path, f"tensor {tensor!r} is produced twice (also by "
                          f"{available[tensor][2]})", cfg=cfg, fld=fld)
            o = t_outputs[model_output]
            available[tensor] = (o.data_type, o.dims, f"output {model_output!r} of step {s}")
    for i, o in enumerate(spec.output):
        if o.name not in available:
            out.error("ensemble.dangling", path, f"ensemble output {o.name!r} is produced by no step",
                      cfg=cfg, fld=f"output.{i}.name")
        elif available[o.name][0] != o.data_type:
            out.error("ensemble.datatype", path, f"ensemble output {o.name!r} is declared {o.data_type} but "
                      f"{available[o.name][2]} is {available[o.name][0]}", cfg=cfg, fld=f"output.{i}.data_type")


def _check_golden(model: Model, out: _Collector) -> None:
    path = model.folder / GOLDEN_FILE
    spec = model.spec
    if spec is None:
        return
    if not path.exists():
        out.warning("golden.missing", path, f"no {GOLDEN_FILE}: smoke checks can only test that "
                    f"{model.name!r} is READY, not that it answers correctly")
        return
    try:
        golden = Golden.load(path)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        out.error("golden.invalid", path, f"{first['msg']}", fld=loc or None, line=_json_line(path, first["loc"]))
        return
    declared: dict[str, dict[str, Tensor]] = {"inputs": {t.name: t for t in spec.input},
                                              "outputs": {t.name: t for t in spec.output}}
    for c, case in enumerate(golden.cases):
        for side in ("inputs", "outputs"):
            for name, tensor in getattr(case, side).items():
                fld = f"cases.{c}.{side}.{name}"
                t = declared[side].get(name)
                if t is None:
                    out.error("golden.tensor", path, f"case {case.name!r} has {side[:-1]} {name!r}, which "
                              f"{model.name!r} does not declare", fld=fld, line=_json_line(path, (name,)))
                elif tensor.datatype != wire_datatype(t.data_type):
                    out.error("golden.datatype", path, f"case {case.name!r} {side[:-1]} {name!r} is "
                              f"{tensor.datatype} but the config says {t.data_type}", fld=fld,
                              line=_json_line(path, (name,)))


def _json_line(path: Path, loc: tuple[object, ...] | list[object]) -> int | None:
    """Best-effort line of the last string key of ``loc`` in a JSON file."""
    keys = [k for k in loc if isinstance(k, str)]
    if not keys:
        return None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(rf'"{re.escape(keys[-1])}"\s*:', line):
            return n
    return None
