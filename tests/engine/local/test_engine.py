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
    model = engine.registry.get("slow").model
    job = engine.submit(req("slow", max_tokens=500))
    for ev in job.events(timeout=30):
        if isinstance(ev, Token) and ev.index == 3:
            calls = model.calls
            job.cancel()
    fin = job.finished
    assert fin.finish_reason == "cancelled" and fin.stats.generation_tokens < 10
    # Counted, not timed: at most the step in flight and the one queued behind it ran.
    assert model.calls - calls <= 2, model.calls - calls


def test_cancel_during_long_prefill_stops_within_one_chunk(
    engine, scripted, tiny_tokenizer, virtual_clock
):
    prompt = "Rivers flow to the sea. " * 600
    n_prompt = len(tiny_tokenizer.encode(prompt, add_special_tokens=False))
    assert n_prompt > 3000
    # 0.5 ms per token on the virtual clock: a 0.1 s target is 160 tokens once measured.
    scripted("prefill", prompt=prompt, token_delay_s=0.0005, clock=virtual_clock)
    job = engine.submit(req("prefill", prompt=prompt, max_tokens=5, prefill_target_s=0.1))
    progress = []

    def on_event(ev):  # on the worker thread, between two chunks
        if isinstance(ev, PrefillProgress):
            progress.append(ev.done)
            if len(progress) == 3:
                job.cancel()

    job.add_listener(on_event)
    assert not any(isinstance(ev, Token) for ev in job.events(timeout=30))
    assert job.finished.finish_reason == "cancelled"
    assert len(progress) == 3  # no chunk after the Stop
    assert progress[-1] < n_prompt - 1
    # Each chunk a small part of the prompt: a Stop waits for one of them at most.
    sizes = [b - a for a, b in zip(progress, progress[1:])]
    assert sizes == [8, 32], sizes  # measure, then grow at most 4x


def test_chunks_are_sized_by_time(engine, scripted, virtual_clock):
    prompt = "Rivers flow to the sea. " * 300
    scripted("timed", prompt=prompt, token_delay_s=0.0002, clock=virtual_clock)
    job = engine.submit(req("timed", prompt=prompt, max_tokens=1, prefill_target_s=0.05))
    done = [e.done for e in job.events(timeout=30) if isinstance(e, PrefillProgress)]
    sizes = [b - a for a, b in zip(done, done[1:])]
    # Measure with 8 tokens, grow at most 4x a chunk, then settle where 0.2 ms a token
    # fills the 0.05 s target aimed 20% low: 200 tokens.
    assert sizes[:3] == [8, 32, 128], sizes
    assert set(sizes[3:-1]) <= {199, 200} and 0 < sizes[-1] <= 200, str(sizes)
    # A second prefill of the same model starts from what the first one learned.
    job = engine.submit(req("timed", prompt=prompt, max_tokens=1, prefill_target_s=0.05,
                            reuse_cache=False))  # fmt: skip
    done = [e.done for e in job.events(timeout=30) if isinstance(e, PrefillProgress)]
    assert done[1] - done[0] in (199, 200)
    assert job.finished.stats.prefill_chunk in (199, 200)


def _chunks_of_the_third_prefill(engine, scripted, clock, **cost) -> list[int]:
    prompt = "Rivers flow to the sea. " * 300
    scripted("attn", prompt=prompt, delay_s=0.02, token_delay_s=1e-4, pos_delay_s=1e-6,
             clock=clock, **cost)  # fmt: skip
    for _ in range(3):  # the first two teach the cost model
        job = engine.submit(req("attn", prompt=prompt, max_tokens=1, prefill_target_s=5.0,
                                reuse_cache=False))  # fmt: skip
        done = [e.done for e in job.events(timeout=60) if isinstance(e, PrefillProgress)]
    return [b - a for a, b in zip(done, done[1:])]


def test_chunks_stop_growing_where_a_prompt_prefills_fastest(engine, scripted, virtual_clock):
    # A fixed 20 ms per chunk, 0.1 ms a token and attention over each chunk's whole
    # square of scores: a prompt is fastest in chunks of sqrt(0.02 / (b / 2)) = 200,
    # far under the time cap.
    sizes = _chunks_of_the_third_prefill(engine, scripted, virtual_clock, square=True)[:-1]
    assert sizes and set(sizes) <= {199, 200}, sizes


