"""Engine and worker: FIFO, cancellation, robustness, KeyboardInterrupt."""

import _thread
import threading
import time

import pytest

from mlx_notebook.engine import (
    Engine,
    Finished,
    GenerationError,
    PrefillProgress,
    Queued,
    Request,
    Started,
    Token,
)


def req(model, prompt="Hello", **kw):
    kw.setdefault("chat", False)
    return Request(prompt, model=model, **kw)


def test_jobs_run_fifo_on_one_worker_thread(engine, tiny_dir):
    seen = []
    jobs = [engine.submit(req(tiny_dir, max_tokens=5)) for _ in range(3)]
    for j in jobs:
        j.add_listener(
            lambda ev, j=j: seen.append((j.id, type(ev).__name__, threading.current_thread().name))
        )
    for j in jobs:
        assert j.result(timeout=30).finish_reason == "length"
    started = [jid for jid, kind, _ in seen if kind == "Started"]
    assert started == [j.id for j in jobs]
    assert {t for _, k, t in seen if k == "Token"} == {"mlx-worker"}
    assert [type(e) for e in list(jobs[2].events())[:1]] == [Queued]


def test_event_order_and_stats(engine, tiny_dir):
    job = engine.submit(req(tiny_dir, max_tokens=8))
    evs = list(job.events(timeout=30))
    kinds = [type(e) for e in evs]
    assert kinds[0] is Queued and kinds[1] is Started and kinds[-1] is Finished
    assert PrefillProgress in kinds
    toks = [e for e in evs if isinstance(e, Token)]
    assert [t.index for t in toks] == list(range(8))
    fin = evs[-1]
    assert fin.finish_reason == "length"
    assert "".join(t.text for t in toks) == fin.text
    s = fin.stats
    assert s.prompt_tokens > 0 and s.generation_tokens == 8 and s.ttft_s > 0
    assert s.prompt_tps > 0 and s.generation_tps > 0 and s.peak_memory > 0


def test_cancel_after_n_tokens_stops_within_one_more(engine, tiny_dir):
    n = 5
    job = engine.submit(req(tiny_dir, max_tokens=200))
    job.add_listener(lambda ev: isinstance(ev, Token) and ev.index == n - 1 and job.cancel())
    r = job.result(timeout=30)
    assert r.finish_reason == "cancelled"
    assert n <= len(r.token_ids) <= n + 1
    assert r.text  # partial text kept


def test_cancel_from_another_thread_mid_decode(engine, scripted):
    scripted("slow", delay_s=0.02)
    job = engine.submit(req("slow", max_tokens=500))
    for ev in job.events(timeout=30):
        if isinstance(ev, Token) and ev.index == 3:
            t0 = time.perf_counter()
            job.cancel()
    latency = time.perf_counter() - t0
    fin = job.finished
    assert fin.finish_reason == "cancelled" and fin.stats.generation_tokens < 10
    assert latency < 0.02 + 0.2


def test_cancel_during_long_prefill_stops_within_one_chunk(engine, scripted, tiny_tokenizer):
    prompt = "Rivers flow to the sea. " * 600
    n_prompt = len(tiny_tokenizer.encode(prompt, add_special_tokens=False))
    assert n_prompt > 3000
    scripted("prefill", prompt=prompt, token_delay_s=0.0005)  # ~2 s of prefill
    target = 0.1
    job = engine.submit(req("prefill", prompt=prompt, max_tokens=5, prefill_target_s=target))
    progress = []
    for ev in job.events(timeout=30):
        if isinstance(ev, PrefillProgress):
            progress.append(ev)
            if len(progress) == 3:
                t0 = time.perf_counter()
                job.cancel()
        assert not isinstance(ev, Token)
    latency = time.perf_counter() - t0
    assert job.finished.finish_reason == "cancelled"
    assert len(progress) <= 4  # at most the chunk in flight completed
    assert progress[-1].done < n_prompt - 1
    assert latency < target * 1.6 + 0.05


