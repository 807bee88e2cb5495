"""Run the rendered dev Triton pod for real with ``podman kube play`` (no API server needed).

What runs is ``tritonops render --stack triton --env dev``'s own Deployment (the stable pods of one
model service: init container ``release-sync``, ``triton``, sidecar ``release-agent``, their emptyDir
and configMap volumes, securityContext, env from Secrets), re-rendered at every call through
:func:`tritonops.k8s.render.build`. :func:`plan` changes exactly these, and lists them (``substituted``):

* every container's ``image`` becomes the local CPU Triton image (:mod:`devkit.triton_image`);
* the release store URL in the agents' argv becomes the local store (an HTTP mirror of a folder,
  the form ``tritonops release publish`` writes and the agent reads over ``http://``);
* the trusted-keys ConfigMap holds the caller's public key (the stack's keys sign nobody's test
  releases); it keeps the rendered object's name and keys;
* ``restartPolicy: OnFailure``: podman 4.3 gives init containers the pod's policy, and under
  ``Always`` restarts ``release-sync`` after it succeeds, then fails to remove it.

Podman 4.3 specifics (seen on the played pod, see tests/infra/kube_play):

* ``catatonit`` is kube play's pause process and ``CONTAINERS_CONF`` must name the devkit's
  containers.conf (runc, ulimits), as for every devkit container;
* ``env[].valueFrom.secretKeyRef`` reads a *podman* secret whose data is JSON ``{"KEY": "<base64>"}``
  (:func:`create_secrets` writes it from stdin, never argv). A ``kind: Secret`` document is accepted
  but stored in a form that its own env lookup then refuses ("secret ... is not valid JSON");
* ``$(VAR)`` in args is passed literally (kubelet expands it): the local image's entrypoint expands
  it as kubelet does (:data:`devkit.triton_image.KUBELET_EXPAND`);
* each emptyDir becomes a *named* volume (the pod's volume name) that outlives the pod and takes
  the image's owner and mode at the mount point; each configMap volume (``data`` and ``binaryData``
  from ``kind: ConfigMap`` documents in the same YAML) a volume named after the ConfigMap, reused
  when it exists. :func:`play` removes them before, :meth:`PlayedPod.down` after;
* readiness and startup probes are dropped; a liveness probe becomes a healthcheck running
  ``curl`` on port 0 (named ports are not resolved) from systemd timers, which a host without
  systemd never runs. Scheduling fields, ``resources.requests``, ``nvidia.com/gpu``,
  ``serviceAccountName`` and ``fsGroup`` have no podman meaning.

The store is served by a container of the same image on Podman's default network
(``python3 -m http.server``, read-only, uid 1000); the pod gets its own address on kube play's
network, which the host reaches directly (rootful Podman). Nothing binds a host port.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tritonops.core.triton_http import DEFAULT_HEADER

from devkit.hosts.podman import HostsError, podman, podman_env, require_podman
from devkit.triton_image import IMAGE, UID

Obj = dict[str, Any]
STORE_CONTAINER = "tritonops-kube-store"
STORE_PORT = 8080
STORE_PREFIX = "releases"  # the folder under the served root that the pod's store URL names
AGENT_PORT_NAME = "agent-metrics"
PLAYED_LABEL = "io.tritonops.kube-play"


class PlayError(HostsError):
    """The rendered pod could not be planned or played; the message names the object and field."""


def unmet() -> str | None:
    """Why this machine cannot play a pod (a reason to skip), or None."""
    if shutil.which("podman") is None or os.geteuid() != 0:
        return "needs root and podman (make apt)"
    if shutil.which("catatonit") is None:
        return "needs catatonit, kube play's pause process (make apt)"
    return None


@dataclass
class PodPlan:
    """The objects ``podman kube play`` gets, and what :func:`plan` substituted in them."""

    deployment: Obj
    config_maps: list[Obj]
    secrets: dict[str, dict[str, bool]]  # Secret name -> {key: optional} that the containers read
    substituted: list[str] = field(default_factory=list)  # "container.field: old -> new", for the report

    def documents(self) -> list[Obj]:
        return [*self.config_maps, self.deployment]

    def yaml(self) -> str:
        return yaml.safe_dump_all(self.documents(), sort_keys=False, width=200)

    @property
    def pod_spec(self) -> Obj:
        return dict(self.deployment["spec"]["template"]["spec"])

    def volume_names(self) -> list[str]:
        """The Podman volumes kube play 4.3 creates for this pod: emptyDirs by volume name, ConfigMaps by theirs."""
        out = []
        for v in self.pod_spec.get("volumes", []):
            if "emptyDir" in v:
                out.append(v["name"])
            elif "configMap" in v:
                out.append(v["configMap"]["name"])
        return out

    def containers(self) -> list[Obj]:
        spec = self.pod_spec
        return [*spec.get("initContainers", []), *spec["containers"]]

    def agent_arg(self, flag: str, container: str = "release-agent") -> str:
        """The value after ``flag`` in a release container's argv (``--channel``, ``--interval``)."""
        c = self.container(container)
        argv = [*c.get("command", []), *c.get("args", [])]
        for i, a in enumerate(argv[:-1]):
            if a == flag:
                return str(argv[i + 1])
        raise PlayError(f"Deployment {self.deployment['metadata']['name']}: container {container} has no {flag}")

    def container(self, name: str) -> Obj:
        for c in self.containers():
            if c["name"] == name:
                return c
        raise PlayError(f"Deployment {self.deployment['metadata']['name']}: no container {name!r}")


