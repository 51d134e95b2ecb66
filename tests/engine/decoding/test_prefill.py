"""Prefill chunk sizing: the cost model, its two limits, and Stop during a long prefill."""

import math
import random
import threading
import time

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.decoding.prefill import ChunkSizer, PrefillProfile


def cost(n, p, g=0.02, a=1e-3, b=2e-6):
    """Attention that skips the masked half of a chunk's scores (the fast path's)."""
    return g + a * n + b * n * (p + n / 2)


def square(n, p, g=0.02, a=1e-3, b=2e-6):
    """Attention that computes a chunk's whole square of scores and masks it (MLX's CPU)."""
    return g + a * n + b * n * (p + n)


CHUNKS = [(8, 0), (32, 8), (128, 40), (100, 168), (60, 268), (200, 328), (150, 528), (90, 678)]


def test_profile_recovers_the_cost_model_and_its_limits():
    prof = PrefillProfile()
    for n, p in CHUNKS:
        prof.observe(n, p, cost(n, p))
    g, a, b, e = prof.coef
    assert g == pytest.approx(0.02, rel=1e-3) and a == pytest.approx(1e-3, rel=1e-3)
    assert b == pytest.approx(2e-6, rel=1e-3) and e == 0
    assert prof.best() == math.inf  # fewer chunks are always faster
    n = prof.largest_within(0.2, 1000)
    assert cost(n, 1000) == pytest.approx(0.2)


def test_attention_over_a_whole_square_makes_long_chunks_dearer():
    prof = PrefillProfile()
    for n, p in CHUNKS:
        prof.observe(n, p, square(n, p))
    g, a, b, e = prof.coef
    assert (g, a, b, e) == pytest.approx((0.02, 1e-3, 2e-6, 1e-6), rel=1e-3)
    best = prof.best()
    assert best == pytest.approx(math.sqrt(2 * 0.02 / 2e-6))

    def prompt(n, total=2000):  # a prompt of `total` tokens in chunks of n
        return sum(square(min(n, total - p), p) for p in range(0, total, n))

    assert prompt(int(best)) < min(prompt(int(best / 2)), prompt(int(best * 2)))
    assert prof.largest_within(0.2, 1000) == pytest.approx(
        next(n for n in range(1, 999) if square(n + 1, 1000) > 0.2), abs=1
    )


def test_chunks_all_at_the_start_count_attention_as_a_whole_square():
    # With every chunk at position 0, n (p + n/2) and n^2 are one column: the fit keeps
    # the second (e), as the CPU's attention computes a chunk's whole square of scores.
    prof = PrefillProfile()
    for n in (2, 30, 120, 250):
        prof.observe(n, 0, square(n, 0))
    g, a, b, e = prof.coef
    assert b == 0 and (g, a, e) == pytest.approx((0.02, 1e-3, 2e-6), rel=1e-6)
    assert prof.best() == pytest.approx(math.sqrt(0.02 / 2e-6))


def test_a_warm_up_of_short_chunks_keeps_a_per_token_cost():
    # Three warm-up chunks timed on the default model (8 to 22 tokens): the best fit of
    # three terms to them had no per-token cost and all attention, and cut a long prompt
    # into chunks of 30. Every fit keeps the per-token term, and none has as many terms
    # as times.
    prof = PrefillProfile()
    for n, p, t in [(8, 0, 0.02407), (22, 8, 0.03694), (13, 24, 0.03703)]:
        prof.observe(n, p, t)
    g, a, b, e = prof.coef
    assert a > 0 and sum(c > 0 for c in (g, a, b, e)) <= 2
    assert prof.best() == math.inf  # nothing here says long chunks cost more
    assert prof.largest_within(0.2, 40) > 150  # not 30 (the old fit's chunks)


def test_noise_never_gives_negative_costs():
    prof = PrefillProfile()
    rng = random.Random(0)
    for i in range(40):
        n, p = rng.choice([16, 32, 64, 128]), 64 * i
        prof.observe(n, p, max(1e-4, 0.001 * n * rng.uniform(0.7, 1.3)))  # no fixed cost
    assert all(c >= 0 for c in prof.coef)


def test_sizer_caps_by_time_and_throughput_and_grows_gradually():
    prof = PrefillProfile()
    s = ChunkSizer(target_s=10.0, profile=prof, first=8)
    assert s.size_at(0) == 8  # a new model: measure with a small chunk
    s.observe(8, cost(8, 0), 0)
    assert s.size_at(8) == 32  # at most 4x per chunk while the fit is young
    for n, p in [(32, 8), (128, 40), (100, 168)]:
        s.observe(n, cost(n, p), p)
    assert s.size_at(300) == 4 * 100  # the time cap is far: 4x the last chunk
    sq = PrefillProfile()
    for n, p in CHUNKS:
        sq.observe(n, p, square(n, p))
    s = ChunkSizer(target_s=10.0, profile=sq)
    assert s.size_at(300) == int(sq.best())  # the time cap is far: throughput decides
    tight = ChunkSizer(target_s=0.1, profile=prof)
    n = tight.size_at(2000)
    assert cost(n, 2000) <= 0.1 * ChunkSizer.MARGIN + 1e-9


