"""Normal decoding: fidelity with mlx-lm, seeds, EOS."""

from mlx_lm import load, stream_generate

from mlx_notebook.engine import Request


def reference_ids(engine, model_dir, prompt, max_tokens, **kw):
    def run():
        model, tok = load(model_dir)
        return [r.token for r in stream_generate(model, tok, prompt, max_tokens=max_tokens, **kw)]

    return engine.call(run).result()


def test_greedy_is_token_identical_to_mlx_lm(engine, tiny_dir):
    for prompt in ["Hello world", "The quick brown fox " * 20]:
        ours = engine.submit(Request(prompt, model=tiny_dir, chat=False, max_tokens=40)).result(
            timeout=60
        )
        assert ours.token_ids == reference_ids(engine, tiny_dir, prompt, 40)


def test_chat_template_applied(engine, tiny_dir, tiny_tokenizer):
    ours = engine.submit(Request("Hi", model=tiny_dir, max_tokens=20)).result(timeout=60)
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert ours.stats.prompt_tokens == len(tiny_tokenizer.encode(text))
    ref = reference_ids(engine, tiny_dir, text, 20)
    assert ours.token_ids[: len(ref)] == ref


def test_same_seed_same_text(engine, tiny_dir):
    def run(seed):
        r = Request("Hello", model=tiny_dir, chat=False, max_tokens=30, temperature=1.0, seed=seed)
        return engine.submit(r).result(timeout=60).token_ids

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_sampling_options_run(engine, tiny_dir):
    r = Request(
        "Hello",
        model=tiny_dir,
        chat=False,
        max_tokens=10,
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        min_p=0.05,
        repetition_penalty=1.3,
        seed=1,
    )
    assert engine.submit(r).result(timeout=60).finish_reason == "length"


def test_eos_ends_with_stop(engine, scripted, tiny_tokenizer):
    out = tiny_tokenizer.encode(" the sea", add_special_tokens=False) + [
        tiny_tokenizer.eos_token_id,
        5,
        6,
    ]
    scripted("eos", outputs=out)
    r = engine.submit(Request("Hello", model="eos", chat=False, max_tokens=50)).result(timeout=30)
    assert r.finish_reason == "stop" and r.matched_stop is None
    assert r.text == "the sea"  # mlx-lm trims the first leading space
