"""Continuous batching: rows equal their solo runs, admission per step, cancels per row."""

import random
import sys
import time

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from mlx_notebook.engine import Engine, Notice, Request, Started, Token
from mlx_notebook.engine.cache.sequence import CachedSequence
from mlx_notebook.engine.events import Queued
from mlx_notebook.testing import ScriptedModel

PROMPTS = [
    "The quick brown fox",
    "Hello world! Stop here.",
    "Rivers flow to the sea; mountains",
    "Paris is the capital",
    "def main():\n    print(",
    "café naïve façade",
    "Speculative decoding drafts tokens",
    "0123456789",
]


def req(model, prompt="Hello", **kw):
    kw.setdefault("chat", False)
    return Request(prompt, model=model, **kw)


def solo(engine, model, prompt, **kw):
    return engine.submit(req(model, prompt, batch=False, **kw)).result(timeout=60)


def test_rows_equal_their_solo_runs_token_for_token(engine, tiny_dir):
    lengths = [5, 40, 17, 33, 8, 25, 40, 12]
    jobs = [engine.submit(req(tiny_dir, p, max_tokens=n)) for p, n in zip(PROMPTS, lengths)]
    batched = [j.result(timeout=60) for j in jobs]
    assert max(r.stats.batch_rows for r in batched) >= 2  # they really shared steps
    for p, n, r in zip(PROMPTS, lengths, batched):
        alone = solo(engine, tiny_dir, p, max_tokens=n)
        assert alone.stats.batch_rows == 0
        assert r.token_ids == alone.token_ids and r.text == alone.text, p


def test_rows_keep_their_own_stops_processors_and_seeds(engine, tiny_dir):
    kinds = [
        dict(stop=["o"]),
        dict(repetition_penalty=1.3),
        dict(temperature=0.9, seed=7),
        dict(temperature=0.9, seed=7, top_k=20),
        dict(),
    ]
    jobs = [
        engine.submit(req(tiny_dir, PROMPTS[i], max_tokens=20, **k)) for i, k in enumerate(kinds)
    ]  # noqa: E501
    batched = [j.result(timeout=60) for j in jobs]
    assert batched[0].finish_reason == "stop" and "o" not in batched[0].text
    for i in (0, 1, 4):  # greedy rows: the same tokens as alone
        alone = solo(engine, tiny_dir, PROMPTS[i], max_tokens=20, **kinds[i])
        assert batched[i].token_ids == alone.token_ids
    # A seeded row samples the same text whatever it is batched with.
    again = [
        engine.submit(req(tiny_dir, PROMPTS[2], max_tokens=20, **kinds[2])),
        engine.submit(req(tiny_dir, PROMPTS[5], max_tokens=20)),
    ]
    assert again[0].result(timeout=60).token_ids == batched[2].token_ids
    alone = engine.submit(req(tiny_dir, PROMPTS[2], max_tokens=20, **kinds[2]))
    assert alone.result(timeout=60).token_ids == batched[2].token_ids
    # And the same as the job run by the single-job loop (no batch at all).
    for i in (2, 3):
        assert solo(engine, tiny_dir, PROMPTS[i], max_tokens=20, **kinds[i]).token_ids == (
            batched[i].token_ids
        ), kinds[i]


def test_a_new_job_gets_its_first_token_within_a_chunk_and_two_steps(engine, scripted):
    scripted("slow", delay_s=0.03)
    model = engine.registry.get("slow").model
    running = [engine.submit(req("slow", max_tokens=300)) for _ in range(8)]
    for j in running:
        next(e for e in j.events(detach=True) if isinstance(e, Token))
    engine.max_batch = 9
    calls0 = model.calls
    new = engine.submit(req("slow", max_tokens=5))
    first = next(e for e in new.events(detach=True) if isinstance(e, Token))
    calls = model.calls - calls0
    # Counted, not timed: the step in flight at submit, one prefill chunk, then two
    # decode steps (the latency itself is measured by benchmarks/bench_batch.py).
    assert first.index == 0 and calls <= 4, calls
    assert all(not j.done for j in running)
    engine.cancel_all()


