"""Validate a Triton model repository (or one model) before any server sees it.

Checks the layout Triton expects (safe names, version folders as Triton reads them), parses every
config.pbtxt with Triton's own protobuf (size-bounded), runs Triton's own configuration rules
(:mod:`tritonops.model_repo.config_rules`) and the rules that span models or need the target: ensemble
steps against the models they call, ensemble cycles, GPU ids against the target's GPUs, golden data.
Every finding names the file, line and field.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from tritonops.core.errors import ReleaseError
from tritonops.core.names import GOLDEN_FILE, check_path
from tritonops.model_repo import config_rules, pbtxt
from tritonops.model_repo.golden import Golden, wire_datatype
from tritonops.model_repo.spec import ModelSpec, Tensor
from tritonops.model_repo.target import Target
from tritonops.model_repo.triton_names import (
    CPU_BACKENDS,
    JETSON_BACKENDS,
    JETSON_SOURCE,
    KNOWN_BACKENDS,
    SHIPPED_WITH,
    declared_backends,
    did_you_mean,
)
from tritonops.model_repo.warmup import WARMUP_DIR  # model_warmup's input_data_file folder
from tritonops.release_format.manifest import walk_release

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
# Files by which Triton's AutoCompleteBackendFields recognises a backend in a version folder.
AUTOFILL_FILES = {"model.savedmodel": "tensorflow", "model.graphdef": "tensorflow", "model.plan": "tensorrt",
                  "model.onnx": "onnxruntime", "model.pt": "pytorch", "model.py": "python"}
INT64_MAX = 2**63 - 1


class Location(BaseModel):
    """A place in a file: ``path:line`` and the dotted field there."""

    path: str
    line: int | None = None
    field: str | None = None

    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    @classmethod
    def of(cls, cfg: pbtxt.LoadedConfig, fld: str) -> Location:
        return cls(path=str(cfg.path), line=cfg.line(fld), field=fld)


class Finding(Location):
    severity: Literal["error", "warning"]
    code: str
    message: str
    related: list[Location] = []  # the other places it is about (the golden file, the ensemble step)


class Report(BaseModel):
    path: str
    target: Target | None
    gpus: int | None = None
    backends: list[str] = []  # custom backends declared (--backend, --backend-directory)
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
            cfg: pbtxt.LoadedConfig | None = None, fld: str | None = None, line: int | None = None,
            related: list[Location] | None = None) -> None:
        if line is None and cfg is not None and fld is not None:
            line = cfg.line(fld)
        self.findings.append(Finding(severity=severity, path=str(path), line=line, field=fld,
                                     code=code, message=message, related=related or []))

    def error(self, code: str, path: Path, message: str, **kw: object) -> None:
        self.add("error", code, path, message, **kw)  # type: ignore[arg-type]

    def warning(self, code: str, path: Path, message: str, **kw: object) -> None:
        self.add("warning", code, path, message, **kw)  # type: ignore[arg-type]


def _version_number(name: str) -> int | None:
    """The version a folder name stands for, as Triton reads it: ASCII digits, no leading zero."""
    if not re.fullmatch(r"[0-9]+", name) or (len(name) > 1 and name[0] == "0"):
        return None
    return int(name)


def is_model_folder(path: Path) -> bool:
    return (path / CONFIG).is_file() or any(p.is_dir() and _version_number(p.name) is not None
                                            for p in path.iterdir())


def model_folders(path: Path) -> list[Path]:
    """The model folders under ``path``: itself when it is one model, else its subfolders."""
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory")
    if is_model_folder(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def validate(path: Path | str, target: Target | None = None, config_name: str | None = None,
             gpus: int | None = None, backends: Iterable[str] = (), backend_dir: Path | str | None = None) -> Report:
    """Validate a repository or a single model folder; findings are sorted by file and line.

    ``gpus``: how many GPUs the target has (ids 0..gpus-1); default: what ``target`` implies.
    ``backends``, ``backend_dir``: custom backends the target's Triton has besides the ones it ships, by name or
    as the folders of its backend directory (tritonserver ``--backend-directory``).
    """
    if str(path).strip() == "":
        raise UsageError("no path given: name a model repository or a model folder")
    if gpus is not None and gpus < 0:
        raise UsageError(f"--gpus {gpus}: a GPU count is 0 or more")
    if config_name is not None:
        try:
            check_path(config_name + ".pbtxt", where="--config-name")
        except ReleaseError as e:
            raise UsageError(str(e)) from None
    custom = declared_backends(backends, backend_dir, UsageError)
    path = Path(path)
    try:
        folders = model_folders(path)
    except OSError as e:
        raise UsageError(f"{path}: cannot read the folder ({e.strerror or e})") from None
    if gpus is None and target is not None:
        gpus = target.gpu_count
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
                with contextlib.suppress(pbtxt.ModelConfigError):  # reported when that model is validated
                    siblings[other.name] = Model(other, pbtxt.load(other / CONFIG))
    for model in models.values():
        _check_model(model, siblings, target, gpus, custom, out)
    if path.is_dir():  # what a published release would lose: publish refuses it, so it is an error here
        for bad, why in walk_release(path)[1]:
            out.error("release.path", bad, f"{why}: tritonops release publish refuses it")
    findings = sorted(out.findings, key=lambda f: (f.path, f.line or 0))
    return Report(
        path=str(path),
        target=target,
        gpus=gpus,
        backends=sorted(custom),
        models=sorted(models),
        errors=[f for f in findings if f.severity == "error"],
        warnings=[f for f in findings if f.severity == "warning"],
    )


def _load_config(path: Path, out: _Collector) -> pbtxt.LoadedConfig | None:
    try:
        return pbtxt.load(path)
    except pbtxt.ModelConfigError as e:
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


def _check_names(model: Model, out: _Collector) -> None:
    """Model and file names from the safe character set the release agent enforces (names are data).

    Each name is checked once, as one part of a release path; a refused folder is not walked into.
    """
    def safe(path: Path) -> bool:
        try:
            check_path(path.name, where="repository")
        except ReleaseError as e:
            out.error("name.unsafe", path, str(e))
            return False
        return True

    if not safe(model.folder):
        return
    for root, dirs, files in os.walk(model.folder):
        dirs[:] = [d for d in dirs if d != "__pycache__" and safe(Path(root, d))]
        for f in files:
            safe(Path(root, f))


def _check_model(model: Model, repo: dict[str, Model], target: Target | None, gpus: int | None,
                 custom: frozenset[str], out: _Collector) -> None:
    _check_names(model, out)
    versions = _check_versions(model, out)
    if model.config is None:
        return
    configs = [(model.config, True), *[(alt, False) for alt in model.alternatives]]
    for cfg, active in configs:
        kind = _check_config(model, cfg, versions, custom, out)
        if active:
            _check_target_backend(model, cfg, kind, versions, target, custom, out)
            _check_gpus(cfg, target, gpus, out)
            if cfg.spec.is_ensemble and cfg.spec.ensemble_scheduling:
                _check_ensemble(cfg, repo, out)
                _check_ensemble_cycle(model, repo, out)
    _check_golden(model, out)


def _check_versions(model: Model, out: _Collector) -> list[Path]:
    versions = []
    for p in sorted(model.folder.iterdir()):
        if not p.is_dir() or p.name in (ALT_CONFIGS, WARMUP_DIR) or p.name.startswith("."):
            continue
        number = _version_number(p.name)
        if number is None:
            why = ("has a leading zero" if re.fullmatch(r"0[0-9]+", p.name)
                   else "fails to convert to integral number")
            out.warning("layout.version", p, f"Triton ignores version directory {p.name!r}, which {why}")
        elif number > INT64_MAX:
            out.error("layout.version", p, f"version directory {p.name!r} is beyond a 64-bit version number: "
                      "tritonserver aborts on it (std::stoll out of range)")
        else:
            versions.append(p)
    versions.sort(key=lambda p: int(p.name))
    if not versions:
        out.error("layout.version", model.folder,
                  f"model {model.name!r} has no numeric version folder (e.g. {model.folder / '1'})")
    return versions


def _resolve(spec: ModelSpec, versions: list[Path]) -> config_rules.Resolved:
    """platform/backend as Triton auto-completes them, from the config and else from the model files."""
    kind = config_rules.resolve(spec)
    if kind.backend or kind.platform or spec.default_model_filename:
        return kind
    for v in versions[:1]:
        for filename, backend in AUTOFILL_FILES.items():
            if (v / filename).exists():
                return config_rules.resolve(spec.model_copy(update={"backend": backend}))
    return kind


def _check_config(model: Model, cfg: pbtxt.LoadedConfig, versions: list[Path], custom: frozenset[str],
                  out: _Collector) -> config_rules.Resolved:
    """Checks one config (active or alternative); returns its platform/backend as Triton completes them."""
    spec, path = cfg.spec, cfg.path
    err = functools.partial(out.error, cfg=cfg)
    warn = functools.partial(out.warning, cfg=cfg)

    if spec.name and spec.name != model.name:
        err("name", path, f"name {spec.name!r} does not match its folder {model.name!r}", fld="name")
    named = spec if spec.name else spec.model_copy(update={"name": model.name})
    kind = _resolve(named, versions)
    if not kind.platform and not kind.backend and not spec.default_model_filename:
        err("platform", path, f"must specify 'platform' or 'backend' for '{model.name}' (no model file in "
            f"version {versions[0].name if versions else '-'} tells Triton which backend it is)", fld="name")
    if spec.backend and spec.backend not in KNOWN_BACKENDS | custom and not _ships_backend(model, spec, versions):
        declared = f" and {', '.join(sorted(custom))} declared" if custom else ""
        err("backend", path, f"unknown backend {spec.backend!r} for '{model.name}'"
            f"{did_you_mean(spec.backend, KNOWN_BACKENDS | custom)}: Triton {SHIPPED_WITH} ships "
            f"{', '.join(sorted(KNOWN_BACKENDS))}{declared}; a custom backend loads when its "
            f"{spec.runtime or f'libtriton_{spec.backend}.so'} is in the model's folder or in every version folder, "
            f"or from Triton's backend folder: declare that with --backend {spec.backend} or --backend-directory DIR",
            fld="backend")

    # The model file each version folder must hold.
    expected = spec.default_model_filename or MODEL_FILES.get(kind.platform) or MODEL_FILES.get(kind.backend)
    if not spec.is_ensemble and expected:
        for v in versions:
            if not (v / expected).exists():
                err("layout.model_file", v, f"version {v.name} of {model.name!r} has no {expected} "
                    f"(expected by {'platform' if spec.platform else 'backend'} "
                    f"{spec.platform or kind.backend!r})")
    if spec.version_policy and spec.version_policy.specific:
        have = {int(v.name) for v in versions}
        wanted = [int(w) for w in spec.version_policy.specific.get("versions", [])]
        for i, w in enumerate(wanted):
            if w not in have:
                (warn if set(wanted) & have else err)(
                    "version_policy", path, f"version {w} is specified for model '{model.name}', but the version "
                    "directory is not present" + ("" if set(wanted) & have else
                                                  "; at least one version must be available under the version "
                                                  "policy"), fld=f"version_policy.specific.versions.{i}")

    def emit(report: functools.partial[None], code: str, message: str, fld: str | None) -> None:
        report(code, path, message, fld=fld)

    config_rules.check(named, kind, functools.partial(emit, err), functools.partial(emit, warn))
    return kind


def _ships_backend(model: Model, spec: ModelSpec, versions: list[Path]) -> bool:
    """The model carries its own backend library where Triton looks before its backend directory: the version
    folder, then the model's (``runtime``, else ``libtriton_<backend>.so``)."""
    lib = spec.runtime or f"libtriton_{spec.backend}.so"
    return (model.folder / lib).is_file() or bool(versions) and all((v / lib).is_file() for v in versions)


