"""Speculative decoding: exactness, acceptance, stops inside drafts, progress."""

import pytest

from mlx_notebook.engine import Engine, PrefillProgress, Request, Token
from mlx_notebook.testing import build_tiny_model, script_rule

PROMPT = "Hello world. The quick brown fox jumps over the lazy dog. Hello world. The quick"


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    # Same tokenizer, different weights: a draft that often disagrees.
    return str(build_tiny_model(tmp_path_factory.mktemp("draft"), seed=1, num_hidden_layers=1))


def greedy(engine, model, **kw):
    r = Request(PROMPT, model=model, chat=False, max_tokens=kw.pop("max_tokens", 40), **kw)
    return engine.submit(r).result(timeout=120)


def test_greedy_speculative_is_exact_for_every_k(engine, tiny_dir, draft_dir):
    base = greedy(engine, tiny_dir).token_ids
    for k in range(1, 9):
        for draft in ("lookup", draft_dir, tiny_dir):
            r = greedy(engine, tiny_dir, draft=draft, num_draft_tokens=k, lookup_ngram=2)
            assert r.token_ids == base, (k, draft)
            assert r.stats.draft_tokens_proposed >= r.stats.draft_tokens_accepted
    same = greedy(engine, tiny_dir, draft=tiny_dir, num_draft_tokens=4)
    assert same.stats.acceptance_rate == 1.0
    assert sum(same.from_draft) == same.stats.draft_tokens_accepted


def words(tok):
    # Distinct single-token words, so decoded text is plain ASCII.
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    return [i for t, i in vocab if t.startswith("Ġ") and t[1:].isalpha() and len(t) > 2]


def register_pair(scripted, tiny_tokenizer, wrong_at=(), n=24):
    pool = words(tiny_tokenizer)
    assert len(pool) > 12
    outputs, alt = [pool[i % 12] for i in range(n)], pool[12]
    ids = scripted("main", outputs=outputs)
    main_rule = script_rule(len(ids), outputs, alt)

    def draft_rule(pos, tok):
        return alt if pos - (len(ids) - 1) in wrong_at else main_rule(pos, tok)

    scripted("draft", rule=draft_rule)
    return outputs


def test_scripted_draft_disagreeing_at_known_positions(engine, scripted, tiny_tokenizer):
    outputs = register_pair(scripted, tiny_tokenizer, wrong_at={5, 12})
    req = Request(
        "Hello", model="main", draft="draft", num_draft_tokens=4, chat=False, max_tokens=24
    )
    r = engine.submit(req).result(timeout=30)
    assert r.token_ids == outputs
    # Token 0 comes from the main model alone (the draft prefills after it). Then rounds
    # of k=4: drafts for 1-4 kept + main 5 | 6-9 kept + main 10 | 11-14 wrong at 12: one
    # kept + main 12 | 13-16 kept + main 17 | 18-21 kept + main 22 | no drafts: main 23.
    assert (r.stats.draft_tokens_proposed, r.stats.draft_tokens_accepted) == (20, 17)
    assert r.stats.acceptance_rate == pytest.approx(17 / 20)
    assert sum(r.from_draft) == 17
    assert r.stats.draft_rounds == 5
    assert r.stats.proposed_by_position == [5, 5, 5, 5]
    assert r.stats.accepted_by_position == [5, 4, 4, 4]
    assert r.stats.mean_accepted == pytest.approx(17 / 5)
    assert r.from_draft[:6] == [False] + [True] * 4 + [False]


def test_draft_prefill_progress_reported_for_both_models(engine, tiny_dir, draft_dir):
    job = engine.submit(
        Request(PROMPT * 4, model=tiny_dir, draft=draft_dir, chat=False, max_tokens=3)
    )
    evs = list(job.events(timeout=60))
    models = {e.model for e in evs if isinstance(e, PrefillProgress)}
    assert models == {"main", "draft"}
    # The draft prefills after the first token, which then comes as soon as with normal
    # decoding (it used to wait for the draft's whole prefill: TTFT about doubled).
    kinds = [
        "token" if isinstance(e, Token) else e.model
        for e in evs
        if isinstance(e, (Token, PrefillProgress))
    ]
    assert kinds.index("token") < kinds.index("draft")
    assert all(k == "main" for k in kinds[: kinds.index("token")])


