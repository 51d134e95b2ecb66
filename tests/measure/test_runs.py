"""RunSet: check everything, then submit in order; stop together."""

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.measure.runs import RunSet


def test_a_bad_request_submits_nothing(engine, tiny_dir):
    good = Request("hi", model=tiny_dir, chat=False, max_tokens=3)
    bad = Request("hi", model=tiny_dir, chat=False, max_tokens=0)
    runs = RunSet(engine, [good, bad])
    with pytest.raises(ValueError, match="max_tokens"):
        runs.start()
    assert runs.jobs == [] and engine.info().queued == 0


def test_runs_in_order_and_results(engine, tiny_dir):
    reqs = [Request("hi", model=tiny_dir, chat=False, max_tokens=n) for n in (2, 3, 4)]
    runs = RunSet(engine, reqs).start()
    runs.wait(60)
    assert runs.done
    assert [r.stats.generation_tokens for r in runs.results()] == [2, 3, 4]
    assert [j.id for j in runs.jobs] == sorted(j.id for j in runs.jobs)


def test_cancel_keeps_what_finished(engine, scripted):
    scripted("slow", delay_s=0.02)
    reqs = [Request("hi", model="slow", chat=False, max_tokens=n) for n in (3, 500, 500)]
    runs = RunSet(engine, reqs).start()
    runs.jobs[0].wait(30)
    runs.cancel()
    runs.wait(30)
    results = runs.results()
    assert results[0].finish_reason == "length"
    assert {r.finish_reason for r in results[1:]} == {"cancelled"}


def test_a_measured_run_never_comes_from_the_result_cache():
    from mlx_notebook.engine import Request
    from mlx_notebook.measure.runs import timed_spec

    assert timed_spec(Request("x", temperature=0)).cache == "off"  # a replay takes no time


def test_a_subscriber_after_the_start_sees_every_job_once_in_order(engine, scripted):
    from mlx_notebook.measure.runs import PacedRuns

    scripted("slow", delay_s=0.01)
    req = Request("hi", model="slow", chat=False, max_tokens=5)
    rounds = iter([[req, req], [req]])
    runs = PacedRuns(engine, [req], lambda: next(rounds, None)).start()
    seen, ended = [], []
    runs.subscribe(lambda job, i: seen.append((i, job)), lambda: ended.append(1))
    runs.wait(60)
    assert [i for i, _ in seen] == [0, 1, 2, 3] and [j for _, j in seen] == runs.jobs
    assert ended == [1]
    late = []  # after the end: every job at once, and the end at once
    runs.subscribe(lambda job, i: late.append(i), lambda: late.append("end"))
    assert late == [0, 1, 2, 3, "end"]
