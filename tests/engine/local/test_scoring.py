"""Scoring a given text: exact per-token log-probabilities in one prefill."""

import math

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

import mlx_notebook
from mlx_notebook.engine.decoding.prompt import encode_prompt
from mlx_notebook.engine.request import Request
from tests.cpu.test_dots import logprob_tolerance


def close(a, b):
    """Equal within float32 rounding: 1e-4, or a few ulps of a large log-probability."""
    return abs(a - b) <= max(1e-4, 4e-6 * abs(b))


def reference(model, prompt_ids, n):
    """mlx-lm's own greedy generation: (tokens, logprob of each) from generate_step."""
    toks, lps = [], []
    steps = generate_step(
        mx.array(prompt_ids), model, max_tokens=n, sampler=lambda x: mx.argmax(x, axis=-1)
    )
    for tok, logprobs in steps:
        toks.append(int(tok))
        lps.append(logprobs[int(tok)].item())
    return toks, lps


def test_scores_equal_mlx_lm_generate_step_logprobs(engine, tiny_dir):
    from mlx_lm import load

    model, tok = load(tiny_dir)  # stock mlx-lm, on this thread
    prompt = tok.encode("Once upon a time")
    gen, want = reference(model, prompt, 32)
    table = engine.score(prompt + gen, model=tiny_dir)
    got = table[len(prompt) - 1 :]  # the generated tokens' records
    assert [r.token_id for r in got] == gen
    assert max(abs(r.logprob - w) for r, w in zip(got, want)) < 1e-4
    for r in got:  # greedy: each was the most likely; alternatives sorted
        assert r.rank == 1 and r.top[0][1] == r.token_id
        probs = [math.exp(lp) for _, _, lp in r.top]
        assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6
        assert r.entropy >= 0


def test_a_reply_is_scored_after_its_prompt_or_its_conversation(engine, tiny_dir, tiny_tokenizer):
    reply = "Paris is the capital."
    table = engine.score(reply, prompt="Capital of France?", model=tiny_dir)
    assert "".join(r.text for r in table) == reply
    msgs = [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": reply},
    ]
    conv = engine.score(msgs, model=tiny_dir)
    # The conversation also scores the end of the turn the template adds.
    assert len(conv) > len(table)
    assert [r.token_id for r in conv[: len(table)]] == [r.token_id for r in table]
    assert all(close(a.logprob, b.logprob) for a, b in zip(conv, table))
    ctx = encode_prompt(Request("Capital of France?", chat=True), tiny_tokenizer)
    whole = engine.score(ctx + [r.token_id for r in table], model=tiny_dir)
    assert all(close(a.logprob, b.logprob) for a, b in zip(whole[len(ctx) - 1 :], table))


def test_long_texts_are_scored_in_chunks_with_the_same_values(engine, tiny_dir, monkeypatch):
    from mlx_notebook.engine.local import scoring

    ids = list(range(5, 305))
    whole = engine.score(ids, model=tiny_dir, top_k=0)
    monkeypatch.setattr(scoring, "CHUNK", 64)
    chunked = engine.score(ids, model=tiny_dir, top_k=0)
    assert len(whole) == len(chunked) == 299 and chunked[0].top == ()
    # The tiny model's logits are large (weights x3): matmuls blocked differently
    # round apart by about 1e-4 there. Exactness is checked against mlx-lm above.
    assert all(abs(a.logprob - b.logprob) < 1e-3 for a, b in zip(whole, chunked))


def test_the_table_summarizes_and_becomes_a_frame(engine, tiny_dir):
    table = engine.score("the quick brown fox jumps over the lazy dog", model=tiny_dir, top_k=3)
    mean = sum(r.logprob for r in table) / len(table)
    assert table.mean_logprob == pytest.approx(mean)
    assert table.perplexity == pytest.approx(math.exp(-mean))
    df = table.to_frame()
    columns = ["token", "id", "logprob", "prob", "rank", "entropy", "source", "special", "top"]
    assert list(df.columns) == columns
    assert len(df) == len(table) and (df["source"] == "text").all()
    assert all(len(t) == 3 for t in df["top"])


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        ([[{"role": "user", "content": "hi"}]], {}, "last message must be the assistant"),
        (["hello there"], {"top_k": 21}, "top_k must be in 0..20"),
        (["a"], {}, "at least two tokens"),
    ],
)
def test_bad_input_is_one_line(engine, tiny_dir, args, kw, message):
    with pytest.raises(ValueError, match=message):
        engine.score(*args, model=tiny_dir, **kw)


def test_a_server_model_cannot_be_scored():
    with pytest.raises(ValueError, match="needs a local model"):
        mlx_notebook.score("hello", model="http://127.0.0.1:9/v1")


@pytest.mark.slow
def test_default_model_scores_equal_mlx_lm_over_64_tokens(default_engine):
    from mlx_notebook.models.loader import load_spec

    _, model, tok, _ = load_spec("default")  # the stock mlx-lm model, on this thread
    prompt = encode_prompt(Request("Describe a rainy afternoon in a small town."), tok)
    gen, want = reference(model, prompt, 64)
    got = default_engine.score(prompt + gen)[len(prompt) - 1 :]
    assert [r.token_id for r in got] == gen
    assert max(abs(r.logprob - w) for r, w in zip(got, want)) < logprob_tolerance()
