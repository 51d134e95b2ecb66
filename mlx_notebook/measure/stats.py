"""Small statistics for side-by-side timing: medians, spreads, intervals of ratios.

Pure Python, no SciPy. Speed ratios are compared on a log scale, where a 2x
speedup and a 2x slowdown are equally far from 1 and machine noise is roughly
symmetric.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Lentz's method)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for aa in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0 or x >= 1.0:
        return max(0.0, min(1.0, x))
    log = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
        + b * math.log(1.0 - x)
    )  # fmt: skip
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, ``t >= 0``."""
    return 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=512)  # a comparison asks for the same few after every pair
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (``p >= 0.5``) of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("df: must be >= 1")
    if not 0.5 <= p < 1:
        raise ValueError("p: must be in [0.5, 1)")
    lo, hi = 0.0, 1e6
    for _ in range(100):  # bisection: t_sf is monotone, 1e6 / 2**100 is far below any need
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf(mid, df) > 1 - p else (lo, mid)
    return (lo + hi) / 2


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom."""
    return t_quantile(0.975, df)


@dataclass(frozen=True)
class Ratio:
    """A speed ratio measured over paired runs.

    Attributes:
        median: Median of the per-pair ratios.
        low: Lower end of the interval (None with fewer than two pairs).
        high: Upper end of the interval (None with fewer than two pairs).
        n: Number of pairs.
        level: Confidence of the interval (0.95: a 95% interval).
    """

    median: float
    low: float | None
    high: float | None
    n: int
    level: float = 0.95

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


def ratio(values: Sequence[float], level: float = 0.95) -> Ratio:
    """Median and a t interval (``level``, default 95%) over the logs of per-pair ratios.

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
        return Ratio(med, None, None, len(values), level)
    logs = [math.log(v) for v in values]
    mean = statistics.fmean(logs)
    t = t_quantile(0.5 + level / 2, len(logs) - 1)
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return Ratio(med, math.exp(mean - half), math.exp(mean + half), len(values), level)


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """``(median, min, max)`` of ``values``."""
    return statistics.median(values), min(values), max(values)


def counted(n: int, noun: str) -> str:
    """``"1 run"``, ``"2 runs"``, ``"0 runs"``: a count with its noun agreeing."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values."""
    return math.exp(statistics.fmean(math.log(v) for v in values))