def _store_arg(c: Obj) -> str | None:
    argv = [*c.get("command", []), *c.get("args", [])]
    for i, a in enumerate(argv[:-1]):
        if a == "--store":
            return str(argv[i + 1])
    return None


def _trusted_dir(c: Obj) -> str | None:
    argv = [*c.get("command", []), *c.get("args", [])]
    keys = [str(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "--trusted-key"]
    return keys[0].rsplit("/", 1)[0] if keys else None


def plan(store_url: str, trusted_keys: Mapping[str, bytes], *, image: str = IMAGE, stack: str = "triton",
         env: str = "dev", service: str = "vision", stacks_dir: Path | None = None,
         user_objects: Mapping[str, Mapping[str, str]] | None = None) -> PodPlan:
    """Render ``stack``/``env`` and take the stable Deployment of ``service`` with the ConfigMaps it mounts.

    ``user_objects``: name -> data of the Secrets and ConfigMaps the pod mounts that the user creates
    (secrets-required.yaml: an oci:// store's registry auth Secret and CA ConfigMap)."""
    from tritonops.k8s.programs import render_set
    from tritonops.k8s.stack_file import load_stack_config

    # The render without its refusal of the user's unset release public key: the trusted-keys ConfigMap is
    # played with ``trusted_keys`` below, whatever the stack file holds.
    objects = render_set(stack, env, load_stack_config(stack, env, stacks_dir)).objects
    name = f"triton-{service}"
    where = f"tritonops render --stack {stack} --env {env}"
    found = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    if not found:
        have = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Deployment")
        raise PlayError(f"{where}: no Deployment {name} (has {', '.join(have) or 'none'})")
    dep = copy.deepcopy(found[0])
    spec = dep["spec"]["template"]["spec"]
    out = PodPlan(dep, [], {})
    # Podman 4.3 gives init containers the pod's restart policy: under Always (a Deployment's only
    # one) it restarts release-sync after it succeeds and then fails to remove it ("container state
    # improper"). OnFailure differs from Always only for a container that exits 0.
    out.substituted.append(f"restartPolicy: {spec.get('restartPolicy', 'Always (default)')} -> OnFailure")
    spec["restartPolicy"] = "OnFailure"
    rendered_store = None
    trusted_dir = None
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        out.substituted.append(f"{c['name']}.image: {c['image']} -> {image}")
        c["image"] = image
        store = _store_arg(c)
        if store is not None:
            rendered_store = store
            for fld in ("command", "args"):
                if fld in c:
                    c[fld] = [store_url if a == store else a for a in c[fld]]
            out.substituted.append(f"{c['name']}.command --store: {store} -> {store_url}")
        trusted_dir = trusted_dir or _trusted_dir(c)
        for e in c.get("env", []):
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                out.secrets.setdefault(ref["name"], {})[ref["key"]] = bool(ref.get("optional"))
    if rendered_store is None:
        raise PlayError(f"{where}: Deployment {name} runs no release agent (no --store): nothing to play")
    # The configMap volume mounted where the agent's --trusted-key files are.
    keys_volume = None
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        for m in c.get("volumeMounts", []):
            if trusted_dir and m["mountPath"] == trusted_dir:
                keys_volume = m["name"]
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    for vol in spec.get("volumes", []):
        _secret_volume_as_config_map(vol, out)
        cm = vol.get("configMap")
        if not cm:
            continue
        rendered = by_name.get(("ConfigMap", cm["name"]))
        if vol["name"] == keys_volume:
            items = [i["key"] for i in cm.get("items", [])] or list(trusted_keys)
            missing = sorted(set(items) - set(trusted_keys))
            if missing:
                raise PlayError(f"Deployment {name}: volume {vol['name']} wants keys {', '.join(missing)} of "
                                f"ConfigMap {cm['name']}; trusted_keys has {', '.join(sorted(trusted_keys))}")
            meta = copy.deepcopy(rendered["metadata"]) if rendered else {"name": cm["name"]}
            doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                   "data": {k: trusted_keys[k].decode() for k in items}}
            out.substituted.append(f"ConfigMap {cm['name']}.data: "
                                   f"{'the stack' + chr(39) + 's keys' if rendered else '(not rendered)'}"
                                   f" -> the caller's {', '.join(items)}")
            out.config_maps.append(doc)
        elif rendered is None and cm["name"] in (user_objects or {}):
            assert user_objects is not None
            out.config_maps.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm["name"]},
                                    "data": dict(user_objects[cm["name"]])})
        elif rendered is None:
            raise PlayError(f"Deployment {name}: volume {vol['name']} mounts ConfigMap {cm['name']}, which "
                            f"{where} does not create")
        else:
            out.config_maps.append(copy.deepcopy(rendered))
    return out