def test_chunks_grow_to_the_largest_allowed_when_attention_skips_the_masked_half(
    engine, scripted, virtual_clock
):
    # The same costs with attention over the earlier tokens only: a prompt's attention
    # is then the same however it is chunked, and the fewest chunks are fastest: the
    # largest a chunk may be (its scores' memory), then the rest.
    sizes = _chunks_of_the_third_prefill(engine, scripted, virtual_clock)
    assert len(sizes) == 2 and sizes[0] == 2048, sizes


def test_queued_job_cancelled_never_runs(engine, scripted):
    scripted("slow", delay_s=0.02)
    # Jobs that run alone queue first come, first served.
    first = engine.submit(req("slow", max_tokens=30, batch=False))
    second = engine.submit(req("slow", max_tokens=30, batch=False))
    assert next(second.events(detach=True)).position == 1
    second.cancel()
    second.cancel()  # twice is harmless
    fin = second.wait(timeout=1)
    assert fin.finish_reason == "cancelled"
    assert not any(isinstance(e, Started) for e in second.events())
    assert first.result(timeout=30).finish_reason == "length"


def test_queue_positions_update_as_jobs_start(engine, scripted):
    scripted("slow", delay_s=0.01)
    jobs = [engine.submit(req("slow", max_tokens=5, batch=False)) for _ in range(3)]
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


def test_a_missing_model_is_refused_at_submit_and_a_broken_one_is_an_error_event(engine, tmp_path):
    with pytest.raises(ValueError, match="model: no such file or directory: '/no/such/model'"):
        engine.submit(req("/no/such/model", max_tokens=4))
    r = engine.submit(req(str(tmp_path), max_tokens=4)).result(30, raise_on_error=False)
    assert r.finish_reason == "error" and "config.json" in r.error


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
    assert not engine.info().worker_alive
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(req("slow"))


def test_default_engine_is_process_wide():
    assert Engine.default() is Engine.default()


# -- hardening (issue 10) ---------------------------------------------------------------


def _active_bytes(eng):
    import gc

    import mlx.core as mx

    def measure():
        gc.collect()
        mx.clear_cache()
        return mx.get_active_memory()

    return eng.run_on_worker(measure)


def test_evicted_and_unloaded_models_free_their_memory(tmp_path):
    from mlx_notebook.testing import build_tiny_model

    dirs = [
        str(build_tiny_model(tmp_path / f"m{i}", seed=i, hidden_size=256, intermediate_size=1024))
        for i in range(5)
    ]
    eng = Engine(max_loaded=2)
    try:
        base = _active_bytes(eng)
        for d in dirs:
            eng.submit(req(d, max_tokens=8)).result(timeout=60)
        loaded = eng.run_on_worker(
            lambda: [
                (m.nbytes, eng.scheduler.states[m.name].cache.nbytes)
                for m in eng.registry._models.values()
            ]
        )
        assert len(loaded) == 2
        need = sum(a + b for a, b in loaded)
        held = _active_bytes(eng) - base
        assert abs(held - need) <= 0.05 * need, (held, need)
        eng.unload()
        one_model = loaded[0][0]
        assert _active_bytes(eng) - base <= 0.05 * one_model
    finally:
        eng.close()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, RuntimeError])
