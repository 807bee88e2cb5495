"""A model service's release store URL, and what an ``oci://REGISTRY/REPO`` store adds to its pods.

The release agents (init container ``release-sync`` and sidecar ``release-agent``,
:mod:`tritonops.k8s.stacks.triton.release_agent`) read an OCI registry with the credentials and CA the
Kubernetes way gives them:

``release.registryAuthSecret``     a Secret of type ``kubernetes.io/dockerconfigjson``; its
                                   ``.dockerconfigjson`` is mounted read-only at :data:`AUTH_PATH`
                                   (``TRITONOPS_REGISTRY_AUTH``), mode 0440, group fsGroup
``release.registryCaConfigMap``    a ConfigMap whose key ``ca.crt`` is the registry's CA bundle,
                                   mounted at :data:`CA_PATH` (``TRITONOPS_REGISTRY_CA``)
an ECR registry, no auth Secret    a token from ``ecr:GetAuthorizationToken`` signed with the pod's
                                   IRSA role, the service's ``modelReader`` (:data:`ECR_ACTIONS`)

The NetworkPolicy lets the pods reach the registry's port (443, or the URL's own):
:func:`tritonops.k8s.stacks.triton.exposure.model_store_ports`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from tritonops.core.errors import UsageError
from tritonops.k8s.config import ConfigError, ModelService, ReleaseSource
from tritonops.k8s.config_keys import check_object_name, config_key
from tritonops.stores import forms, schemes
from tritonops.stores.oci_api import ECR_HOST, split_url

Obj = dict[str, Any]
Loc = tuple[int | str, ...]

SCHEMES = schemes(network=True)  # the store kinds a pod reaches over the network
AUTH_KEY = ".dockerconfigjson"  # the key of a kubernetes.io/dockerconfigjson Secret
AUTH_DIR, AUTH_FILE = "/etc/tritonops/registry-auth", "config.json"
AUTH_PATH = f"{AUTH_DIR}/{AUTH_FILE}"
CA_KEY = "ca.crt"  # the key of release.registryCaConfigMap (as in kube-root-ca.crt)
CA_DIR = "/etc/tritonops/registry-ca"
CA_PATH = f"{CA_DIR}/{CA_KEY}"
AUTH_ENV, CA_ENV = "TRITONOPS_REGISTRY_AUTH", "TRITONOPS_REGISTRY_CA"  # tritonops.stores.oci_api reads them
# What the modelReader role of a service reading ECR needs: the token (account-wide: ECR scopes
# GetAuthorizationToken to no repository) and the repository's manifests and layers.
ECR_ACTIONS = ("ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")


def ecr_region(store: str) -> str | None:
    """The AWS region of an ``oci://`` store on an ECR registry; None for any other store."""
    if not store.startswith("oci://"):
        return None
    m = ECR_HOST.fullmatch(urlsplit(store).netloc)
    return m.group(2) if m else None


def ecr_read_policy(stores: list[str]) -> str:
    """The modelReader role's ECR statements for ``stores`` (``oci://`` on ECR): a token, and pulls of
    those repositories only (no push, no other repository)."""
    arns = []
    for store in stores:
        host, repo = split_url(store)
        m = ECR_HOST.fullmatch(host)
        if m is None:
            raise ValueError(f"{store}: not an ECR registry (ACCOUNT.dkr.ecr.REGION.amazonaws.com)")
        partition = "aws-cn" if host.endswith(".cn") else "aws"
        arns.append(f"arn:{partition}:ecr:{m.group(2)}:{m.group(1)}:repository/{repo}")
    statements = [{"Effect": "Allow", "Action": [ECR_ACTIONS[0]], "Resource": ["*"]},
                  {"Effect": "Allow", "Action": list(ECR_ACTIONS[1:]), "Resource": sorted(set(arns))}]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def check_store_url(svc: Any, loc: Loc, source: str | None) -> None:
    """``release.store``'s scheme, and an oci:// store's repository, auth and CA fields."""
    rel: ReleaseSource = svc.release
    parts = urlsplit(rel.store)

    def refuse(field: str, message: str) -> ConfigError:
        return ConfigError(config_key("triton", (*loc, field)), message, source)

    if parts.scheme not in SCHEMES or not parts.netloc:
        raise refuse("store", f"{rel.store!r}: a pod pulls from {forms(network=True)}")
    for field, value, kind in (("registryAuthSecret", rel.registry_auth_secret, "Secret"),
                               ("registryCaConfigMap", rel.registry_ca_config_map, "ConfigMap")):
        if value is not None and parts.scheme != "oci":
            raise refuse(field, f"only for an oci:// store (store is {rel.store!r})")
        if value is not None:
            check_object_name((*loc, field), value, kind, source)
    if parts.scheme != "oci":
        return
    try:
        split_url(rel.store)
    except UsageError as exc:
        raise refuse("store", str(exc).split(": ", 1)[1]) from exc
    ecr = ecr_region(rel.store) is not None
    if ecr and rel.registry_auth_secret is None and svc.model_reader is None:
        raise refuse("store", "an ECR registry is read with the service's modelReader role (IRSA: "
                              f"{', '.join(ECR_ACTIONS)}) or the credentials of registryAuthSecret: set one")
    if ecr and rel.registry_auth_secret is not None and svc.model_reader is not None:
        raise refuse("registryAuthSecret", "give either modelReader (IRSA: the pod's role gets ECR tokens) or "
                                           "registryAuthSecret, not both: the Secret's credentials would win")


