"""Secrets never reach a command line, a process environment or Ansible's output (even at -vvv).

The real roles and playbooks run against this machine (``--connection local``): the model_repository role
with an S3 source (moto_server, the stand-in for AWS S3) and a real tritonserver in explicit model
control mode behind its admin header, then ``ansible/drift_probe.yml`` against the node it left. Each
secret has a distinctive value. While a play runs, a sampler reads every process's ``/proc/PID/cmdline``
and ``/proc/PID/environ`` (the test's own tritonserver excepted: Triton takes its restricted-API key
on its command line, which the triton_server role keeps in a root-only environment file); afterwards
the play's output is searched. A finding names the secret and the process, never the value.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tritonops.agent.releases import active_release, state
from tritonops.triton import server

# The role run behind the [role] cases takes about 2 min on a loaded 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "model_repository"
TOKEN = uuid.uuid4().hex[:12]
SECRETS = {
    "S3 access key id": f"AKIATOPS{TOKEN.upper()}",
    "S3 secret access key": f"s3-secret-{TOKEN}-tritonops",
    "Triton admin secret": f"admin-secret-{TOKEN}-tritonops",
}
HEADER = "triton-admin-key"


def _masked(text: str) -> str:
    """``text`` with every secret replaced by its name (a failure message must not print one)."""
    for name, value in SECRETS.items():
        text = text.replace(value, f"<{name}>")
    return text[:100]


@dataclass
class Sampler:
    """Reads every process's argv and environment in a loop while a play runs."""

    skip_session: int
    hits: set[tuple[str, str, str]] = field(default_factory=set)  # (secret, where, process)
    seen: set[str] = field(default_factory=set)  # steps seen running (proves the sampling covered them)
    rounds: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def _scan(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_bytes()
                if int(stat.rsplit(b")", 1)[1].split()[3]) == self.skip_session:
                    continue
                argv = Path(entry.path, "cmdline").read_bytes()
                environ = Path(entry.path, "environ").read_bytes()
            except (OSError, ValueError, IndexError):
                continue  # the process ended meanwhile
            for step in (b"fetch-s3", b"AnsiballZ_uri", b"AnsiballZ_triton_model", b"AnsiballZ_command"):
                if step in argv:
                    self.seen.add(step.decode())
            for name, value in SECRETS.items():
                for where, blob in (("command line", argv), ("environment", environ)):
                    if value.encode() in blob:
                        self.hits.add((name, where, _masked(argv.replace(b"\0", b" ").decode(errors="replace"))))

    def run(self) -> None:
        while not self.stop.is_set():
            self._scan()
            self.rounds += 1
            time.sleep(0.005)


@dataclass
class Play:
    rc: int
    output: str
    sampler: Sampler

    def leaks(self) -> list[str]:
        """Where each secret showed up, by name (the value is never printed)."""
        found = [f"{name}: in the play's -vvv output" for name, value in SECRETS.items() if value in self.output]
        return found + [f"{name}: in the {where} of `{proc}...`" for name, where, proc in sorted(self.sampler.hits)]


def _ansible_playbook() -> str:
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.exists():
        pytest.skip("ansible-playbook is not installed (make venv)")
    return str(exe)


def _play(tmp: Path, name: str, playbook: Path, extra: dict[str, Any], skip_session: int) -> Play:
    """ansible-playbook -vvv with the variables in a 0600 file (never -e on the command line)."""
    vars_file = tmp / f"{name}-vars.json"
    vars_file.touch(mode=0o600)
    vars_file.write_text(json.dumps(extra))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "HOME": str(tmp),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    sampler = Sampler(skip_session)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        res = subprocess.run([_ansible_playbook(), "-vvv", "-i", "localhost,", "-c", "local",
                              "-e", f"@{vars_file}", str(playbook)],
                             capture_output=True, text=True, env=env, timeout=600, cwd=tmp)
    finally:
        sampler.stop.set()
        thread.join(timeout=30)
    (tmp / f"{name}.log").write_text(res.stdout + res.stderr)
    return Play(res.returncode, res.stdout + res.stderr, sampler)


@pytest.fixture(scope="module")
def plays(moto_s3: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import boto3

    tmp = tmp_path_factory.mktemp("secrets")
    s3 = boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1",
                      aws_access_key_id=SECRETS["S3 access key id"],
                      aws_secret_access_key=SECRETS["S3 secret access key"])
    s3.create_bucket(Bucket="models")
    for p in SAMPLE.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            s3.upload_file(str(p), "models", f"edge/r1/{p.relative_to(SAMPLE).as_posix()}")
    node = tmp / "node"
    link, releases = node / "models", node / "releases"
    link.mkdir(parents=True)  # Triton needs its repository to exist; the first switch replaces it with the link
    srv = server.start(link, model_control_mode="explicit", workdir=tmp / "triton",
                       extra_args=["--exit-timeout-secs=5",
                                   f"--http-restricted-api=model-repository:{HEADER}={SECRETS['Triton admin secret']}"])
    try:
        extra = {
            "model_repository_source": "s3", "model_repository_s3_bucket": "models",
            "model_repository_s3_prefix": "edge/r1", "model_repository_s3_endpoint_url": moto_s3,
            "model_repository_s3_region": "us-east-1",
            "model_repository_s3_access_key_id": SECRETS["S3 access key id"],
            "model_repository_s3_secret_access_key": SECRETS["S3 secret access key"],
            "model_repository_admin_header": HEADER,
            "model_repository_admin_secret": SECRETS["Triton admin secret"],
            "model_repository_link": str(link), "model_repository_releases_dir": str(releases),
            "model_repository_owner": "root", "model_repository_group": "root",
            "model_repository_target": "cpu", "model_repository_model_control_mode": "explicit",
            "model_repository_http_port": srv.http_port, "model_repository_triton_host": "127.0.0.1",
            "model_repository_controller_cache": str(tmp / "cache"),
            # This machine is the node: no units are written into its systemd.
            "model_repository_recover_on_start": False, "model_repository_recover_after": 0,
        }
        role = tmp / "role.yml"
        role.write_text("- hosts: localhost\n  gather_facts: true\n  gather_subset: [min]\n"
                        "  roles: [model_repository]\n")
        out = {"role": _play(tmp, "role", role, extra, srv.process.pid)}
        out["drift_probe"] = _play(tmp, "drift_probe", REPO / "ansible" / "drift_probe.yml",
                                   extra | {"drift_hosts": "localhost", "ansible_become": False}, srv.process.pid)
        yield {"plays": out, "link": link, "releases": releases}
    finally:
        srv.stop()
        shutil.rmtree(tmp / "cache", ignore_errors=True)


@pytest.mark.parametrize("name", ["role", "drift_probe"])
def test_play_succeeds_with_the_s3_source(plays: dict[str, Any], name: str) -> None:
    play = plays["plays"][name]
    assert play.rc == 0, play.output[-5000:] if not play.leaks() else "the play failed (output holds a secret)"


def test_role_released_what_s3_holds(plays: dict[str, Any]) -> None:
    """The credentials did reach boto3: the release came from the bucket, and Triton serves it."""
    release = active_release(plays["link"], plays["releases"])
    assert release and state(plays["releases"])["current"] == release


@pytest.mark.parametrize("name", ["role", "drift_probe"])
def test_no_secret_on_a_command_line_in_an_environment_or_in_the_output(plays: dict[str, Any], name: str) -> None:
    play = plays["plays"][name]
    # The sampler saw the steps that handle secrets while they ran (so an empty finding means something).
    assert {"fetch-s3", "AnsiballZ_command"} <= play.sampler.seen, (play.sampler.seen, play.sampler.rounds)
    if name == "role":  # the repository API calls with the admin header (tritonops.triton.triton_model)
        assert "AnsiballZ_triton_model" in play.sampler.seen, play.sampler.seen
    assert play.leaks() == []


def test_unusable_credentials_on_stdin_name_the_key_never_a_value(tmp_path: Path) -> None:
    """fetch-s3 --credentials-stdin refuses bad input with exit 2 before any S3 request."""
    secret = SECRETS["S3 secret access key"]
    for stdin, says in ((json.dumps({"aws_secret_access_key": secret}), "go together"),
                        (json.dumps({"aws_secret_key": secret}), "unknown key(s) ['aws_secret_key']"),
                        (f"{{'aws_secret_access_key': {secret}", "not one JSON object")):
        res = subprocess.run([sys.executable, "-m", "tritonops.release.push", "fetch-s3", "--bucket", "b",
                              "--dest", str(tmp_path / "d"), "--credentials-stdin"],
                             input=stdin, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert res.returncode == 2, _masked(res.stdout + res.stderr)
        assert says in res.stderr, _masked(res.stderr)
        assert secret not in res.stdout + res.stderr