def test_exactly_per_token_costs_never_shrink_chunks_to_one_token():
    # Times of exactly 0.2 ms a token: every term but the per-token one fits rounding
    # errors only (a CI run's fit had g = 1e-17, b = 2e-22), so the fit keeps that one,
    # and the time target alone sizes the chunks.
    from mlx_notebook.testing import VirtualClock

    prof, clock = PrefillProfile(), VirtualClock()
    s = ChunkSizer(target_s=0.05, profile=prof)
    pos = 0
    for _ in range(12):
        n = s.size_at(pos)
        t0 = clock()
        clock.sleep(0.0002 * n)  # timed as prefill times chunks: rounding in each difference
        s.observe(n, clock() - t0, pos)
        pos += n
        assert prof.coef == (0.0, pytest.approx(2e-4), 0.0, 0.0)
        assert pos <= 168 or n in (199, 200)  # 8, 32, 128, then 0.04 s of tokens
    prof.coef = (0.0, 2e-4, 2e-22, 0.0)  # no fixed cost: nothing makes small chunks pay
    assert prof.best() == math.inf and s.size_at(pos) in (199, 200)
    assert prof.largest_within(0.04, 10**6) == pytest.approx(200, rel=1e-6)  # no cancellation


def test_a_young_fit_does_not_size_a_chunk_far_past_what_was_measured():
    # A warm-up of a few tokens fits "all per-token, cheap": a long prompt's first
    # chunk then grows from what was measured, not to the whole prompt at once.
    prof = PrefillProfile()
    warm = ChunkSizer(target_s=0.25, profile=prof)
    warm.observe(3, 0.001, 0)  # a short prompt: 3 tokens in a millisecond
    assert prof.largest_within(0.25 * ChunkSizer.MARGIN, 0) > 150  # what the fit says
    fresh = ChunkSizer(target_s=0.25, profile=prof)  # the next job's prefill
    assert fresh.size_at(0) == 12  # 4x the longest chunk measured
    fresh.observe(12, 0.004, 0)
    assert fresh.size_at(12) == 48


def test_a_chunk_with_cancel_points_grows_further_and_gates_every_layer_past_the_measured():
    # Cancel points between layers bound a Stop whatever the fit says, once every layer
    # has one: such a chunk may grow 16x past what was measured, not 4x.
    prof = PrefillProfile()
    ChunkSizer(profile=prof).observe(3, 0.001, 0)  # a short prompt: 3 tokens in 1 ms
    gated = ChunkSizer(target_s=0.25, profile=prof)
    n = gated.size_at(0, points=16)
    assert n == ChunkSizer.GATED_GROWTH * 3 == 48
    assert gated.size_at(0) == ChunkSizer.GROWTH * 3  # no cancel points: 4x, as before
    assert gated.every(n, 0, 16) == 1  # an extrapolation: a cancel point after each layer
    assert gated.every(12, 0, 16) > 16  # within 4x of the measured: the fit sizes them
    gated.observe(n, 0.016, 0)
    assert gated.size_at(n, points=16) == 16 * 48  # and so on, within the hold


def test_past_the_window_chunks_end_on_the_grid_whatever_the_time():
    # A model whose multi-token pass differs from single steps: a chunk that begins past
    # its window changes the text, so there chunks end where mlx-lm's prefill ends them.
    ends = []
    for target in (1e-6, 0.05, 30.0):
        s = ChunkSizer(target_s=target, profile=PrefillProfile(), window=20, grid=64)
        pos, cuts = 0, []
        while pos < 300:
            n = s.size_at(pos)
            s.observe(n, 0.001 * n, pos)
            pos += n
            cuts.append(pos)
        assert all(c < 20 or c % 64 == 0 for c in cuts), cuts
        ends.append([c for c in cuts if c >= 20])
    assert ends[0] == ends[1] == ends[2] == [64, 128, 192, 256, 320]
    plain = ChunkSizer(target_s=1e-6, profile=PrefillProfile(), window=20)  # no grid
    assert plain.size_at(40) == plain.first