def test_a_ninth_job_waits_for_a_slot_and_says_so(engine, scripted):
    scripted("slow", delay_s=0.01)
    jobs = [engine.submit(req("slow", max_tokens=30)) for _ in range(9)]
    for j in jobs[:8]:
        next(e for e in j.events(detach=True) if isinstance(e, Started))
    ninth = [e for e in jobs[8].events(timeout=30) if isinstance(e, Queued)]
    assert any("batch slot (8 of 8 in use)" in q.waiting_for for q in ninth) or len(ninth) == 1
    assert all(j.result(timeout=30).finish_reason == "length" for j in jobs)


def test_cancel_one_row_ends_it_within_a_step_and_the_others_are_unaffected(engine, tiny_dir):
    jobs = [engine.submit(req(tiny_dir, p, max_tokens=30)) for p in PROMPTS[:4]]
    victim = jobs[1]
    victim.add_listener(lambda ev: isinstance(ev, Token) and ev.index == 4 and victim.cancel())
    results = [j.result(timeout=60) for j in jobs]
    assert results[1].finish_reason == "cancelled" and 5 <= len(results[1].token_ids) <= 6
    for p, r in zip(PROMPTS[:4], results):
        if r is not results[1]:
            assert r.token_ids == solo(engine, tiny_dir, p, max_tokens=30).token_ids


def _check_cache_entries(engine, name):
    """Every cached sequence is consistent and holds exactly its tokens' keys and values."""

    def check():
        state = engine.scheduler.states[name]
        bad = []
        for seq in list(state.cache._entries.values()):
            if not seq.consistent():
                bad.append(("offset", len(seq.tokens)))
                continue
            fresh = CachedSequence(seq.model)
            fresh.forward(seq.tokens)
            for a, b in zip(seq.cache, fresh.cache):
                if type(a) is not type(b):
                    bad.append((type(a).__name__, len(seq.tokens)))
                    break
                ka, va = a.keys_and_values()
                kb, vb = b.keys_and_values()
                if ka.shape != kb.shape or not mx.allclose(ka, kb, atol=1e-4).item():
                    bad.append(("keys", len(seq.tokens)))
                    break
        return bad, len(state.cache)

    return engine.run_on_worker(check, timeout=60)


def test_300_random_cancels_across_batched_rows_leave_every_cache_consistent(tiny_dir):
    rng = random.Random(1)
    eng = Engine(max_batch=6)
    try:
        cancels = 0
        while cancels < 300:
            jobs = []
            for _ in range(rng.randint(2, 8)):
                p = rng.choice(PROMPTS) + rng.choice(["", " and", " the sea"])
                j = eng.submit(req(tiny_dir, p, max_tokens=rng.randint(4, 30),
                                   prefill_target_s=rng.choice([0.001, 0.25])))  # fmt: skip
                at = rng.randint(-1, 25)
                if at < 0:
                    j.add_listener(lambda ev, j=j: type(ev).__name__ == "PrefillProgress"
                                   and j.cancel())  # fmt: skip
                else:
                    j.add_listener(lambda ev, j=j, at=at: isinstance(ev, Token)
                                   and ev.index == at and j.cancel())  # fmt: skip
                jobs.append(j)
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.01)
                rng.choice(jobs).cancel()
            results = [j.result(timeout=60) for j in jobs]
            cancels += sum(r.finish_reason == "cancelled" for r in results)
        name = eng.registry.key_for(tiny_dir)
        bad, entries = _check_cache_entries(eng, name)
        assert entries > 0 and not bad, bad
        # And the next jobs equal fresh ones, batched and alone.
        after = [eng.submit(req(tiny_dir, p, max_tokens=20)) for p in PROMPTS]
        for p, j in zip(PROMPTS, after):
            fresh = eng.submit(req(tiny_dir, p, max_tokens=20, reuse_cache=False, batch=False))
            assert j.result(timeout=60).token_ids == fresh.result(timeout=60).token_ids
    finally:
        eng.close()