def test_chunks_are_sized_by_time(engine, scripted):
    prompt = "Rivers flow to the sea. " * 300
    scripted("timed", prompt=prompt, token_delay_s=0.0002)
    job = engine.submit(req("timed", prompt=prompt, max_tokens=1, prefill_target_s=0.05))
    done = [e.done for e in job.events(timeout=30) if isinstance(e, PrefillProgress)]
    sizes = [b - a for a, b in zip(done, done[1:])]
    assert sizes[0] == 8  # the measuring chunk
    assert all(b <= 2 * a for a, b in zip(sizes, sizes[1:-1]))  # growth is capped
    # 0.05 s at 0.2 ms per token, aimed 20% low: ~200 tokens per chunk once settled
    settled = sizes[5:-1]
    assert settled and all(150 <= s <= 260 for s in settled), sizes


def test_queued_job_cancelled_never_runs(engine, scripted):
    scripted("slow", delay_s=0.02)
    first = engine.submit(req("slow", max_tokens=30))
    second = engine.submit(req("slow", max_tokens=30))
    assert next(second.events()) == Queued(1)
    second.cancel()
    second.cancel()  # twice is harmless
    fin = second.wait(timeout=1)
    assert fin.finish_reason == "cancelled"
    assert not any(isinstance(e, Started) for e in second.events())
    assert first.result(timeout=30).finish_reason == "length"


def test_queue_positions_update_as_jobs_start(engine, scripted):
    scripted("slow", delay_s=0.01)
    jobs = [engine.submit(req("slow", max_tokens=5)) for _ in range(3)]
    jobs[-1].wait(timeout=30)
    queued = [e.position for e in jobs[2].events() if isinstance(e, Queued)]
    assert queued == [2, 1]  # the running job counts as ahead


def test_cancel_twice_and_after_finish_is_harmless(engine, tiny_dir):
    job = engine.submit(req(tiny_dir, max_tokens=3))
    r = job.result(timeout=30)
    job.cancel()
    job.cancel()
    assert job.finished.finish_reason == r.finish_reason == "length"


def test_after_cancel_next_job_matches_fresh_engine(engine, tiny_dir):
    job = engine.submit(req(tiny_dir, max_tokens=200))
    job.add_listener(lambda ev: isinstance(ev, Token) and ev.index == 7 and job.cancel())
    assert job.result(timeout=30).finish_reason == "cancelled"
    after = engine.submit(req(tiny_dir, max_tokens=30)).result(timeout=30)
    fresh_engine = Engine()
    try:
        fresh = fresh_engine.submit(req(tiny_dir, max_tokens=30)).result(timeout=30)
    finally:
        fresh_engine.close()
    assert after.token_ids == fresh.token_ids and after.text == fresh.text


def test_model_error_ends_job_and_worker_lives(engine, scripted, tiny_dir):
    scripted("broken", fail_at=8)
    job = engine.submit(req("broken", max_tokens=50))
    with pytest.raises(GenerationError, match="scripted failure") as err:
        job.result(timeout=30)
    assert err.value.text == job.finished.text  # partial text travels with the error
    r = job.result(timeout=30, raise_on_error=False)
    assert r.finish_reason == "error" and "scripted failure" in r.error
    assert engine.submit(req(tiny_dir, max_tokens=4)).result(timeout=30).finish_reason == "length"


def test_missing_model_is_an_error_event(engine):
    r = engine.submit(req("/no/such/model", max_tokens=4)).result(30, raise_on_error=False)
    assert r.finish_reason == "error" and "no such file" in r.error


def test_result_keyboard_interrupt_cancels_and_waits(engine, scripted):
    scripted("slow", delay_s=0.02)
    job = engine.submit(req("slow", max_tokens=1000))
    job.add_listener(
        lambda ev: isinstance(ev, Token) and ev.index == 2 and _thread.interrupt_main()
    )
    with pytest.raises(KeyboardInterrupt):
        job.result(timeout=30)
    assert job.done and job.finished.finish_reason == "cancelled"
    assert engine.submit(req("slow", max_tokens=2)).result(timeout=30).finish_reason == "length"


def test_cancel_all_and_close(scripted, engine):
    scripted("slow", delay_s=0.02)
    jobs = [engine.submit(req("slow", max_tokens=1000)) for _ in range(3)]
    time.sleep(0.1)
    assert engine.cancel_all() == 3
    assert [j.wait(timeout=5).finish_reason for j in jobs] == ["cancelled"] * 3
    engine.close()
    assert not engine.info()["worker_alive"]
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(req("slow"))


def test_default_engine_is_process_wide():
    assert Engine.default() is Engine.default()