def _secret_volume_as_config_map(vol: Obj, out: PodPlan) -> None:
    """Podman 4.3's kube play panics on a ``secret`` volume (VolumeFromSecret without a secrets manager):
    it plays as a configMap volume of the same name and items (its data from ``user_objects``)."""
    sec = vol.pop("secret", None)
    if sec is None:
        return
    vol["configMap"] = {"name": sec["secretName"], **({"items": sec["items"]} if "items" in sec else {})}
    out.substituted.append(f"volume {vol['name']}: Secret {sec['secretName']} -> a ConfigMap of the same name and "
                           "items (podman 4.3 kube play panics on secret volumes)")


def registry_stacks(dest: Path, store: str, auth_secret: str, ca_config_map: str, *, env: str = "dev",
                    service: str = "vision", poll_seconds: int = 5) -> Path:
    """A copy of the project's stacks/ in ``dest`` whose ``service`` pulls the ``oci://`` ``store`` with the
    registry auth Secret and CA ConfigMap named (its s3-only fields dropped); ``plan(stacks_dir=...)`` it."""
    from tritonops.project import stacks_dir

    out = dest / "stacks"
    shutil.copytree(stacks_dir(), out, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    path = out / "triton" / f"Pulumi.{env}.yaml"
    doc = yaml.safe_load(path.read_text())
    (svc,) = [s for s in doc["config"]["tritonops-triton:modelServices"] if s["name"] == service]
    rel = svc["release"]
    for s3_only in ("region", "credentialsSecret", "s3Endpoint", "reports", "reportKeySecret"):
        rel.pop(s3_only, None)
    rel.update(store=store, registryAuthSecret=auth_secret, registryCaConfigMap=ca_config_map,
               pollSeconds=poll_seconds)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def bridge_gateway(network: str = "podman") -> str:
    """The host's address on a Podman network: a server bound there is reachable from the pods."""
    res = podman(["network", "inspect", network])
    subnets = [s for n in json.loads(res.stdout) for s in n.get("subnets") or []]
    gateways = [str(s["gateway"]) for s in subnets if s.get("gateway") and ":" not in str(s["gateway"])]
    if not gateways:
        raise PlayError(f"podman network {network}: no IPv4 gateway")
    return gateways[0]


# --- podman secrets ------------------------------------------------------------------------------


def create_secrets(pod: PodPlan, values: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Each Secret the pod reads, as a podman secret in 4.3's JSON form (data from stdin, never argv)."""
    created = []
    for name, keys in sorted(pod.secrets.items()):
        given = values.get(name, {})
        missing = sorted(k for k, optional in keys.items() if not optional and k not in given)
        if missing:
            raise PlayError(f"Secret {name}: the pod reads {', '.join(missing)}; no value given")
        data = {k: base64.b64encode(v.encode()).decode() for k, v in given.items()}
        podman(["secret", "rm", name], check=False)
        res = _podman_input(["secret", "create", "--label", f"{PLAYED_LABEL}=1", name, "-"], json.dumps(data))
        if res.returncode != 0:
            raise PlayError(f"podman secret create {name} failed: {res.stderr.strip()[-500:]}")
        created.append(name)
    return created


def _podman_input(args: list[str], text: str) -> subprocess.CompletedProcess[str]:
    require_podman()
    return subprocess.run(["podman", *args], input=text, capture_output=True, text=True, env=podman_env(), timeout=60)


# --- the store -----------------------------------------------------------------------------------


def container_ip(name: str) -> str:
    out = podman(["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name])
    ips = out.stdout.split()
    if not ips:
        raise PlayError(f"{name}: no address on a Podman network")
    return ips[0]


@dataclass
class StoreServer:
    """An HTTP mirror of ``root`` (read-only) on Podman's network; the store URL is ``url``."""

    root: Path
    name: str = STORE_CONTAINER
    ip: str = ""

    @property
    def folder(self) -> Path:
        """Where ``tritonops release publish --to`` writes (the URL's folder)."""
        return self.root / STORE_PREFIX

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{STORE_PORT}/{STORE_PREFIX}"

    def start(self, image: str = IMAGE) -> StoreServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        podman(["rm", "-f", self.name], check=False)
        podman(["run", "-d", "--name", self.name, "--label", f"{PLAYED_LABEL}=1", "--user", f"{UID}:{UID}",
                "--read-only", "--cap-drop=ALL", "-v", f"{self.root}:/srv:ro", image,
                "python3", "-m", "http.server", str(STORE_PORT), "--bind", "0.0.0.0", "--directory", "/srv"])
        self.ip = container_ip(self.name)
        wait_http(f"http://{self.ip}:{STORE_PORT}/", timeout=30, what=f"store server {self.name}", ok=(200, 404))
        return self

    def stop(self) -> None:
        podman(["rm", "-f", "-t", "2", self.name], check=False)


# --- the played pod ------------------------------------------------------------------------------


def wait_http(url: str, timeout: float, what: str, ok: tuple[int, ...] = (200,),
              headers: Mapping[str, str] | None = None) -> float:
    """Seconds until ``url`` answers one of ``ok``; PlayError after ``timeout``."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        code = http_status(url, headers)
        if code in ok:
            return time.monotonic() - start
        last = str(code)
        time.sleep(0.25)
    raise PlayError(f"{what}: {url} did not answer {ok} in {timeout:.0f}s (last: {last})")


def http_status(url: str, headers: Mapping[str, str] | None = None) -> int | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers or {})), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return None


@dataclass
class PlayedPod:
    """A pod ``podman kube play`` created from a :class:`PodPlan`; :meth:`down` removes all of it."""

    pod: PodPlan
    yaml_path: Path
    name: str = ""
    ip: str = ""
    secrets: list[str] = field(default_factory=list)
    started: float = 0.0

    def ctr(self, container: str) -> str:
        """Podman's name for one of the pod's containers."""
        return f"{self.name}-{container}"

    def inspect(self, container: str) -> Obj:
        res = podman(["inspect", self.ctr(container)])
        return dict(json.loads(res.stdout)[0])

    def logs(self, container: str, tail: int = 60) -> str:
        res = podman(["logs", "--tail", str(tail), self.ctr(container)], check=False)
        return res.stdout + res.stderr

    def exec(self, container: str, *argv: str) -> str:
        res = podman(["exec", self.ctr(container), *argv], check=False)
        if res.returncode != 0:
            raise PlayError(f"podman exec {self.ctr(container)} {' '.join(argv)}: {res.stderr.strip()[-500:]}")
        return res.stdout

    def url(self, port_name: str) -> str:
        for c in self.pod.pod_spec["containers"]:
            for p in c.get("ports", []):
                if p.get("name") == port_name:
                    return f"http://{self.ip}:{p['containerPort']}"
        raise PlayError(f"Deployment {self.pod.deployment['metadata']['name']}: no port named {port_name}")

    def down(self) -> None:
        """Remove the pod, its containers and anonymous volumes, the secrets and the YAML's volumes."""
        if self.name:
            vols = []
            res = podman(["pod", "inspect", "--format", "{{range .Containers}}{{.Name}} {{end}}", self.name],
                         check=False)
            for ctr in res.stdout.split():
                mounts = podman(["inspect", "--format", "{{range .Mounts}}{{.Type}}={{.Name}} {{end}}", ctr],
                                check=False).stdout.split()
                vols += [m.split("=", 1)[1] for m in mounts if m.startswith("volume=") and m.split("=", 1)[1]]
            podman(["pod", "rm", "-f", "-t", "5", self.name], check=False)
            vols += self.pod.volume_names()
            for v in sorted(set(vols)):
                podman(["volume", "rm", "-f", v], check=False)
        for s in self.secrets:
            podman(["secret", "rm", s], check=False)


def play(pod: PodPlan, workdir: Path, secret_values: Mapping[str, Mapping[str, str]]) -> PlayedPod:
    """Write the kube YAML, create the secrets, ``podman kube play`` it; returns once the pod exists."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "kube-play.yaml"
    path.write_text(pod.yaml())
    played = PlayedPod(pod, path)
    played.secrets = create_secrets(pod, secret_values)
    # kube play 4.3 makes each emptyDir a *named* volume (the pod's volume name) and each ConfigMap
    # volume one named after the ConfigMap, and reuses one that exists: an "empty" dir would hold an
    # earlier pod's releases, root-owned, and a ConfigMap volume earlier data. Start from none.
    for v in pod.volume_names():
        podman(["volume", "rm", "-f", v], check=False)
    played.started = time.monotonic()
    res = podman(["kube", "play", "--replace", "--log-driver", "k8s-file", str(path)], check=False, timeout=300)
    if res.returncode != 0:
        played.down()
        raise PlayError(f"podman kube play {path} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    pod_id = res.stdout.split("Pod:", 1)[1].split()[0] if "Pod:" in res.stdout else ""
    if not pod_id:
        played.down()
        raise PlayError(f"podman kube play {path}: no pod in its output: {res.stdout[-500:]}")
    played.name = podman(["pod", "inspect", "--format", "{{.Name}}", pod_id]).stdout.strip()
    infra = podman(["pod", "inspect", "--format", "{{.InfraContainerID}}", played.name]).stdout.strip()
    played.ip = container_ip(infra)
    return played


def wait_ready(played: PlayedPod, timeout: float, on_sample: Callable[[float, Obj], None] | None = None) -> float:
    """Seconds from ``kube play`` until the sidecar's /ready answers 200 (the readiness the Service uses)."""
    ready_url = f"{played.url(AGENT_PORT_NAME)}/ready"
    deadline = played.started + timeout
    while time.monotonic() < deadline:
        code = http_status(ready_url)
        if on_sample:
            on_sample(time.monotonic() - played.started, {"ready": code})
        if code == 200:
            return time.monotonic() - played.started
        state = podman(["pod", "inspect", "--format", "{{.State}}", played.name], check=False).stdout.strip()
        if state in ("Exited", "Dead", "Error"):
            break
        time.sleep(0.25)
    logs = "\n".join(f"--- {c['name']}\n{played.logs(c['name'], 30)}" for c in played.pod.containers())
    raise PlayError(f"pod {played.name}: {ready_url} not 200 within {timeout:.0f}s\n{logs}")


# --- `make demo-k8s` -----------------------------------------------------------------------------


def demo(console: Any, keep: bool = False, workdir: Path | None = None) -> Any:
    """Publish the sample repository, play the rendered dev pod on it, smoke-check it; print each step.

    Returns the smoke report. ``keep`` leaves the pod and the store running (and says how to remove them).
    """
    import secrets
    import shutil

    from tritonops.release import publish as pub
    from tritonops.release_format import signing
    from tritonops.triton.smoke import report_table, smoke

    from devkit import triton_image
    from devkit.demo import SAMPLE, pipeline_table
    from devkit.hosts.images import cache_dir

    started = time.monotonic()
    work = workdir or cache_dir().parent / "kube-demo"
    shutil.rmtree(work, ignore_errors=True)
    with console.status("image: checking the local CPU Triton image") as status:
        built = triton_image.build(step=lambda m: status.update(f"image: {m}"))
    console.print(f"[1/5] image {triton_image.IMAGE} {'built' if built else 'cached'} "
                  f"({time.monotonic() - started:.0f}s)")
    key, pub_key = signing.keygen(work / "keys" / "release.key", work / "keys" / "release.pub")
    store = StoreServer(work / "store").start()
    played: PlayedPod | None = None
    try:
        pod = plan(store.url, {"release.pub": pub_key.read_bytes()})
        channel = pod.agent_arg("--channel")
        out = pub.publish(SAMPLE, str(store.folder), channel, key, target="cpu")
        console.print(f"[2/5] tritonops release publish examples/model_repository --store {store.folder} --channel "
                      f"{channel}: release {out['release']}, {out['files']} files (served at {store.url})")
        console.print("[3/5] tritonops render --stack triton --env dev: Deployment "
                      f"{pod.deployment['metadata']['name']}, substituted:")
        for line in pod.substituted:
            console.print(f"      {line}", highlight=False)
        token = secrets.token_urlsafe(24)
        values = {name: {k: token if name == "triton-admin-api" else "unused-by-an-http-store"
                         for k, optional in keys.items() if not optional} for name, keys in pod.secrets.items()}
        with console.status("podman kube play: init container, then triton and the release agent"):
            played = play(pod, work / "play", values)
            ready = wait_ready(played, timeout=600)
        console.print(f"[4/5] podman kube play: pod {played.name} at {played.ip}, /ready after {ready:.1f}s "
                      f"(release {out['release']} installed by the init container, golden gate passed)")
        http = played.url("http")
        console.print(f"[5/5] tritonops smoke {http} --repository examples/model_repository")
        report = smoke(http, repository=SAMPLE, metrics_url=f"{played.url('metrics')}/metrics",
                       headers={DEFAULT_HEADER: token})
        console.print(report_table(report))
        console.print(pipeline_table(http.removeprefix("http://"), SAMPLE))
        if keep:
            console.print(f"kept: pod {played.name} ({http}), store {store.name}. Remove them with `podman pod rm -f "
                          f"{played.name}; podman rm -f {store.name}; podman secret rm "
                          f"{' '.join(played.secrets)}`.")
        console.print(f"demo-k8s done in {time.monotonic() - started:.0f}s")
        return report
    finally:
        if not keep:
            if played is not None:
                played.down()
            store.stop()
