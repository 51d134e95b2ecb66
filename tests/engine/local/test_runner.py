"""Stop strings through the engine, on a scripted model."""

import pytest

from mlx_notebook.engine import Request, Token

SENTENCE = " The quick brown fox jumps over the lazy dog."


@pytest.fixture
def sentence(scripted, tiny_tokenizer):
    ids = tiny_tokenizer.encode(SENTENCE, add_special_tokens=False)
    scripted("sentence", outputs=ids)
    detok = tiny_tokenizer.detokenizer  # mlx-lm trims the first token's leading space
    texts = []
    for t in ids:
        detok.add_token(t)
        texts.append(detok.last_segment)
    detok.finalize()
    texts[-1] += detok.last_segment
    return ids, texts


def run(engine, stop, max_tokens=60):
    job = engine.submit(
        Request("Hello", model="sentence", chat=False, max_tokens=max_tokens, stop=stop)
    )
    streamed = [e.text for e in job.events(timeout=30) if isinstance(e, Token)]
    return job.result(), streamed


def test_stop_string_spanning_three_tokens(engine, sentence):
    ids, texts = sentence
    stop = "".join(texts[3:6])
    r, streamed = run(engine, [stop])
    assert r.finish_reason == "stop" and r.matched_stop == stop
    assert r.text == "".join(texts[:3])
    assert "".join(streamed) == r.text
    assert len(r.token_ids) == 6  # stopped at the token completing the match


def test_stop_string_at_the_very_start(engine, sentence):
    _, texts = sentence
    r, streamed = run(engine, [texts[0] + texts[1]])
    assert r.text == "" and "".join(streamed) == "" and r.finish_reason == "stop"


def test_overlapping_candidates(engine, sentence):
    r, streamed = run(engine, ["quick brown cat", "brown fox", "lazy"])
    assert r.matched_stop == "brown fox"
    assert r.text == "The quick "
    assert "".join(streamed) == r.text


def test_no_partial_stop_leaks_into_stream(engine, sentence):
    r, streamed = run(engine, ["fox jumps"])
    assert r.text == "The quick brown "
    joined = ""
    for piece in streamed:
        joined += piece
        assert "fox" not in joined


def test_unmatched_candidate_is_released_at_the_end(engine, sentence):
    ids, texts = sentence
    r, streamed = run(engine, ["dog.!"], max_tokens=len(ids))
    assert r.finish_reason == "length" and r.text == "".join(texts) == SENTENCE.lstrip()
    # "dog." was withheld as a possible start of the stop string; the last token,
    # which ends the generation, releases it.
    assert streamed[-1].endswith("dog.") and r.text == "".join(streamed)


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "solo"])
def test_text_held_back_is_released_by_the_end_of_text(engine, scripted, tiny_tokenizer, batch):
    # A stray byte (half of "é") and a possible stop-string start, then the end of
    # text: the end-of-text token's event carries both, as the result's text has them.
    vocab = tiny_tokenizer.get_vocab()
    half = vocab["\u00c3"]  # byte 0xC3 in a byte-level vocabulary
    words = tiny_tokenizer.encode(" fox", add_special_tokens=False)
    eos = tiny_tokenizer.eos_token_id
    for outputs, stop, tail in (([*words, half, eos], [], "\ufffd"), ([*words, eos], ["x!"], "")):
        scripted("tail", outputs=outputs)
        req = Request("Hello", model="tail", chat=False, max_tokens=9, stop=stop, batch=batch)
        job = engine.submit(req)
        events = [e for e in job.events(timeout=30) if isinstance(e, Token)]
        r = job.result()
        assert r.finish_reason == "stop" and r.text == "fox" + tail
        assert r.stats.batch_rows == (1 if batch else 0)  # the batch's path, or the solo one
        assert [e.token_id for e in events] == outputs
        assert "".join(e.text for e in events) == r.text and events[-1].text


def test_a_solo_prefill_runs_long_chunks_only_while_no_row_decodes(endless_dir, monkeypatch):
    # A solo job (batch=False, speculative, another model) prefills between the batch's
    # steps: while rows decode there, its chunks must keep the time target, not run to
    # the hold between cancel points inside them (`prefill_steps`' ``alone``).
    from mlx_notebook.engine import Engine, Request, Token
    from mlx_notebook.engine.local import runner

    seen = []
    real = runner.prefill

    def spy(*args, alone=lambda: True, **kw):
        seen.append(alone())
        return real(*args, alone=alone, **kw)

    monkeypatch.setattr(runner, "prefill", spy)
    eng = Engine()
    try:
        one = dict(model=endless_dir, chat=False, batch=False, max_tokens=2)
        eng.submit(Request("Nothing decodes beside me.", **one)).result(timeout=60)
        rows = eng.submit(Request("Go", model=endless_dir, chat=False, max_tokens=5000))
        next(e for e in rows.events(detach=True) if isinstance(e, Token))  # a row decodes
        eng.submit(Request("A row decodes beside me.", **one)).result(timeout=60)
        assert not rows.done
        rows.cancel()
    finally:
        eng.close()
    assert seen == [True, False]
