"""Benchmark: `tritonops validate` on a generated repository of 500 models.

    .venv/bin/python tests/benchmarks/bench_validate.py [N]

Prints wall time for the whole repository and per hundred models (target: well under 1 s / 100).
The repository is the sample one cloned N/5 times under new names, ensembles rewired to their clones.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from tritonops.model_repo.validate import Target, validate

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_repository"


def generate(dest: Path, n_models: int) -> None:
    names = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
    for i in range(n_models // len(names)):
        for name in names:
            folder = dest / f"{name}_{i}"
            shutil.copytree(SAMPLE / name, folder)
            cfg = folder / "config.pbtxt"
            text = cfg.read_text().replace(f'name: "{name}"', f'name: "{name}_{i}"', 1)
            for other in names:
                text = text.replace(f'model_name: "{other}"', f'model_name: "{other}_{i}"')
            cfg.write_text(text)
            if (folder / "configs").exists():
                shutil.rmtree(folder / "configs")


def main(n_models: int = 500) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        generate(repo, n_models)
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            report = validate(repo, target=Target.cpu)
            runs.append(time.perf_counter() - start)
        assert report.ok, report.errors[:3]
        best = min(runs)
        print(f"validate: {len(report.models)} models, best of 3 = {best:.3f} s "
              f"({best / len(report.models) * 100:.3f} s per 100 models; runs: "
              f"{', '.join(f'{r:.3f}' for r in runs)})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