def test_a_speculative_job_runs_alongside_the_batch(engine, scripted):
    scripted("slow", delay_s=0.02)
    rows = [engine.submit(req("slow", max_tokens=60)) for _ in range(3)]
    spec = engine.submit(req("slow", max_tokens=20, draft="lookup"))
    assert spec.result(timeout=60).finish_reason == "length"
    # It finished while the rows were still decoding: neither waited for the other.
    assert not all(r.done for r in rows)
    assert spec.finished.stats.batch_rows == 0
    assert all(r.result(timeout=60).finish_reason == "length" for r in rows)


def test_max_batch_one_runs_jobs_one_at_a_time(tiny_dir):
    eng = Engine(max_batch=1)
    try:
        jobs = [eng.submit(req(tiny_dir, p, max_tokens=10)) for p in PROMPTS[:3]]
        results = [j.result(timeout=60) for j in jobs]
        assert all(r.stats.batch_rows == 0 for r in results)
        starts = [next(i for i, e in enumerate(j.events()) if isinstance(e, Started)) for j in jobs]
        assert starts[1] > 0  # the second was queued behind the first
        assert "batching: off" in eng.info().notes[0]
        with pytest.raises(ValueError, match="max_batch"):
            eng.max_batch = -1
    finally:
        eng.close()


def test_a_failing_batched_step_fails_its_rows_and_the_worker_lives(engine, scripted):
    scripted("fails", fail_at=12)
    jobs = engine.submit_many([req("fails", max_tokens=30) for _ in range(3)])  # together
    fins = [j.wait(timeout=30) for j in jobs]
    assert all(f.finish_reason == "error" and "scripted failure" in f.error for f in fins)
    assert max(f.stats.batch_rows for f in fins) == 3  # it failed in a shared step
    scripted("ok")
    assert engine.submit(req("ok", max_tokens=3)).result(timeout=30).finish_reason == "length"


def test_status_names_the_batch(engine, scripted):
    scripted("slow", delay_s=0.02)
    jobs = [engine.submit(req("slow", max_tokens=100)) for _ in range(2)]
    for j in jobs:
        next(e for e in j.events(detach=True) if isinstance(e, Token))
    note = engine.info().notes[0]
    assert note.startswith("batch: 2 of 8 rows on slow") and str(jobs[0].id) in note
    engine.cancel_all()


# -- on the bundled default model (issue 16's acceptance) -----------------------------------

DEFAULT_PROMPTS = [
    "Write a haiku about the sea.", "Describe a rainy afternoon in a small town.",
    "List three uses of a paperclip.", "What is the capital of France? Explain briefly.",
    "Tell me a fun fact about octopuses.", "Give two tips for learning to code.",
    "Describe the taste of an orange.", "Why is the sky blue?",
]  # fmt: skip


SUBJECTS = [
    "the sea", "a lighthouse", "autumn leaves", "a busy market",
    "a mountain lake", "an old library", "a desert night", "a snowy village",
]  # fmt: skip


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@pytest.mark.slow
def test_default_model_rows_equal_solo_or_part_at_a_near_tie(default_engine):
    eng = default_engine
    # Submitted together, with whole-prompt prefill chunks: time-sized chunks shrink
    # on a busy machine, and a short answer could end before the last row joined.
    greedy = dict(max_tokens=64, temperature=0, repetition_penalty=1, prefill_target_s=30)
    jobs = eng.submit_many([Request(p, **greedy) for p in DEFAULT_PROMPTS])
    batched = [j.result() for j in jobs]
    assert max(r.stats.batch_rows for r in batched) == 8
    for p, row in zip(DEFAULT_PROMPTS, batched):
        alone = eng.submit(
            Request(p, max_tokens=64, batch=False, temperature=0, repetition_penalty=1)
        ).result()
        if row.token_ids == alone.token_ids:
            continue
        # Where a row differs, it must be a numerical near-tie where they part.
        n = first_difference(row.token_ids, alone.token_ids)
        n = min(len(row.token_ids), len(alone.token_ids)) if n is None else n
        margin = eng.logit_margin(Request(p), alone.token_ids[:n])
        assert margin < 1e-3, (p, n, margin)


