"""Small statistics for side-by-side timing: medians, spreads, intervals of ratios.

Pure Python, no SciPy. Speed ratios are compared on a log scale, where a 2x
speedup and a 2x slowdown are equally far from 1 and machine noise is roughly
symmetric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% quantiles of Student's t, by degrees of freedom.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("df: must be >= 1")
    if df in _T975:
        return _T975[df]
    larger = [d for d in _T975 if d > df]
    return _T975[min(larger)] if larger else 1.960


@dataclass(frozen=True)
class Ratio:
    """A speed ratio measured over paired runs.

    Attributes:
        median: Median of the per-pair ratios.
        low: Lower end of the 95% interval (None with fewer than two pairs).
        high: Upper end of the 95% interval (None with fewer than two pairs).
        n: Number of pairs.
    """

    median: float
    low: float | None
    high: float | None
    n: int

    @property
    def interval(self) -> tuple[float, float] | None:
        """``(low, high)``, or None when it cannot be computed."""
        return None if self.low is None else (self.low, self.high)

    def verdict(self) -> str:
        """``"faster"`` only when the interval lies above 1, ``"slower"`` below, else ``"same"``."""
        if self.low is not None and self.low > 1:
            return "faster"
        if self.high is not None and self.high < 1:
            return "slower"
        return "same"


def ratio(values: Sequence[float]) -> Ratio:
    """Median and a 95% t interval over the logs of per-pair ratios.

    The interval is for the geometric mean ratio: the mean log-ratio plus or
    minus t * s / sqrt(n). With few pairs it is wide, which is the honest answer.

    Raises:
        ValueError: No ratios, or a ratio that is not positive.
    """
    if not values:
        raise ValueError("ratio: needs at least one value")
    if any(not v > 0 for v in values):
        raise ValueError("ratio: every value must be > 0")
    med = statistics.median(values)
    if len(values) < 2:
        return Ratio(med, None, None, len(values))
    logs = [math.log(v) for v in values]
    mean = statistics.fmean(logs)
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Ratio(med, math.exp(mean - half), math.exp(mean + half), len(values))


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """``(median, min, max)`` of ``values``."""
    return statistics.median(values), min(values), max(values)


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values."""
    return math.exp(statistics.fmean(math.log(v) for v in values))