def registry_env(rel: ReleaseSource) -> list[Obj]:
    """The agents' environment for an oci:// store: the auth file, the CA, an ECR registry's region."""
    env: list[Obj] = []
    if rel.registry_auth_secret:
        env.append({"name": AUTH_ENV, "value": AUTH_PATH})
    if rel.registry_ca_config_map:
        env.append({"name": CA_ENV, "value": CA_PATH})
    region = ecr_region(rel.store)
    if region and not rel.region:
        env.append({"name": "AWS_REGION", "value": region})  # the IRSA role's STS calls
    return env


def registry_mounts(rel: ReleaseSource) -> list[Obj]:
    mounts: list[Obj] = []
    if rel.registry_auth_secret:
        mounts.append({"name": "registry-auth", "mountPath": AUTH_DIR, "readOnly": True})
    if rel.registry_ca_config_map:
        mounts.append({"name": "registry-ca", "mountPath": CA_DIR, "readOnly": True})
    return mounts


def registry_volumes(rel: ReleaseSource) -> list[Obj]:
    volumes: list[Obj] = []
    if rel.registry_auth_secret:  # 0440, group fsGroup: the pod's uid reads it, no one else
        items = [{"key": AUTH_KEY, "path": AUTH_FILE}]
        volumes.append({"name": "registry-auth",
                        "secret": {"secretName": rel.registry_auth_secret, "items": items, "defaultMode": 0o440}})
    if rel.registry_ca_config_map:
        volumes.append({"name": "registry-ca", "configMap": {"name": rel.registry_ca_config_map,
                                                             "items": [{"key": CA_KEY, "path": CA_KEY}]}})
    return volumes


def registry_secrets(svc: ModelService, namespace: str) -> list[Obj]:
    """The Secret and ConfigMap an oci:// store's pods mount and the user creates (secrets-required.yaml)."""
    rel = svc.release
    if rel is None:
        return []
    host = urlsplit(rel.store).netloc
    out: list[Obj] = []
    if rel.registry_auth_secret:
        name = rel.registry_auth_secret
        out.append({
            "kind": "Secret", "name": name, "keys": [AUTH_KEY],
            "command": f"kubectl create secret generic {name} --namespace {namespace} "
                       f"--type=kubernetes.io/dockerconfigjson --from-file={AUTH_KEY}=./config.json",
            "note": f"read credentials of the registry {host}: config.json is a docker config.json whose auths "
                    f"names {host} (`docker login` or `podman login --authfile ./config.json {host}` writes one); "
                    "delete the file afterwards",
        })
    if rel.registry_ca_config_map:
        name = rel.registry_ca_config_map
        out.append({
            "kind": "ConfigMap", "name": name, "keys": [CA_KEY],
            "command": f"kubectl create configmap {name} --namespace {namespace} --from-file={CA_KEY}=./ca.crt",
            "note": f"the CA bundle (PEM) the certificate of the registry {host} is checked with",
        })
    return out
