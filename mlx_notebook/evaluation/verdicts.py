"""Mean scores with intervals, and paired verdicts between columns, over the rows.

The rows are the unit: a column's score on a row is the mean over its epochs, and
intervals come from resampling rows (a seeded bootstrap, so a table reads the same
each time). Two columns are compared on the rows both scored, as pairs: the
interval is that of the mean difference, and a difference is "beyond noise" only
when its whole interval lies on one side of zero. The bootstrap interval is
widened by sqrt(n / (n - 1)) and uses Student's t in place of the normal, the
small-sample correction of Hesterberg (2015), so that with a dozen rows a
difference that is not there is still called "within noise" about 19 times in 20.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from ..measure.stats import counted, t975

RESAMPLES = 2000


@dataclass(frozen=True)
class Mean:
    """A column's mean score and its 95% interval.

    Attributes:
        mean: Mean over rows (None when no row was scored).
        low: Lower end (None with fewer than two rows).
        high: Upper end.
        n: Rows scored.
    """

    mean: float | None
    low: float | None
    high: float | None
    n: int

    def __str__(self) -> str:
        if self.mean is None:
            return "no scores"
        if self.low is None:
            return f"{self.mean:.3f} (n={self.n})"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n})"


@dataclass(frozen=True)
class Paired:
    """Column ``b`` against column ``a`` over the rows both scored.

    Attributes:
        a: The first column's label.
        b: The second's.
        diff: ``Mean`` of b − a per row.
        better: Rows where b scored higher.
        worse: Rows where b scored lower.
        same: Rows where they tied.
    """

    a: str
    b: str
    diff: Mean
    better: int
    worse: int
    same: int

    @property
    def verdict(self) -> str:
        """``"better beyond noise"``, ``"worse beyond noise"`` or ``"within noise"``."""
        d = self.diff
        if d.low is not None and d.low > 0:
            return "better beyond noise"
        if d.high is not None and d.high < 0:
            return "worse beyond noise"
        return "within noise"

    def __str__(self) -> str:
        d = self.diff
        if d.mean is None:
            return f"{self.b} − {self.a}: no rows scored by both"
        span = "" if d.low is None else f" [{d.low:+.3f}, {d.high:+.3f}]"
        return (
            f"{self.b} − {self.a} = {d.mean:+.3f}{span}, {self.b} better on "
            f"{counted(self.better, 'row')}, worse on {self.worse}, same on {self.same}: "
            f"{self.verdict}"
        )


def mean_interval(values: list[float], seed: int = 0) -> Mean:
    """The mean and a 95% bootstrap interval over ``values`` (one per row)."""
    n = len(values)
    if n == 0:
        return Mean(None, None, None, 0)
    mean = statistics.fmean(values)
    if n < 2:
        return Mean(mean, None, None, 1)
    if max(values) == min(values):  # every row the same: nothing to resample
        return Mean(mean, mean, mean, n)
    rng = random.Random(seed)
    boots = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(RESAMPLES))
    # The percentile interval at the level that Student's t gives, widened by
    # sqrt(n / (n - 1)) around the mean: too narrow with few rows otherwise.
    level = 2 * _normal_cdf(t975(n - 1) * math.sqrt(n / (n - 1))) - 1
    lo = boots[int((1 - level) / 2 * (RESAMPLES - 1))]
    hi = boots[int((1 + level) / 2 * (RESAMPLES - 1) + 0.5)]
    return Mean(mean, lo, hi, n)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def paired(a_label: str, a: dict, b_label: str, b: dict, seed: int = 0) -> Paired:
    """Compare per-row scores ``{row: score}`` of two columns on the rows both have."""
    rows = sorted(set(a) & set(b))
    diffs = [b[r] - a[r] for r in rows]
    return Paired(
        a_label,
        b_label,
        mean_interval(diffs, seed),
        sum(d > 0 for d in diffs),
        sum(d < 0 for d in diffs),
        sum(d == 0 for d in diffs),
    )