def test_stop_string_inside_accepted_draft_run(engine, scripted, tiny_tokenizer):
    outputs = register_pair(scripted, tiny_tokenizer)
    text = tiny_tokenizer.decode(outputs)
    stop = tiny_tokenizer.decode(outputs[3:5])
    req = Request(
        "Hello",
        model="main",
        draft="draft",
        num_draft_tokens=8,
        chat=False,
        max_tokens=24,
        stop=[stop],
    )
    r = engine.submit(req).result(timeout=30)
    assert r.matched_stop == stop
    assert r.text == text[: text.index(stop)].lstrip()
    assert len(r.token_ids) == 5  # nothing after the token completing the stop


def test_eos_inside_accepted_draft_run(engine, scripted, tiny_tokenizer):
    outputs = register_pair(scripted, tiny_tokenizer)
    outputs[3] = tiny_tokenizer.eos_token_id
    ids = scripted("main", outputs=outputs)
    scripted("draft", outputs=outputs)
    assert ids
    for draft in ("draft", "lookup"):
        req = Request(
            "Hello", model="main", draft=draft, num_draft_tokens=8, chat=False, max_tokens=24
        )
        r = engine.submit(req).result(timeout=30)
        assert r.finish_reason == "stop" and r.token_ids == outputs[:4]


def test_draft_with_another_vocabulary_is_rejected_in_submit_naming_both(
    engine, tiny_dir, tmp_path
):
    other = str(build_tiny_model(tmp_path / "other", vocab_size=300))
    # Local models are checked from their tokenizer files, before anything loads.
    with pytest.raises(ValueError, match="vocabulary") as info:
        engine.submit(Request("Hi", model=tiny_dir, draft=other, max_tokens=3))
    assert tiny_dir in str(info.value) and other in str(info.value)
    assert engine.info().queued == 0


def test_draft_vocabulary_is_checked_on_the_worker_when_submit_cannot_tell(
    engine, scripted, tiny_dir, tmp_path
):
    from pathlib import Path

    from mlx_lm.utils import load_tokenizer

    from mlx_notebook.testing import ScriptedModel

    other = load_tokenizer(Path(build_tiny_model(tmp_path / "other", vocab_size=300)))
    engine.registry.max_loaded = 3  # busy, odd and the main model, none evicted
    scripted("busy", delay_s=0.02)
    busy = engine.submit(Request("Hi", model="busy", max_tokens=20, chat=False))
    # A directory with no tokenizer files yet: it exists, so submit() accepts it, but
    # its vocabulary cannot be read there...
    odd = tmp_path / "odd"
    odd.mkdir()
    odd = str(odd.resolve())
    job = engine.submit(Request("Hi", model=tiny_dir, draft=odd, max_tokens=3))
    # ...and a model of another vocabulary takes its name before the job runs.
    vocab = len(other.get_vocab())
    engine.call(lambda: engine.registry.register(odd, ScriptedModel(vocab, lambda p, t: 3), other))
    r = job.result(timeout=30, raise_on_error=False)
    assert busy.result(timeout=30).finish_reason == "length"
    assert r.finish_reason == "error" and "vocabulary" in r.error
    assert repr(odd) in r.error and tiny_dir in r.error


def test_sampling_speculative_runs_and_is_seeded(engine, tiny_dir):
    def run():
        r = Request(
            PROMPT,
            model=tiny_dir,
            chat=False,
            max_tokens=30,
            temperature=0.8,
            seed=3,
            draft="lookup",
            num_draft_tokens=4,
            lookup_ngram=1,
        )
        return engine.submit(r).result(timeout=60).token_ids

    assert run() == run()


@pytest.mark.parametrize(
    "sampling",
    [
        dict(temperature=0.7, top_p=0.9, repetition_penalty=1.1, seed=11),
        dict(temperature=0.7, seed=11),  # no processors: rounds without drafts pipeline
    ],
    ids=["processors", "plain"],
)
def test_seeded_sampling_gives_the_same_text_with_every_draft_source(
    engine, tiny_dir, draft_dir, sampling
):
    # Each position draws with its own key, so a verify pass samples exactly the token
    # normal decoding samples there: speculation keeps seeded sampling's text.
    base = greedy(engine, tiny_dir, max_tokens=48, **sampling)
    assert base.token_ids != greedy(engine, tiny_dir, max_tokens=48).token_ids  # it samples
    assert (
        base.token_ids
        != greedy(engine, tiny_dir, max_tokens=48, **{**sampling, "seed": 12}).token_ids
    )
    accepted = 0
    for draft, kind in (
        ("lookup", "lookup"),
        (None, "suffix"),
        (draft_dir, "model"),
        (tiny_dir, "model"),
    ):
        for k in (1, 4, 9):
            r = greedy(engine, tiny_dir, max_tokens=48, draft=draft, draft_kind=kind,
                       num_draft_tokens=k, lookup_ngram=1, **sampling)  # fmt: skip
            assert r.token_ids == base.token_ids, (draft, kind, k)
            accepted += r.stats.draft_tokens_accepted
    assert accepted > 0  # drafts were taken, not only refused


