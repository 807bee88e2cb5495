"""The built wheel works as ``pip install tritonops`` gives it: its declared dependencies only, outside this checkout.

The wheel is built from a copy of the package sources (pyproject.toml, README.md, infra/), so nothing is
written into the checkout. It is installed non-editable, with the dependencies it declares and nothing
else, into fresh venvs under a temporary folder: one bare (``tritonops``) and one per extra
(``tritonops[EXTRA]``), so each extra's commands are checked with that extra alone. Every command runs
from a temporary working directory with a minimal environment (no PYTHONPATH).

Bare: ``--help``, ``--version``, ``validate`` and ``smoke`` (base dependencies) work, and each command that
needs an extra prints ``tritonops CMD needs the 'EXTRA' extra: pip install 'tritonops[EXTRA]'`` and
exits 3. With the extra: those commands start (obs: observability export, render; k8s: drift's Pulumi
source; triton: serve; s3: publish and status on an S3 store, moto_server; ansible: drift's
ansible source, which runs the venv's ansible-playbook). And the README's package quick start, as
written: a venv with the extras its ``pip install`` line names runs its ``tritonops`` lines.

Time: the six venvs are installed at once with uv (the dev extra; pip when uv is absent), which shares one
download cache (~/.cache/uv, about 1.7 GB) across them and across runs. On the 2-core development machine
the build and the six installs took 20 s with a cold cache, and the whole file 67 s (the earlier version,
one venv borrowing .venv's site-packages, 55 s); pip, one venv after another, took about 3 min to install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "model_repository"
# What the product wheel must not carry: the development kit (tools/devkit), in any form.
NOT_SHIPPED = ("devkit/", "tritonops/hosts/", "tritonops/demo.py", "tritonops/ansible_roles.py", "containers.conf")
EXTRAS = ("obs", "k8s", "triton", "s3", "ansible", "signing")
UV = Path(sys.executable).with_name("uv")


def _quick_start() -> tuple[str, list[str]]:
    """The README's package quick start: the extras its ``pip install`` line names, and its tritonops lines."""
    block = (ROOT / "README.md").read_text().split("**The Python package**", 1)[1]
    block = block.split("```text\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    pip = next(line for line in lines if line.startswith("pip install"))
    extras = re.search(r"\.whl\[([a-z0-9,]+)\]", pip)
    assert extras, f"README.md: no extras in the quick start's pip line: {pip}"
    return extras.group(1), [line for line in lines if line.startswith("tritonops ")]


QUICK_EXTRAS, QUICK_COMMANDS = _quick_start()


@dataclass(frozen=True)
class Installed:
    venv: Path
    cwd: Path  # a scratch working directory outside the checkout

    @property
    def path(self) -> str:
        return f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": self.path, "HOME": str(self.cwd), "LANG": "C.UTF-8", "COLUMNS": "200", **extra}

    def run(self, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True,
                              cwd=self.cwd, env=self.env(**env), timeout=timeout)


@dataclass(frozen=True)
class Built:
    wheel: Path
    bare: Installed
    extras: dict[str, Installed]


def _sh(cmd: list[str], cwd: Path) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    assert res.returncode == 0, f"{' '.join(cmd)}: {res.stdout[-3000:]}{res.stderr[-3000:]}"


def _install(venv: Path, requirement: str, cwd: Path) -> subprocess.Popen[str]:
    """A new venv holding ``requirement`` and what it declares, from the package index (never this checkout)."""
    if UV.exists():
        _sh([str(UV), "venv", "--quiet", "--python", sys._base_executable, str(venv)], cwd)
        cmd = [str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), requirement]
    else:
        _sh([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], cwd)
        cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
               requirement]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp = tmp_path_factory.mktemp("wheel")
    assert not tmp.resolve().is_relative_to(ROOT)
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "infra", src / "infra", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _sh([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(src), "-w", str(tmp / "dist")], tmp)
    wheel = next((tmp / "dist").glob("tritonops-*.whl"))
    # Installed all at once: the downloads are shared through the installer's cache.
    wanted = {name: name for name in ("", *EXTRAS)} | {"quickstart": QUICK_EXTRAS}
    jobs = {name: _install(tmp / f"venv-{name or 'bare'}", f"tritonops{f'[{extras}]' if extras else ''} @ {wheel.as_uri()}",
                           tmp) for name, extras in wanted.items()}
    for name, job in jobs.items():
        out, _ = job.communicate(timeout=900)
        assert job.returncode == 0, f"installing tritonops[{name}]: {out[-3000:]}"
    venvs = {}
    for name in jobs:
        cwd = tmp / f"work-{name or 'bare'}"
        cwd.mkdir()
        venvs[name] = Installed(tmp / f"venv-{name or 'bare'}", cwd)
    return Built(wheel, venvs.pop(""), venvs)


