"""Triton's command line, built once: the pods (``tritonops.k8s.stacks.triton.workload``), ``tritonops serve`` and the
tests (``tritonops.triton.server``) and the edge role (the ``tritonops.triton.tritonserver_args`` lookup
behind ``roles/triton_server/templates/tritonserver-args.j2``) all call :func:`triton_args` with the
:func:`settings` of their deployment kind, a row of :data:`PROFILES`.

A setting left at None is a flag left out (Triton's own default). Standard library only: the lookup
imports this module inside Ansible. The parser that reads a command line back, the default ports and the
restricted APIs are :mod:`tritonops.core.triton_cli`'s (the node agent and the CrossGuard pack read them).

The admin key is never a value here: ``admin_key_ref`` is how the site names it where Triton starts, the
pods' ``$(TRITON_ADMIN_KEY)`` (the kubelet expands it from a Secret). The edge keeps the whole admin
arguments in its root-only environment file (:func:`restricted_args`, through the lookup's ``admin``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonops.core.triton_cli import GRPC_PORT, HTTP_PORT, METRICS_PORT, RESTRICTED_APIS, RESTRICTED_FLAGS
from tritonops.core.triton_http import DEFAULT_HEADER

RESTRICTED = ",".join(RESTRICTED_APIS)
# The facts the roles' defaults read through the lookup's terms (``query`` gives a list's elements).
FACTS: dict[str, Any] = {"http_port": HTTP_PORT, "grpc_port": GRPC_PORT, "metrics_port": METRICS_PORT,
                         "admin_header": DEFAULT_HEADER, "restricted_apis": list(RESTRICTED_APIS)}


@dataclass(frozen=True)
class Listener:
    """One of Triton's HTTP, gRPC or metrics endpoints; None leaves Triton's default."""

    enabled: bool | None = None  # --allow-http / --allow-grpc / --allow-metrics
    address: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class GrpcTls:
    """gRPC over TLS: the server's certificate and key, and the CA for client certificates (mutual)."""

    cert: str
    key: str
    root_cert: str | None = None  # mutual TLS when set


@dataclass(frozen=True)
class TritonSettings:
    """What a site starts tritonserver with."""

    model_repository: str
    backend_directory: str | None = None
    model_control_mode: str | None = None
    load_models: tuple[str, ...] = ()
    model_config_name: str = ""
    repository_poll_secs: int | None = None
    strict_model_config: bool | None = None
    strict_readiness: bool | None = None
    exit_on_error: bool | None = None
    http: Listener = Listener()
    grpc: Listener = Listener()
    grpc_tls: GrpcTls | None = None
    metrics: Listener = Listener()
    gpu_metrics: bool | None = None
    cpu_metrics: bool | None = None
    metrics_config: Mapping[str, str] = field(default_factory=dict)
    restricted_apis: tuple[str, ...] = ()
    admin_header: str = ""
    admin_key_ref: str = ""  # how the site names the key where Triton starts, e.g. "$(TRITON_ADMIN_KEY)"
    exit_timeout_secs: int | None = None
    log_format: str | None = None
    log_verbose: int | None = None
    cuda_memory_pool_bytes: tuple[int, ...] = ()  # one per GPU, device 0 first
    pinned_memory_pool_bytes: int | None = None
    model_load_gpu_limit: tuple[float, ...] = ()  # one fraction per GPU
    extra_args: tuple[str, ...] = ()


