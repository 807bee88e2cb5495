"""The bad-input table: every command of ``tritonops`` and of the node agent, fed what users get wrong.

Exit codes (infra/tritonops/core/exitcodes.py): 2 for a bad command line or an unusable input the user named
(missing, empty, binary, a folder or FIFO or device where a file belongs, oversized, malformed, a
number that is NaN, infinite or out of range, an unknown or hostile name); 1 for findings (a model
repository with errors, a release refused); 3 when a server or store could not be reached or broke.
Closed ports are loopback ports nobody listens on. Nothing here starts Podman or a server.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from badinput_runner import Case
from tritonops.core.names import MANIFEST_FILE

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "model_repository"
STACKS = ROOT / "stacks"
DIGEST = "ab" * 32
BINARY = bytes(range(256)) * 8 + b"\xff\xfe\x00\x00"
BIG = 70 << 20  # more than any input file of the project may be (a manifest: 64 MiB)


# --- inputs ---------------------------------------------------------------------------------------

def _big(path: Path, size: int = BIG) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: cheap to make, still this many bytes to read


def _special(path: Path, kind: str) -> None:
    """Put something unreadable where a file belongs (the tests run as root: chmod 000 is no bar)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(path.parent / "no-such-target")
    elif kind == "dir":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(BINARY)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "malformed":
        path.write_text('{"cases": [ {"name": "x", ')
    elif kind == "list":
        path.write_text("[1, 2, 3]\n")
    elif kind == "big":
        _big(path)
    else:
        raise AssertionError(kind)


KINDS = ("fifo", "zero", "dangling", "dir", "binary", "empty", "malformed", "list", "big")


def kit(tmp: Path) -> None:
    """Inputs every case can name: {tmp}/repo (the sample repository), a file of each bad kind."""
    shutil.copytree(SAMPLE, tmp / "repo", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "precious.txt").write_text("the operator's own file\n")
    for kind in ("fifo", "zero", "dangling", "dir", "binary", "empty", "malformed", "list"):
        _special(tmp / f"{kind}.json", kind)


def with_(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        kit(tmp)
        for step in steps:
            step(tmp)
    return setup


def put(rel: str, kind: str) -> Callable[[Path], None]:
    return lambda tmp: _special(tmp / rel, kind)


def write(rel: str, text: str | bytes) -> Callable[[Path], None]:
    def step(tmp: Path) -> None:
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return step


def link(rel: str, target: str) -> Callable[[Path], None]:
    def step(tmp: Path) -> None:
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target.format(tmp=tmp))
    return step


def mkdirs(*rels: str) -> Callable[[Path], None]:
    return lambda tmp: [(tmp / r).mkdir(parents=True, exist_ok=True) for r in rels]  # type: ignore[func-returns-value]


def cyclic(tmp: Path) -> None:
    """Two ensembles that call each other (A -> B -> A): Triton refuses to load either."""
    repo = tmp / "repo"
    shutil.copytree(repo / "pipeline", repo / "pipeline2")
    for name, other in (("pipeline", "pipeline2"), ("pipeline2", "pipeline")):
        cfg = repo / name / "config.pbtxt"
        text = cfg.read_text().replace('name: "pipeline"', f'name: "{name}"', 1)
        cfg.write_text(text.replace('model_name: "mlp"', f'model_name: "{other}"'))


def version_dir(name: str) -> Callable[[Path], None]:
    def step(tmp: Path) -> None:
        shutil.copytree(tmp / "repo" / "mlp" / "1", tmp / "repo" / "mlp" / name)
    return step


def edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def step(tmp: Path) -> None:
        p = tmp / rel
        p.write_text(p.read_text().replace(old, new, 1))
    return step


def pointer(channel: str = "canary", history: list | None = None) -> Callable[[Path], None]:
    """A signed channel pointer (version 1, valid a day) to release r1 (a manifest without files, signed for
    canary and stable), signed by {tmp}/keys/release.key."""
    def setup(tmp: Path) -> None:
        import hashlib
        import time

        from tritonops.release_format import manifest, trust

        if not (tmp / "keys" / "release.key").exists():
            keys(tmp)
        text = manifest.text({}, {}, "r1", ["canary", "stable"]).encode()
        digest = hashlib.sha256(text).hexdigest()
        (tmp / "store" / "releases" / digest).mkdir(parents=True, exist_ok=True)
        (tmp / "store" / "releases" / digest / "manifest.json").write_bytes(text)
        (tmp / "store" / "releases" / digest / "manifest.json.sigs").write_bytes(
            trust.sign_detached(text, [tmp / "keys" / "release.key"]))
        doc = {"type": "channel", "channel": channel, "version": 1, "expires": trust.format_time(time.time() + 86400),
               "release": "r1", "digest": digest, "length": len(text), "root_version": 0,
               "history": history or []}
        dest = tmp / "store" / "channels" / f"{channel}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(trust.sign_envelope(doc, [tmp / "keys" / "release.key"]))
    return setup


