"""Prompt-cache reuse: prefix reuse, consistency after cancels, fallback."""

import pytest
from mlx_lm.models.cache import RotatingKVCache

from mlx_notebook.engine import Engine, Request, Token
from mlx_notebook.engine.sequence import common_prefix
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


def test_untrimmable_cache_falls_back_without_error(engine, tiny_tokenizer):
    vocab = len(tiny_tokenizer.get_vocab())
    engine.call(
        lambda: engine.registry.register(
            "rot", RotatingScripted(vocab, lambda p, t: 40), tiny_tokenizer
        )
    ).result()
    for _ in range(2):
        r = engine.submit(make("rot", P1, max_tokens=5)).result(timeout=30)
        assert r.finish_reason == "length" and r.stats.cached_tokens == 0