def _check_target_backend(model: Model, cfg: pbtxt.LoadedConfig, kind: config_rules.Resolved, versions: list[Path],
                          target: Target | None, custom: frozenset[str], out: _Collector) -> None:
    """A backend the target's Triton build lacks (unless declared or carried by the model): on a Jetson it does not
    load (an error); on a --target cpu repository it loads only where a node runs NGC's image (a warning)."""
    fld = "backend" if cfg.spec.backend else "platform" if cfg.spec.platform else "name"
    if target is Target.jetson and kind.backend in KNOWN_BACKENDS - JETSON_BACKENDS - custom and not _ships_backend(
            model, cfg.spec, versions):
        out.error("target.backend", cfg.path, f"backend {kind.backend!r} is not in Triton's Jetson build (the -igpu "
                  f"image and tarball ship {', '.join(sorted(JETSON_BACKENDS))}: {JETSON_SOURCE}); where you built "
                  f"it for the Jetson, declare it (--backend {kind.backend} or --backend-directory DIR)",
                  cfg=cfg, fld=fld)
    if target is Target.cpu and kind.backend in KNOWN_BACKENDS - CPU_BACKENDS - custom:
        out.warning("target.backend", cfg.path, f"backend {kind.backend!r} is not in the CPU build tritonops "
                    f"installs on CPU nodes (install method wheel: {', '.join(sorted(CPU_BACKENDS))} only); it loads "
                    "where the node runs NGC's image (install method container)", cfg=cfg, fld=fld)


