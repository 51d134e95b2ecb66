"""The sequential rule: error rates in simulation, and a Comparison run on injected timings."""

import math
import random

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.events import Finished, Stats, Token
from mlx_notebook.engine.job import Job
from mlx_notebook.measure.compare import Comparison
from mlx_notebook.measure.sequential import Decision, Rule, decide, judge
from mlx_notebook.measure.stats import ratio


def simulate(truth, sigma, rng, rule=None):
    """One sequential comparison on ratios drawn around ``truth`` (log-normal noise)."""
    values = []
    while True:
        values.append(truth * math.exp(rng.gauss(0, sigma)))
        d = decide(values, rule or Rule(), elapsed_s=0.0)
        if d is not None:
            return d, len(values)


@pytest.mark.parametrize("sigma", [0.05, 0.2, 0.5])
def test_false_faster_on_a_1x_truth_stays_under_5_percent(sigma):
    rng = random.Random(7)
    runs = [simulate(1.0, sigma, rng) for _ in range(2000)]
    false_faster = sum(d.outcome == "faster" for d, _ in runs) / len(runs)
    assert false_faster < 0.05, false_faster


def test_a_true_1_5x_is_decided_within_10_pairs_in_95_percent_of_runs():
    # Per-pair noise of 20% (log-normal), about what this 2-core machine shows.
    rng = random.Random(11)
    runs = [simulate(1.5, 0.2, rng) for _ in range(2000)]
    quick = sum(d.outcome == "faster" and n <= 10 for d, n in runs) / len(runs)
    assert quick >= 0.95, quick


def test_equivalence_is_decided_when_the_noise_is_small():
    rng = random.Random(3)
    runs = [simulate(1.0, 0.02, rng) for _ in range(500)]
    assert sum(d.outcome == "same" for d, _ in runs) / len(runs) > 0.9


def test_budget_ends_an_undecided_measurement():
    rule = Rule(max_pairs=5, budget_s=10)
    assert decide([1.0, 2.0, 0.5], rule, 3.0) is None
    assert decide([1.0, 2.0, 0.5], rule, 10.0) == Decision("undecided", "time")
    assert decide([1.0, 2.0, 0.5, 1.5, 0.7], rule, 3.0) == Decision("undecided", "pairs")
    assert decide([1.5, 1.5], Rule(fixed=2), 0.0) == Decision("undecided", "fixed")
    assert decide([1.5], Rule(fixed=2), 0.0) is None


def test_nothing_accepted_never_says_faster():
    values = [1.5, 1.52, 1.49, 1.51]
    assert decide(values, Rule(), 0.0).outcome == "faster"
    assert decide(values, Rule(), 0.0, can_be_faster=False) is None
    assert decide(values[:2], Rule(), 0.0, nothing_accepted=True).outcome == "nothing accepted"


def test_nothing_accepted_is_said_even_when_one_pair_spends_the_budget():
    # A busy machine can spend the whole budget on the first pair.
    assert decide([1.0], Rule(budget_s=60), 10.0, nothing_accepted=True) is None
    spent = decide([1.0], Rule(budget_s=60), 61.0, nothing_accepted=True)
    assert spent.outcome == "nothing accepted"
    assert decide([1.0], Rule(budget_s=60), 61.0).outcome == "undecided"


def test_judge():
    assert judge(ratio([1.01, 0.99, 1.0, 1.005]), 0.05) == "same"
    assert judge(ratio([1.5, 1.6, 1.55]), 0.05) == "faster"
    assert judge(ratio([0.5, 0.6, 0.55]), 0.05) == "slower"
    assert judge(ratio([0.5, 2.0]), 0.05) is None and judge(ratio([1.0]), 0.05) is None
    with pytest.raises(ValueError, match="band"):
        Rule(band=0)


