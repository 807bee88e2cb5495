"""Live drift test on a local Podman node: converge, tamper, detect exactly that, converge, clean.

1. converge a fresh node (``drift-live-1``) with ``ansible/edge.yml`` (gpu_facts, triton_server from the
   wheel, the sample repository as a release, drift_check's timer): ``tritonops drift`` finds nothing;
2. tamper with the node while Triton runs: edit Triton's unit, change one model file and delete
   another in the active release, unload a model through the repository API, install another version
   of a pinned wheel in Triton's venv: drift reports exactly those resources on that host (Ansible
   check mode, the release manifest, Triton's index), and the node's own timer check counts the same
   model-repository findings in its textfile metric;
3. stop Triton: the service is reported too (by Ansible, and by the probe: the process is not running),
   and Triton's index becomes unreachable (one finding);
4. converge again: no drift, by every source and by the node's own check.

Needs root, Podman and the image ``python -m devkit hosts build`` makes (built here when missing). Bounded:
each playbook run has a timeout. At low load on 2 cores it takes about 15 minutes: converge 205 s,
clean drift checks about 105 s, tampered ones 135-140 s, re-converge 160 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from devkit.hosts.podman import CONTAINERS_CONF, podman
from tritonops.agent.drift_probe import TEXTFILE_NAME
from tritonops.core.exitcodes import ExitCode
from tritonops.drift.report import DriftReport
from tritonops.drift.run import run
from tritonops.release_format.node_drift import DRIFT_METRIC

REPO = Path(__file__).resolve().parents[3]
# TRITONOPS_DRIFT_NODE names an existing node to reuse (kept afterwards): a re-converge instead of a first one.
NODE = os.environ.get("TRITONOPS_DRIFT_NODE", "drift-live-1")
REUSE = "TRITONOPS_DRIFT_NODE" in os.environ
LOCAL = REPO / "ansible" / "inventories" / "local"
SECRET = yaml.safe_load((LOCAL / "group_vars" / "all.yml").read_text())["triton_server_admin_secret"]
HEADER = "triton-admin-key"
TEXTFILE = f"/var/lib/prometheus/node-exporter/{TEXTFILE_NAME}"
PLAY_TIMEOUT = 900
# Another version of a pinned wheel (triton_server_wheels pins packaging==26.4); nothing imports it at run time.
OTHER_PACKAGING = "packaging==24.2"

# Two converges and four checks: above the project-wide 900 s pytest-timeout on a busy 2-core machine.
pytestmark = [pytest.mark.host, pytest.mark.timeout(2400)]


def _have_podman() -> bool:
    return shutil.which("podman") is not None and os.geteuid() == 0


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not _have_podman():
        pytest.skip("needs root and Podman (make apt installs it)")
    from devkit.hosts.images import ImageSpec, build_image
    from devkit.hosts.nodes import node_down, node_up

    # The drift run below talks to the node in-process, through Podman: the project's Podman settings.
    os.environ.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    build_image(ImageSpec(arch="amd64"))
    if not REUSE:
        node_down(NODE)
    node_up(NODE)
    inv = tmp_path_factory.mktemp("drift-live") / "hosts.yml"
    inv.write_text(json.dumps({"all": {"children": {"edge": {"children": {"cpu_gateways": {"hosts": {NODE: {}}}}}}}}))
    try:
        yield inv
    finally:
        if not REUSE:
            node_down(NODE)


def converge(inventory: Path) -> None:
    exe = Path(sys.executable).parent / "ansible-playbook"
    cmd = [str(exe), str(REPO / "ansible" / "edge.yml"), "-i", str(LOCAL), "-i", str(inventory), "--limit", NODE]
    from tritonops.drift.ansible_check import ansible_env

    env = ansible_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=PLAY_TIMEOUT)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


def drift(inventory: Path) -> DriftReport:
    return run(["ansible", "models"], [LOCAL, inventory], limit=NODE)


def found(report: DriftReport) -> set[tuple[str, str, str]]:
    return {(f.source, f.host, f.resource) for f in report.findings}


def sh(cmd: str) -> str:
    return podman(["exec", NODE, "sh", "-c", cmd], timeout=300).stdout


def node_ip() -> str:
    from devkit.hosts.nodes import node_address

    return node_address(NODE)


def own_check() -> tuple[int, int]:
    """Run the node's timer service now; (its findings per the textfile metric, success flag)."""
    sh("systemctl start tritonops-drift-check.service")
    text = sh(f"cat {TEXTFILE}")
    count = success = -1
    for line in text.splitlines():
        if line.startswith(f'{DRIFT_METRIC}{{source="models",host="{NODE}"}}'):
            count = int(line.rsplit(" ", 1)[1])
        if line.startswith('tritonops_drift_check_success{source="models"}'):
            success = int(line.rsplit(" ", 1)[1])
    return count, success