def test_fresh_engine_default_is_closed_cleanly(tiny_dir):
    eng = Engine()
    eng.close()
    assert eng.closed


def test_greedy_speculative_with_repetition_penalty_is_exact(engine, tiny_dir, draft_dir):
    # Logits processors see the same context per verified row as sequential decoding.
    base = greedy(engine, tiny_dir, repetition_penalty=1.5).token_ids
    assert base != greedy(engine, tiny_dir).token_ids  # the penalty matters here
    for draft in ("lookup", draft_dir):
        for k in (1, 3, 6):
            r = greedy(
                engine,
                tiny_dir,
                draft=draft,
                num_draft_tokens=k,
                lookup_ngram=1,
                repetition_penalty=1.5,
            )
            assert r.token_ids == base, (draft, k)


class _Scripted:
    """A draft source proposing (wrong) drafts after the given history lengths only,
    noting how many passes the main model had run each time it was asked."""

    needs_prefill = False
    label = "test"

    def __init__(self, seq, at=()):
        self.seq, self.at, self.asked = seq, set(at), []

    def prefill(self, prompt, check, progress):
        pass

    def propose(self, history, k):
        self.asked.append((len(history), self.seq.passes))
        return [1, 1][:k] if len(history) in self.at else []


def _run(tiny_dir, n, at=(), cancel_after=None):
    import mlx.core as mx
    from mlx_lm import load

    from mlx_notebook.engine.cache.sequence import CachedSequence
    from mlx_notebook.engine.decoding.speculative import DraftCounters, speculative_tokens
    from mlx_notebook.engine.errors import Cancelled

    model = load(tiny_dir)[0]
    prompt = [5, 17, 99, 3, 42, 8]
    ref, cache_seq = [], CachedSequence(model)
    y = mx.argmax(cache_seq.forward(prompt)[0, -1:], axis=-1)
    for _ in range(n):  # plain greedy decoding, one synchronous step at a time
        ref.append(y.item())
        y = mx.argmax(cache_seq.forward([ref[-1]])[0], axis=-1)
    seq = CachedSequence(model)
    mx.eval(seq.forward(prompt[:-1]))
    source, history, calls = _Scripted(seq, {len(prompt) + i for i in at}), list(prompt), [0]

    def check():
        calls[0] += 1
        if cancel_after is not None and calls[0] > cancel_after:
            raise Cancelled()

    out = []
    try:
        for t, _ in speculative_tokens(
            seq, history, source, num_draft=2, sampler=None, processors=None, max_tokens=n,
            check=check, stream=mx.default_stream(mx.default_device()),
            counters=DraftCounters(), greedy=True,
        ):  # fmt: skip
            out.append(t)
    except Cancelled:
        pass
    return ref, out, seq, source, history


def test_rounds_without_drafts_queue_the_next_step_before_reading_a_token(tiny_dir):
    ref, out, seq, source, history = _run(tiny_dir, 12)
    assert out == ref
    # Asked after each token: the step for the next one was already queued then (one pass
    # for the prefill, one per token so far, one queued), as plain decoding pipelines.
    after = [(h, p) for h, p in source.asked if h > 6]
    assert after and all(p == 1 + (h - 6) + 1 for h, p in after), source.asked
    assert seq.consistent() and seq.tokens == history[:-1]  # the last token is not fed


def test_a_draft_after_plain_steps_drops_the_queued_step_and_text_stays_exact(tiny_dir):
    ref, out, seq, source, history = _run(tiny_dir, 16, at=(3, 4, 9))
    assert out == ref
    assert seq.consistent() and seq.tokens == history[:-1]


def test_a_cancel_between_pipelined_steps_leaves_the_cache_as_recorded(tiny_dir):
    ref, out, seq, source, history = _run(tiny_dir, 16, cancel_after=5)
    assert 0 < len(out) < 16 and out == ref[: len(out)]
    assert seq.consistent()
    assert seq.tokens == history[: len(seq.tokens)] and len(seq.tokens) >= len(history) - 1
