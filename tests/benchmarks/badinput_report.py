"""The bad-input table's counts per class (clean, vague, traceback, wrong_exit, hang, lost_file).

    .venv/bin/python tests/benchmarks/badinput_report.py [--json] [--all] [FILTER]

Runs every case of tests/unit/badinput/badinput_cases.py against the ``tritonops`` package on the path
(``PYTHONPATH=OTHER_CHECKOUT/infra`` measures another tree with the same cases), prints each case that is
not clean with its owner, then the totals per class and per owner. Exit 1 when any case is not clean.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "badinput"))

import tritonops.agent.cli  # noqa: E402,F401
import tritonops.cli  # noqa: E402,F401
import tritonops.k8s.render  # noqa: E402,F401
from badinput_cases import CASES  # noqa: E402
from badinput_runner import CLASSES, run, tritonops_command  # noqa: E402

tritonops_command()


def main(argv: list[str]) -> int:
    as_json, show_all = "--json" in argv, "--all" in argv
    wanted = [a for a in argv if not a.startswith("--")]
    cases = [c for c in CASES if not wanted or any(w in c.id for w in wanted)]
    start = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="badinput-") as tmp:
        for case in cases:
            o = run(case, Path(tmp))
            rows.append({"case": o.case, "owner": case.owner, "class": o.klass, "code": o.code,
                         "expect": case.expect, "seconds": round(o.seconds, 2), "detail": o.detail})
            if not as_json and (show_all or o.klass != "clean"):
                print(f"{o.klass:10} {case.owner:5} {o.case:40} {o.detail}", flush=True)
    totals = collections.Counter(r["class"] for r in rows)
    owners: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        owners[r["owner"]][r["class"]] += 1
    if as_json:
        print(json.dumps({"cases": rows, "totals": {k: totals[k] for k in CLASSES}}, indent=2))
    else:
        print(f"\n{len(rows)} cases in {time.monotonic() - start:.1f}s (infra from {Path(tritonops.cli.__file__).parent})")
        print("owner  " + " ".join(f"{k:>10}" for k in CLASSES))
        for owner in sorted(owners):
            print(f"{owner:6} " + " ".join(f"{owners[owner][k]:>10}" for k in CLASSES))
        print("total  " + " ".join(f"{totals[k]:>10}" for k in CLASSES))
    return 0 if totals["clean"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