def keys(tmp: Path) -> None:
    from tritonops.release_format import signing

    signing.keygen(tmp / "keys" / "release.key", tmp / "keys" / "release.pub")


def node(tmp: Path) -> None:
    """A node's layout with one installed, gated release r0: {tmp}/models -> releases/r0."""
    from tritonops.agent import releases
    from tritonops.release_format import manifest

    rel = tmp / "releases" / "r0"
    shutil.copytree(tmp / "repo", rel)
    (rel / MANIFEST_FILE).write_text(manifest.text(manifest.tree_files(rel)))
    releases.activate(tmp / "models", tmp / "releases", "r0")
    releases.mark(tmp / "releases", "r0")


def staged(release: str = "r1") -> Callable[[Path], None]:
    """A pushed copy at releases/.staging-<release>, with its manifest."""
    def step(tmp: Path) -> None:
        from tritonops.release_format import manifest

        st = tmp / "releases" / f".staging-{release}"
        shutil.copytree(tmp / "repo", st)
        (st / MANIFEST_FILE).write_text(manifest.text(manifest.tree_files(st)))
    return step


def stack_copy(stack: str, env: str, kind_or_text: str) -> Callable[[Path], None]:
    def step(tmp: Path) -> None:
        shutil.copytree(STACKS / stack, tmp / "stacks" / stack)
        path = tmp / "stacks" / stack / f"Pulumi.{env}.yaml"
        if kind_or_text in KINDS or kind_or_text == "missing":
            path.unlink()
            if kind_or_text != "missing":
                _special(path, kind_or_text)
        else:
            path.write_text(kind_or_text)
    return step


def render_call(stack: str, env: str) -> Callable[[Path], object]:
    def call(tmp: Path) -> object:
        from tritonops.k8s.render import render

        return render(stack, env, tmp / "out", stacks_dir=tmp / "stacks")
    return call


def _opt_names(opt: str) -> tuple[str, ...]:
    """How a message may name an option: --budget-ms, budget-ms or budget_ms."""
    return opt, opt.lstrip("-"), opt.lstrip("-").replace("-", "_")


# --- the table ------------------------------------------------------------------------------------

T = "{tmp}"
R = "{tmp}/repo"
CLOSED = "127.0.0.1:{port}"
NO_PODMAN = {"PATH": "/nonexistent"}  # whatever a case does, Podman cannot start
LAYOUT = ("--link", f"{T}/models", "--releases", f"{T}/releases")
PULL = (*LAYOUT, "--store", f"{T}/store", "--channel", "canary", "--trusted-key", f"{T}/keys/release.pub")


