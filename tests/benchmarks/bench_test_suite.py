"""How long do the test suites the docs quote take? Prints figures and records them; asserts nothing.

    .venv/bin/python tests/benchmarks/bench_test_suite.py [--note TEXT]        # k8s unit tests: bench_k8s_tests
    .venv/bin/python tests/benchmarks/bench_test_suite.py --ci [--note TEXT]   # all of make test: bench_make_test

The default times ``pytest tests/unit/k8s`` in one process and with ``-n 2`` (pytest-xdist), one after
the other, and records the wall time of each and the number of tests (record ``bench_k8s_tests``).
``--ci`` runs ``.ci/run`` (``make test`` stage by stage: 30 minutes or more on 2 cores) and records the
stage times and total it prints (record ``bench_make_test``). Run on a quiet machine, or say in ``--note``
what else ran.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[2]
PYTEST = [str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", "tests/unit/k8s"]
# `.ci/run`'s stage lines: "  unit           150 s"; the total "  total   1843 s (30 min 43 s)".
STAGE = re.compile(r"^  ([\w-]+)\s+(\d+) s\b", re.MULTILINE)


def timed(argv: list[str]) -> tuple[float, str]:
    """Run ``argv`` in the checkout; its wall time and output (stdout and stderr). Exit 3 if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stdout[-4000:])
        sys.exit(f"error: {' '.join(argv)} exited {proc.returncode}: nothing recorded")
    return wall, proc.stdout


def k8s_tests(note: str) -> None:
    one, out = timed([*PYTEST, "-n", "0"])
    two, _ = timed([*PYTEST, "-n", "2"])
    passed = re.search(r"(\d+) passed", out)
    tests = int(passed.group(1)) if passed else 0
    lines = [f"pytest tests/unit/k8s: {tests} tests", f"  one process  {one:7.1f} s", f"  -n 2         {two:7.1f} s"]
    print("\n".join(lines))
    record.write("bench_k8s_tests", {"tests": tests, "one_process_s": round(one, 1), "two_workers_s": round(two, 1)},
                 "\n".join(lines), note=note)


def make_test(note: str) -> None:
    wall, out = timed([str(ROOT / ".ci" / "run")])
    stages = {f"{name.replace('-', '_')}_s": int(secs) for name, secs in STAGE.findall(out) if name != "budget"}
    report = out[out.index("== .ci/run stage times"):] if "== .ci/run stage times" in out else out[-4000:]
    print(report)
    record.write("bench_make_test", {**stages, "wall_s": round(wall, 1)}, report, note=note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="time all of make test (.ci/run) instead of tests/unit/k8s")
    parser.add_argument("--note", default="", help="what the record should say about the machine (busy, quiet)")
    args = parser.parse_args()
    (make_test if args.ci else k8s_tests)(args.note)


if __name__ == "__main__":
    main()