def _check_gpus(cfg: pbtxt.LoadedConfig, target: Target | None, gpus: int | None, out: _Collector) -> None:
    """Instance groups against the GPUs the target has (Triton's ValidateInstanceGroup on that host)."""
    spec = cfg.spec
    if spec.is_ensemble:
        return
    where = f"target {target.value!r}" if target is not None and target.gpu_count == gpus else "the target"
    for i, g in enumerate(spec.instance_group):
        who = f"instance group {g.name or f'{spec.name}_{i}'} of model {spec.name}"
        on_gpu = g.kind == "KIND_GPU" or (g.gpus and g.kind in (None, "KIND_AUTO"))
        if on_gpu and gpus is None and target is None:
            out.warning("target.gpu", cfg.path, f"{who} runs on GPUs ({g.kind or 'KIND_AUTO'}"
                        f"{f' gpus {g.gpus}' if g.gpus else ''}): Triton refuses to load it on a node without one, "
                        "and no --target says what the repository is for (--target gpu or --gpus N silences this, "
                        "--target cpu makes it an error)", cfg=cfg,
                        fld=f"instance_group.{i}.{'kind' if g.kind else 'gpus'}")
            continue
        if gpus is None:
            continue
        if gpus == 0 and on_gpu:
            out.error("target.gpu", cfg.path, f"{who} has kind {g.kind or 'KIND_AUTO'} with GPUs but no GPUs are "
                      f"available on {where} (use KIND_CPU)", cfg=cfg, fld=f"instance_group.{i}.kind")
            continue
        for j, gid in enumerate(g.gpus):  # ids no GPU can have are config_rules' (instance_group.gpus)
            if gpus <= gid < config_rules.MAX_GPUS and g.kind in (None, "KIND_AUTO", "KIND_GPU"):
                out.error("target.gpu", cfg.path, f"{who} specifies invalid or unsupported gpu id {gid}; "
                          f"{where} has {gpus} GPU{'s' if gpus != 1 else ''} (ids 0..{gpus - 1})",
                          cfg=cfg, fld=f"instance_group.{i}.gpus.{j}")
    acc = spec.optimization.execution_accelerators if spec.optimization else None
    if gpus == 0 and acc and acc.gpu_execution_accelerator:
        out.warning("target.gpu", cfg.path, f"GPU execution accelerators are ignored on {where}",
                    cfg=cfg, fld="optimization.execution_accelerators")


