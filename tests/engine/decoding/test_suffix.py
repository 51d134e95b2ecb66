"""Suffix drafting: the index on scripted token streams, and the draft source."""

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.decoding.suffix import KEEP, SuffixDraft, SuffixIndex, SuffixOptions


def test_longest_suffix_match_and_its_continuation():
    idx = SuffixIndex()
    idx.add([1, 2, 3, 4, 5, 6, 7, 8, 9])
    n, occ = idx.match([0, 3, 4, 5, 6])
    assert n == 4 and occ == [(0, 6)]  # "3 4 5 6" ended at position 6
    path, prob = idx.continuation(occ, limit=10, min_prob=0.1)
    assert path == [7, 8, 9] and prob == 1.0  # runs to the end of the document
    assert idx.match([42, 43, 44]) == (0, [])


def test_most_frequent_continuation_and_stopping_when_unsure():
    idx = SuffixIndex()
    for tail in ([7, 8, 9], [7, 8, 9], [7, 8, 1], [5, 5, 5]):
        idx.add([1, 2, 3] + tail)
    n, occ = idx.match([1, 2, 3])
    assert n == 3 and len(occ) == 4
    path, prob = idx.continuation(occ, limit=10, min_prob=0.1)
    assert path == [7, 8, 9] and abs(prob - 0.5) < 1e-9  # 3/4, then 2/3
    path, _ = idx.continuation(occ, limit=10, min_prob=0.6)
    assert path == [7, 8]  # 0.75 then 0.5 < 0.6: stop before the unsure token


def test_incremental_updates_index_only_new_ngrams():
    idx = SuffixIndex()
    doc = idx.add([1, 2, 3])
    before = idx.entries
    idx.extend(doc, [4])
    assert idx.tokens == 4 and idx.entries - before == 2  # the 3- and 4-gram ending at 4
    n, occ = idx.match([2, 3, 4, 9], exclude=None)
    assert n == 0


def test_eviction_by_document_keeps_the_budget_and_forgets_everything():
    idx = SuffixIndex(max_tokens=20)
    a = idx.add(list(range(100, 110)))
    b = idx.add(list(range(200, 210)))
    idx.touch(a)  # a is now the most recent: b goes first
    idx.add(list(range(300, 305)))
    assert b not in idx.docs and a in idx.docs and idx.tokens <= 20
    assert idx.match([203, 204, 205]) == (0, [])
    for d in list(idx.docs):
        idx.remove(d)
    assert idx.tokens == 0 and idx.entries == 0  # nothing left behind


def test_memory_is_bounded_per_ngram_and_by_tokens():
    idx = SuffixIndex(max_tokens=5000)
    for _ in range(50):
        idx.add([1, 2, 3, 4, 5] * 20)
    assert idx.tokens <= 5000
    assert max(len(o) for o in idx._grams.values()) <= KEEP
    assert idx.entries < 100  # a repeated pattern has few distinct n-grams


def test_draft_source_uses_the_job_and_the_session():
    session = SuffixIndex()
    session.add([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])  # an earlier job
    src = SuffixDraft(session, SuffixOptions(min_match=3, factor=1.0))
    assert src.propose([1, 2, 12, 13, 14], 16) == [15, 16, 17]  # match of 3 -> 3 tokens
    assert src.proposed_from["session"] == 1
    hist = [5, 6, 7, 8, 9, 1, 5, 6, 7, 8]
    src = SuffixDraft(session, SuffixOptions(min_match=3, factor=1.0))
    assert src.propose(hist, 16) == [9, 1, 5, 6]  # this job's own text, match of 4
    assert src.propose(hist, 2) == [9, 1]  # the cap
    assert src.propose([99, 98, 97], 16) == []  # nothing matches: no draft at all
    assert src.propose([1, 2, 12, 13, 14], 16) == [15, 16, 17]  # a new history: re-indexed


def test_short_matches_do_not_draft():
    session = SuffixIndex()
    session.add([1, 2, 3, 4, 5])
    src = SuffixDraft(session, SuffixOptions(min_match=3))
    assert src.propose([9, 9, 2, 3], 16) == []  # a match of 2 guesses too often


# --- through the engine -----------------------------------------------------------

PROMPT = "Hello world. The quick brown fox jumps over the lazy dog. Hello world. The quick"


def greedy(engine, model, **kw):
    r = Request(PROMPT, model=model, chat=False, max_tokens=kw.pop("max_tokens", 40), **kw)
    return engine.submit(r).result(timeout=120)


def test_greedy_suffix_is_exact_for_every_cap_and_learns_from_earlier_jobs(engine, tiny_dir):
    base = greedy(engine, tiny_dir)
    engine.forget_history()
    first = greedy(engine, tiny_dir, draft_kind="suffix", num_draft_tokens=16)
    assert first.token_ids == base.token_ids
    for k in (1, 2, 3, 5, 8, 16):
        r = greedy(engine, tiny_dir, draft_kind="suffix", num_draft_tokens=k)
        assert r.token_ids == base.token_ids, k
        # The same prompt again: the session index knows the whole answer.
        assert r.stats.draft_tokens_accepted > first.stats.draft_tokens_accepted, k
        assert max(i + 1 for i, n in enumerate(r.stats.proposed_by_position) if n) <= k
    assert r.stats.draft_tokens_accepted >= len(base.token_ids) // 2


