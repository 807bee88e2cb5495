"""Paired comparisons of two settings measured in turns: the drift of a busy host cancels within a pair.

:func:`median_bound` is the sign test's distribution-free bound on a median; :class:`Comparison` judges a
finalist against a simpler setting from their per-round throughput and p95 ratios (:func:`tritonops.triton.tune.runoff`
measures the rounds).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tritonops.triton.bench import BenchReport
from tritonops.triton.tune_space import Setting


class Trial(Protocol):
    """What a comparison reads of a measured run (:class:`tritonops.triton.tune.Trial`)."""

    report: BenchReport

# The bound on the median ratio: two-sided, this confidence or more (each end 95%). 5 pairs give the
# smallest and largest ratio, 93.8% (1 - 2/2**5): the fewest pairs that reach 90%.
CONFIDENCE = 0.9
# A setting must beat another by more than this fraction of throughput to count as better: below it,
# two perf_analyzer runs of one setting differ on a busy machine (tune's climb and its runoff alike).
MIN_GAIN = 0.05


def median_bound(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): a distribution-free bound on the median of ``values`` (the sign test's).

    With n values sorted, the true median lies between the k-th smallest and the k-th largest with
    probability 1 - 2 P(B < k), B ~ Binomial(n, 1/2), whatever the values' distribution; k is the largest
    for which that is at least ``confidence`` (at least 1: the smallest and largest, with the coverage
    they give, when there are too few values to reach it). Binomial tails with the standard library
    (``math.comb``; scipy is not a dependency).
    """
    xs = sorted(values)
    n = len(xs)
    if not n:
        raise ValueError("median_bound: no values")

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = max((k for k in range(1, (n + 1) // 2 + 1) if coverage(k) >= confidence), default=1)
    return statistics.median(xs), xs[k - 1], xs[n - k], coverage(k)


Verdict = Literal["better", "indistinguishable", "slower", "p95 worse"]


@dataclass(frozen=True)
class Comparison:
    """A finalist against a simpler one, measured in pairs (:func:`runoff`): ``other`` / ``simpler``.

    Each pair is one round: both settings measured one after the other, so the host's drift between
    rounds cancels in the pair's ratio. ``ratio`` is the median of the pairs' throughput ratios, ``low`` and
    ``high`` its bound (:func:`median_bound`, ``confidence`` its coverage); the ``p95_`` figures are the
    same for the p95 ratio. ``other`` wins (``better``) only when ``low`` clears 1 + min_gain and its p95
    is not worse beyond its own bound (``p95_low`` over 1 + min_gain: ``p95 worse``); a bound below 1 is
    ``slower``; anything else ``indistinguishable``: the simpler setting is kept.
    """

    simpler: Setting
    other: Setting
    pairs: int
    ratio: float
    low: float
    high: float
    p95_ratio: float
    p95_low: float
    p95_high: float
    confidence: float
    verdict: Verdict

    @classmethod
    def of(cls, simpler: Setting, other: Setting, pairs: Sequence[tuple[Trial, Trial]],
           min_gain: float = MIN_GAIN) -> Comparison:
        """Judge ``pairs`` ((simpler's run, other's run) per round, both measured)."""
        ratio, low, high, cover = median_bound(
            [b.report.inferences_per_s / a.report.inferences_per_s for a, b in pairs])
        p95, p95_low, p95_high, _ = median_bound([b.report.p95_ms / a.report.p95_ms for a, b in pairs])
        verdict: Verdict = "indistinguishable"
        if cover >= CONFIDENCE and low > 1 + min_gain:
            verdict = "p95 worse" if p95_low > 1 + min_gain else "better"
        elif cover >= CONFIDENCE and high < 1:
            verdict = "slower"
        return cls(simpler, other, len(pairs), ratio, low, high, p95, p95_low, p95_high, cover, verdict)

    @property
    def kept(self) -> Setting:
        return self.other if self.verdict == "better" else self.simpler

    @property
    def figures(self) -> str:
        return (f"throughput x{self.ratio:.2f} [{self.low:.2f}, {self.high:.2f}], p95 x{self.p95_ratio:.2f} "
                f"[{self.p95_low:.2f}, {self.p95_high:.2f}] ({self.pairs} pairs, {self.confidence:.1%} bound)")

    @property
    def says(self) -> str:
        """One line: the verdict, the setting kept, and the figures."""
        head = {
            "better": f"better: {self.other.label} over {self.simpler.label}",
            "indistinguishable": f"indistinguishable: kept the simpler setting {self.simpler.label} "
                                 f"over {self.other.label}",
            "slower": f"slower: kept the simpler setting {self.simpler.label} over {self.other.label}",
            "p95 worse": f"p95 worse: kept the simpler setting {self.simpler.label} over {self.other.label}",
        }[self.verdict]
        return f"{head}: {self.figures}"

    def to_dict(self) -> dict[str, Any]:
        return {"simpler": self.simpler.label, "other": self.other.label, "verdict": self.verdict,
                "kept": self.kept.label, "pairs": self.pairs,
                "throughput_ratio": round(self.ratio, 4), "bound": [round(self.low, 4), round(self.high, 4)],
                "p95_ratio": round(self.p95_ratio, 4), "p95_bound": [round(self.p95_low, 4), round(self.p95_high, 4)],
                "confidence": round(self.confidence, 4), "says": self.says}
