"""Sweep: shuffled, repeated k with interleaved baselines; best k only beyond noise."""

import pytest

import mlx_notebook
from mlx_notebook.engine import Request
from mlx_notebook.engine.events import Stats
from mlx_notebook.engine.job import Result
from mlx_notebook.measure.sweep import Sweep, SweepResult, schedule
from mlx_notebook.notebook.views.sweep import SweepRun


def test_schedule_shuffles_each_repeat_and_brackets_with_normal_runs():
    order = schedule([1, 2, 3, 4], repeats=3, seed=7)
    assert order[0] is None and order[-1] is None
    spec = [k for k in order if k is not None]
    assert sorted(spec) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert len({tuple(spec[i : i + 4]) for i in (0, 4, 8)}) > 1  # not the same order each time
    # never more than two speculative runs between normal ones
    run = 0
    for k in order:
        run = 0 if k is None else run + 1
        assert run <= 2


def res(tps, accepted=5):
    s = Stats(generation_tokens=10, generation_tps=tps, total_s=10 / tps)
    s.draft_tokens_proposed, s.draft_tokens_accepted = (10, accepted) if accepted else (10, 0)
    s.proposed_by_position, s.accepted_by_position = [5, 5], [3, 2]
    return Result("t", "length", None, None, s)


def test_best_k_only_when_its_interval_lies_above_normal():
    speeds = [None, 15, 11, None, 15.5, 9, None, 14.8, 10.5, None]
    base = iter([10, 10, 10.2, 9.9])
    ks = [None, 1, 2, None, 1, 2, None, 1, 2, None]
    runs = [(k, res(next(base) if k is None else v)) for k, v in zip(ks, speeds)]
    sr = SweepResult(runs, [1, 2])
    assert sr.best_k == 1 and sr.speedup(1).low > 1
    assert sr.speedup(2).verdict() == "same"
    assert "best k = 1" in sr.verdict_line()
    rows = {r["k"]: r for r in sr.rows}
    assert rows[1]["by_position"] == [0.6] and rows[2]["by_position"] == [0.6, 0.4]
    noise = iter([10, 10.4, 9.7, 10.1, 9.6, 10.3, 9.9, 10.2, 9.8, 10])
    flat = SweepResult([(k, res(next(noise))) for k, _ in runs], [1, 2])
    assert flat.best_k is None and "no k beat normal decoding" in flat.verdict_line()


def test_sweep_runs_every_k_with_baselines(engine, tiny_dir):
    r = mlx_notebook.sweep(
        "Hello world. Hello world. Hello",
        ks=[1, 3],
        repeats=2,
        model=tiny_dir,
        chat=False,
        max_tokens=12,
        backend=engine,
        seed=1,
    )
    assert sorted(k for k, _ in r.runs if k) == [1, 1, 3, 3]
    assert len(r.baseline) == sum(k is None for k, _ in r.runs) >= 2
    assert [row["runs"] for row in r.rows] == [2, 2]
    pd = pytest.importorskip("pandas")
    assert isinstance(r.to_frame(), pd.DataFrame) and len(r.to_frame("run")) == len(r.runs)


def test_sweep_view(engine, tiny_dir):
    req = Request("Hello world. Hello", model=tiny_dir, chat=False, max_tokens=10, draft="lookup")
    run = SweepRun(engine, req, ks=[1, 2], repeats=1).start()
    res = run.wait(60)
    html = run.widget.children[0].value
    assert "<svg" in html and ("best k" in html or "no k beat normal decoding" in html)
    assert res.ks == [1, 2]
    with pytest.raises(ValueError, match="ks"):
        Sweep(engine, req, ks=[0, 20])


class SpeedBackend:
    """Runs end at once with a decode speed set by k (injected; no noise but a wobble)."""

    def __init__(self, speed_of_k, base=30.0):
        self.speed_of_k, self.base, self.n = speed_of_k, base, 0

    def check(self, request):
        pass

    def submit(self, request):
        from mlx_notebook.engine.events import Finished
        from mlx_notebook.engine.job import Job

        self.n += 1
        job = Job(request, self.n)
        wobble = 1 + 0.01 * ((self.n * 7) % 5 - 2)
        k = request.num_draft_tokens if request.mode != "normal" else None
        tps = self.base * (1.0 if k is None else self.speed_of_k[k]) * wobble
        s = Stats(generation_tokens=20, generation_tps=tps, total_s=20 / tps)
        if k is not None:
            s.draft_tokens_proposed, s.draft_tokens_accepted, s.draft_rounds = 20, 10, 5
        job.emit(Finished("x", "length", stats=s))
        return job


def test_clearly_worse_k_is_dropped_after_the_second_round():
    speeds = {1: 1.5, 2: 1.6, 8: 0.5}
    req = Request("go", max_tokens=20, draft="lookup", chat=False)
    sw = Sweep(SpeedBackend(speeds), req, ks=[1, 2, 8], repeats=4, seed=3).start()
    res = sw.wait(30)
    assert res.dropped == {8: 2}  # known after two rounds, not run in rounds 3 and 4
    runs = {k: sum(1 for kk, r in res.runs if kk == k and r is not None) for k in speeds}
    assert runs == {1: 4, 2: 4, 8: 2}
    assert res.best_k == 2 and "dropped early as clearly worse: k = 8" in res.verdict_line()
    kept = Sweep(SpeedBackend(speeds), req, ks=[1, 2, 8], repeats=3, seed=3, drop=False)
    assert kept.start().wait(30).dropped == {}


def test_estimate_of_the_time_left():
    done = [(None, res(10)), (1, res(20)), (2, None), (None, None)]
    sr = SweepResult(done, [1, 2])
    each = (10 / 10 + 10 / 20) / 2  # res() makes 10 tokens at the given tok/s
    assert sr.estimate_s() == pytest.approx(2 * each)
    assert sr.estimate_s(planned=10) == pytest.approx(8 * each)
    assert SweepResult([(None, None)], [1]).estimate_s() is None


def test_sweep_view_shows_progress_with_an_estimate(engine, tiny_dir):
    from mlx_notebook.notebook.views.sweep import SweepRenderer

    req = Request("go", max_tokens=20, draft="lookup", chat=False)
    sw = Sweep(SpeedBackend({1: 1.5, 2: 1.2}), req, ks=[1, 2], repeats=2, seed=1)
    view = SweepRenderer(sw)
    assert "estimating" in view.plain()  # nothing has run yet
    sw.start().wait(30)
    assert "best k" in view.plain() and "dropped" not in view.plain()