def _cases() -> list[Case]:
    c: list[Case] = []
    add = c.append

    # validate (helper G: infra/tritonops/model_repo/validate.py, spec.py, pbtxt.py)
    g = "G"
    add(Case("validate-missing", ("validate", f"{T}/nope"), names=("nope",), owner=g, setup=kit))
    add(Case("validate-empty-string", ("validate", ""), names=("path", "empty"), owner=g, setup=kit))
    add(Case("validate-file", ("validate", f"{T}/empty.json"), names=("empty.json",), owner=g, setup=kit))
    add(Case("validate-fifo", ("validate", f"{T}/fifo.json"), names=("fifo.json",), owner=g, setup=kit))
    add(Case("validate-target-unknown", ("validate", R, "--target", "tpu"), names=("target",), owner=g, setup=kit))
    add(Case("validate-config-name-hostile", ("validate", R, "--config-name", "../../etc/passwd"),
             names=("config-name", "config_name", "passwd"), owner=g, setup=kit))
    for kind in ("binary", "fifo", "zero", "dir", "dangling", "empty", "big"):
        add(Case(f"validate-config-{kind}", ("validate", R), expect=1, names=("config.pbtxt",), owner=g,
                 setup=with_(put("repo/mlp/config.pbtxt", kind))))
    for kind in ("fifo", "zero", "dir", "binary", "malformed", "list", "big"):
        add(Case(f"validate-golden-{kind}", ("validate", R), expect=1, names=("golden.json",), owner=g,
                 setup=with_(put("repo/mlp/golden.json", kind))))
    add(Case("validate-cyclic-ensemble", ("validate", R), expect=1, names=("cycl", "pipeline2"), owner=g,
             setup=with_(cyclic)))
    add(Case("validate-version-huge", ("validate", R), expect=1, names=("99999999999999999999999",), owner=g,
             setup=with_(version_dir("99999999999999999999999"))))
    add(Case("validate-version-nonascii-digit", ("validate", R), expect=1, names=("version", "\u0661"), owner=g,
             setup=with_(version_dir("\u0661"))))
    add(Case("validate-model-name-hostile", ("validate", R), expect=1, names=("$(reboot)",), owner=g,
             setup=with_(lambda t: shutil.copytree(t / "repo" / "mlp", t / "repo" / "$(reboot)"))))
    # what Triton refuses at load time: an unknown backend, a misspelt field, a GPU id no GPU has (exit 1, the field)
    for cid, was, now, named in (("validate-backend-unknown", 'backend: "python"', 'backend: "onnx"', "onnxruntime"),
                                 ("validate-field-misspelt", "max_batch_size", "max_batch", "max_batch_size"),
                                 ("validate-gpu-id-negative", "kind: KIND_CPU", "kind: KIND_GPU\n  gpus: -1",
                                  "instance_group.0.gpus.0")):
        add(Case(cid, ("validate", R), expect=1, names=(named,), owner=g,
                 setup=with_(edit("repo/mlp/config.pbtxt", was, now))))

    # manifest (helper A: infra/tritonops/cli/model_repo.py, infra/tritonops/release_format/manifest.py)
    add(Case("manifest-missing", ("manifest", f"{T}/nope"), names=("nope",), setup=kit))
    add(Case("manifest-empty-string", ("manifest", ""), names=("path", "empty"), setup=kit))
    add(Case("manifest-file", ("manifest", f"{T}/precious.txt"), names=("precious.txt",), setup=kit))
    for kind in ("fifo", "zero", "dangling", "dir", "binary", "empty", "malformed", "list", "big"):
        add(Case(f"manifest-compare-{kind}", ("manifest", R, "--compare", f"{T}/{kind}.json"),
                 names=(f"{kind}.json",), setup=with_(put("big.json", "big")) if kind == "big" else kit))
    add(Case("manifest-compare-missing", ("manifest", R, "--compare", f"{T}/nope.json"), names=("nope.json",),
             setup=kit))
    add(Case("manifest-compare-bad-digest", ("manifest", R, "--compare", f"{T}/m.json"), names=("m.json",),
             setup=with_(write("m.json", '{"algorithm": "sha256", "files": {"a/config.pbtxt": "xyz"}}'))))
    add(Case("manifest-compare-hostile-path", ("manifest", R, "--compare", f"{T}/m.json"), names=("m.json",),
             setup=with_(write("m.json", json.dumps({"algorithm": "sha256", "files": {"../../etc/passwd": DIGEST}})))))
    add(Case("manifest-compare-wrong-types", ("manifest", R, "--compare", f"{T}/m.json"), names=("m.json",),
             setup=with_(write("m.json", '{"algorithm": "sha256", "files": {"a": 5}}'))))
    add(Case("manifest-write-through-symlink", ("manifest", R, "--write"), names=("MANIFEST.sha256.json",),
             setup=with_(link("repo/MANIFEST.sha256.json", f"{T}/precious.txt"))))
    add(Case("manifest-write-onto-folder", ("manifest", R, "--write"), names=("MANIFEST.sha256.json",),
             setup=with_(mkdirs("repo/MANIFEST.sha256.json/keep"), write("repo/MANIFEST.sha256.json/keep/x", "x"))))
    add(Case("manifest-tree-with-fifo", ("manifest", R), expect=0, setup=with_(put("repo/mlp/fifo", "fifo"))))

    # smoke (argument handling: helper A, infra/tritonops/cli/load.py; checks against a server: helper H)
    add(Case("smoke-empty-url", ("smoke", ""), names=("url", "''"), setup=kit))
    add(Case("smoke-bad-scheme", ("smoke", "ftp://127.0.0.1:21"), names=("ftp",), setup=kit))
    add(Case("smoke-bad-port", ("smoke", "http://127.0.0.1:notaport"), names=("notaport", "port"), setup=kit))
    add(Case("smoke-repository-missing", ("smoke", f"http://{CLOSED}", "--repository", "/nonexistent"),
             names=("/nonexistent",), setup=kit))
    add(Case("smoke-repository-file", ("smoke", f"http://{CLOSED}", "--repository", f"{T}/precious.txt"),
             names=("precious.txt",), setup=kit))
    add(Case("smoke-header-with-a-value", ("smoke", f"http://{CLOSED}", "--header", "triton-admin-key=secret"),
             names=("--header", "never the command line"), setup=kit))
    add(Case("smoke-admin-key-file-missing", ("smoke", f"http://{CLOSED}", "--admin-key-file", f"{T}/nope.key"),
             names=("--admin-key-file", "nope.key"), setup=kit))
    add(Case("smoke-ca-missing", ("smoke", f"grpcs://{CLOSED}", "--ca", f"{T}/nope.pem"), names=("nope.pem",),
             setup=kit))
    add(Case("smoke-closed-port", ("smoke", f"http://{CLOSED}"), expect=1, names=("127.0.0.1",), owner="H",
             setup=kit))
    add(Case("smoke-closed-port-grpc", ("smoke", f"grpc://{CLOSED}"), expect=1, names=("127.0.0.1",), owner="H",
             setup=kit))

    # serve (helper E: infra/tritonops/triton/server.py); only argument errors, no server is started
    e = "E"
    add(Case("serve-missing", ("serve", f"{T}/nope"), names=("nope",), owner=e, setup=kit))
    add(Case("serve-empty-string", ("serve", ""), names=("repository", "empty"), owner=e, setup=kit))
    add(Case("serve-file", ("serve", f"{T}/precious.txt"), names=("precious.txt",), owner=e, setup=kit))
    add(Case("serve-mode-unknown", ("serve", R, "--model-control-mode", "sometimes"),
             names=("model-control-mode", "sometimes"), owner=e, setup=kit))

    # bench and tune (helper H: infra/tritonops/triton/bench.py, tune.py, cli/load.py)
    h = "H"
    bench = ("bench", "mlp", "--url", CLOSED)
    add(Case("bench-closed-port", bench, expect=3, names=("127.0.0.1",), owner=h, setup=kit))
    add(Case("bench-closed-port-grpc", ("bench", "mlp", "--url", CLOSED, "--protocol", "grpc"), expect=3,
             names=("127.0.0.1",), owner=h, setup=kit))
    for opt, value in (("--rate", "nan"), ("--rate", "inf"), ("--rate", "-1"), ("--duration", "nan"),
                       ("--duration", "-1"), ("--concurrency", "0"), ("--requests", "-5"), ("--batch-size", "0"),
                       ("--protocol", "ftp"), ("--mode", "sideways"), ("--concurrency", "x")):
        extra = ("--mode", "open") if opt == "--rate" else ()
        add(Case(f"bench{opt}-{value}", (*bench, *extra, opt, value), names=_opt_names(opt),
                 owner=h, setup=kit))
    add(Case("bench-url-empty", ("bench", "mlp", "--url", ""), names=("url",), owner=h, setup=kit))
    add(Case("bench-model-empty", ("bench", "", "--url", CLOSED), names=("model",), owner=h, setup=kit))
    tune = ("tune", "mlp", "--repository", R, "--url", CLOSED, "--no-write", "--plot", f"{T}/cwd/p.png")
    add(Case("tune-closed-port", tune, expect=3, names=("127.0.0.1",), owner=h, setup=kit))
    add(Case("tune-repository-missing", ("tune", "mlp", "--repository", f"{T}/nope", "--url", CLOSED),
             names=("nope",), owner=h, setup=kit))
    add(Case("tune-model-unknown", ("tune", "nosuch", "--repository", R, "--url", CLOSED), names=("nosuch",),
             owner=h, setup=kit))
    add(Case("tune-model-hostile", ("tune", "../repo/mlp", "--repository", R, "--url", CLOSED),
             names=("../repo/mlp", "model"), owner=h, setup=kit))
    add(Case("tune-config-binary", ("tune", "mlp", "--repository", R, "--url", CLOSED), names=("config.pbtxt",),
             owner=h, setup=with_(put("repo/mlp/config.pbtxt", "binary"))))
    add(Case("tune-config-fifo", ("tune", "mlp", "--repository", R, "--url", CLOSED), names=("config.pbtxt",),
             owner=h, setup=with_(put("repo/mlp/config.pbtxt", "fifo"))))
    for opt, value in (("--instances", "a,b"), ("--instances", "0"), ("--delays", "-5"), ("--budget-ms", "nan"),
                       ("--budget-ms", "-1"), ("--concurrency", "0"), ("--duration", "inf")):
        add(Case(f"tune{opt}-{value}", (*tune, opt, value), names=_opt_names(opt),
                 owner=h, setup=kit))

    # render: arguments (helper A, infra/tritonops/cli/k8s.py); Pulumi.<env>.yaml loading (helper C)
    add(Case("render-stack-unknown", ("render", "--stack", "nosuch", "--env", "dev", "--out", f"{T}/out"),
             names=("nosuch",), setup=kit))
    add(Case("render-stack-empty", ("render", "--stack", "", "--env", "dev", "--out", f"{T}/out"),
             names=("--stack", "stack"), setup=kit))
    # Any stack with a Pulumi.<env>.yaml renders; one without a file, or a name that is no file name, is refused.
    add(Case("render-env-unknown", ("render", "--stack", "triton", "--env", "qa", "--out", f"{T}/out"),
             names=("Pulumi.qa.yaml",), setup=kit))
    add(Case("render-env-path", ("render", "--stack", "triton", "--env", "../dev", "--out", f"{T}/out"),
             names=("../dev",), setup=kit))
    add(Case("render-out-empty", ("render", "--stack", "triton", "--env", "dev", "--out", ""), names=("--out",),
             setup=kit))
    add(Case("render-out-file", ("render", "--stack", "triton", "--env", "dev", "--out", f"{T}/precious.txt"),
             names=("precious.txt",), setup=kit))
    from tritonops.k8s.config import ConfigError

    for kind in ("missing", "binary", "fifo", "zero", "dir", "empty", "big", "malformed", "list",
                 "config: 5\n", "config:\n  tritonops-triton:modelServices: [\n"):
        label = kind if kind in (*KINDS, "missing") else ("config-not-a-map" if "5" in kind else "yaml-unclosed")
        add(Case(f"render-pulumi-yaml-{label}", cli="call", owner="C", raises=(ConfigError,),
                 names=("Pulumi.dev.yaml",), setup=with_(stack_copy("triton", "dev", kind)),
                 call=render_call("triton", "dev")))

    # drift: arguments (helper A, infra/tritonops/cli/drift.py); the sources themselves (helper D)
    inv = ("-i", f"{T}/inventory.yml")
    has_inv = with_(write("inventory.yml", "all:\n  hosts: {}\n"))
    for value in ("x", "0", "-1"):
        add(Case(f"drift-forks-{value}", ("drift", *inv, "--forks", value), names=("--forks", "forks"),
                 setup=has_inv))
    add(Case("drift-source-unknown", ("drift", *inv, "--source", "nosuch"), names=("nosuch",), setup=has_inv))
    add(Case("drift-no-inventory", ("drift",), names=("-i", "inventory"), setup=kit))
    add(Case("drift-inventory-missing", ("drift", "-i", f"{T}/nope.yml"), names=("nope.yml",), setup=kit))
    add(Case("drift-inventory-fifo", ("drift", "-i", f"{T}/fifo.json"), names=("fifo.json",), setup=kit))
    add(Case("drift-playbook-missing", ("drift", *inv, "--playbook", f"{T}/nope.yml"), names=("nope.yml",),
             setup=has_inv))
    add(Case("drift-pulumi-env-unknown", ("drift", "--source", "pulumi", "--env", "qa"), names=("qa",),
             setup=kit))
    add(Case("drift-pulumi-stack-unknown", ("drift", "--source", "pulumi", "--stack", "nosuch"),
             names=("nosuch",), setup=kit))
    add(Case("drift-summary-folder", ("drift", "--source", "pulumi", "--summary", f"{T}/dir.json"),
             names=("dir.json", "--summary"), setup=kit))
    add(Case("drift-textfile-dir-file", ("drift", "--source", "pulumi", "--textfile-dir", f"{T}/precious.txt"),
             names=("precious.txt",), setup=kit))

    # release keygen / publish / promote / rollback / status (helper A: infra/tritonops/cli/release.py, release/publish.py)
    add(Case("keygen-empty-path", ("release", "keygen", "", f"{T}/k.pub"), names=("private", "empty", "key"),
             setup=kit))
    add(Case("keygen-existing-key", ("release", "keygen", f"{T}/precious.txt", f"{T}/k.pub"),
             names=("precious.txt",), setup=kit))
    add(Case("keygen-same-path", ("release", "keygen", f"{T}/k", f"{T}/k"), names=("same", f"{T}/k"),
             setup=kit))
    add(Case("keygen-public-is-folder", ("release", "keygen", f"{T}/k", f"{T}/dir.json"), names=("dir.json",),
             setup=kit))
    store = ("--store", f"{T}/store")
    pub = ("release", "publish", R, *store, "--key", f"{T}/keys/release.key")
    add(Case("publish-repo-missing", ("release", "publish", f"{T}/nope", *store, "--key", f"{T}/keys/release.key"),
             names=("nope",), setup=with_(keys)))
    add(Case("publish-repo-empty-string", ("release", "publish", "", *store, "--key", f"{T}/keys/release.key"),
             names=("repository", "empty"), setup=with_(keys)))
    add(Case("publish-to-empty", ("release", "publish", R, "--store", "", "--key", f"{T}/keys/release.key"),
             names=("--store", "store"), setup=with_(keys)))
    add(Case("publish-to-ftp", ("release", "publish", R, "--store", "ftp://x/y", "--key", f"{T}/keys/release.key"),
             names=("ftp://x/y",), setup=with_(keys)))
    add(Case("publish-to-file", ("release", "publish", R, "--store", f"{T}/precious.txt", "--key",
                                 f"{T}/keys/release.key"), names=("precious.txt",), setup=with_(keys)))
    add(Case("publish-key-missing", ("release", "publish", R, *store, "--key", f"{T}/nope.key"),
             names=("nope.key",), setup=kit))
    add(Case("publish-key-binary", ("release", "publish", R, *store, "--key", f"{T}/binary.json"),
             names=("binary.json",), setup=kit))
    add(Case("publish-key-fifo", ("release", "publish", R, *store, "--key", f"{T}/fifo.json"),
             names=("fifo.json",), setup=kit))
    add(Case("publish-channel-hostile", (*pub, "--channel", "../../x"), names=("channel",), setup=with_(keys)))
    add(Case("publish-version-hostile", (*pub, "--release", "../x"), names=("release id", "version"),
             setup=with_(keys)))
    add(Case("publish-target-unknown", (*pub, "--target", "tpu"), names=("tpu", "target"), setup=with_(keys)))
    add(Case("publish-invalid-repository", pub, expect=1, names=("config.pbtxt",),
             setup=with_(keys, put("repo/mlp/config.pbtxt", "binary"))))
    add(Case("publish-store-id-corrupt", (*pub, "--release", "r1", "--channel", "stable"), expect=3, names=("ids/r1.json",),
             setup=with_(keys, write("store/ids/r1.json", BINARY))))
    add(Case("publish-store-pointer-corrupt", (*pub, "--channel", "stable"), expect=3,
             names=("channels/stable.json",), setup=with_(keys, write("store/channels/stable.json", "{oops"))))
    add(Case("promote-source-unknown", ("release", "promote", "nosuch", "stable", *store), names=("nosuch",),
             setup=with_(pointer())))
    add(Case("promote-channel-hostile", ("release", "promote", "canary", "../x", *store), names=("../x",),
             setup=with_(pointer())))
    add(Case("promote-pointer-fifo", ("release", "promote", "canary", "stable", *store),
             expect=3, names=("canary.json",), setup=with_(put("store/channels/canary.json", "fifo"))))
    add(Case("promote-pointer-zero", ("release", "promote", "canary", "stable", *store),
             expect=3, names=("canary.json",), setup=with_(put("store/channels/canary.json", "zero"))))
    add(Case("promote-pointer-binary", ("release", "promote", "canary", "stable", *store),
             expect=3, names=("canary.json",), setup=with_(put("store/channels/canary.json", "binary"))))
    add(Case("promote-prometheus-closed-port", ("release", "promote", "canary", "stable", *store, "--prometheus",
                                                f"http://{CLOSED}"), expect=3, names=("127.0.0.1",),
             setup=with_(pointer())))
    for opt, value in (("--max-failure-increase", "nan"), ("--max-latency-increase", "-1"),
                       ("--min-requests", "-1"), ("--window", "soon")):
        add(Case(f"promote{opt}-{value}", ("release", "promote", "canary", "stable", *store, "--prometheus",
                                            f"http://{CLOSED}", opt, value),
                 names=(*_opt_names(opt), value), setup=with_(pointer())))
    add(Case("rollback-channel-unknown", ("release", "rollback", "nosuch", *store), names=("nosuch",),
             setup=with_(pointer())))
    add(Case("rollback-release-unknown", ("release", "rollback", "canary", *store, "--release", "nosuch"),
             names=("nosuch",), setup=with_(pointer(history=[{"release": "r0", "digest": "cd" * 32}]))))
    add(Case("rollback-history-wrong-type", ("release", "rollback", "canary", *store), expect=3,
             names=("canary.json",), setup=with_(write("store/channels/canary.json", json.dumps(
                 {"release": "r1", "digest": DIGEST, "history": "yesterday"})))))
    add(Case("status-channel-hostile", ("release", "status", *store, "--channel", "../x"), names=("../x",),
             setup=kit))
    add(Case("status-store-closed-port", ("release", "status", "--store", f"http://{CLOSED}", "--channel", "stable"),
             expect=3, names=("127.0.0.1",), setup=kit))
    add(Case("status-target-not-a-url", ("release", "status", *store, "--channel", "canary", "--agent-url",
                                         "notaurl"), names=("notaurl",), setup=with_(pointer())))
    add(Case("status-target-closed-port", ("release", "status", *store, "--channel", "canary", "--agent-url",
                                           f"http://{CLOSED}/metrics"), expect=1, names=("127.0.0.1",),
             setup=with_(pointer())))

    # agent build, observability export, unknown commands; hosts and demo of the development kit (helper A)
    add(Case("agent-build-empty-path", ("agent", "build", ""), names=("out", "empty", "path"), setup=kit))
    add(Case("agent-build-onto-folder", ("agent", "build", f"{T}/dir.json"), names=("dir.json",), setup=kit))
    add(Case("export-empty-path", ("observability", "export", ""), names=("directory", "empty"), setup=kit))
    add(Case("export-onto-file", ("observability", "export", f"{T}/precious.txt"), names=("precious.txt",),
             setup=kit))
    for opt, value in (("--max-replicas", "0"), ("--max-replicas", "x"), ("--pending-target", "nan"),
                       ("--pending-target", "-1"), ("--pending-target", "inf"), ("--job", ""), ("--job", 'a"}}b')):
        add(Case(f"export{opt}-{value.replace('}}', '}')}", ("observability", "export", f"{T}/out", opt, value),
                 names=_opt_names(opt), setup=kit))
    add(Case("hosts-build-arch-unknown", ("hosts", "build", "--arch", "mips"), names=("mips", "--arch"),
             env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-up-no-name", ("hosts", "up"), names=("NAME", "name"), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-up-publish-bad", ("hosts", "up", "n1", "--publish", "notaport"), names=("--publish", "notaport"),
             env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-up-arch-unknown", ("hosts", "up", "n1", "--arch", "sparc"), names=("sparc", "--arch"),
             env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-up-name-hostile", ("hosts", "up", "n1;reboot"), names=("n1;reboot",), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-down-name-hostile", ("hosts", "down", "../x"), names=("../x",), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-up-name-empty", ("hosts", "up", ""), names=("name",), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("hosts-unknown-command", ("hosts", "frobnicate"), names=("frobnicate",), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("demo-unknown-option", ("demo", "--bogus"), names=("--bogus",), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("demo-extra-argument", ("demo", "extra"), names=("extra",), env=NO_PODMAN, setup=kit, cli="devkit"))
    add(Case("unknown-command", ("nosuch",), names=("nosuch",), setup=kit))

    # the node agent (helper A: infra/tritonops/agent/cli.py, releases.py, manifest.py, store.py, pull.py)
    a = "agent"
    ag = with_(node)
    add(Case("agent-no-command", (), cli=a, names=("usage",), setup=kit))
    add(Case("agent-unknown-command", ("frobnicate",), cli=a, names=("frobnicate",), setup=kit))
    add(Case("agent-status-missing-args", ("status",), cli=a, names=("--link",), setup=kit))
    add(Case("agent-status-release-hostile", ("status", *LAYOUT, "--release", "../r0"), cli=a,
             names=("../r0",), setup=ag))
    add(Case("agent-status-releases-is-file", ("status", "--link", f"{T}/models", "--releases",
                                              f"{T}/precious.txt"), cli=a, names=("precious.txt",), setup=kit))
    add(Case("agent-install-release-hostile", ("install", *LAYOUT, "--staging", f"{T}/releases/.staging-x",
                                               "--release", "../x"), cli=a, names=("../x",), setup=ag))
    add(Case("agent-install-staging-outside", ("install", *LAYOUT, "--staging", R, "--release", "r9"), cli=a,
             names=("--staging", "staging"), setup=ag))
    add(Case("agent-install-staging-is-release", ("install", *LAYOUT, "--staging", f"{T}/releases/r0",
                                                  "--release", "r9"), cli=a, names=("--staging", "staging"),
             setup=ag))
    add(Case("agent-install-tarball-folder", ("install", *LAYOUT, "--staging", f"{T}/releases/.staging-r1",
                                              "--release", "r1", "--tarball", f"{T}/dir.json"), cli=a,
             names=("dir.json",), setup=with_(node, write("dir.json/keep", "x"))))
    add(Case("agent-install-tarball-device", ("install", *LAYOUT, "--staging", f"{T}/releases/.staging-r1",
                                              "--release", "r1", "--tarball", f"{T}/zero.json"), cli=a,
             names=("zero.json",), setup=ag))
    add(Case("agent-install-tarball-garbage", ("install", *LAYOUT, "--staging", f"{T}/releases/.staging-r1",
                                               "--release", "r1", "--tarball", f"{T}/releases/.staging-r1.tar"),
             cli=a, expect=1, names=(".staging-r1.tar",), consumes=("releases/.staging-r1",),
             setup=with_(node, write("releases/.staging-r1.tar", BINARY))))
    for kind in ("fifo", "zero", "binary", "malformed", "list", "dir", "big"):
        add(Case(f"agent-install-manifest-{kind}", ("install", *LAYOUT, "--staging", f"{T}/releases/.staging-r1",
                                                    "--release", "r1"), cli=a, expect=1,
                 names=("MANIFEST.sha256.json",), consumes=("releases/.staging-r1",),
                 setup=with_(node, staged(), put("releases/.staging-r1/MANIFEST.sha256.json", kind))))
    add(Case("agent-activate-release-unknown", ("activate", *LAYOUT, "--release", "nosuch"), cli=a,
             names=("nosuch",), setup=ag))
    add(Case("agent-activate-touch-hostile", ("activate", *LAYOUT, "--release", "r0", "--touch", "../../cwd"),
             cli=a, names=("../../cwd",), setup=ag))
    add(Case("agent-mark-release-unknown", ("mark", *LAYOUT, "--release", "nosuch"), cli=a, names=("nosuch",),
             setup=ag))
    add(Case("agent-mark-release-hostile", ("mark", *LAYOUT, "--release", "-rf"), cli=a, names=("--release",),
             setup=ag))
    for value in ("0", "-1", "x"):
        add(Case(f"agent-prune-keep-{value}", ("prune", *LAYOUT, "--keep", value), cli=a, names=("keep",),
                 setup=ag))
    for value in ("nan", "-1", "x", "inf"):
        add(Case(f"agent-recover-grace-{value}", ("recover", *LAYOUT, "--grace", value), cli=a, names=("grace",),
                 setup=ag))
    add(Case("agent-verify-missing", ("verify", f"{T}/nope"), cli=a, names=("nope",), setup=kit))
    add(Case("agent-verify-empty-string", ("verify", ""), cli=a, names=("path", "empty"), setup=kit))
    add(Case("agent-verify-file", ("verify", f"{T}/precious.txt"), cli=a, names=("precious.txt",), setup=kit))
    for kind in ("fifo", "zero", "binary", "malformed", "list", "dir", "big", "dangling", "empty"):
        add(Case(f"agent-verify-manifest-{kind}", ("verify", f"{T}/releases/r0"), cli=a, expect=1,
                 names=("MANIFEST.sha256.json",), setup=with_(node, put("releases/r0/MANIFEST.sha256.json", kind))))
    add(Case("agent-verify-manifest-hostile-path", ("verify", f"{T}/releases/r0"), cli=a, expect=1,
             names=("../../etc/passwd",), setup=with_(node, write("releases/r0/MANIFEST.sha256.json", json.dumps(
                 {"algorithm": "sha256", "files": {"../../etc/passwd": DIGEST}})))))
    pull_setup = with_(node, keys, pointer())
    add(Case("agent-sync-store-empty", ("sync", *LAYOUT, "--store", "", "--channel", "canary", "--trusted-key",
                                        f"{T}/keys/release.pub"), cli=a, names=("--store", "store"), setup=pull_setup))
    add(Case("agent-sync-store-ftp", ("sync", *LAYOUT, "--store", "ftp://x/y", "--channel", "canary",
                                      "--trusted-key", f"{T}/keys/release.pub"), cli=a, names=("ftp://x/y",),
             setup=pull_setup))
    add(Case("agent-sync-channel-hostile", ("sync", *LAYOUT, "--store", f"{T}/store", "--channel", "../x",
                                            "--trusted-key", f"{T}/keys/release.pub"), cli=a, names=("../x",),
             setup=pull_setup))
    add(Case("agent-sync-trusted-key-missing", ("sync", *LAYOUT, "--store", f"{T}/store", "--channel", "canary",
                                                "--trusted-key", f"{T}/nope.pub"), cli=a, names=("nope.pub",),
             setup=pull_setup))
    add(Case("agent-sync-keep-0", (*("sync",), *PULL, "--keep", "0"), cli=a, names=("keep",), setup=pull_setup))
    for kind in ("fifo", "zero", "binary", "malformed", "big"):
        add(Case(f"agent-sync-pointer-{kind}", ("sync", *PULL), cli=a, expect=3, names=("canary.json",),
                 setup=with_(node, keys, put("store/channels/canary.json", kind))))
    add(Case("agent-sync-store-closed-port", ("sync", *LAYOUT, "--store", f"http://{CLOSED}", "--channel",
                                              "canary", "--trusted-key", f"{T}/keys/release.pub"), cli=a, expect=3,
             names=("127.0.0.1",), setup=pull_setup))
    pull = ("pull", *PULL, "--once", "--triton", f"http://{CLOSED}")
    add(Case("agent-pull-store-closed-port", ("pull", *LAYOUT, "--store", f"http://{CLOSED}", "--channel",
                                              "canary", "--trusted-key", f"{T}/keys/release.pub", "--once",
                                              "--triton", f"http://{CLOSED}"), cli=a, expect=3,
             names=("127.0.0.1",), setup=pull_setup))
    add(Case("agent-pull-pointer-fifo", pull, cli=a, expect=3, names=("canary.json",),
             setup=with_(node, keys, put("store/channels/canary.json", "fifo"))))
    for opt, value in (("--interval", "nan"), ("--interval", "-1"), ("--jitter", "5"), ("--load-timeout", "nan"),
                       ("--golden-timeout", "inf"), ("--listen", "nowhere"), ("--triton", "notaurl")):
        add(Case(f"agent-pull{opt}-{value}", (*pull, opt, value), cli=a,
                 names=_opt_names(opt), setup=pull_setup))
    d = "D"
    add(Case("agent-probe-port-x", ("probe", "--port", "x"), cli=a, names=("--port",), setup=kit))
    add(Case("agent-probe-port-out-of-range", ("probe", *LAYOUT, "--port", "99999"), cli=a, names=("port",),
             owner=d, setup=ag))
    add(Case("agent-check-closed-port", ("check", *LAYOUT, "--port", "{port}"), cli=a, expect=1,
             names=("127.0.0.1",), owner=d, setup=ag))
    add(Case("agent-check-url-not-a-url", ("check", "--url", "notaurl", "--expect", "mlp"), cli=a,
             names=("notaurl",), owner=d, setup=kit))
    add(Case("agent-check-textfile-is-file", ("check", *LAYOUT, "--port", "{port}", "--textfile",
                                              f"{T}/precious.txt"), cli=a, names=("precious.txt",), owner=d,
             setup=ag))
    return c


CASES = _cases()
assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