class TimedBackend:
    """A scripted model with injected timings: each run ends at once, with stats drawn
    from a known speedup and noise, and the injected clock moves by its duration."""

    def __init__(self, speedup, sigma, seed=0, tps=30.0, accepted=True):
        self.speedup, self.sigma, self.tps, self.accepted = speedup, sigma, tps, accepted
        self.rng = random.Random(seed)
        self.now = 0.0
        self.n = 0

    def clock(self):
        return self.now

    def check(self, request):
        pass

    def submit(self, request):
        self.n += 1
        job = Job(request, self.n)
        spec = request.mode != "normal"
        tps = self.tps * (self.speedup if spec else 1.0) * math.exp(self.rng.gauss(0, self.sigma))
        n = request.max_tokens
        s = Stats(generation_tokens=n, generation_tps=tps, total_s=n / tps)
        if spec:
            s.draft_tokens_proposed, s.draft_rounds = 40, 10
            s.draft_tokens_accepted = 30 if self.accepted else 0
        self.now += s.total_s
        for i in range(n):
            job.emit(Token("x", 7, False, i))
        job.emit(Finished("x" * n, "length", stats=s))
        return job


def compare_on(backend, **kw):
    req = Request("go", max_tokens=32, draft="lookup", chat=False)
    return Comparison(backend, req, clock=backend.clock, **kw).start().wait(30)


def test_a_comparison_on_injected_timings_ends_by_its_rule():
    fast = compare_on(TimedBackend(1.5, 0.1, seed=1))
    assert fast.decision.outcome == "faster" and fast.verdict == "faster"
    assert fast.verdict_line().startswith("faster: 1.")
    assert "pairs)" in fast.verdict_line() and len(fast.pairs()) <= 10

    equal = compare_on(TimedBackend(1.0, 0.01, seed=2))
    assert equal.decision.outcome == "same"
    assert equal.verdict_line().startswith("no difference beyond ±5%")

    noisy = compare_on(TimedBackend(1.0, 1.5, seed=3), budget_s=20)
    assert noisy.decision.outcome == "undecided" and noisy.decision.limit == "time"
    line = noisy.verdict_line()
    assert line.startswith("undecided after ") and "too noisy (run-to-run spread" in line
    assert "try --metric decode or a longer budget" in line and noisy.spread() > 2

    capped = compare_on(TimedBackend(1.0, 1.5, seed=4), max_pairs=4, budget_s=1e9)
    assert capped.decision == Decision("undecided", "pairs", capped.decision.elapsed_s)
    assert len(capped.pairs()) == 4 and "undecided after 4 pairs" in capped.verdict_line()

    nothing = compare_on(TimedBackend(1.3, 0.05, seed=5, accepted=False))
    assert nothing.decision.outcome == "nothing accepted" and len(nothing.pairs()) == 2
    assert nothing.verdict != "faster" and "no draft token was accepted" in nothing.verdict_line()


def test_decode_deciding_where_end_to_end_does_not_is_said():
    from mlx_notebook.engine.job import Result
    from mlx_notebook.measure.compare_result import CompareResult

    def run(tps, total):
        s = Stats(generation_tokens=10, generation_tps=tps, total_s=total)
        s.draft_tokens_proposed, s.draft_tokens_accepted, s.draft_rounds = 10, 8, 3
        return Result("t", "length", None, None, s, [1, 2])

    runs = []
    for p, (n_total, s_total) in enumerate([(1.0, 2.0), (2.0, 0.6), (1.0, 1.9), (1.5, 0.5)]):
        runs += [(p, "normal", run(10.0, n_total)), (p, "speculative", run(20.0, s_total))]
    res = CompareResult(runs, repeats=None, decision=Decision("undecided", "pairs"))
    assert res.verdict == "undecided"
    assert "decode alone decides: faster, 2.00×" in res.verdict_line()


def test_the_view_marks_only_a_clear_faster_with_a_tick():
    from mlx_notebook.notebook.measure_views.compare import CompareRun

    req = Request("go", max_tokens=32, draft="lookup", chat=False)
    for speedup, sigma, mark, words in [
        (1.5, 0.1, "ok", "faster: 1."),
        (1.0, 0.01, "neutral", "no difference beyond ±5%"),
        (1.0, 1.5, "neutral", "undecided after 4 pairs"),
    ]:
        b = TimedBackend(speedup, sigma, seed=9)
        c = Comparison(b, req, clock=b.clock, max_pairs=4, budget_s=1e9)
        run = CompareRun(c).start()
        run.wait(30)
        html = run.widget.value
        assert f'<span class="{mark}"></span>' in html and words in html, html[:600]
        assert "(pair " not in html  # ended: no progress line
