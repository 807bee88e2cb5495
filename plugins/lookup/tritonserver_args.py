# Copyright: tritonops contributors
# Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""The tritonops.triton.tritonserver_args lookup: tritonserver's arguments from tritonops.triton.args."""

from __future__ import annotations

DOCUMENTATION = r"""
name: tritonserver_args
author:
  - tritonops maintainers (@tritonops)
version_added: 0.2.0
short_description: tritonserver's arguments, or a fact of Triton's (ports, admin header), from tritonops.triton.args
description:
  - Returns tritonserver's arguments as the C(tritonops.triton.args) module of the C(tritonops) Python
    package builds them for every site (the Kubernetes pods, C(tritonops serve), the edge), one list
    element per argument, so a flag added there reaches the edge unit too. The triton_server role's
    C(tritonserver-args.j2) writes them into its systemd units.
  - With the term C(admin), only the admin restriction (C(--http-restricted-api) and
    C(--grpc-restricted-protocol) for each enabled protocol); the role keeps these in its root-only
    environment file, since they hold the admin key.
  - With the term C(restricted_apis), the admin APIs a hardened Triton restricts (the role's default).
  - With the term C(http_port), C(grpc_port), C(metrics_port) or C(admin_header), Triton's default port or
    the project's admin header name (C(tritonops.triton.args.FACTS)), as the roles' defaults read them.
  - Runs on the controller and needs the C(tritonops) package, of the same release as this collection,
    in the Python that runs Ansible (as the C(tritonops.triton.pin) lookup does).
options:
  _terms:
    description: Nothing (the arguments), C(admin), or one fact (C(restricted_apis), C(http_port), C(grpc_port),
      C(metrics_port), C(admin_header)).
    type: list
    elements: str
  model_repository:
    description: C(--model-repository); required for the arguments.
    type: str
  backend_directory:
    description: C(--backend-directory).
    type: str
  model_control_mode:
    description: C(--model-control-mode) (none, poll, explicit).
    type: str
  load_models:
    description: One C(--load-model) each.
    type: list
    elements: str
  model_config_name:
    description: C(--model-config-name); empty leaves it out.
    type: str
  strict_readiness:
    description: C(--strict-readiness).
    type: bool
  exit_timeout_secs:
    description: C(--exit-timeout-secs).
    type: int
  http_enabled:
    description: C(--allow-http); when false, no HTTP address, port or restriction.
    type: bool
  http_address:
    description: C(--http-address).
    type: str
  http_port:
    description: C(--http-port).
    type: int
  grpc_enabled:
    description: C(--allow-grpc); when false, no gRPC address, port, TLS or restriction.
    type: bool
  grpc_address:
    description: C(--grpc-address).
    type: str
  grpc_port:
    description: C(--grpc-port).
    type: int
  grpc_server_cert:
    description: The server certificate's path; with C(grpc_server_key), gRPC over TLS.
    type: str
  grpc_server_key:
    description: The server key's path.
    type: str
  grpc_root_cert:
    description: The CA's path for client certificates (mutual TLS).
    type: str
  metrics_enabled:
    description: C(--allow-metrics); when false, no metrics address, port or options.
    type: bool
  metrics_address:
    description: C(--metrics-address).
    type: str
  metrics_port:
    description: C(--metrics-port).
    type: int
  gpu_metrics:
    description: C(--allow-gpu-metrics).
    type: bool
  cpu_metrics:
    description: C(--allow-cpu-metrics).
    type: bool
  metrics_config:
    description: One C(--metrics-config=name=value) per entry, by name.
    type: dict
  log_verbose:
    description: C(--log-verbose).
    type: int
  extra_args:
    description: Arguments written as given, after the others.
    type: list
    elements: str
  restricted_apis:
    description: The admin APIs the C(admin) term restricts.
    type: list
    elements: str
  admin_header:
    description: The admin header's name.
    type: str
  admin_key:
    description: The admin header's value, as the site passes it (the role, the secret in its root-only file).
    type: str
notes:
  - An unknown option or a value of the wrong type fails, naming the option.
"""

EXAMPLES = r"""
- name: Show the arguments of a Triton serving /srv/models
  ansible.builtin.debug:
    msg: "{{ query('tritonops.triton.tritonserver_args', model_repository='/srv/models', model_control_mode='none') }}"

# In a role's defaults/main.yml: the APIs every Triton of the project restricts.
# triton_server_restricted_apis: "{{ query('tritonops.triton.tritonserver_args', 'restricted_apis') }}"
# triton_server_http_port: "{{ lookup('tritonops.triton.tritonserver_args', 'http_port') }}"
"""

RETURN = r"""
_raw:
  description: The arguments (or API names), one element each; or the one fact a term names.
  type: list
  elements: raw
"""

# ansible-test (validate-modules) wants the imports below DOCUMENTATION, EXAMPLES and RETURN.
import importlib  # noqa: E402
import sys  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            args = importlib.import_module("tritonops.triton.args")
        except ImportError as e:
            raise AnsibleLookupError(
                f"tritonops.triton.tritonserver_args: the tritonops Python package is not importable by "
                f"{sys.executable} (the Python that runs Ansible): install the tritonops wheel of this "
                f"collection's release into it ({e})") from None
        part = [str(t) for t in terms]
        if len(part) == 1 and part[0] in args.FACTS and not kwargs:
            fact = args.FACTS[part[0]]
            return list(fact) if isinstance(fact, list) else [fact]
        if part not in ([], ["admin"]):
            raise AnsibleLookupError(f"tritonops.triton.tritonserver_args: terms {part}: expected none, "
                                     f"'admin' or one of {', '.join(args.FACTS)}")
        try:
            settings = args.settings_from_options(kwargs, admin_only=part == ["admin"])
        except ValueError as e:
            raise AnsibleLookupError(f"tritonops.triton.tritonserver_args: {e}") from None
        return args.restricted_args(settings) if part else args.triton_args(settings)
