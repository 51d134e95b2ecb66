"""Branching a generation at a token: exact, on the prompt cache, on every job path."""

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.branch import BranchPoint, branch_request
from tests.engine.local.test_scoring import close, reference

PROMPT = "Once upon a time"
N = 24


def parent(engine, model, **kw):
    req = Request(PROMPT, model=model, chat=False, max_tokens=N, temperature=0, **kw)
    return req, engine.submit(req).result(timeout=120)


@pytest.fixture(scope="module")
def ref(tiny_dir):
    from mlx_lm import load

    return load(tiny_dir)  # stock mlx-lm, on this thread: the fresh runs


def test_a_branch_starts_with_the_chosen_token_on_the_cache_and_equals_a_fresh_run(
    engine, tiny_dir, ref
):
    model, tok = ref
    req, res = parent(engine, tiny_dir, logprobs=5)
    i = 7
    alt = res.tokens[i].top[1]  # the runner-up there: (text, id, logprob)
    b = engine.submit(branch_request(req, res.token_ids, i, alt[1])).result(timeout=120)
    assert b.token_ids[0] == alt[1] != res.token_ids[i]
    prompt = tok.encode(PROMPT)
    # The parent's cache served the prompt and the i tokens before the branch point:
    # only the last of them is fed again, with the chosen token after it.
    assert b.stats.prompt_tokens == len(prompt) + i
    assert b.stats.cached_tokens == b.stats.prompt_tokens - 1
    assert len(b.token_ids) == N - i  # the parent's budget from there
    want, _ = reference(model, prompt + res.token_ids[:i] + [alt[1]], N - i - 1)
    assert b.token_ids[1:] == want  # greedy: exactly a fresh run of that prefix
    # The chosen token keeps the model's own probability there (the parent's view).
    first = b.tokens[0]
    assert first.source == "chosen" and first.rank == 2 and close(first.logprob, alt[2])
    assert [r.source for r in b.tokens[1:]] == ["model"] * (N - i - 1)


def test_the_same_token_again_reproduces_the_parent(engine, tiny_dir):
    req, res = parent(engine, tiny_dir)
    for i in (0, 5, N - 1):
        tok = res.token_ids[i]
        b = engine.submit(branch_request(req, res.token_ids, i, tok)).result(timeout=120)
        assert b.token_ids == res.token_ids[i:]


def test_no_token_redraws_the_position_without_the_parents(engine, tiny_dir):
    req, res = parent(engine, tiny_dir, logprobs=3)
    i = 4
    b = engine.submit(branch_request(req, res.token_ids, i, logprobs=3)).result(timeout=120)
    # Greedy without the parent's token is the runner-up; recorded as drawn then.
    assert b.token_ids[0] == res.tokens[i].top[1][1]
    assert b.tokens[0].source == "model" and b.tokens[0].rank == 1


def test_batched_and_speculative_branches_equal_the_one_alone(engine, tiny_dir):
    req, res = parent(engine, tiny_dir, logprobs=3)
    picks = [(3, res.tokens[3].top[1][1]), (9, res.tokens[9].top[2][1])]
    alone = [
        engine.submit(branch_request(req, res.token_ids, i, t, batch=False)).result(timeout=120)
        for i, t in picks
    ]
    jobs = engine.submit_many(
        [branch_request(req, res.token_ids, i, t, prefill_target_s=30) for i, t in picks]
    )
    together = [j.result(timeout=120) for j in jobs]
    assert max(r.stats.batch_rows for r in together) == 2
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    for kind in ("lookup", "suffix"):
        spec = [
            engine.submit(branch_request(req, res.token_ids, i, t, draft_kind=kind)).result(
                timeout=120
            )
            for i, t in picks
        ]
        assert [r.token_ids for r in spec] == [r.token_ids for r in alone], kind


def test_a_token_given_as_text_and_bad_branches(engine, tiny_dir, tiny_tokenizer):
    req, res = parent(engine, tiny_dir)
    text = tiny_tokenizer.decode([res.token_ids[2]])
    one = tiny_tokenizer.encode(text, add_special_tokens=False)
    if len(one) == 1:  # the tiny BPE may split a decoded piece differently
        b = engine.submit(branch_request(req, res.token_ids, 2, text)).result(timeout=120)
        assert b.token_ids == res.token_ids[2:]
    long = engine.submit(branch_request(req, res.token_ids, 2, "a whole sentence here"))
    fin = long.result(timeout=120, raise_on_error=False)
    assert fin.finish_reason == "error" and "tokens here" in fin.error
    with pytest.raises(IndexError, match="0..24"):
        branch_request(req, res.token_ids, 25)
    with pytest.raises(ValueError, match="schema"):
        engine.submit(branch_request(Request(PROMPT, schema=int), [1, 2], 1, 5))
    with pytest.raises(ValueError, match="BranchPoint"):
        engine.submit(Request(PROMPT, branch_from=(1, 2)))
    with pytest.raises(ValueError, match="token ids"):
        BranchPoint((1, -2)).check()
