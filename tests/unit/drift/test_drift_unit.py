"""Drift detection without hosts: callback parsing (a recorded real run), comparisons, outputs, exit codes."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from tritonops import agent_bundle as bundle
from tritonops.agent import drift_probe as agent_drift
from tritonops.agent import releases as agent_releases
from tritonops.cli import app
from tritonops.core.errors import ReleaseError
from tritonops.core.exitcodes import ExitCode
from tritonops.core.triton_http import SECRET_ENV
from tritonops.drift import ansible_check, models, pulumi_check
from tritonops.drift.report import (
    DriftReport,
    Finding,
    SourceResult,
    markdown,
    textfile,
    write_textfile,
)
from tritonops.k8s.config import TritonStackConfig
from tritonops.k8s.stack_file import load_stack_config
from tritonops.k8s.stacks.triton import drift_cronjob as k8s_drift
from tritonops.k8s.stacks.triton import release_agent as k8s_release_agent
from tritonops.observability.metrics import DRIFT_METRIC
from tritonops.release import push as rel
from tritonops.release_format import manifest, node_drift
from typer.testing import CliRunner

DATA = Path(__file__).with_name("data")
REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "model_repository"


# --- the Ansible JSON callback (recorded from a real check run against a tampered local node) -------

@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return dict(json.loads((DATA / "edge_check_tampered.json").read_text()))


def test_recorded_check_finds_the_tampered_unit(recorded: dict[str, Any]) -> None:
    findings, failures, hosts = ansible_check.parse(recorded)
    assert failures == {}
    assert hosts == ["drift-1"]
    by_resource = {f.resource: f for f in findings}
    unit = by_resource["triton_server : Write the systemd unit"]
    assert unit.host == "drift-1"
    assert unit.diff.startswith("--- /etc/systemd/system/tritonserver.service\n")
    assert "\n-RestartSec=30\n+RestartSec=5\n" in unit.diff
    assert {f.resource for f in findings} == {
        "triton_server : Install the wheels into the venv (offline, hash-checked)",
        "triton_server : Write the systemd unit",
        "model_repository : Push the release tarball",
    }


def test_recorded_check_reports_only_changed_tasks(recorded: dict[str, Any]) -> None:
    findings, _, _ = ansible_check.parse(recorded)
    changed = {(h, t["task"]["name"]) for p in recorded["plays"] for t in p["tasks"]
               for h, r in t["hosts"].items() if r.get("changed")}
    assert {(f.host, f.resource.split(" [")[0]) for f in findings} == changed


def test_loop_items_are_one_finding_each() -> None:
    doc = {"plays": [{"tasks": [{"task": {"name": "r : Push"}, "hosts": {"n1": {
        "changed": True,
        "results": [
            {"changed": True, "item": "a.whl", "diff": {"before": "", "after": "x\n", "after_header": "a.whl"}},
            {"changed": False, "item": "b.whl"},
            {"changed": True, "_ansible_item_label": "c.whl", "diff": []},
        ]}}}]}], "stats": {"n1": {"failures": 0, "unreachable": 0}}}
    findings, failures, hosts = ansible_check.parse(doc)
    assert [f.resource for f in findings] == ["r : Push [a.whl]", "r : Push [c.whl]"]
    assert "+x" in findings[0].diff
    assert failures == {} and hosts == ["n1"]


def test_failed_and_unreachable_hosts_are_check_failures_not_drift() -> None:
    doc = {"plays": [{"tasks": [{"task": {"name": "t"}, "hosts": {
        "n1": {"failed": True, "msg": "boom"},
        "n2": {"unreachable": True, "msg": "no route"},
        "n3": {"failed": True, "msg": "ignored"}}}]}],
        "stats": {"n1": {"failures": 1}, "n2": {"unreachable": 1}, "n3": {"failures": 0, "ignored": 1}}}
    findings, failures, hosts = ansible_check.parse(doc)
    assert findings == []
    assert set(failures) == {"n1", "n2"}
    assert "boom" in failures["n1"] and "no route" in failures["n2"]
    assert hosts == ["n1", "n2", "n3"]


@pytest.mark.parametrize("diff, want", [
    ({"before": "a\nb\n", "after": "a\nc\n", "before_header": "f", "after_header": "f"}, ["-b", "+c"]),
    ({"before": {"state": "stopped"}, "after": {"state": "started"}}, ['-  "state": "stopped"', '+  "state": "started"']),
    ({"prepared": "pkg foo 1.0 -> 2.0"}, ["pkg foo 1.0 -> 2.0"]),
    ([{"before": "x", "after": "x"}], []),
])
def test_render_diff(diff: Any, want: list[str]) -> None:
    text = ansible_check.render_diff(diff)
    lines = text.splitlines()
    for w in want:
        assert w in lines
    if not want:
        assert text == ""


def test_playbook_command_is_check_and_diff() -> None:
    cmd = ansible_check.playbook_cmd(Path("ansible/edge.yml"), ["inv1", "inv2"], "edge", {"edge_serial": "100%"})
    assert cmd[1:3] == ["ansible/edge.yml", "--forks"]
    assert "--check" in cmd and "--diff" in cmd
    assert cmd[cmd.index("--limit") + 1] == "edge"
    assert json.loads(cmd[cmd.index("-e") + 1]) == {"edge_serial": "100%"}
    assert ansible_check.ansible_env()["ANSIBLE_STDOUT_CALLBACK"] == "ansible.posix.json"


# --- model repository comparison -------------------------------------------------------------------

@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return rel.prepare(SAMPLE, tmp_path_factory.mktemp("stage"), "cpu")


def _index(release: dict[str, Any], drop: str = "") -> list[dict[str, Any]]:
    files = manifest.read(Path(release["path"]))
    want = node_drift.expected_versions(files, node_drift.release_configs(Path(release["path"]), files))
    return [{"name": m, "version": v, "state": "READY"} for m, vs in want.items() for v in vs if m != drop]


def _node(release: dict[str, Any], **kw: Any) -> dict[str, Any]:
    files = manifest.read(Path(release["path"]))
    base = {"active": release["release"], "current": release["release"], "manifest": dict(files),
            "files": dict(files), "index": _index(release), "index_error": None}
    return base | kw


def test_clean_node_has_no_findings(staged: dict[str, Any]) -> None:
    assert models.compare_host("n1", staged, _node(staged)) == []


def test_expected_versions_of_the_sample(staged: dict[str, Any]) -> None:
    files = manifest.read(Path(staged["path"]))
    want = node_drift.expected_versions(files, node_drift.release_configs(Path(staged["path"]), files))
    assert set(want) == set(staged["models"])
    assert all(v == ["1"] for v in want.values())


def test_changed_deleted_added_files_and_unloaded_model(staged: dict[str, Any]) -> None:
    files = dict(manifest.read(Path(staged["path"])))
    changed = "mlp/config.pbtxt"
    deleted = next(k for k in sorted(files) if k.startswith("preprocess/"))
    files[changed] = "0" * 64
    del files[deleted]
    files["mlp/extra.txt"] = "1" * 64
    node = _node(staged, files=files, index=_index(staged, drop="postprocess")
                 + [{"name": "postprocess", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}])
    got = {(f.resource, f.detail.split(" ")[0]) for f in models.compare_host("n1", staged, node)}
    assert got == {(f"file:{changed}", "sha256"), (f"file:{deleted}", "missing"),
                   ("file:mlp/extra.txt", "not"), ("model:postprocess", "version")}


def test_triton_down_is_one_finding(staged: dict[str, Any]) -> None:
    node = _node(staged, index=None, index_error="connection refused")
    assert [(f.resource, f.detail) for f in models.compare_host("n1", staged, node)] == [
        ("triton", "repository index unavailable: connection refused")]


def test_other_release_active(staged: dict[str, Any]) -> None:
    node = _node(staged, active="0123456789abcdef", current="0123456789abcdef")
    found = models.compare_host("n1", staged, node)
    assert [f.resource for f in found] == ["release"]
    assert staged["release"] in found[0].detail


def test_extra_ready_model_is_drift(staged: dict[str, Any]) -> None:
    node = _node(staged, index=_index(staged) + [{"name": "stray", "version": "1", "state": "READY"}])
    assert [(f.resource, f.detail) for f in models.compare_host("n1", staged, node)] == [
        ("model:stray", "READY but not in the release")]


def test_expect_without_versions_accepts_any_ready_version() -> None:
    index = [{"name": "a", "version": "3", "state": "READY"}, {"name": "b", "version": "1", "state": "UNAVAILABLE"}]
    found = node_drift.compare({}, {}, {"a": [], "b": []}, index, None)
    assert found == [{"resource": "model:b", "detail": "version any not READY (UNAVAILABLE)"}]


def test_probe_reads_a_release_folder(staged: dict[str, Any], tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    shutil.copytree(staged["path"], releases / staged["release"])
    (releases / agent_releases.STATE_FILE).write_text(json.dumps({"current": staged["release"], "history": []}))
    (tmp_path / "models").symlink_to(releases / staged["release"])
    out = agent_drift.probe(tmp_path / "models", releases, "http://127.0.0.1:9", "h", "")
    assert out["active"] == out["current"] == staged["release"]
    assert out["files"] == out["manifest"] == manifest.read(Path(staged["path"]))
    assert out["index"] is None and "127.0.0.1:9" in out["index_error"]


# --- outputs and exit codes ------------------------------------------------------------------------

def _report(*results: SourceResult) -> DriftReport:
    return DriftReport(results=list(results), seconds=1.0)


CLEAN = SourceResult(source="ansible", hosts=["n1", "n2"])
DRIFT = SourceResult(source="models", hosts=["n1", "n2"], findings=[
    Finding(source="models", host="n2", resource="file:mlp/config.pbtxt", detail="missing"),
    Finding(source="models", host="n2", resource="model:mlp", detail="not READY")])
FAILED = SourceResult(source="pulumi", hosts=["triton/dev"], error="the Pulumi CLI is not installed")


@pytest.mark.parametrize("results, code", [
    ((CLEAN,), ExitCode.OK), ((CLEAN, DRIFT), ExitCode.FINDINGS), ((CLEAN, FAILED), ExitCode.FAILED),
    ((DRIFT, FAILED), ExitCode.FAILED),
])
def test_exit_codes(results: tuple[SourceResult, ...], code: int) -> None:
    assert _report(*results).exit_code == code


def test_textfile_counts_per_source_and_host() -> None:
    text = textfile(_report(CLEAN, DRIFT, FAILED))
    lines = [line for line in text.splitlines() if line.startswith(DRIFT_METRIC + "{")]
    assert lines == [f'{DRIFT_METRIC}{{source="ansible",host="n1"}} 0', f'{DRIFT_METRIC}{{source="ansible",host="n2"}} 0',
                     f'{DRIFT_METRIC}{{source="models",host="n1"}} 0', f'{DRIFT_METRIC}{{source="models",host="n2"}} 2']
    assert 'tritonops_drift_check_success{source="pulumi"} 0' in text
    assert 'tritonops_drift_check_success{source="models"} 1' in text


def test_textfile_is_valid_for_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    import subprocess

    path = write_textfile(_report(CLEAN, DRIFT), tmp_path)
    res = subprocess.run([promtool, "check", "metrics"], input=path.read_text(), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_textfile_write_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    (tmp_path / "tritonops_drift.prom").write_text("old\n")
    path = write_textfile(_report(DRIFT), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["tritonops_drift.prom"]
    assert path.read_text().startswith("# HELP " + DRIFT_METRIC)
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_markdown_summary() -> None:
    md = markdown(_report(CLEAN, DRIFT, FAILED))
    assert md.startswith("## Drift check: check failed\n")
    assert "| models | n2 | 2 | drift |" in md
    assert "| ansible | n1 | 0 | clean |" in md
    assert "| pulumi | - | - | failed: the Pulumi CLI is not installed |" in md
    assert "- **models** `n2` `file:mlp/config.pbtxt`: missing" in md
    assert markdown(_report(CLEAN)).startswith("## Drift check: no drift\n")


# --- pulumi ----------------------------------------------------------------------------------------

def test_pulumi_targets_are_the_committed_stacks() -> None:
    pairs = pulumi_check.targets()
    assert ("triton", "dev") in pairs and ("platform", "prod") in pairs
    assert pulumi_check.targets(["triton"], ["prod"]) == [("triton", "prod")]


def test_pulumi_without_cli_is_a_clear_error_for_that_source_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulumi_check.shutil, "which", lambda name: None)
    res = pulumi_check.check(["triton"], ["dev"])
    assert res.error is not None and "Pulumi CLI is not installed" in res.error and "triton/dev" in res.error
    assert res.findings == []


def test_cli_pulumi_missing_exits_3_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulumi_check.shutil, "which", lambda name: None)
    out = CliRunner().invoke(app, ["drift", "--source", "pulumi", "--stack", "triton", "--env", "dev", "--json"])
    assert out.exit_code == ExitCode.FAILED, out.output
    doc = json.loads(out.output)
    assert "Pulumi CLI is not installed" in doc["errors"]["pulumi"]
    assert doc["counts"] == []


def test_cli_rejects_unknown_source() -> None:
    out = CliRunner().invoke(app, ["drift", "--source", "terraform"])
    assert out.exit_code == ExitCode.USAGE
    assert "unknown --source terraform" in out.output


# --- the Kubernetes CronJob ------------------------------------------------------------------------

def _triton_cfg() -> Any:
    cfg = load_stack_config("triton", "dev")
    assert isinstance(cfg, TritonStackConfig)
    return cfg


def test_cron_job_checks_the_desired_models() -> None:
    cfg = _triton_cfg()
    svc = cfg.model_services[0]
    job = k8s_drift.cron_job(cfg, svc)
    cmd = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    expected = [a for i, a in enumerate(cmd) if i and cmd[i - 1] == "--expect"]
    assert expected == sorted(m.name for m in svc.models)
    assert cmd[cmd.index("--url") + 1] == f"http://triton-{svc.name}.{cfg.namespace}.svc:8000"
    env = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"][0]
    assert env["name"] == SECRET_ENV
    assert env["valueFrom"]["secretKeyRef"]["name"] == cfg.admin_api.secret_name


def test_drift_objects_are_valid_kubernetes() -> None:
    cfg = _triton_cfg()
    for obj in [*k8s_drift.drift_objects(cfg, cfg.model_services[0]), k8s_release_agent.agent_config_map(cfg)]:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_cron_job_runs_the_agents_check_from_its_config_map() -> None:
    """The CronJob runs the agent's ``check`` (the code the nodes' timer runs), mounted from the ConfigMap
    that holds exactly the zipapp ``tritonops.agent_bundle`` builds."""
    cfg = _triton_cfg()
    pod = k8s_drift.cron_job(cfg, cfg.model_services[0])["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    cmd = pod["containers"][0]["command"]
    assert cmd[:3] == ["python3", k8s_release_agent.AGENT_PATH, "check"]
    mount = pod["containers"][0]["volumeMounts"][0]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert Path(mount["mountPath"]) / volume["configMap"]["items"][0]["path"] == Path(cmd[1])
    cm = k8s_release_agent.agent_config_map(cfg)
    assert cm["metadata"]["name"] == volume["configMap"]["name"]
    key = volume["configMap"]["items"][0]["key"]
    assert base64.b64decode(cm["binaryData"][key]) == bundle.build_bytes()


# --- converging repairs a release whose files drifted on the node ----------------------------------

def test_install_repairs_a_tampered_release_from_a_verified_push(staged: dict[str, Any], tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    dest = releases / staged["release"]
    shutil.copytree(staged["path"], dest)
    (dest / "preprocess" / "1" / "model.py").write_text("# tampered\n")
    (dest / "postprocess" / "golden.json").unlink()
    with pytest.raises(ReleaseError):  # no push to repair from: the damage is reported, nothing moves
        agent_releases.install(releases, releases / f".staging-{staged['release']}", staged["release"])
    staging = releases / f".staging-{staged['release']}"
    shutil.copytree(staged["path"], staging)
    out = agent_releases.install(releases, staging, staged["release"])
    assert out["changed"] and out["repaired"]
    assert manifest.verify(dest) == manifest.read(Path(staged["path"]))
    assert sorted(p.name for p in releases.iterdir()) == [staged["release"]]
    assert agent_releases.install(releases, staging, staged["release"])["changed"] is False


def test_pulumi_events_become_findings_and_unchanged_resources_do_not() -> None:
    from pulumi.automation import events as ev

    def event(op: ev.OpType, urn: str, diffs: list[str] | None = None) -> ev.EngineEvent:
        meta = ev.StepEventMetadata(op=op, urn=urn, type="kubernetes:apps/v1:Deployment", provider="", diffs=diffs)
        return ev.EngineEvent(sequence=1, timestamp=0, resource_pre_event=ev.ResourcePreEvent(metadata=meta))

    found: list[Finding] = []
    on_event = pulumi_check._events("triton", "prod", "preview", found)
    on_event(event(ev.OpType.SAME, "urn:same"))
    on_event(event(ev.OpType.READ, "urn:read"))
    on_event(event(ev.OpType.UPDATE, "urn:deploy", ["spec.replicas", "spec.template"]))
    on_event(ev.EngineEvent(sequence=2, timestamp=0))  # no resource event: ignored
    assert [(f.host, f.resource, f.detail) for f in found] == [
        ("triton/prod", "urn:deploy", "preview: update (spec.replicas, spec.template)")]


def test_pulumi_one_failing_stack_is_an_error_and_the_others_still_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulumi_check.shutil, "which", lambda name: f"/usr/bin/{name}")

    def preview(stack: str, env: str) -> list[Finding]:
        if stack == "platform":
            raise RuntimeError("backend unreachable")
        return [Finding(source="pulumi", host=f"{stack}/{env}", resource="urn:x", detail="refresh: update")]

    result = pulumi_check.check(["platform", "triton"], ["dev"], preview=preview)
    assert [(f.host, f.resource) for f in result.findings] == [("triton/dev", "urn:x")]
    assert result.error == "platform/dev: RuntimeError: backend unreachable"
    assert result.hosts == ["platform/dev", "triton/dev"]