@pytest.fixture(scope="module")
def installed(built: Built) -> Installed:
    return built.bare


@pytest.fixture(scope="module")
def project(built: Built, user_project: Path) -> Path:
    """The stacks as a user has set them (their release public key), outside the checkout."""
    dest = built.bare.cwd.parent / "project"
    if not dest.exists():
        shutil.copytree(user_project / "stacks", dest / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _hint(command: str, extra: str) -> str:
    return f"tritonops {command} needs the '{extra}' extra: pip install 'tritonops[{extra}]'\n"


# --- the bare install: base dependencies only ---------------------------------------------------

def test_the_wheel_carries_the_product_only(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    assert [n for n in names if any(bad in n for bad in NOT_SHIPPED)] == []
    assert {"tritonops/cli/__init__.py", "tritonops/project.py", "tritonops/capacity/prices.json"} <= set(names)


def test_the_venv_holds_the_declared_dependencies_only(installed: Installed) -> None:
    probe = ("import importlib.util, json, sys, tritonops; print(json.dumps({'file': tritonops.__file__, "
             "'finders': [repr(f) for f in sys.meta_path], 'path': sys.path, "
             "'present': [m for m in ('devkit', 'grafana_foundation_sdk', 'matplotlib', 'pulumi', 'boto3', "
             "'pytriton', 'ansible') if importlib.util.find_spec(m)]}))")
    res = installed.run("python", "-c", probe)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert Path(doc["file"]).is_relative_to(installed.venv)
    assert not any("editable" in f for f in doc["finders"])
    assert not any(p.startswith(str(ROOT)) for p in doc["path"])
    assert doc["present"] == []


def test_help_lists_no_development_kit_commands(installed: Installed) -> None:
    res = installed.run("tritonops", "--help")
    assert res.returncode == 0, res.stderr
    commands = {line.split()[1] for line in res.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 1}
    assert {"validate", "smoke", "render", "drift", "plan", "release", "observability"} <= commands
    assert not {"hosts", "demo"} & commands
    assert "Exit codes: 0 ok, 1 findings" in res.stdout


def test_version_is_the_wheels(built: Built, installed: Installed) -> None:
    res = installed.run("tritonops", "--version")
    assert (res.returncode, res.stdout) == (0, f"tritonops {built.wheel.name.split('-')[1]}\n")


def test_validate_a_copy_of_the_sample_repository(installed: Installed) -> None:
    repo = installed.cwd / "model_repository"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    res = installed.run("tritonops", "validate", "model_repository")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "5 models, 0 errors, 0 warnings" in res.stdout
    (repo / "mlp" / "config.pbtxt").write_text('name: "mlp"\nbackend: "onnxruntime"\nmax_batch_size: -1\n')
    bad = installed.run("tritonops", "validate", "model_repository", "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    errors = json.loads(bad.stdout)["errors"]
    assert {"path": "model_repository/mlp/config.pbtxt", "line": 3, "field": "max_batch_size"}.items() <= errors[0].items()


def test_smoke_against_a_real_tritonserver(installed: Installed, triton) -> None:  # type: ignore[no-untyped-def]
    repo = installed.cwd / "smoke_repository"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    res = installed.run("tritonops", "smoke", f"http://{triton.http_url}", "--repository", "smoke_repository",
                        "--metrics-url", triton.metrics_url, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["server_version"] == "2.51.0"
    assert sorted(c["target"] for c in doc["checks"] if c["check"] == "golden") == sorted(
        p.name for p in SAMPLE.iterdir() if (p / "golden.json").is_file())


def test_render_check_config_needs_no_extra(installed: Installed, project: Path) -> None:
    res = installed.run("tritonops", "render", "--stack", "triton", "--env", "dev", "--check-config",
                        "--project-dir", str(project))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Pulumi.dev.yaml: valid" in res.stdout


@pytest.mark.parametrize(("args", "command", "extra"), [
    (("observability", "export", "out"), "observability export", "obs"),
    (("render", "--stack", "triton", "--env", "dev", "--out", "rendered", "--project-dir", "{project}"), "render",
     "obs"),
    (("drift", "--source", "pulumi", "--project-dir", "{project}", "--json"), "drift --source pulumi", "k8s"),
    (("serve", "."), "serve", "triton"),
    (("bench", "mlp", "--url", "127.0.0.1:1"), "bench", "obs"),
    (("release", "status", "--store", "s3://bucket/vision", "--channel", "stable"), "release status", "s3"),
], ids=lambda a: a if isinstance(a, str) else None)
def test_a_command_needing_an_extra_says_which_and_exits_3(installed: Installed, args: tuple[str, ...],
                                                           command: str, extra: str, project: Path) -> None:
    res = installed.run("tritonops", *(a.format(project=project) for a in args))
    assert (res.returncode, res.stderr, res.stdout) == (3, _hint(command, extra), "")


def test_drift_models_source_without_a_project_is_a_usage_error(installed: Installed) -> None:
    inventory = installed.cwd / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    node1:\n")
    res = installed.run("tritonops", "drift", "--source", "models", "-i", "hosts.yml")
    assert res.returncode == 2, res.stdout + res.stderr
    flat = "".join((res.stdout + res.stderr).split())  # rich wraps long lines
    assert f"noansible/drift_probe.ymlunder{installed.cwd};pass--project-dir" in flat


# --- one venv per extra: the commands that need it start -----------------------------------------

def test_obs_observability_export_writes_rules_and_dashboards(built: Built) -> None:
    obs = built.extras["obs"]
    res = obs.run("tritonops", "observability", "export", "out", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    files = json.loads(res.stdout)["files"]
    assert any(f.endswith(".json") and "dashboards" in f for f in files)
    assert all((obs.cwd / f).is_file() or Path(f).is_file() for f in files)


def test_obs_bench_gets_past_the_extra_to_the_server(built: Built) -> None:
    """perf_analyzer's CUDA runtime is there: bench goes on to ask the server, which does not answer (exit 3)."""
    res = built.extras["obs"].run("tritonops", "bench", "mlp", "--url", "127.0.0.1:1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "no Triton answers" in res.stderr and "needs the" not in res.stderr


def test_obs_render_from_a_project_dir(built: Built, project: Path) -> None:
    obs = built.extras["obs"]
    res = obs.run("tritonops", "render", "--stack", "triton", "--env", "dev", "--out", "rendered",
                  "--project-dir", str(project), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    written = json.loads(res.stdout)
    assert {"Deployment", "Service", "Namespace"} <= {w["kind"] for w in written}
    assert all((obs.cwd / w["path"]).is_file() or Path(w["path"]).is_file() for w in written)
    assert (obs.cwd / "rendered" / "kustomization.yaml").is_file()


def test_obs_render_without_a_project_names_the_file_and_folder(built: Built) -> None:
    obs = built.extras["obs"]
    res = obs.run("tritonops", "render", "--stack", "triton", "--env", "dev", "--out", "rendered2")
    assert res.returncode == 2, res.stdout + res.stderr
    flat = "".join((res.stdout + res.stderr).split())  # rich wraps long lines
    assert f"nostackconfigfile{obs.cwd}/stacks/triton/Pulumi.dev.yaml;pass--project-dir" in flat
    assert "Traceback" not in flat


def test_k8s_drift_pulumi_source_from_a_project_dir(built: Built, project: Path) -> None:
    """The source finds every stack under --project-dir; with no Pulumi CLI it fails (3), naming them."""
    k8s = built.extras["k8s"]
    res = k8s.run("tritonops", "drift", "--source", "pulumi", "--project-dir", str(project), "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    [result] = json.loads(res.stdout)["results"]
    # Every stack file found (dev, prod, staging, ...), never a fixed list of names.
    found = sorted((ROOT / "stacks").glob("*/Pulumi.*.yaml"))
    assert result["hosts"] == [f"{p.parent.name}/{p.name[len('Pulumi.'):-len('.yaml')]}" for p in found]
    assert {"triton/staging", "triton/prod"} <= set(result["hosts"])
    if shutil.which("pulumi", path=k8s.path) is None:
        assert "Pulumi CLI is not installed" in json.loads(res.stdout)["errors"]["pulumi"]


def test_k8s_drift_pulumi_source_without_a_project_names_the_folder(built: Built) -> None:
    k8s = built.extras["k8s"]
    res = k8s.run("tritonops", "drift", "--source", "pulumi", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"]["pulumi"]
    assert f"under {k8s.cwd / 'stacks'}" in error and "--project-dir" in error


def test_triton_serve_starts_a_tritonserver(built: Built) -> None:
    triton = built.extras["triton"]
    (triton.cwd / "empty_repository").mkdir()
    # SIGINT as from a terminal: under a non-interactive shell's `&` (CI's runner, say) the test inherits it
    # ignored, and serve rightly leaves an ignored signal ignored (tests/integration/test_serve_signals.py).
    proc = subprocess.Popen([str(triton.venv / "bin" / "tritonops"), "serve", "empty_repository"], cwd=triton.cwd,
                            env=triton.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("tritonserver ready: http://127.0.0.1:"), line  # serve waits for /v2/health/ready
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=120)  # serve stops its tritonserver (at most 30 s, then SIGKILL) and exits
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"tritonops serve still running 120 s after SIGINT; stderr: {err[-3000:]}")
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""  # Ctrl-C is how serve is meant to end


@pytest.fixture
def s3_bucket(moto_s3: str) -> Iterator[str]:
    import boto3

    boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="wheel-test")
    yield moto_s3


def test_s3_publish_and_status_against_moto(built: Built, s3_bucket: str) -> None:
    s3 = built.extras["s3"]
    keys = s3.run("tritonops", "release", "keygen", "release.key", "release.pub")
    assert keys.returncode == 0, keys.stderr
    shutil.copytree(SAMPLE, s3.cwd / "model_repository", ignore=shutil.ignore_patterns("__pycache__"))
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    pub = s3.run("tritonops", "release", "publish", "model_repository", "--store", "s3://wheel-test/vision",
                 "--key", "release.key", "--channel", "stable", "--s3-endpoint", s3_bucket, "--json", **creds)
    assert pub.returncode == 0, pub.stdout + pub.stderr
    status = s3.run("tritonops", "release", "status", "--store", "s3://wheel-test/vision", "--channel", "stable",
                    "--s3-endpoint", s3_bucket, "--json", **creds)
    assert status.returncode == 0, status.stdout + status.stderr
    assert json.loads(status.stdout)["channels"]["stable"]["release"] == json.loads(pub.stdout)["release"]


def test_signing_release_verify_accepts_what_model_signing_signed_and_refuses_a_changed_byte(built: Built) -> None:
    """The 'signing' extra alone brings what the model_signing library and ``release verify`` need (model-signing
    1.1.1 imports pyOpenSSL without declaring it: the extra names it)."""
    sv = built.extras["signing"]
    repo = sv.cwd / "model_repository"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    for cmd in (["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "producer.key"],
                ["openssl", "ec", "-in", "producer.key", "-pubout", "-out", "producer.pub"]):
        _sh(cmd, sv.cwd)
    sign = sv.run("python", "-c", "from pathlib import Path; from model_signing import hashing, signing; "
                  "signing.Config().use_elliptic_key_signer(private_key=Path('producer.key')).set_hashing_config("
                  "hashing.Config().set_ignored_paths(paths=['model.sig'])).sign(Path('model_repository'), "
                  "Path('model_repository/model.sig'))")
    assert sign.returncode == 0, sign.stdout + sign.stderr
    ok = sv.run("tritonops", "release", "verify", "model_repository", "--producer-key", "producer.pub")
    assert (ok.returncode, ok.stdout.split(":")[0]) == (0, "model signature model_repository/model.sig"), ok.stderr
    with (repo / "mlp" / "config.pbtxt").open("a") as f:
        f.write("#")
    bad = sv.run("tritonops", "release", "verify", "model_repository", "--producer-key", "producer.pub")
    assert bad.returncode == 1 and "differ from what the producer signed: mlp/config.pbtxt" in bad.stderr, bad.stderr


def test_ansible_drift_runs_the_venvs_ansible_playbook(built: Built) -> None:
    """drift's ansible source runs the venv's ansible-playbook on the project's ansible/edge.yml: a host that refuses
    the connection is that source's error (exit 3), from Ansible itself."""
    ans = built.extras["ansible"]
    (ans.cwd / "hosts.yml").write_text("edge:\n  hosts:\n    node1:\n      ansible_host: 127.0.0.1\n"
                                       "      ansible_port: 9\n")
    res = ans.run("tritonops", "drift", "--source", "ansible", "-i", "hosts.yml", "--project-dir", str(ROOT),
                  "--json")  # the checkout as the project folder: its ansible/ resolves the collection to it
    assert res.returncode == 3, res.stdout + res.stderr
    [result] = json.loads(res.stdout)["results"]
    assert result["hosts"] == ["node1"] and "edge.yml: node1: unreachable" in result["error"]


# --- the README's package quick start, as written ---------------------------------------------------


def test_the_readme_package_quick_start_runs_as_written(built: Built) -> None:
    qs = built.extras["quickstart"]
    checkout = qs.cwd.parent / "checkout"
    if not checkout.exists():
        shutil.copytree(ROOT / "stacks", checkout / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(SAMPLE, checkout / "examples" / "model_repository", ignore=shutil.ignore_patterns("__pycache__"))
    assert QUICK_COMMANDS, "README.md: the package quick start runs no tritonops command"
    for line in QUICK_COMMANDS:
        res = subprocess.run(line.replace("PATH_TO_THIS_CHECKOUT", str(checkout)), shell=True, capture_output=True,
                             text=True, cwd=qs.cwd, env=qs.env(), timeout=180)
        assert res.returncode == 0, f"README.md quick start: {line}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
