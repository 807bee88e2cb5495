"""Making Triton serve a release, and the error of one failed step: what pull mode and push mode's
``recover`` share.

``serve_release`` loads every model of the release the link points at (ensembles last), unloads what
the release lacks, runs the golden gate against what Triton answers, and only then marks the release
served (``releases.mark``). ``StepFailed`` names the step that failed and keeps the error underneath,
which ``failures.classify`` classes by cause (retry or refuse).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import ReleaseError
from ..core.triton_http import Triton
from ..release_format import manifest
from ..release_format.golden_gate import golden_gate
from . import failures, releases


class StepFailed(ReleaseError):
    """A step of a release failed; ``error`` is what made it fail (failures.py classes it by cause)."""

    def __init__(self, step: str, reason: str, error: BaseException | None = None) -> None:
        super().__init__(f"{step}: {reason}")
        self.step, self.reason, self.error = step, reason, error

    def classify(self, triton_live: bool | None = None) -> tuple[str, str]:
        """(retry|refused, cause), from the step and what is underneath (failures.py)."""
        return failures.classify(self.step, self.error or self.__context__, triton_live)


def _step(name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except StepFailed:
        raise
    except (ReleaseError, OSError) as e:
        raise StepFailed(name, str(e), e) from None


def serve_release(triton: Triton | None, link: Path, releases_dir: Path, release: str, load_timeout: float = 600.0,
                  golden_timeout: float = 120.0, touch: bool = True, digest: str | None = None,
                  load: bool = True) -> dict[str, Any]:
    """Make Triton serve the release the link points at, gate it, and mark it served (the lock held).

    Every model of the release is loaded (ensembles after their steps), re-read from its files when
    ``touch`` (their mtime set to now: Triton keeps a model whose folder is not newer than what it
    loaded); models Triton has READY that the release lacks are unloaded; the golden gate runs against
    what Triton answers. Only a passing gate marks it served. Without Triton (an init step), the link
    is what serves. Raises StepFailed (load, unload, golden, mark) otherwise. ``digest``: the one
    ``current.json`` records for it (default: that of ``current`` when it is the release, else its
    manifest file's), never changed by a gate run again. ``load=False`` (model control mode poll or
    none, where Triton loads the repository itself and the caller knows it started after the link last
    moved): nothing is loaded or unloaded; every model of the release must be READY in Triton (else a
    ``triton`` StepFailed, retried) and the gate runs against them.
    """
    st = releases.state(Path(releases_dir))
    if digest is None and st.get("current") == release and st.get("digest"):
        digest = str(st["digest"])
    rdir = Path(releases_dir) / release
    models = _step("load", lambda: manifest.models(manifest.read(rdir)))
    ens = set(_step("load", lambda: manifest.ensembles(rdir)))
    order = [m for m in models if m not in ens] + [m for m in models if m in ens]
    out: dict[str, Any] = {"reloaded": order if triton and load else [], "unloaded": [], "cases": 0}
    if triton is not None and not load:
        missing = sorted(set(models) - set(_step("triton", triton.ready_models)))
        if missing:
            raise StepFailed("triton", f"not READY in Triton (it loads the repository itself): {', '.join(missing)}")
    elif triton is not None:
        if touch:
            _step("load", lambda: releases.touch_models(rdir, order))
        for m in order:
            _step("load", lambda: triton.load(m, timeout=load_timeout))  # noqa: B023
        extra = sorted(set(_step("load", triton.ready_models)) - set(models))
        for m in extra:
            _step("unload", lambda: triton.unload(m))  # noqa: B023
        out["unloaded"] = extra
    if triton is not None:
        gate = _step("golden", lambda: golden_gate(triton, rdir, sorted(models), timeout=golden_timeout))
        if not gate["ok"]:
            raise StepFailed("golden", "; ".join(gate["failed"]))
        out["cases"] = gate["cases"]
    _step("mark", lambda: releases.mark(releases_dir, release, digest, link=link))
    return out