@pytest.mark.slow
def test_stop_mid_prefill_on_the_default_model(engine):
    engine.submit(Request("hi", max_tokens=2)).result(timeout=300)
    tok = engine.registry.peek("default").tokenizer
    from pathlib import Path

    import mlx_notebook

    text = "\n".join(p.read_text() for p in sorted(Path(mlx_notebook.__file__).parent.glob("*.py")))
    prompt = tok.decode(tok.encode(text)[:1500])
    rng = random.Random(1)
    lat, after = [], []
    while len(lat) < 10:
        job = engine.submit(Request(prompt, chat=False, max_tokens=1, reuse_cache=False))
        marks = []  # per chunk done: was Stop already pressed when it was reported?
        job.add_listener(
            lambda ev, j=job, m=marks: (
                type(ev).__name__ == "PrefillProgress" and m.append(j.cancelled)
            )
        )
        next(e for e in job.events(detach=True) if type(e).__name__ == "PrefillProgress")
        time.sleep(rng.uniform(0.0, 4.0))
        t0 = time.perf_counter()
        job.cancel()
        fin = job.wait(60)
        if fin.finish_reason == "cancelled":  # not already past prefill
            lat.append(time.perf_counter() - t0)
            after.append(sum(marks))
    # The mechanism, counted: a Stop ends the chunk in flight at its next cancel point
    # (between layers) or waits for it, and no other chunk.
    assert max(after) <= 1, after
    # The latency itself is in docs/performance.md (median ~0.11 s); here only with 10x headroom.
    lat.sort()
    assert (lat[4] + lat[5]) / 2 <= 1.5, lat


def test_gated_chunks_fill_the_hold_and_each_stretch_fits_the_target():
    prof = PrefillProfile()
    for n, p in [(8, 0), (32, 8), (128, 40), (100, 168), (60, 268), (200, 328), (150, 528)]:
        prof.observe(n, p, cost(n, p, g=0.0, a=0.01, b=1e-7))
    s = ChunkSizer(target_s=0.25, profile=prof)
    plain, gated = s.size_at(300), s.size_at(300, points=30)
    assert cost(plain, 300, 0, 0.01, 1e-7) <= 0.25 * ChunkSizer.MARGIN + 1e-9
    # Thirty stretches of 0.2 s would be 6 s: the hold (4 s) bounds the whole chunk.
    assert gated == int(prof.largest_within(ChunkSizer.HOLD_S * ChunkSizer.MARGIN, 300))
    assert gated > 7 * plain
    every = s.every(gated, 300, 30)
    stretch = cost(gated, 300, 0, 0.01, 1e-7) / 30
    assert every * stretch <= 0.25 * ChunkSizer.MARGIN < (every + 1) * stretch


def _gated_setup(tmp_path, per_token_s):
    from mlx_lm import load

    from mlx_notebook.engine.cache.sequence import CachedSequence
    from mlx_notebook.testing.families import build_family

    model = load(str(build_family("llama", tmp_path, num_hidden_layers=4)))[0]
    prof = PrefillProfile()
    prof.coef, prof.largest = (0.0, per_token_s, 0.0, 0.0), 10_000  # as if measured long ago
    return CachedSequence(model), ChunkSizer(target_s=0.25, profile=prof)


def test_a_stop_inside_a_chunk_ends_the_steps_with_the_cache_as_before(tmp_path):
    from mlx_notebook.engine.decoding import prefill as pf

    seq, sizer = _gated_setup(tmp_path, 0.01)  # 10 ms a token: 20 a chunk without gates
    tokens = list(range(20, 260))
    seen, asked = [], []
    note = dict(progress=lambda d, t: seen.append(d), sizer=sizer)
    steps = pf.prefill_steps(seq, tokens, stop=lambda: bool(asked.append(1)), **note)
    first = next(steps)
    assert first == 80  # 0.8 s of tokens: four layers of 0.2 s each
    assert len(asked) == 3  # a cancel point after each layer but the last
    asked.clear()
    sizer.profile.coef = (0.0, 0.01, 0.0, 0.0)  # the tiny model ran fast: keep it slow on paper
    stopped = pf.prefill_steps(seq, tokens, stop=lambda: not asked.append(1), **note)
    assert list(stopped) == [] and len(asked) == 1  # stopped at the first point
    assert seq.tokens == tokens[:80] and {c.offset for c in seq.cache} == {80}
    assert seen == [0, 80, 80]  # no progress for the chunk that was rolled back
    sizer.profile.coef = (0.0, 0.01, 0.0, 0.0)
    with pytest.raises(pf.Cancelled):
        pf.prefill(seq, tokens, check=lambda: None, stop=lambda: True, **note)
    assert seq.tokens == tokens[:80] and seq.consistent()