def _full_dims(dims: list[int], batching: bool) -> list[int]:
    return [-1, *dims] if batching else list(dims)


def _dims_match(a: list[int], b: list[int]) -> bool:
    """triton::common::CompareDimsWithWildcard."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


@dataclass
class _TensorNode:
    origin: str
    data_type: str
    dims: list[int]
    full_dims: list[int]
    cfg: pbtxt.LoadedConfig | None  # the config that declares the tensor, at ``declared``
    declared: str

    def where(self, what: str) -> list[Location]:
        return [Location.of(self.cfg, f"{self.declared}.{what}")] if self.cfg is not None else []


def _check_ensemble(cfg: pbtxt.LoadedConfig, repo: dict[str, Model], out: _Collector) -> None:
    """Ensemble steps against the models they call (Triton's ensemble_utils ValidateEnsembleConfig)."""
    spec, path = cfg.spec, cfg.path
    steps = spec.ensemble_scheduling.step if spec.ensemble_scheduling else []
    mbs = spec.max_batch_size or 0
    tensors: dict[str, _TensorNode] = {}
    for side, own in (("input", spec.input), ("output", spec.output)):
        for i, t in enumerate(own):
            dims = t.reshape.shape if t.reshape is not None else t.dims
            tensors.setdefault(t.name, _TensorNode(f"ensemble {spec.name}", t.data_type, dims,
                                                   _full_dims(dims, mbs > 0), cfg, f"{side}.{i}"))
    for s, step in enumerate(steps):
        base = f"ensemble_scheduling.step.{s}"
        target = repo.get(step.model_name)
        if target is None or target.spec is None:
            if step.model_name:
                out.error("ensemble.model", path, f"ensemble {spec.name} contains models that are not available: "
                          f"{step.model_name} (step {s})" + (" (its config does not load: see its error)"
                                                               if target is not None else
                                                               did_you_mean(step.model_name, repo)),
                          cfg=cfg, fld=f"{base}.model_name")
            continue
        tspec = target.spec
        tmbs = tspec.max_batch_size or 0
        if tmbs != 0 and tmbs < mbs:
            out.error("ensemble.batch", path, f"ensemble {spec.name} allows maximum batch size {mbs}, but it "
                      f"contains model {step.model_name} which only allows maximum batch size to be {tmbs}",
                      cfg=cfg, fld=f"{base}.model_name")
        t_inputs: dict[str, tuple[int, Tensor]] = {t.name: (i, t) for i, t in enumerate(tspec.input)}
        t_outputs: dict[str, tuple[int, Tensor]] = {t.name: (i, t) for i, t in enumerate(tspec.output)}
        where = f"in ensemble {spec.name}, ensemble tensor"
        for side, mapping, declared in (("input", step.input_map, t_inputs), ("output", step.output_map, t_outputs)):
            for key, tensor in mapping.items():
                fld = f"{base}.{side}_map.{key}"
                if key not in declared:
                    verb = "mapping to" if side == "input" else "mapped from"
                    out.error(f"ensemble.{side}", path, f"{where} {tensor} is {verb} non-existing {side} {key} in "
                              f"model {step.model_name}{did_you_mean(key, declared)} ({side}s: {sorted(declared)})",
                              cfg=cfg, fld=fld)
                    continue
                index, mapped = declared[key]
                node = _TensorNode(f"model {step.model_name}", mapped.data_type, mapped.dims,
                                   _full_dims(mapped.dims, tmbs > 0), target.config, f"{side}.{index}")
                have = tensors.setdefault(tensor, node)
                if have is node:
                    continue
                if have.data_type != node.data_type:  # both declarations are related places
                    out.error("ensemble.datatype", path, f"{where} {tensor}: inconsistent data type: "
                              f"{have.data_type} is inferred from {have.origin} while {node.data_type} is "
                              f"inferred from {node.origin} ({side} {key})", cfg=cfg, fld=fld,
                              related=[*have.where("data_type"), *node.where("data_type")])
                elif not _dims_match(have.dims, node.dims) and not _dims_match(have.full_dims, node.full_dims):
                    out.error("ensemble.dims", path, f"{where} {tensor}: inconsistent shape: {have.full_dims} is "
                              f"inferred from {have.origin} while {node.full_dims} is inferred from {node.origin} "
                              f"({side} {key})", cfg=cfg, fld=fld, related=[*have.where("dims"), *node.where("dims")])
        for name, ti in {t.name: t for t in tspec.input}.items():
            if name not in step.input_map and not ti.optional:
                out.error("ensemble.input", path, f"in ensemble {spec.name}, input {name} in model "
                          f"{step.model_name} is not mapped to any ensemble tensors (step {s})", cfg=cfg,
                          fld=f"{base}.input_map")


def _check_ensemble_cycle(model: Model, repo: dict[str, Model], out: _Collector) -> None:
    """Ensembles that call themselves through other ensembles (Triton: circular dependency)."""

    def steps(m: Model) -> list[str]:
        spec = m.spec
        if spec is None or not spec.is_ensemble or spec.ensemble_scheduling is None:
            return []
        return [s.model_name for s in spec.ensemble_scheduling.step]

    start = model.name
    path: list[str] = [start]
    seen: set[str] = set()

    def walk(name: str) -> list[str] | None:
        for nxt in steps(repo[name]) if name in repo else []:
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                path.append(nxt)
                found = walk(nxt)
                if found:
                    return found
                path.pop()
        return None

    cycle = walk(start)
    if cycle and model.config is not None:
        first = steps(model).index(cycle[1])
        out.error("ensemble.cycle", model.config.path, f"circular dependency between ensembles: "
                  f"{' -> '.join(cycle)}", cfg=model.config, fld=f"ensemble_scheduling.step.{first}.model_name")


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
    except ReleaseError as e:
        out.error("golden.unreadable", path, str(e))
        return
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        out.error("golden.invalid", path, f"{first['msg']}", fld=loc or None, line=_json_line(path, first["loc"]))
        return
    cfg = model.config
    assert cfg is not None  # spec is not None
    declared: dict[str, dict[str, tuple[int, Tensor]]] = {
        "inputs": {t.name: (i, t) for i, t in enumerate(spec.input)},
        "outputs": {t.name: (i, t) for i, t in enumerate(spec.output)}}
    for c, case in enumerate(golden.cases):
        for side in ("inputs", "outputs"):
            for name, tensor in getattr(case, side).items():
                fld = f"cases.{c}.{side}.{name}"
                here = Location(path=str(path), line=_json_line(path, (name,)), field=fld)
                if name not in declared[side]:
                    out.error("golden.tensor", path, f"case {case.name!r} has {side[:-1]} {name!r}, which "
                              f"{model.name!r} does not declare{did_you_mean(name, declared[side])}", fld=fld,
                              line=here.line)
                    continue
                i, t = declared[side][name]
                if tensor.datatype != wire_datatype(t.data_type):  # the config line first, the golden file beside
                    out.error("golden.datatype", cfg.path, f"the config says {t.data_type} for {side[:-1]} {name!r}, "
                              f"but golden case {case.name!r} in {path.name} has {tensor.datatype}", cfg=cfg,
                              fld=f"{side[:-1]}.{i}.data_type", related=[here])


def _json_line(path: Path, loc: tuple[object, ...] | list[object]) -> int | None:
    """Best-effort line of the last string key of ``loc`` in a JSON file."""
    keys = [k for k in loc if isinstance(k, str)]
    if not keys:
        return None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(rf'"{re.escape(keys[-1])}"\s*:', line):
            return n
    return None
