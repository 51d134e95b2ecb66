"""Prompt-cache reuse: prefix reuse, consistency after cancels, fallback."""

import pytest
from mlx_lm.models.cache import RotatingKVCache

from mlx_notebook.engine import Engine, Request, Token
from mlx_notebook.engine.cache.sequence import common_prefix
from mlx_notebook.testing import ScriptedModel, script_rule

P1 = "Hello world. The quick brown fox jumps over the lazy dog."
P2 = "Hello world. The quick brown fox sleeps under the lazy dog."


def make(model, prompt, **kw):
    kw.setdefault("max_tokens", 25)
    return Request(prompt, model=model, chat=False, **kw)


@pytest.fixture(scope="module")
def fresh_results(tiny_dir):
    eng = Engine()
    try:
        out = {}
        for mode in (None, "lookup", tiny_dir):
            r = eng.submit(make(tiny_dir, P2, draft=mode, num_draft_tokens=3, lookup_ngram=1))
            out[mode] = r.result(timeout=60).token_ids
        return out
    finally:
        eng.close()


@pytest.mark.parametrize("mode", [None, "lookup", "self-draft"])
def test_after_cancel_at_many_points_next_job_equals_fresh(engine, tiny_dir, fresh_results, mode):
    draft = tiny_dir if mode == "self-draft" else mode
    for point in [-1, 0, 1, 2, 5, 9, 17]:
        job = engine.submit(
            make(tiny_dir, P1, max_tokens=200, draft=draft, lookup_ngram=1, prefill_target_s=0.001)
        )
        if point < 0:
            job.add_listener(
                lambda ev, j=job: type(ev).__name__ == "PrefillProgress" and j.cancel()
            )
        else:
            job.add_listener(
                lambda ev, j=job, p=point: isinstance(ev, Token) and ev.index == p and j.cancel()
            )
        assert job.result(timeout=60).finish_reason == "cancelled"
        nxt = engine.submit(make(tiny_dir, P2, draft=draft, num_draft_tokens=3, lookup_ngram=1))
        r = nxt.result(timeout=60)
        assert r.token_ids == fresh_results[draft], point
        assert r.stats.cached_tokens > 0 or point < 0


def test_follow_up_prefills_only_new_tokens(engine, scripted, tiny_tokenizer):
    reply = tiny_tokenizer.encode("the sea.", add_special_tokens=False)
    eos = tiny_tokenizer.eos_token_id
    first = [{"role": "user", "content": "Hello"}]
    n_first = len(tiny_tokenizer.apply_chat_template(first, add_generation_prompt=True))
    scripted("chat", rule=script_rule(n_first, reply + [eos], eos))
    r1 = engine.submit(Request(first, model="chat", max_tokens=20)).result(timeout=30)
    assert r1.text == "the sea." and r1.finish_reason == "stop"
    follow = first + [
        {"role": "assistant", "content": r1.text},
        {"role": "user", "content": "More please"},
    ]
    r2 = engine.submit(Request(follow, model="chat", max_tokens=3)).result(timeout=30)

    def ids(msgs):
        text = tiny_tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return tiny_tokenizer.encode(text)

    held = ids(first) + r1.token_ids  # prompt + reply (EOS included: it was fed)
    assert r2.stats.cached_tokens == common_prefix(held, ids(follow))
    assert r2.stats.cached_tokens == len(held)  # everything before the new turn
    assert r2.stats.prompt_tokens - r2.stats.cached_tokens == len(ids(follow)) - len(held)


def test_identical_prompt_reuses_all_but_last_token(engine, tiny_dir):
    a = engine.submit(make(tiny_dir, P1)).result(timeout=30)
    b = engine.submit(make(tiny_dir, P1)).result(timeout=30)
    assert b.stats.cached_tokens == b.stats.prompt_tokens - 1
    assert a.token_ids == b.token_ids


def test_reuse_cache_false_prefills_from_scratch(engine, tiny_dir):
    a = engine.submit(make(tiny_dir, P1)).result(timeout=30)
    b = engine.submit(make(tiny_dir, P1, reuse_cache=False)).result(timeout=30)
    assert b.stats.cached_tokens == 0 and a.token_ids == b.token_ids


class RotatingScripted(ScriptedModel):
    def make_cache(self):
        return [RotatingKVCache(max_size=8, keep=0)]


