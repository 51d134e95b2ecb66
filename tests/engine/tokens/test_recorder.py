"""Per-token records of a generation: exact, and the same on every job path."""

import math

import pytest

from mlx_notebook.engine import Request
from tests.cpu.test_dots import logprob_tolerance
from tests.engine.local.test_scoring import close, reference

PROMPT = "Once upon a time"


def gen(engine, model, **kw):
    kw.setdefault("temperature", 0)
    req = Request(PROMPT, model=model, chat=False, max_tokens=kw.pop("max_tokens", 32), **kw)
    return engine.submit(req).result(timeout=120)


def test_records_equal_mlx_lm_logprobs_and_the_scored_text(engine, tiny_dir):
    from mlx_lm import load

    model, tok = load(tiny_dir)
    r = gen(engine, tiny_dir, logprobs=5, batch=False)
    prompt = tok.encode(PROMPT)
    toks, want = reference(model, prompt, 32)
    assert r.token_ids == toks
    t = r.tokens
    assert [x.token_id for x in t] == toks and all(x.source == "model" for x in t)
    assert all(close(x.logprob, w) for x, w in zip(t, want))
    assert all(x.raw_logprob == x.logprob for x in t)  # no processors, no schema
    scored = engine.score(prompt + toks, model=tiny_dir)[len(prompt) - 1 :]
    assert all(close(x.logprob, s.logprob) for x, s in zip(t, scored))
    for x in t:
        probs = [math.exp(lp) for _, _, lp in x.top]
        assert len(x.top) == 5 and probs == sorted(probs, reverse=True) and sum(probs) <= 1
    assert r.perplexity == pytest.approx(math.exp(-sum(x.logprob for x in t) / len(t)))


def test_records_are_the_same_alone_batched_and_speculative(engine, tiny_dir, draft_dir):
    base = gen(engine, tiny_dir, logprobs=3, batch=False).tokens
    runs = {
        "batched": dict(),
        "lookup": dict(draft_kind="lookup", lookup_ngram=1, num_draft_tokens=4),
        "suffix": dict(draft_kind="suffix", num_draft_tokens=4),
        "draft-model": dict(draft=draft_dir, draft_kind="model", num_draft_tokens=3),
    }
    for name, kw in runs.items():
        t = gen(engine, tiny_dir, logprobs=3, **kw).tokens
        assert [x.token_id for x in t] == [x.token_id for x in base], name
        assert all(close(a.logprob, b.logprob) for a, b in zip(t, base)), name
        assert [a.rank for a in t] == [b.rank for b in base], name
        sources = {x.source for x in t}
        if name in ("lookup", "suffix", "draft-model"):
            want = {"lookup": "prompt-lookup"}.get(name, name)
            assert sources <= {"model", want}
        else:
            assert sources == {"model"}


def test_processors_and_a_schema_change_logprob_but_not_raw(engine, tiny_dir):
    from tests.engine.tokens.test_constraint import PERSON

    plain = gen(engine, tiny_dir, logprobs=0, batch=False).tokens
    pen = gen(engine, tiny_dir, logprobs=0, batch=False, repetition_penalty=1.5).tokens
    assert pen[0].raw_logprob == pytest.approx(plain[0].raw_logprob, abs=1e-5)
    r = gen(engine, tiny_dir, logprobs=2, schema=PERSON, max_tokens=150, batch=False)
    t = r.tokens
    forced = [x for x in t if x.source == "grammar"]
    assert forced and all(x.logprob == 0.0 and x.rank == 1 for x in forced)
    sampled = [x for x in t if x.source == "model"]
    assert all(x.raw_logprob is not None and x.raw_logprob <= x.logprob + 1e-6 for x in sampled)
    batched = gen(engine, tiny_dir, logprobs=2, schema=PERSON, max_tokens=150).tokens
    assert [(x.token_id, x.source) for x in batched] == [(x.token_id, x.source) for x in t]
    assert all(close(a.logprob, b.logprob) for a, b in zip(batched, t))


def test_without_logprobs_nothing_is_recorded(engine, tiny_dir):
    r = gen(engine, tiny_dir, max_tokens=4)
    with pytest.raises(ValueError, match="logprobs=K"):
        _ = r.tokens
    with pytest.raises(ValueError, match="logprobs: must be in 0..20"):
        Request("x", logprobs=21).validate()


def test_map_rows_and_the_magic_carry_records(engine, tiny_dir, ipshell):
    import mlx_notebook
    from mlx_notebook.notebook.magics import generate as magics

    res = mlx_notebook.map(
        ["Once upon a time", "The sea"], model=tiny_dir, chat=False, max_tokens=8,
        temperature=0, logprobs=2, backend=engine,
    )  # fmt: skip
    t = res.tokens(1)
    assert len(t) == 8 and all(len(x.top) == 2 for x in t)
    alone = gen(engine, tiny_dir, logprobs=2, max_tokens=8, batch=False).tokens
    assert [x.token_id for x in res.tokens(0)] == [x.token_id for x in alone]
    ipshell.run_line_magic("load_ext", "mlx_notebook")
    m = magics.MLXNotebook(shell=ipshell, engine=engine)
    ipshell.register_magics(m)
    ipshell.run_cell_magic("generate", f"-m {tiny_dir} --raw -t 0 -n 6 --inspect -o h --wait", "Hi")
    h = ipshell.user_ns["h"]
    assert len(h.tokens) == 6 and len(h.tokens[0].top) == 5  # --inspect records 5
    assert h.perplexity >= 1
    ipshell.run_cell_magic("generate", f"-m {tiny_dir} --raw -n 3 --logprobs 0 -o g --wait", "Hi")
    assert ipshell.user_ns["g"].tokens[0].top == ()


@pytest.mark.slow
def test_default_model_records_equal_mlx_lm_on_every_path(default_engine):
    from mlx_notebook.engine.decoding.prompt import encode_prompt
    from mlx_notebook.models.loader import load_spec

    _, model, tok, _ = load_spec("default")  # the stock mlx-lm model, on this thread
    prompt = "Describe a rainy afternoon in a small town."
    ids = encode_prompt(Request(prompt), tok)
    toks, want = reference(model, ids, 64)
    greedy = dict(max_tokens=64, temperature=0, repetition_penalty=1, logprobs=3)
    paths = [
        (dict(batch=False), None), (dict(), None), (dict(draft_kind="lookup"), "prompt-lookup"),
        (dict(draft_kind="suffix"), "suffix"),  # the runs before it taught it this text
        (dict(draft="default"), "draft-model"),  # the model as its own draft: all accepted
    ]  # fmt: skip
    for kw, source in paths:
        r = default_engine.submit(Request(prompt, **greedy, **kw)).result()
        assert r.token_ids == toks, kw
        assert max(abs(x.logprob - w) for x, w in zip(r.tokens, want)) < logprob_tolerance(), kw
        sources = {x.source for x in r.tokens}
        assert sources <= {"model", source}, (kw, sources)
        if source in ("suffix", "draft-model"):
            assert source in sources, kw  # accepted drafts carry their source
