"""What the triton stack's objects name but no stack creates: the user creates it, with the command given.

``tritonops render`` writes these entries into ``secrets-required.yaml`` next to the Secrets whose
values live in Pulumi secret config:

- ``secrets``: the release store's reader credentials (``release.credentialsSecret``), the
  Ingress TLS Secret (``ingress.tlsSecret``: the platform stack installs no cert-manager), and the
  trusted-keys Secret or ConfigMap a service names without ``publicKeys``. Each entry gives the
  ``kubectl create ...`` command that creates it; values are read from files, never typed on a
  command line, and no value is written anywhere.
- ``prerequisites``: what the cluster must already run for the objects to be accepted and served:
  the IngressClass of ``ingress.mode: ingress`` (ingress-nginx), the Gateway API CRDs and the Gateway
  of ``ingress.mode: gateway``, the PersistentVolumeClaim of a ``modelRepository.type: pvc``.

:func:`user_values` are the values inside the stack's config that only the user can give: each trusted
public key a service's ``publicKeys`` leaves out of ``keys`` (no stack file ships a key whose private half
nobody has). Each comes with the ``pulumi config set --path`` command that reads it from the file
``tritonops release keygen`` wrote; ``render --check-config`` prints it, render and the program refuse
until it is set (tritonops.k8s.contract.missing_user_values).

Pure: no Pulumi, no cluster access.
"""

from __future__ import annotations

from typing import Any

from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.labels import name_of
from tritonops.k8s.registry_source import registry_secrets
from tritonops.k8s.stacks.triton.release_agent import REPORT_KEY, trusted_keys_config_maps

Obj = dict[str, Any]

AWS_KEYS = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]  # AWS_SESSION_TOKEN optional


def user_secrets(cfg: TritonStackConfig) -> list[Obj]:
    """Secrets (and trusted-keys ConfigMaps) the user creates before ``pulumi up``, one entry per object."""
    ns = cfg.namespace
    out: dict[tuple[str, str], Obj] = {}

    def add(kind: str, name: str, keys: list[str], command: str, note: str) -> None:
        entry = out.setdefault(
            (kind, name),
            {"kind": kind, "name": name, "namespace": ns, "keys": [], "command": command, "note": note},
        )
        entry["keys"] = sorted(set(entry["keys"]) | set(keys))

    created = {o["metadata"]["name"] for o in trusted_keys_config_maps(cfg)}  # by the stack, from publicKeys
    for svc in cfg.model_services:
        rel = svc.release
        if rel is None:
            continue
        if rel.credentials_secret:
            env_file = f"{rel.credentials_secret}.env"
            add(
                "Secret",
                rel.credentials_secret,
                AWS_KEYS,
                f"kubectl create secret generic {rel.credentials_secret} --namespace {ns} --from-env-file={env_file}",
                f"S3 read credentials of {rel.store} for {name_of(svc)}'s release agent: {env_file} holds "
                "AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines (AWS_SESSION_TOKEN optional); "
                "delete the file afterwards",
            )
        if rel.report_key_secret:
            add(
                "Secret",
                rel.report_key_secret,
                [REPORT_KEY],
                f"kubectl create secret generic {rel.report_key_secret} --namespace {ns} "
                f"--from-file={REPORT_KEY}=./report.key",
                f"the private key {name_of(svc)}'s release agents sign their rollout status reports with (the "
                "root's 'report' role; `tritonops release keygen` writes one); delete the file afterwards",
            )
        for obj in registry_secrets(svc, ns):  # an oci:// store's auth Secret and CA ConfigMap
            add(obj["kind"], obj["name"], obj["keys"], obj["command"], obj["note"])
        tk = rel.trusted_keys
        if tk.public_keys is not None or (tk.config_map is not None and tk.config_map in created):
            continue  # the stack creates the ConfigMap (release_agent.trusted_keys_config_maps)
        files = " ".join(f"--from-file={k}=./{k}" for k in tk.keys)
        if tk.config_map:
            add(
                "ConfigMap",
                tk.config_map,
                list(tk.keys),
                f"kubectl create configmap {tk.config_map} --namespace {ns} {files}",
                "public keys the releases are signed with (`tritonops release keygen` writes them); or set "
                "release.trustedKeys.publicKeys and the stack creates it",
            )
        elif tk.secret:
            add(
                "Secret",
                tk.secret,
                list(tk.keys),
                f"kubectl create secret generic {tk.secret} --namespace {ns} {files}",
                "public keys the releases are signed with (`tritonops release keygen` writes them)",
            )
    if cfg.ingress.mode == "ingress" and cfg.ingress.tls_secret:
        add(
            "Secret",
            cfg.ingress.tls_secret,
            ["tls.crt", "tls.key"],
            f"kubectl create secret tls {cfg.ingress.tls_secret} --namespace {ns} --cert=tls.crt --key=tls.key",
            f"TLS certificate of *.{cfg.ingress.host_suffix} for the Ingresses (the platform stack installs no "
            "cert-manager)",
        )
    return list(out.values())