@pytest.mark.slow
@pytest.mark.parametrize("n", [8, 4])
def test_batched_rows_share_steps_one_token_each(default_engine, n):
    # What makes batching fast, counted: n rows advance together, one token each per
    # step, so n x 64 tokens take about 64 forward passes instead of n x 64. (The
    # speed this buys is measured by benchmarks/bench_batch.py, not asserted here.)
    # Essays run to the budget: every row generates 64 tokens.
    essays = [f"Write a detailed essay about {s} ({n} rows)." for s in SUBJECTS[:n]]
    # Greedy: the same counts every run. Whole-prompt chunks: chunks sized by time
    # shrink on a busy machine, and rows admitted many ticks apart would not overlap.
    greedy = dict(temperature=0, repetition_penalty=1, prefill_target_s=30)
    jobs = default_engine.submit_many([Request(p, max_tokens=64, **greedy) for p in essays])
    rows = [j.result() for j in jobs]
    alone = default_engine.submit(
        Request(essays[0] + " Alone.", max_tokens=64, batch=False, **greedy)
    )
    alone = alone.result()
    for r in rows:
        st = r.stats
        assert st.batch_rows == n and st.generation_tokens >= 32, st
        # One token per step (the step that feeds a row's last token is its last).
        assert st.generation_tokens <= st.decode_steps <= st.generation_tokens + 1, st
        assert st.step_rows / st.decode_steps > 0.75 * n, st  # in full batches nearly always
    assert alone.stats.decode_steps == alone.stats.step_rows == alone.stats.generation_tokens


# -- cache kinds that refuse to batch, and failures that must not strand a job ----------


class RefusingKV(KVCache):
    """A cache kind whose merge raises, as falcon_h1's did before each kind merged itself."""

    @classmethod
    def merge(cls, caches):
        raise RuntimeError("merge refused by this cache kind")


class UnmergeableKV(KVCache):
    """A cache kind with no merge at all (as a paged or quantized cache)."""

    merge = None


def _register(engine, tiny_tokenizer, name, kind, **kw):
    vocab = len(tiny_tokenizer.get_vocab())

    class Model(ScriptedModel):
        def make_cache(self):
            return [kind()]

    model = Model(vocab, lambda p, t: 40 + p % 7, **kw)
    engine.call(lambda: engine.registry.register(name, model, tiny_tokenizer)).result()
    return model


