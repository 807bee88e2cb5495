"""The agent's zipapp holds the agent and ``tritonops.core`` (nothing else of tritonops) and runs on the standard library.

A node has its ``python3`` and nothing else: the zipapp is run here with ``-I -S`` (no site-packages, so
neither the checkout's ``tritonops`` nor any third-party package can be imported) and every module it holds
must import.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from tritonops import agent_bundle as bundle

INFRA = Path(bundle.__file__).resolve().parent

_IMPORT_ALL = """
import importlib, json, sys, zipfile
sys.path.insert(0, sys.argv[1])
names = [n[:-3].replace("/", ".").removesuffix(".__init__") for n in zipfile.ZipFile(sys.argv[1]).namelist()
         if n.startswith("tritonops_agent/")]
for n in names:
    importlib.import_module(n)
print(json.dumps({"imported": sorted(names), "tritonops": sorted(m for m in sys.modules if m.split(".")[0] == "tritonops"),
                  "site": [p for p in sys.path if "site-packages" in p]}))
"""


def test_the_zipapp_holds_the_node_packages_and_nothing_else() -> None:
    names = zipfile.ZipFile(io.BytesIO(bundle.build_bytes())).namelist()
    expected = {f"tritonops_agent/{sub}/{p.name}" for sub in ("agent", "core", "release_format", "stores")
                for p in (INFRA / sub).glob("*.py") if p.name != "__main__.py"}
    assert {"tritonops_agent/core/errors.py", "tritonops_agent/core/keys.py", "tritonops_agent/agent/cli.py",
            "tritonops_agent/release_format/trust.py", "tritonops_agent/stores/http.py"} <= expected
    assert set(names) == expected | {"tritonops_agent/__init__.py", "__main__.py"}


def test_the_zipapp_runs_and_imports_with_the_standard_library_only(tmp_path: Path) -> None:
    pyz = bundle.build(tmp_path / "tritonops-agent.pyz")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", _IMPORT_ALL, str(pyz)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["site"] == [] and doc["tritonops"] == []  # nothing but the zipapp and the standard library
    assert {"tritonops_agent.core.fsio", "tritonops_agent.agent.pull"} <= set(doc["imported"])
    run = subprocess.run([sys.executable, "-I", "-S", str(pyz), "verify", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "nowhere" in run.stderr and "Traceback" not in run.stderr, run.stderr
