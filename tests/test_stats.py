"""Ratios, intervals and verdicts."""

import math

import pytest

from mlx_notebook.measure.stats import geomean, ratio, spread, t975


def test_t_quantiles():
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(22) == 2.060 and t975(10_000) == 1.96


def test_interval_is_the_t_interval_of_the_log_ratios():
    r = ratio([2.0, 2.2, 1.8])
    logs = [math.log(v) for v in (2.0, 2.2, 1.8)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.303 * sd / math.sqrt(3)
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