def _cpu_ticks(thread) -> int:
    with open(f"/proc/self/task/{thread.native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_model_whose_merge_fails_runs_its_rows_alone_and_the_worker_idles(engine, tiny_tokenizer):
    _register(engine, tiny_tokenizer, "refuses", RefusingKV, delay_s=0.002)
    # 500 steps of at least 2 ms: the joiner arrives while the first row decodes.
    alone = engine.submit(req("refuses", max_tokens=500, batch=False)).result(timeout=30)
    solo = engine.submit(req("refuses", max_tokens=40, batch=False)).result(timeout=30)
    first = engine.submit(req("refuses", max_tokens=500))
    next(e for e in first.events(detach=True) if isinstance(e, Token))
    job = engine.submit(req("refuses", max_tokens=40))
    joiner = job.result(timeout=30)
    # The batched check at the second row found it: the joiner ran alone, and heard why.
    assert joiner.finish_reason == "length" and joiner.token_ids == solo.token_ids
    told = [e.message for e in job.events() if isinstance(e, Notice)]
    assert told == [
        "refuses runs alone: its batched forward pass failed "
        "(RuntimeError: merge refused by this cache kind)"
    ]
    res = first.result(timeout=30)  # the running row never noticed
    assert res.token_ids == alone.token_ids and res.stats.batch_rows == 1
    # Nothing left behind: the worker thread sleeps (a spinning one burns ~100 ticks/s).
    before = _cpu_ticks(engine.scheduler.thread)
    time.sleep(1.0)
    assert _cpu_ticks(engine.scheduler.thread) - before <= 10
    assert engine.submit(req("refuses", max_tokens=3)).result(timeout=30).finish_reason == "length"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_failing_step_ends_its_rows_and_the_worker_idles(engine, scripted):
    scripted("fails", fail_at=12)
    jobs = [engine.submit(req("fails", max_tokens=30)) for _ in range(3)]
    fins = [j.wait(timeout=30) for j in jobs]
    assert all(f.finish_reason == "error" and "\n" not in f.error for f in fins)
    before = _cpu_ticks(engine.scheduler.thread)
    time.sleep(1.0)
    assert _cpu_ticks(engine.scheduler.thread) - before <= 10


def test_a_model_whose_cache_cannot_batch_runs_its_jobs_alone_in_order(engine, tiny_tokenizer):
    model = _register(engine, tiny_tokenizer, "lonely", UnmergeableKV)
    jobs = [engine.submit(req("lonely", max_tokens=6)) for _ in range(3)]
    events = [list(j.events(timeout=30)) for j in jobs]
    for evs in events:
        notices = [e.message for e in evs if isinstance(e, Notice)]
        assert notices == ["lonely runs alone: its UnmergeableKV layers cannot join a batch"]
        assert sum(isinstance(e, Started) for e in evs) == 1
        fin = evs[-1]
        assert fin.finish_reason == "length" and fin.stats.batch_rows == 0
    assert model.calls >= 3 * 6  # no shared steps: each job's steps are its own


def test_mlx_lm_batched_window_hides_a_key_from_a_multi_token_pass_once_wrapped():
    # Why batched rows on a sliding window take a token a step (`Batch._jumps_exactly`):
    # mlx-lm 0.32's BatchRotatingKVCache, once wrapped, builds the mask of a pass over
    # several tokens one key off, hiding a short row's first kept key. When mlx-lm fixes
    # it this test fails: then batched rows there may feed forced tokens together too.
    import mlx.core as mx
    from mlx_lm.models.cache import BatchRotatingKVCache, RotatingKVCache

    def kv(ids):  # keys whose features are their token ids
        return mx.broadcast_to(mx.array(ids, dtype=mx.float32)[None, None, :, None],
                               (1, 1, len(ids), 2)) + 0  # fmt: skip

    caches = []
    for row in (list(range(100, 108)), list(range(200, 203))):  # 8 and 3 tokens, window 8
        c = RotatingKVCache(max_size=8)
        c.update_and_fetch(kv(row), kv(row))
        caches.append(c)
    batch = BatchRotatingKVCache.merge(caches)
    for step in range(3):  # single steps: the buffer wraps
        k = mx.concatenate([kv([108 + step]), kv([203 + step])])
        batch.update_and_fetch(k, k)
    mask = batch.make_mask(3)
    k3 = mx.concatenate([kv([111, 112, 113]), kv([206, 207, 208])])
    keys, _ = batch.update_and_fetch(k3, k3)
    mask = mx.broadcast_to(mask, (2, 1, 3, keys.shape[2]))
    ids, seen = keys[1, 0, :, 0].tolist(), mask[1, 0, 0].tolist()
    visible = [int(i) for i, ok in zip(ids, seen) if ok]
    # Token 206 of the short row, window 8: a single step sees keys 200..206.
    assert visible == list(range(201, 207))  # 200 hidden: the defect
