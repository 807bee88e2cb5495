"""Write the agent into one file: a zipapp that ``python3 FILE <command>`` runs on any node or pod.

The roles push it, the Kubernetes pods get it from a ConfigMap, drift runs it. It holds the node's
packages under one renamed top package, as they sit in the checkout: ``tritonops_agent/agent/`` (the
node program), ``core/`` (the plumbing it shares with the controller), ``release_format/`` (the release
format and its checks) and ``stores/`` (the store kinds), so their relative imports (``from ..core.errors
import ...``) resolve alike in both. Its content depends only on their sources, so its sha256 changes
exactly when one of them does.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

PACKAGE = "tritonops_agent"
SUBPACKAGES = ("agent", "core", "release_format", "stores")  # the folders of infra/tritonops/ the zipapp holds
_INIT = b'"""The tritonops release agent (``agent``) and what it shares with the controller, as one zipapp."""\n'
_MAIN = b"import sys\nfrom tritonops_agent.agent.cli import main\nsys.exit(main())\n"
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def sources() -> dict[str, bytes]:
    """{path inside the zipapp's package: source} of the modules of SUBPACKAGES."""
    root = Path(__file__).parent
    return {f"{sub}/{p.name}": p.read_bytes() for sub in SUBPACKAGES
            for p in sorted((root / sub).glob("*.py")) if p.name != "__main__.py"}


def build_bytes() -> bytes:
    """The zipapp's bytes: fixed timestamps and order, so the same source gives the same file."""
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        files = [(f"{PACKAGE}/__init__.py", _INIT), *((f"{PACKAGE}/{n}", d) for n, d in sources().items()),
                 ("__main__.py", _MAIN)]
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buf.getvalue()


def build(out: Path) -> Path:
    """Write the zipapp to ``out`` (atomically, 0755); unchanged content is not rewritten."""
    out = Path(out)
    data = build_bytes()
    if out.is_file() and out.read_bytes() == data:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


if __name__ == "__main__":  # python -m tritonops.agent_bundle OUT: what the roles run on the controller
    import hashlib
    import json
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m tritonops.agent_bundle OUT")
    target = Path(sys.argv[1])
    before = target.read_bytes() if target.is_file() else None
    data = build(target).read_bytes()
    print(json.dumps({"path": str(target), "sha256": hashlib.sha256(data).hexdigest(), "changed": before != data}))