def test_chunks_stay_within_the_target_while_other_rows_wait(tmp_path):
    from mlx_notebook.engine.decoding import prefill as pf

    seq, sizer = _gated_setup(tmp_path, 0.01)
    asked = []
    steps = pf.prefill_steps(
        seq,
        list(range(20, 260)),
        progress=lambda d, t: None,
        sizer=sizer,
        stop=lambda: bool(asked.append(1)),
        alone=lambda: False,  # other rows decode between chunks
    )
    assert next(steps) == 20 and asked == []  # 0.2 s of tokens, no cancel points inside


@pytest.mark.parametrize("batch", [True, False])  # a batch row, a job run alone
def test_a_stop_at_a_layer_ends_the_job_and_its_cache_serves_the_next(
    engine, tiny_dir, monkeypatch, batch
):
    from mlx_notebook.engine.decoding import layer_gates

    prompt = " ".join(f"w{i}" for i in range(60))
    base = dict(model=tiny_dir, chat=False, max_tokens=4, temperature=0, batch=batch)
    holder, passes = [], []
    passed = layer_gates.Gate.passed

    def spy(self, out):
        passes.append(self.seen)  # layers of this chunk passed before this one
        if len(passes) > 20 and self.seen == 0 and not holder[0].cancelled:
            holder[0].cancel()  # Stop pressed while a chunk's first layer ran
        passed(self, out)

    monkeypatch.setattr(layer_gates.Gate, "passed", spy)
    # A tiny target: on paper every chunk outlasts it, so every layer is a cancel point.
    job = engine.submit(Request(prompt, prefill_target_s=1e-7, **base))
    holder.append(job)
    done = []
    job.add_listener(lambda ev: type(ev).__name__ == "PrefillProgress" and done.append(ev.done))
    fin = job.wait(60)
    assert fin.finish_reason == "cancelled" and passes[-1] == 0  # no layer after the Stop
    monkeypatch.setattr(layer_gates.Gate, "passed", passed)
    again = engine.submit(Request(prompt, **base)).result(timeout=60)
    # The chunks before the Stop, reused; the stopped one rolled back.
    assert again.stats.cached_tokens == done[-1] > 0 and len(done) > 2
    fresh = engine.submit(Request(prompt, reuse_cache=False, **base)).result(timeout=60)
    assert again.text == fresh.text


def test_one_long_chunk_is_not_enough_to_cut_chunks_for_throughput():
    # Timed on the default model (float32): warm-ups of 8-38 tokens, then a prompt's
    # first chunk. The fit put the per-token cost of the long chunk into ``e``, and its
    # optimum (119 and 61 tokens) cut the rest of a 512-token prompt into chunks that ran
    # at 1.5-1.8 ms a token against the long one's 1.0.
    for warm, first in (
        ([(8, 0, 0.018), (22, 8, 0.025), (38, 0, 0.04)], (304, 0.296)),
        ([(8, 0, 0.018), (22, 8, 0.023), (13, 24, 0.025)], (176, 0.201)),
    ):
        prof = PrefillProfile()
        for n, p, t in warm:
            prof.observe(n, p, t)
        s = ChunkSizer(target_s=0.25, profile=prof)
        s.observe(*first, 0)
        g, _, _, e = prof.coef
        assert e > 0 and math.sqrt(g / e) < 150  # what the fit alone says
        assert prof.best() == math.inf
        assert s.size_at(first[0], points=30) >= 512 - first[0]  # the rest in one chunk


def test_freed_memory_goes_back_once_a_prefill_ends_not_per_chunk(tmp_path, monkeypatch):
    from mlx_notebook.engine.decoding import prefill as pf

    seq, sizer = _gated_setup(tmp_path, 0.01)
    released = []
    monkeypatch.setattr(pf, "release_freed", lambda: released.append(len(seq.tokens)))
    note = dict(progress=lambda d, t: None, sizer=sizer, alone=lambda: False)
    tokens = list(range(20, 80))
    seen = [(n, list(released)) for n in pf.prefill_steps(seq, tokens, **note)]
    assert len(seen) >= 2 and sum(n for n, _ in seen) == 59
    # chunks reuse each other's blocks: given back once, with the last chunk
    assert [r for _, r in seen] == [[]] * (len(seen) - 1) + [[59]]
    assert list(pf.prefill_steps(seq, tokens, **note)) == [] and released == [59]


def test_the_worker_gives_freed_memory_back_when_it_goes_idle(monkeypatch, tiny_dir):
    from mlx_notebook.engine import Engine
    from mlx_notebook.engine.local import scheduler

    idle = threading.Event()
    monkeypatch.setattr(scheduler, "release_freed", idle.set)
    eng = Engine(start=False, results=False)
    try:
        eng.start()
        assert idle.wait(30)  # at start: nothing queued
        idle.clear()
        eng.submit(Request("Hello", model=tiny_dir, chat=False, max_tokens=3)).result(timeout=300)
        assert idle.wait(30)  # the job ended and the queue is empty
    finally:
        eng.close()
