import _thread
import threading

import pytest

import mlx_notebook
from mlx_notebook.engine.request import Request
from mlx_notebook.mapping.mapper import MapRun, as_prompts

PROMPTS = ["The quick brown fox", "Hello world", "Rivers flow", "Paris is", "def main():"]


def test_as_prompts_accepts_lists_series_and_iterables():
    pd = pytest.importorskip("pandas")
    assert as_prompts(("a", "b")) == ["a", "b"]
    assert as_prompts(pd.Series(["a", "b"])) == ["a", "b"]
    assert as_prompts(p for p in ["x"]) == ["x"]
    with pytest.raises(ValueError, match="not a single prompt"):
        as_prompts("one prompt")
    with pytest.raises(ValueError, match="empty"):
        as_prompts([])
    with pytest.raises(ValueError, match="must be a list"):
        as_prompts(3)


def test_map_returns_rows_in_order_equal_to_solo_runs(engine, tiny_dir):
    res = mlx_notebook.map(PROMPTS, model=tiny_dir, chat=False, max_tokens=12, backend=engine)
    assert [r.prompt for r in res] == PROMPTS and len(res) == len(PROMPTS)
    for r in res:
        alone = engine.generate(r.prompt, model=tiny_dir, chat=False, max_tokens=12, batch=False)
        assert r.text == alone.text and r.finish_reason == alone.finish_reason
    assert max(r.stats.batch_rows for r in res) > 1  # they did share steps
    frame = res.to_frame()
    assert list(frame["text"]) == res.texts and len(frame) == len(PROMPTS)


def test_map_without_waiting_returns_a_future_that_waits_for_a_final_value(engine, scripted):
    scripted("slow", delay_s=0.01)
    res = mlx_notebook.map(["a", "b"], model="slow", chat=False, max_tokens=20, backend=engine,
                           wait=False)  # fmt: skip
    assert not res.done and {r.finish_reason for r in res.snapshot().rows} == {"running"}
    assert len(res.texts) == 2 and res.done  # a final value waited for the rows
    assert {r.finish_reason for r in res.rows} == {"length"} and res.run is None


def test_map_takes_chat_messages_and_per_row_failures_stay_in_their_row(engine, tiny_dir):
    msgs = [[{"role": "user", "content": "Hello"}], "x" * 5000]  # the second overflows
    res = mlx_notebook.map(msgs, model=tiny_dir, max_tokens=5, backend=engine)
    assert res[0].finish_reason in ("stop", "length")
    assert res[1].finish_reason == "error" and "context window" in res[1].error
    assert "1 error" in res.summary()


def test_a_bad_row_submits_nothing(engine, tiny_dir):
    with pytest.raises(ValueError, match=r"row 1: prompt: must not be empty"):
        MapRun(engine, ["ok", " "], model=tiny_dir).start()
    assert engine.info().queued == 0 and not engine.scheduler.batch.rows


def test_ctrl_c_stops_every_row_and_keeps_finished_ones(engine, scripted):
    scripted("slow", delay_s=0.02)
    run = MapRun(engine, ["a"] * 4, model="slow", chat=False, max_tokens=400).start()
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        run.wait()
    res = run.result()
    assert {r.finish_reason for r in res} == {"cancelled"}
    assert all(j.done for j in run.jobs) and not engine.scheduler.batch.rows


def test_progress_counts_rows_and_tokens(engine, tiny_dir):
    run = MapRun(engine, PROMPTS, model=tiny_dir, chat=False, max_tokens=4).start()
    res = run.wait()
    done, total, tokens, tps, eta = run.progress()
    assert (done, total, tokens) == (5, 5, res.generated_tokens) and tps > 0 and eta is None


def test_rows_keep_their_own_request_fields(engine, tiny_dir):
    # One shared step, different stop strings and budgets per job.
    jobs = [
        engine.submit(Request("Hello world", model=tiny_dir, chat=False, max_tokens=n))
        for n in (3, 9, 17)
    ]
    assert [j.result().stats.generation_tokens for j in jobs] == [3, 9, 17]