def unload(model: str) -> None:
    req = urllib.request.Request(f"http://{node_ip()}:8000/v2/repository/models/{model}/unload", data=b"{}",
                                 headers={HEADER: SECRET, "Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def other_wheel(tmp: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    OTHER_PACKAGING, "-d", str(tmp)], check=True, timeout=300)
    return next(tmp.glob("packaging-*.whl"))


def tritonops(*args: str) -> dict[str, Any]:
    res = subprocess.run([str(Path(sys.executable).parent / "tritonops"), *args, "--json"], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return dict(json.loads(res.stdout))


def load_tools(tmp: Path) -> None:
    """Our load tools against the Triton edge.yml left (issue 35 item 1): restricted APIs on, the admin key
    from a 0600 file, as an operator has it; tune reads the model's config copied from the node's release,
    measures through the node's repository API and puts the served config back (--no-write)."""
    key = tmp / "admin.key"
    key.write_text(SECRET)
    key.chmod(0o600)
    ip, fast = node_ip(), ["--duration", "2", "--stability", "100", "--concurrency", "4"]
    url = f"http://{ip}:8000"
    report = tritonops("bench", "mlp_batched", "--url", url, "--allow-host", ip, *fast, "--admin-key-file", str(key))
    assert report["engine"] == "perf_analyzer" and report["errors"] == {} and report["throughput_rps"] > 0
    assert report["server"]["requests"] > 0  # the statistics API answered: the key reached it
    repo = tmp / "repository"
    repo.mkdir()
    podman(["cp", f"{NODE}:/var/lib/triton/models/mlp_batched", str(repo / "mlp_batched")])
    before = (repo / "mlp_batched" / "config.pbtxt").read_text()
    result = tritonops("tune", "mlp_batched", "--repository", str(repo), "--url", url, "--allow-host", ip, "--search", "grid",
                       "--instances", "1", "--delays", "0", *fast, "--budget-ms", "10000", "--no-write",
                       "--plot", str(tmp / "tune.png"), "--admin-key-file", str(key))
    assert result["recommended"] is not None and all(t["errors"] == {} for t in result["trials"]), result
    assert any(t["server"]["batch_size"] > 1 for t in result["trials"] if t["setting"]["dynamic_batching"])
    assert (repo / "mlp_batched" / "config.pbtxt").read_text() == before
    print(f"\nedge node {NODE}: bench {report['throughput_rps']:.0f} req/s; tune picked {result['recommended']['label']}")


def test_drift_live(inventory: Path, tmp_path: Path) -> None:
    timings: dict[str, float] = {}

    def timed(label: str, fn: Any, *args: Any) -> Any:
        start = time.monotonic()
        out = fn(*args)
        timings[label] = round(time.monotonic() - start, 1)
        return out

    # 1. converged: no drift anywhere
    timed("converge", converge, inventory)
    clean = timed("drift (clean)", drift, inventory)
    assert clean.errors == {}, clean.errors
    assert clean.findings == [], [f.model_dump() for f in clean.findings]
    assert clean.exit_code == ExitCode.OK
    assert own_check() == (0, 1)
    timed("bench and tune", load_tools, tmp_path)

    # 2. tamper while Triton runs
    active = sh("readlink -f /var/lib/triton/models").strip()
    wheel = other_wheel(tmp_path)
    podman(["cp", str(wheel), f"{NODE}:/tmp/{wheel.name}"])
    sh(f"/opt/tritonserver/bin/python -m pip install --quiet --no-deps --no-index /tmp/{wheel.name}")
    sh("sed -i 's/^RestartSec=5$/RestartSec=30/' /etc/systemd/system/tritonserver.service")
    sh(f"echo '# tampered' >> {active}/preprocess/1/model.py")
    sh(f"rm {active}/postprocess/golden.json")
    unload("mlp_batched")

    report = timed("drift (tampered)", drift, inventory)
    assert report.errors == {}, report.errors
    # Task names as Ansible prints them: the playbooks call the collection's roles by FQCN. The release
    # module predicts in check mode, so the tampered release shows as the push and the install it causes.
    ansible_expected = {
        ("ansible", NODE, "tritonops.triton.triton_server : Write the systemd unit"),
        ("ansible", NODE, "tritonops.triton.triton_server : Install the wheels into the venv (offline, hash-checked)"),
        ("ansible", NODE, "tritonops.triton.model_repository : Push the release tarball"),
        ("ansible", NODE, "tritonops.triton.model_repository : Unpack, verify the checksums on the node and move "
                          "the release into place"),
    }
    models_expected = {
        ("models", NODE, "file:preprocess/1/model.py"),
        ("models", NODE, "file:postprocess/golden.json"),
        ("models", NODE, "model:mlp_batched"),
    }
    assert found(report) == ansible_expected | models_expected, [f.model_dump() for f in report.findings]
    unit = next(f for f in report.findings if f.resource.endswith("Write the systemd unit"))
    assert "-RestartSec=30" in unit.diff and "+RestartSec=5" in unit.diff, unit.diff
    assert report.exit_code == ExitCode.FINDINGS
    # The node's own check (timer) sees the same model-repository drift.
    assert own_check() == (len(models_expected), 1)

    # 3. stop Triton: the service is reported (Ansible; the probe finds no process), the index is unreachable
    # (one finding replaces the model's)
    sh("systemctl stop tritonserver")
    stopped = timed("drift (stopped)", drift, inventory)
    assert stopped.errors == {}, stopped.errors
    assert found(stopped) == (ansible_expected | {("ansible", NODE, "tritonops.triton.triton_server : Enable and start Triton")}
                              | (models_expected - {("models", NODE, "model:mlp_batched")})
                              | {("models", NODE, "triton"), ("models", NODE, "process")}), [
        f.model_dump() for f in stopped.findings]

    # 4. converge again: clean
    timed("re-converge", converge, inventory)
    after = timed("drift (after converge)", drift, inventory)
    assert after.errors == {}, after.errors
    assert after.findings == [], [f.model_dump() for f in after.findings]
    assert own_check() == (0, 1)
    print("\n" + ", ".join(f"{k}: {v}s" for k, v in timings.items()))