# Which flags each deployment kind sets itself, whatever its site passes: one row per kind (:func:`settings`).
PROFILES: dict[str, dict[str, Any]] = {
    # The Kubernetes pods (k8s/stacks/triton/workload.py): every model ships a complete config.pbtxt (no
    # auto-complete), a pod that fails to load exits for Kubernetes to restart, logs in ISO 8601.
    "pod": {"strict_model_config": True, "strict_readiness": True, "exit_on_error": True,
            "http": Listener(port=HTTP_PORT), "grpc": Listener(port=GRPC_PORT),
            "metrics": Listener(enabled=True, port=METRICS_PORT), "gpu_metrics": True, "cpu_metrics": True,
            "exit_timeout_secs": 30, "log_format": "ISO8601"},
    # The edge unit (roles/triton_server through the tritonserver_args lookup): the role's variables set the rest.
    "edge": {},
    # ``tritonops serve`` and the tests (triton/server.py): a model that fails to load stops the server ...
    "serve": {"exit_on_error": True},
    # ... but in explicit mode, where a later load may fix it.
    "serve-explicit": {"exit_on_error": False},
}


def settings(profile: str, **site: Any) -> TritonSettings:
    """The settings of a deployment kind (a :data:`PROFILES` row) with what its site passes."""
    fixed = PROFILES[profile]
    both = sorted(set(fixed) & set(site))
    if both:
        raise ValueError(f"profile {profile!r} sets {', '.join(both)} itself")
    return TritonSettings(**fixed, **site)


def _flag(name: str, value: object) -> list[str]:
    """``--name=value``, booleans as Triton writes them; nothing for None."""
    if value is None:
        return []
    return [f"--{name}={str(value).lower() if isinstance(value, bool) else value}"]


def _listener(name: str, lis: Listener, allow_last: bool = False) -> list[str]:
    allow = _flag(f"allow-{name}", lis.enabled)
    if lis.enabled is False:
        return allow
    where = _flag(f"{name}-address", lis.address) + _flag(f"{name}-port", lis.port)
    return where + allow if allow_last else allow + where


def restricted_args(s: TritonSettings) -> list[str]:
    """The admin restriction over each enabled protocol; nothing without APIs or a key reference."""
    if not s.restricted_apis or not s.admin_key_ref:
        return []
    value = f"{','.join(s.restricted_apis)}:{s.admin_header}={s.admin_key_ref}"
    enabled = (s.http.enabled, s.grpc.enabled)
    return [f"{flag}={value}" for flag, on in zip(RESTRICTED_FLAGS, enabled, strict=True) if on is not False]


def _grpc_tls(s: TritonSettings) -> list[str]:
    if s.grpc_tls is None or s.grpc.enabled is False:
        return []
    args = ["--grpc-use-ssl=true", f"--grpc-server-cert={s.grpc_tls.cert}", f"--grpc-server-key={s.grpc_tls.key}"]
    if s.grpc_tls.root_cert:
        args += ["--grpc-use-ssl-mutual=true", f"--grpc-root-cert={s.grpc_tls.root_cert}"]
    return args


def _metrics(s: TritonSettings) -> list[str]:
    args = _listener("metrics", s.metrics, allow_last=True)
    if s.metrics.enabled is False:
        return args
    args += _flag("allow-gpu-metrics", s.gpu_metrics) + _flag("allow-cpu-metrics", s.cpu_metrics)
    return args + metrics_config_args(s.metrics_config)


def metrics_config_args(config: Mapping[str, str]) -> list[str]:
    """One ``--metrics-config=name=value`` per setting, by name."""
    return [f"--metrics-config={k}={v}" for k, v in sorted(config.items())]


def memory_args(s: TritonSettings) -> list[str]:
    """The pool sizes and model-load limits alone (a budget checked outside a full command line)."""
    args = [f"--cuda-memory-pool-byte-size={dev}:{size}" for dev, size in enumerate(s.cuda_memory_pool_bytes)]
    args += _flag("pinned-memory-pool-byte-size", s.pinned_memory_pool_bytes)
    return args + [f"--model-load-gpu-limit={dev}:{frac}" for dev, frac in enumerate(s.model_load_gpu_limit)]