def test_a_raising_listener_never_ends_the_worker_and_is_logged_once(engine, tiny_dir, exc, caplog):
    job = engine.submit(req(tiny_dir, max_tokens=6))
    seen = []

    def bad(ev):
        seen.append(ev)
        raise exc("listener bug")

    job.add_listener(bad)
    assert job.result(timeout=30).finish_reason == "length"
    assert isinstance(seen[-1], Finished)  # kept receiving events after failing
    logged = [r for r in caplog.records if "listener" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert engine.info().worker_alive
    assert engine.submit(req(tiny_dir, max_tokens=2)).result(timeout=30).finish_reason == "length"


def test_a_dead_worker_fails_every_job_and_closes_the_engine(scripted, engine, monkeypatch):
    scripted("slow", delay_s=0.02)
    blocker = engine.submit(req("slow", max_tokens=30, batch=False))
    next(e for e in blocker.events(detach=True) if isinstance(e, Started))
    queued = [engine.submit(req("slow", max_tokens=5, batch=False)) for _ in range(2)]
    real = engine.scheduler._renumber

    def boom():
        if threading.current_thread().name == "mlx-worker":
            raise SystemExit("simulated worker crash")
        return real()

    monkeypatch.setattr(engine.scheduler, "_renumber", boom)
    assert blocker.wait(timeout=30).finish_reason == "length"
    fins = [j.wait(timeout=10) for j in queued]
    assert all(f.finish_reason == "error" and "worker died" in f.error for f in fins)
    assert engine.closed
    engine.close()  # joins the dead worker
    assert not engine.info().worker_alive
    with pytest.raises(RuntimeError, match="worker died"):
        engine.submit(req("slow"))
    with pytest.raises(RuntimeError, match="closed"):
        engine.call(lambda: None)


def test_default_engine_is_replaced_once_closed():
    first = Engine.default()
    first.close()
    second = Engine.default()
    assert second is not first and not second.closed


def test_unload_while_generating_cancels_that_models_jobs_quickly(engine, scripted):
    scripted("slow", delay_s=0.05)
    running = engine.submit(req("slow", max_tokens=1000))
    waiting = engine.submit(req("slow", max_tokens=10))
    model = engine.registry.get("slow").model
    next(e for e in running.events(detach=True) if isinstance(e, Token))
    calls = model.calls
    report = engine.unload("slow")
    assert model.calls - calls <= 2  # it ran at the running job's next cancel point
    assert report.names == ["slow"] and set(report.cancelled) == {running.id, waiting.id}
    assert "cancelled 2 job(s)" in report.message()
    assert running.wait(5).finish_reason == waiting.wait(5).finish_reason == "cancelled"
    assert engine.info().models == ()


def test_unload_of_another_model_runs_between_steps_of_the_running_job(engine, scripted):
    scripted("slow", delay_s=0.05)
    scripted("other")
    running = engine.submit(req("slow", max_tokens=1000))
    model = engine.registry.get("slow").model
    next(e for e in running.events(detach=True) if isinstance(e, Token))
    calls = model.calls
    assert engine.unload("other").names == ["other"]
    assert model.calls - calls <= 2  # between two steps, not after the job
    assert not running.done  # untouched
    running.cancel()


def test_unload_from_a_listener_raises_instead_of_deadlocking(engine, tiny_dir):
    errors = []

    def listener(ev):
        if isinstance(ev, Token) and ev.index == 0:
            try:
                engine.unload(tiny_dir)
            except RuntimeError as exc:
                errors.append(str(exc))

    engine.submit(req(tiny_dir, max_tokens=2)).result(timeout=30)  # loaded
    job = engine.submit(req(tiny_dir, max_tokens=5))
    job.add_listener(listener)
    assert job.result(timeout=30).finish_reason == "length"
    assert errors and "worker thread" in errors[0]


def test_a_call_whose_caller_gave_up_never_runs(engine, tiny_dir):
    engine.submit(req(tiny_dir, max_tokens=2)).result(timeout=30)
    engine.call(lambda: time.sleep(0.6))  # keeps the worker busy
    with pytest.raises(TimeoutError, match="withdrawn"):
        engine.run_on_worker(lambda: engine.registry.unload(tiny_dir), timeout=0.1)
    time.sleep(0.8)
    assert [m.name for m in engine.info().models] == [tiny_dir]


def test_prompt_longer_than_the_context_is_refused(engine, tmp_path):
    from mlx_notebook.engine import ContextOverflow, Notice
    from mlx_notebook.testing import build_tiny_model

    small = str(build_tiny_model(tmp_path / "ctx", max_position_embeddings=64))
    long_prompt = "Rivers flow to the sea. " * 40
    # Not loaded yet: the job ends with the error before any prefill.
    evs = list(engine.submit(req(small, prompt=long_prompt)).events(timeout=30))
    assert not any(isinstance(e, PrefillProgress) for e in evs)
    fin = evs[-1]
    assert fin.finish_reason == "error" and "64" in fin.error and "context" in fin.error
    # Loaded now: submit() refuses it on the caller's thread, naming both numbers.
    with pytest.raises(ContextOverflow, match=r"\d+ tokens do not fit .*\(64 tokens"):
        engine.submit(req(small, prompt=long_prompt))
    assert engine.info().queued == 0
    # max_tokens beyond the room left is clamped, and the job says so.
    job = engine.submit(req(small, prompt="Hello", max_tokens=500))
    evs = list(job.events(timeout=30))
    notes = [e.message for e in evs if isinstance(e, Notice)]
    assert notes and "max_tokens lowered from 500" in notes[0]
    fin = evs[-1]
    assert fin.stats.prompt_tokens + fin.stats.generation_tokens <= 64


def test_top_k_beyond_the_vocabulary(engine, tiny_dir, tmp_path):
    from mlx_notebook.testing import build_tiny_model

    fresh = str(build_tiny_model(tmp_path / "k"))
    fin = engine.submit(req(fresh, top_k=10**6, temperature=1.0)).wait(timeout=30)
    assert fin.finish_reason == "error" and "top_k" in fin.error and "vocabulary" in fin.error
    with pytest.raises(ValueError, match="top_k: 1000000 exceeds the vocabulary"):
        engine.submit(req(fresh, top_k=10**6, temperature=1.0))


def test_tiny_temperature_is_greedy(engine, tiny_dir):
    greedy = engine.submit(req(tiny_dir, max_tokens=20)).result(timeout=30)
    tiny = engine.submit(req(tiny_dir, max_tokens=20, temperature=1e-45, seed=3)).result(30)
    assert tiny.token_ids == greedy.token_ids


def test_queue_positions_never_increase_under_concurrent_cancels(engine, scripted):
    scripted("slow", delay_s=0.002)
    jobs = [engine.submit(req("slow", max_tokens=3)) for _ in range(30)]
    stop = threading.Event()

    def canceller(offset):
        for j in jobs[offset::3]:
            if stop.is_set():
                return
            j.cancel()
            time.sleep(0.001)

    threads = [threading.Thread(target=canceller, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for j in jobs:
        j.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join()
    for j in jobs:
        pos = [e.position for e in j.events() if isinstance(e, Queued)]
        assert pos == sorted(pos, reverse=True) and len(set(pos)) == len(pos), pos


def test_breaking_out_of_events_cancels_the_job_unless_detached(engine, scripted):
    scripted("slow", delay_s=0.02)
    job = engine.submit(req("slow", max_tokens=1000))
    for ev in job.events():
        if isinstance(ev, Token):
            break
    assert job.wait(timeout=5).finish_reason == "cancelled"
    kept = engine.submit(req("slow", max_tokens=8))
    for ev in kept.events(detach=True):
        if isinstance(ev, Token):
            break
    assert kept.wait(timeout=30).finish_reason == "length"


def test_interrupting_an_events_loop_cancels_its_job(engine, scripted):
    scripted("slow", delay_s=0.02)
    job = engine.submit(req("slow", max_tokens=1000))
    job.add_listener(
        lambda ev: isinstance(ev, Token) and ev.index == 2 and _thread.interrupt_main()
    )
    with pytest.raises(KeyboardInterrupt):
        for _ in job.events():
            pass
    assert job.wait(timeout=5).finish_reason == "cancelled"


def test_errors_keep_one_line_and_the_exception_with_its_traceback(engine, scripted):
    scripted("broken", fail_at=8)
    fin = engine.submit(req("broken", max_tokens=50)).wait(timeout=30)
    assert fin.error == "RuntimeError: scripted failure at position 8"
    assert "\n" not in fin.error
    exc = fin.exception
    assert isinstance(exc, RuntimeError) and exc.__traceback__ is not None
    import traceback

    assert "scripted.py" in "".join(traceback.format_exception(exc))


def test_many_stop_strings_work_end_to_end(engine, tiny_dir):
    plain = engine.submit(req(tiny_dir, max_tokens=30)).result(timeout=30)
    word = plain.text[10:14]
    stops = [f"zz{i}zz" for i in range(10_000)] + [word]
    r = engine.submit(req(tiny_dir, max_tokens=30, stop=stops)).result(timeout=30)
    assert r.matched_stop == word and r.text == plain.text[: plain.text.index(word)]


def test_every_engine_shuts_down_cleanly_at_exit(tiny_dir):
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import time, mlx_notebook
        from mlx_notebook.engine import Engine, Request
        eng = Engine()
        job = eng.submit(Request("Hello " * 300, model={tiny_dir!r}, chat=False,
                                 max_tokens=100000))
        next(e for e in job.events(detach=True) if type(e).__name__ == "Token")
        print("generating", flush=True)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert "generating" in out.stdout
    assert out.returncode == 0, out.stderr
    assert "terminate called" not in out.stderr
