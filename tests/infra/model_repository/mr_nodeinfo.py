"""What the model_repository checks need to know about a node: its inventory variables and address."""

from __future__ import annotations

import base64
import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

import yaml
from node_helpers import host_name, inventory_vars, node_address  # noqa: F401 - re-exported to the tests
from tritonops.core.triton_cli import HTTP_PORT
from tritonops.core.triton_http import DEFAULT_HEADER

REPO = Path(__file__).resolve().parents[3]


def _defaults(role: str) -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {})






def _plain(value: Any, fallback: Any) -> Any:
    """Inventory values are untemplated: use the role default for anything still holding Jinja."""
    return fallback if isinstance(value, str) and "{{" in value else value


def node_vars(host: Any, config: Any) -> dict[str, Any]:
    v = inventory_vars(host, config)
    ts, mr = _defaults("triton_server"), _defaults("model_repository")

    def get(name: str, fallback: Any) -> Any:
        return _plain(v.get(name, fallback), fallback)

    link = get("model_repository_link", get("triton_server_model_repository", ts["triton_server_model_repository"]))
    return {
        "link": link,
        "releases": get("model_repository_releases_dir", os.path.dirname(link) + "/releases"),
        "group": get("triton_server_group", ts["triton_server_group"]),
        "user": get("triton_server_user", ts["triton_server_user"]),
        "port": int(get("triton_server_http_port", HTTP_PORT)),
        "header": get("triton_server_admin_header", DEFAULT_HEADER),
        "secret": get("triton_server_admin_secret", ""),
        "keep": int(get("model_repository_keep_releases", 3)),
        "source": get("model_repository_local_path", "") if v.get("model_repository_source", "local") == "local" else "",
        "recover_after": int(get("model_repository_recover_after", mr["model_repository_recover_after"])),
        "recover_interval": int(get("model_repository_recover_interval", mr["model_repository_recover_interval"])),
        "triton_service": get("triton_server_service_name", ts["triton_server_service_name"]),
    }




def repository_api(host: Any, mr: dict[str, Any], path: str, check: bool = True) -> Any:
    """POST to Triton's repository API on the node's loopback (with the admin header when given)."""
    headers = {mr["header"]: mr["secret"]} if mr["secret"] else {}
    code = (
        "import json, urllib.request, urllib.error\n"
        f"req = urllib.request.Request('http://127.0.0.1:{mr['port']}/v2/repository/{path}', data=b'{{}}',"
        f" headers={headers!r}, method='POST')\n"
        "try:\n    print(urllib.request.urlopen(req, timeout=30).read().decode())\n"
        "except urllib.error.HTTPError as e:\n    print(e.read().decode())\n"
    )
    out = host.run("python3 -c " + shlex.quote(code))
    if check:
        assert out.rc == 0, out.stderr
    return json.loads(out.stdout or "null")


def run_agent(host: Any, *args: str) -> Any:
    """Run the release agent (the zipapp the role pushes, built from this checkout) on the node with its
    own python3, in a temporary folder removed afterwards; the arguments are shell-quoted."""
    from tritonops.agent_bundle import build

    d = host.check_output("mktemp -d")
    with tempfile.TemporaryDirectory() as local:  # pushed in pieces: its base64 is over one argument's 128 KiB
        push_file(host, build(Path(local) / "agent.pyz"), f"{d}/agent.pyz")
    cmd = " ".join(shlex.quote(a) for a in args)
    return host.run(f'python3 {shlex.quote(d)}/agent.pyz {cmd}; rc=$?; rm -rf {shlex.quote(d)}; exit $rc')


def push_file(host: Any, local: Path, remote: str, chunk: int = 60_000) -> None:
    """Copy a file to the node through the host backend, in base64 pieces a command line can hold."""
    b64 = base64.b64encode(local.read_bytes()).decode()
    host.check_output(f"rm -f {shlex.quote(remote)}.b64")
    for i in range(0, len(b64), chunk):
        host.check_output(f"printf %s {b64[i:i + chunk]} >> {shlex.quote(remote)}.b64")
    host.check_output(f"base64 -d {shlex.quote(remote)}.b64 > {shlex.quote(remote)} && rm {shlex.quote(remote)}.b64")