def triton_args(s: TritonSettings) -> list[str]:
    """tritonserver's arguments (without the binary), in one order for every site."""
    return [
        f"--model-repository={s.model_repository}",
        *_flag("backend-directory", s.backend_directory),
        *_flag("model-control-mode", s.model_control_mode),
        *[f"--load-model={m}" for m in s.load_models],
        *_flag("model-config-name", s.model_config_name or None),
        *_flag("repository-poll-secs", s.repository_poll_secs),
        *_flag("strict-model-config", s.strict_model_config),
        *_flag("strict-readiness", s.strict_readiness),
        *_flag("exit-on-error", s.exit_on_error),
        *_listener("http", s.http),
        *_listener("grpc", s.grpc),
        *_grpc_tls(s),
        *_metrics(s),
        *restricted_args(s),
        *_flag("exit-timeout-secs", s.exit_timeout_secs),
        *_flag("log-format", s.log_format),
        *_flag("log-verbose", s.log_verbose),
        *memory_args(s),
        *s.extra_args,
    ]


# --- the flat options of the collection's tritonserver_args lookup (the edge role) ------------------

_OPTIONS: dict[str, type] = {
    "model_repository": str, "backend_directory": str, "model_control_mode": str, "load_models": list,
    "model_config_name": str, "strict_readiness": bool, "exit_timeout_secs": int,
    "http_enabled": bool, "http_address": str, "http_port": int,
    "grpc_enabled": bool, "grpc_address": str, "grpc_port": int,
    "grpc_server_cert": str, "grpc_server_key": str, "grpc_root_cert": str,
    "metrics_enabled": bool, "metrics_address": str, "metrics_port": int, "gpu_metrics": bool,
    "cpu_metrics": bool, "metrics_config": dict, "log_verbose": int, "extra_args": list,
    "restricted_apis": list, "admin_header": str, "admin_key": str,
}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _option(name: str, value: object) -> object:
    """``value`` as option ``name``'s type (booleans and numbers as Ansible's inventory may write them)."""
    kind = _OPTIONS[name]
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in _TRUE + _FALSE:
            raise ValueError(f"{name}: {value!r} is not a boolean")
        return text in _TRUE
    if kind is int and not isinstance(value, bool):
        try:
            return int(str(value))
        except ValueError:
            raise ValueError(f"{name}: {value!r} is not an integer") from None
    if kind is list and isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if kind is dict and isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if kind is str and isinstance(value, str):
        return value
    raise ValueError(f"{name}: {value!r} is not a {'list of strings' if kind is list else kind.__name__}")


def settings_from_options(options: Mapping[str, object], admin_only: bool = False) -> TritonSettings:
    """:class:`TritonSettings` from the lookup's options; ValueError names an unknown or mistyped option."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}")
    o: dict[str, Any] = {k: _option(k, v) for k, v in options.items() if v is not None}
    if "model_repository" not in o and not admin_only:
        raise ValueError("model_repository is required")
    tls = None
    if o.get("grpc_server_cert") or o.get("grpc_server_key"):
        tls = GrpcTls(o.get("grpc_server_cert", ""), o.get("grpc_server_key", ""), o.get("grpc_root_cert") or None)

    def listener(name: str) -> Listener:
        return Listener(o.get(f"{name}_enabled"), o.get(f"{name}_address"), o.get(f"{name}_port"))

    return settings(
        "edge", model_repository=o.get("model_repository", ""), backend_directory=o.get("backend_directory"),
        model_control_mode=o.get("model_control_mode"), load_models=o.get("load_models", ()),
        model_config_name=o.get("model_config_name", ""), strict_readiness=o.get("strict_readiness"),
        exit_timeout_secs=o.get("exit_timeout_secs"), http=listener("http"), grpc=listener("grpc"),
        grpc_tls=tls, metrics=listener("metrics"), gpu_metrics=o.get("gpu_metrics"),
        cpu_metrics=o.get("cpu_metrics"), metrics_config=o.get("metrics_config", {}),
        log_verbose=o.get("log_verbose"), extra_args=o.get("extra_args", ()),
        restricted_apis=o.get("restricted_apis", ()), admin_header=o.get("admin_header", ""),
        admin_key_ref=o.get("admin_key", ""),
    )