def public_key_path(index: int, key: str) -> str:
    """The Pulumi property path of trusted key ``key`` of model service ``index`` (``["..."]``: the key has dots)."""
    return f'modelServices[{index}].release.trustedKeys.publicKeys["{key}"]'


def user_values(cfg: TritonStackConfig) -> dict[str, str]:
    """Property path -> ``pulumi config set`` command of each trusted key a service's ``publicKeys`` lacks.

    The PEM is read from the file named like the key (``tritonops release keygen release-signing.key
    release.pub`` writes ``release.pub``): Pulumi reads a value piped to its standard input whole, the
    way to set a multi-line value (https://www.pulumi.com/docs/iac/cli/commands/pulumi_config_set/, read
    2026-12-07), so nothing is pasted and the value cannot be taken for a flag. Services naming a
    ConfigMap without ``publicKeys`` mount what another service's ``publicKeys`` gives it: nothing to set.
    """
    out = {}
    for i, svc in enumerate(cfg.model_services):
        tk = svc.release.trusted_keys if svc.release is not None else None
        if tk is None or tk.public_keys is None:
            continue
        for key in tk.keys:
            if key not in tk.public_keys:
                path = public_key_path(i, key)
                out[path] = f"pulumi config set --path '{path}' < {key}"
    return out


def prerequisites(cfg: TritonStackConfig) -> list[Obj]:
    """Cluster-wide objects and CRDs the triton stack's objects need and no stack here installs."""
    out: list[Obj] = []
    if cfg.ingress.mode == "ingress":
        out.append(
            {
                "kind": "IngressClass",
                "name": cfg.ingress.class_name,
                "check": f"kubectl get ingressclass {cfg.ingress.class_name}",
                "note": "the ingress controller the Ingresses name (ingress-nginx: its canary and "
                "request-counter annotations are what the stack uses)",
            }
        )
    elif cfg.ingress.mode == "gateway":
        out += [
            {
                "kind": "CustomResourceDefinition",
                "name": f"gateway.networking.k8s.io/{kind}",
                "check": f"kubectl get crd {plural}.gateway.networking.k8s.io",
                "note": "Gateway API (standard channel), installed with the cluster's Gateway controller",
            }
            for kind, plural in (("Gateway", "gateways"), ("HTTPRoute", "httproutes"), ("GRPCRoute", "grpcroutes"))
        ]
        if any(s.autoscaling.enabled and s.autoscaling.min_replicas == 0 for s in cfg.model_services):
            out.append(
                {
                    "kind": "CustomResourceDefinition",
                    "name": "gateway.envoyproxy.io/BackendTrafficPolicy",
                    "check": "kubectl get crd backendtrafficpolicies.gateway.envoyproxy.io",
                    "note": "Envoy Gateway's (the cluster contract's Envoy Gateway command): the wake routing of "
                    "a service that may scale to zero",
                }
            )
        gw_ns = cfg.ingress.gateway_namespace or cfg.namespace
        out.append(
            {
                "kind": "Gateway",
                "name": cfg.ingress.gateway_name,
                "namespace": gw_ns,
                "check": f"kubectl get gateways.gateway.networking.k8s.io --namespace {gw_ns} "
                f"{cfg.ingress.gateway_name}",
                "note": "the Gateway the routes attach to; its listeners must allow routes from namespace "
                f"{cfg.namespace}",
            }
        )
    for svc in cfg.model_services:
        repo = svc.model_repository
        if repo is not None and repo.type == "pvc" and repo.claim_name:
            out.append(
                {
                    "kind": "PersistentVolumeClaim",
                    "name": repo.claim_name,
                    "namespace": cfg.namespace,
                    "check": f"kubectl get pvc --namespace {cfg.namespace} {repo.claim_name}",
                    "note": f"the model repository {name_of(svc)} mounts read-only (ReadOnlyMany or ReadWriteMany "
                    "when its pods spread over nodes)",
                }
            )
    return out
