"""Ratios, intervals and verdicts."""

import math

import pytest

from mlx_notebook.measure.stats import geomean, ratio, spread, t975, t_quantile, t_sf


def test_t_quantiles():
    # Published table values (3 decimals).
    table = {(0.975, 1): 12.706, (0.975, 2): 4.303, (0.975, 22): 2.074,
             (0.975, 10_000): 1.960, (0.995, 1): 63.657, (0.995, 5): 4.032,
             (0.995, 30): 2.750, (0.9, 4): 1.533}  # fmt: skip
    for (p, df), q in table.items():
        assert t_quantile(p, df) == pytest.approx(q, abs=6e-4), (p, df)
    assert t975(3) == t_quantile(0.975, 3)
    assert t_sf(0.0, 7) == pytest.approx(0.5) and t_sf(2.365, 7) == pytest.approx(0.025, abs=1e-4)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


def test_interval_level():
    r95, r99 = ratio([2.0, 2.2, 1.8]), ratio([2.0, 2.2, 1.8], 0.99)
    assert r99.level == 0.99 and r99.low < r95.low < r95.high < r99.high


def test_interval_is_the_t_interval_of_the_log_ratios():
    r = ratio([2.0, 2.2, 1.8])
    logs = [math.log(v) for v in (2.0, 2.2, 1.8)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = t_quantile(0.975, 2) * sd / math.sqrt(3)  # 4.303
    assert r.median == 2.0 and r.n == 3
    assert r.low == pytest.approx(math.exp(mean - half)) and r.high == pytest.approx(
        math.exp(mean + half)
    )
    assert r.verdict() == "faster"


def test_verdicts():
    assert ratio([0.5, 0.55, 0.52]).verdict() == "slower"
    assert ratio([0.9, 1.2, 1.05]).verdict() == "same"
    assert ratio([3.0]).verdict() == "same" and ratio([3.0]).interval is None


def test_bad_values():
    with pytest.raises(ValueError):
        ratio([])
    with pytest.raises(ValueError):
        ratio([1.0, 0.0])


def test_spread_and_geomean():
    assert spread([3, 1, 2]) == (2, 1, 3)
    assert geomean([1, 4]) == pytest.approx(2)