def test_sampling_with_suffix_is_seeded_given_the_same_history(engine, tiny_dir):
    # Drafts depend on earlier jobs, and with sampling so do the random draws.
    engine.forget_history()
    a = greedy(engine, tiny_dir, draft_kind="suffix", temperature=0.8, seed=5)
    engine.forget_history()
    b = greedy(engine, tiny_dir, draft_kind="suffix", temperature=0.8, seed=5)
    assert a.token_ids == b.token_ids


def test_nothing_to_match_means_no_verify_pass(engine, scripted, tiny_tokenizer):
    vocab = sorted(tiny_tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    pool = [i for t, i in vocab if t.startswith("Ġ") and t[1:].isalpha() and len(t) > 2]
    outputs = pool[:12]  # no token repeats, so no suffix of the history recurs
    scripted("distinct", outputs=outputs)
    engine.forget_history()
    req = Request("Hello", model="distinct", draft_kind="suffix", chat=False, max_tokens=12)
    r = engine.submit(req).result(timeout=60)
    assert r.token_ids == outputs
    assert (r.stats.draft_rounds, r.stats.draft_tokens_proposed) == (0, 0)


def test_forget_history_and_status_report_the_index(engine, tiny_dir):
    greedy(engine, tiny_dir, max_tokens=8)
    notes = " ".join(engine.info().notes)
    assert "suffix index of" in notes and " 0 tokens in" not in notes
    engine.forget_history(tiny_dir)
    assert "suffix index of" in " ".join(engine.info().notes)
    assert " 0 tokens in 0 documents" in " ".join(engine.info().notes)


# --- acceptance on the default model (figures: benchmarks/bench_suffix.py) ---------

FIVE = "List five tips for staying healthy."
SIX = "List six tips for staying healthy."
OPEN = "Describe a rainy afternoon in a small town."


def decode_tps(eng, prompt, methods, rounds, tokens):
    """Median decode tok/s per (kind, k), interleaved; every text equal to normal's."""
    tps, ref = {m: [] for m in methods}, None
    for i in range(rounds):
        for kind, k in methods[i % 2 :] + methods[: i % 2]:
            req = Request(prompt, max_tokens=tokens, draft_kind=kind, num_draft_tokens=k,
                          reuse_cache=False, remember=False, temperature=0,
                          repetition_penalty=1)  # fmt: skip
            r = eng.submit(req).result(timeout=300)
            ref = ref or r.token_ids
            assert r.token_ids == ref, (kind, k)
            tps[kind, k].append(r)
    return tps


@pytest.mark.slow
def test_asking_again_with_a_small_change_beats_lookup_and_normal(default_engine):
    # Counted, not timed: forward passes of the main model for the same 96 greedy
    # tokens (identical in every method). Suffix drafting copies the earlier answer,
    # which the new prompt does not contain, so only it saves passes; the tok/s
    # this buys are measured by benchmarks/bench_suffix.py.
    eng = default_engine
    eng.forget_history()
    eng.submit(
        Request(FIVE, max_tokens=160, reuse_cache=False, temperature=0, repetition_penalty=1)
    ).result(timeout=300)
    methods = [("none", 3), ("lookup", 4), ("lookup", 16), ("suffix", 16)]
    runs = decode_tps(eng, SIX, methods, 1, 96)
    passes = {m: v[0].stats.decode_steps for m, v in runs.items()}
    gen = runs["none", 3][0].stats.generation_tokens
    assert gen <= passes["none", 3] <= gen + 1  # one pass a token (batched: one spare)
    best_lookup = min(passes["lookup", 4], passes["lookup", 16])
    assert passes["suffix", 16] * 2.5 <= passes["none", 3], passes
    assert passes["suffix", 16] * 2 <= best_lookup, passes


@pytest.mark.slow
def test_open_ended_pays_for_no_verify_pass_and_little_else(default_engine):
    from mlx_notebook.engine.decoding.suffix import LENGTHS, SuffixDraft

    eng = default_engine
    eng.forget_history()
    runs = decode_tps(eng, OPEN, [("none", 3), ("suffix", 16)], 1, 48)
    for r in runs["suffix", 16]:
        assert (r.stats.draft_rounds, r.stats.draft_tokens_proposed) == (0, 0)
        assert r.stats.decode_steps <= runs["none", 3][0].stats.decode_steps  # no extra pass
    # What suffix adds per token when nothing matches: each new token is indexed once
    # (a few n-grams), never the whole history again.
    r = runs["suffix", 16][0]
    src, hist = SuffixDraft(None), list(r.token_ids)
    for n in range(1, len(hist) + 1):
        src.propose(hist[:n], 16)
        assert src.local.tokens == n  # O(new tokens), not O(history)
    occurrences = sum(len(o) for o in src.local._grams.values())
    assert occurrences <= len(LENGTHS) * len(hist)
