"""Cache protocols: snapshots, rewinds with pending replay, copies and merges, per kind."""

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache, make_prompt_cache

from mlx_notebook.engine.cache.caches import (
    always_trimmable,
    copy_cache,
    extract,
    layers,
    merge,
    unbatchable,
)
from mlx_notebook.engine.cache.sequence import CachedSequence
from mlx_notebook.testing.families import WINDOW, build_family

IDS = list(range(20, 60))  # 40 tokens: five windows


@pytest.fixture(scope="module", params=["gemma3_text", "qwen3_5", "falcon_h1", "llama"])
def model(request, tmp_path_factory):
    from mlx_lm import load

    path = build_family(request.param, tmp_path_factory.mktemp(request.param))
    return load(str(path))[0]


def logits_after(model, ids, nxt):
    """Last-position logits for ``nxt`` after a fresh cache fed ``ids``."""
    seq = CachedSequence(model)
    seq.forward(ids)
    return seq.forward(nxt)[0, -1]


def test_a_rewind_past_the_window_or_a_state_replays_and_matches_a_fresh_run(model):
    seq = CachedSequence(model)
    seq.forward(IDS[:30])
    seq.checkpoint()
    seq.forward(IDS[30:36])  # a verify pass of six tokens
    seq.trim_to(33)  # keep three of them
    plain = always_trimmable(seq.cache)
    assert seq.pending == ([] if plain else IDS[30:33])
    assert seq.held == (33 if plain else 30) and seq.consistent()
    got = seq.forward([7, 8])[0, -1]
    assert seq.replayed == (0 if plain else 3) and seq.pending == []
    want = logits_after(model, IDS[:33], [7, 8])
    assert mx.allclose(got, want, atol=1e-4).item()


def test_pending_tokens_are_dropped_first_and_settle_forgets_them(model):
    seq = CachedSequence(model)
    seq.forward(IDS[:30])
    seq.checkpoint()
    seq.forward(IDS[30:36])
    seq.trim_to(34)
    seq.trim_to(32)  # within what is pending (or trimmed, for full attention)
    assert seq.tokens == IDS[:32]
    seq.settle()
    assert seq.pending == [] and seq.tokens == IDS[: seq.held] and seq.consistent()


def test_a_rewind_before_the_checkpoint_is_refused_in_one_line(model):
    seq = CachedSequence(model)
    seq.forward(IDS[:30])
    seq.checkpoint()
    seq.forward(IDS[30:36])
    if always_trimmable(seq.cache):
        seq.trim_to(10)  # full attention trims anywhere
        assert seq.held == 10
        return
    with pytest.raises(RuntimeError, match="cannot rewind this cache from 36 to 10 tokens"):
        seq.trim_to(10)


def test_a_copy_is_independent_of_later_writes_to_either_side(model):
    seq = CachedSequence(model)
    seq.forward(IDS[:30])
    mx.eval([c.state for c in layers(seq.cache)])
    snap = seq.snapshot()
    for t in IDS[30:34]:  # single-token writes update some kinds in place
        seq.forward([t])
    snap_logits = snap.forward([7])[0, -1]
    assert mx.allclose(snap_logits, logits_after(model, IDS[:30], [7]), atol=1e-4).item()
    got = seq.forward([7])[0, -1]
    assert mx.allclose(got, logits_after(model, IDS[:34], [7]), atol=1e-4).item()


def test_merged_rows_extract_to_their_own_kinds_bounded_by_the_window(model):
    a, b = CachedSequence(model), CachedSequence(model)
    a.forward(IDS[:30])
    b.forward(IDS[:12])
    for t in IDS[30:33]:
        a.forward([t])
    batch = merge([a.cache, b.cache])
    assert unbatchable(a.cache) is None
    for i, src in enumerate((a, b)):
        row = extract(batch, i)
        assert [type(c) for c in layers(row)] == [type(c) for c in layers(src.cache)]
        for c in layers(row):
            if isinstance(c, RotatingKVCache):
                assert c.keys.shape[2] <= WINDOW and c.offset == src.held
            elif isinstance(c, KVCache):
                assert c.offset == src.held
        got = CachedSequence(model, row, src.tokens).forward([7])[0, -1]
        assert mx.allclose(got, logits_after(model, src.tokens, [7]), atol=1e-4).item()


def test_kinds_without_merge_are_named():
    class Paged(KVCache):
        merge = None

    assert unbatchable([KVCache(), Paged()]) == "Paged"
    assert unbatchable([KVCache(), ArraysCache(2)]) is None
    assert always_trimmable([KVCache()]) and not always_trimmable([ArraysCache(2)])


def test_copy_cache_keeps_each_kind(model):
    cache = make_prompt_cache(model)
    assert [type(c) for c in copy_cache(cache)] == [type(c) for c in cache]
