"""Paired verdicts on scripted scores: a planted difference found, none invented."""

import random

from mlx_notebook.evaluation.verdicts import mean_interval, paired


def scripted(seed, n, delta):
    rng = random.Random(seed)
    a = {i: rng.random() for i in range(n)}
    b = {i: min(1.0, max(0.0, a[i] + delta + rng.gauss(0, 0.2))) for i in range(n)}
    return a, b


def test_a_planted_difference_is_better_beyond_noise():
    for seed in range(20):
        a, b = scripted(seed, 24, 0.3)
        p = paired("A", a, "B", b, seed)
        assert p.verdict == "better beyond noise", (seed, str(p))
        assert p.diff.low > 0 and p.better > p.worse
        assert paired("B", b, "A", a, seed).verdict == "worse beyond noise"


def test_no_difference_is_within_noise_in_at_least_19_of_20_seeds():
    calls = []
    for seed in range(20):
        a, b = scripted(seed, 24, 0.0)
        calls.append(paired("A", a, "B", b, seed))
    assert all(p.diff.n == 24 for p in calls)
    within = sum(p.verdict == "within noise" for p in calls)
    assert within >= 19, within


def test_bernoulli_scores_and_small_cases():
    rng = random.Random(3)
    a = {i: float(rng.random() < 0.5) for i in range(50)}
    same = paired("A", a, "B", dict(a))
    assert same.verdict == "within noise" and same.same == 50 and same.diff.mean == 0
    assert str(same).startswith("B − A = +0.000 [+0.000, +0.000], B better on 0 rows")
    assert mean_interval([]).mean is None and str(mean_interval([])) == "no scores"
    one = mean_interval([0.5])
    assert one.low is None and str(one) == "0.500 (n=1)"
    m = mean_interval([0.0, 1.0] * 10)
    assert m.low < 0.5 < m.high and m.n == 20
    assert paired("A", {0: 1.0}, "B", {1: 1.0}).diff.mean is None  # no row in common