def test_untrimmable_cache_is_reused_only_from_the_end_of_a_prompt(engine, tiny_tokenizer):
    vocab = len(tiny_tokenizer.get_vocab())
    engine.call(
        lambda: engine.registry.register(
            "rot", RotatingScripted(vocab, lambda p, t: 40), tiny_tokenizer
        )
    ).result()
    runs = [engine.submit(make("rot", P1, max_tokens=5)).result(timeout=30) for _ in range(2)]
    assert [r.finish_reason for r in runs] == ["length", "length"]
    assert runs[0].token_ids == runs[1].token_ids
    # The window is past its 8 tokens, so the first job's final state (prompt and
    # output) cannot come back to the prompt: the state kept at its prompt's end can.
    prompt = runs[0].stats.prompt_tokens
    assert runs[0].stats.cached_tokens == 0 and runs[1].stats.cached_tokens == prompt - 1
    entries = engine.call(lambda: engine.scheduler.states["rot"].cache.entries).result()
    assert all(e[: prompt - 1] == entries[0][: prompt - 1] for e in entries)
    assert sorted(len(e) for e in entries) == [prompt - 1, prompt + 5]  # each kept once


# -- several prefixes per model (issue 14) -----------------------------------------------


def lru_fixture(engine, tiny_dir):
    from mlx_notebook.engine.cache.prompt_cache import PromptCache

    lm = engine.call(lambda: engine.registry.get(tiny_dir)).result()
    return lm.model, PromptCache(max_bytes=1 << 40)


def run_on(engine, fn):
    return engine.run_on_worker(fn, timeout=60)


def test_fetch_picks_the_longest_prefix_and_never_aliases(engine, tiny_dir):
    import mlx.core as mx

    model, pc = lru_fixture(engine, tiny_dir)

    def scenario():
        from mlx_notebook.engine.cache.sequence import CachedSequence

        a = CachedSequence(model)
        a.forward(list(range(5, 25)))  # conversation A: 20 tokens
        b = CachedSequence(model)
        b.forward(list(range(5, 12)) + [99, 98, 97])  # B shares 7 with A
        mx.eval([c.state for c in a.cache + b.cache])
        pc.store(a)
        pc.store(b)
        # Continuing A: A's entry is taken (it is a prefix of the new prompt).
        seq, n = pc.fetch(model, list(range(5, 30)))
        taken = (seq is a, n, len(pc))
        pc.store(seq)
        # A branch of A (shares 10): a copy is trimmed, A stays whole.
        br, m = pc.fetch(model, list(range(5, 15)) + [1, 2, 3])
        return taken, (br is not a, m, len(pc), [len(t) for t in pc.entries], pc.copies)

    taken, branch = run_on(engine, scenario)
    assert taken == (True, 20, 1)  # only B left while A is out
    assert branch[0] and branch[1] == 10 and branch[2] == 2 and 20 in branch[3]
    assert branch[4] == 1


def test_prefix_entries_are_dropped_and_the_budget_evicts_the_oldest(engine, tiny_dir):
    import mlx.core as mx

    from mlx_notebook.engine.cache.prompt_cache import PromptCache

    model, _ = lru_fixture(engine, tiny_dir)

    def scenario():
        from mlx_notebook.engine.cache.sequence import CachedSequence

        def seq(tokens):
            s = CachedSequence(model)
            s.forward(tokens)
            mx.eval([c.state for c in s.cache])
            return s

        one = seq(list(range(10)))
        pc = PromptCache(max_bytes=int(2.5 * one.nbytes))
        pc.store(one)
        longer = seq(list(range(10)) + [50, 51])
        pc.store(longer)  # `one` is a prefix of it: dropped
        after_prefix = len(pc)
        pc.store(seq([200, 201, 202]))
        pc.store(seq([300, 301, 302]))  # over budget: the oldest (longer) goes
        return after_prefix, pc.entries, pc.nbytes <= pc.max_bytes

    after_prefix, entries, within = run_on(engine, scenario)
    assert after_prefix == 1
    assert entries == [[200, 201, 202], [300, 301, 302]] and within


def test_status_reports_the_prompt_caches(engine, tiny_dir):
    engine.submit(Request("Hello", model=tiny_dir, chat=False, max_tokens=3)).result(timeout=30)
    notes = "\n".join(engine.info().notes)
    assert f"prompt cache of {tiny_dir}: 1 entries" in notes and "budget" in notes
