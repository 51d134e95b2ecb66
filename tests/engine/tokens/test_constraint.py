"""Constrained decoding on every job path: alone, batched, speculative; same greedy text."""

import dataclasses
import json
import re

import jsonschema
import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.tokens.constraint import ChoiceConstraint, for_schema
from mlx_notebook.schema import Schema
from mlx_notebook.testing import build_tiny_model
from mlx_notebook.value_check import IncompleteValue

# Bounded fields, so even a random-weight model finishes well inside its budget.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "mood": {"enum": ["pos", "neg", "neutral"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2},
    },
    "required": ["name", "age", "mood", "tags"],
    "additionalProperties": False,
}
PROMPTS = [f"Person number {i}, described:" for i in range(6)]


def run(engine, model, prompt, **kw):
    kw.setdefault("schema", PERSON)
    kw.setdefault("temperature", 0)
    req = Request(prompt, model=model, chat=False, max_tokens=kw.pop("max_tokens", 150), **kw)
    return engine.submit(req).result(timeout=120)


def test_every_finished_text_validates_and_parses(engine, tiny_dir):
    for p in PROMPTS:
        r = run(engine, tiny_dir, p, batch=False)
        assert r.finish_reason == "stop", (p, r.text)
        jsonschema.validate(json.loads(r.text), PERSON)
        assert r.value == json.loads(r.text)
        assert r.token_ids[-1] not in engine.registry.get(tiny_dir).tokenizer.eos_token_ids


def test_unconstrained_text_is_not_json_so_the_mask_did_the_work(engine, tiny_dir):
    r = run(engine, tiny_dir, PROMPTS[0], schema=None, max_tokens=40)
    with pytest.raises(ValueError):
        json.loads(r.text)


def test_batched_rows_equal_their_solo_runs(engine, tiny_dir):
    solo = [run(engine, tiny_dir, p, batch=False).token_ids for p in PROMPTS]
    # Queued together with whole-prompt prefill chunks, so they share steps however
    # busy the machine is (time-sized chunks shrink under load).
    jobs = engine.submit_many(
        [
            Request(
                p,
                model=tiny_dir,
                chat=False,
                max_tokens=150,
                temperature=0,
                prefill_target_s=30,
                schema=PERSON if i % 2 == 0 else None,
            )
            for i, p in enumerate(PROMPTS)
        ]
    )
    rows = [j.result(timeout=120) for j in jobs]
    assert max(r.stats.batch_rows for r in rows) >= 4  # they did share steps
    for i, (r, alone) in enumerate(zip(rows, solo)):
        if i % 2 == 0:  # constrained rows: their own mask in the shared step
            assert r.token_ids == alone, PROMPTS[i]
        else:  # unconstrained neighbours are left alone
            assert r.token_ids == run(engine, tiny_dir, PROMPTS[i], schema=None,
                                      max_tokens=150, batch=False).token_ids  # fmt: skip


@pytest.mark.parametrize("k", [1, 4, 9])
def test_speculative_text_equals_constrained_normal_decoding(engine, tiny_dir, draft_dir, k):
    proposed = accepted = 0
    for p in PROMPTS[:3]:
        base = run(engine, tiny_dir, p, batch=False).token_ids
        for draft, kind in (("lookup", "lookup"), (None, "suffix"), (draft_dir, "model"),
                            (tiny_dir, "model")):  # fmt: skip
            r = run(engine, tiny_dir, p, draft=draft, draft_kind=kind, num_draft_tokens=k,
                    lookup_ngram=1)  # fmt: skip
            assert r.token_ids == base, (p, kind, k)
            proposed += r.stats.draft_tokens_proposed
            accepted += r.stats.draft_tokens_accepted
    assert accepted > 0 and proposed > accepted  # drafts were taken, and some refused


def test_seeded_sampling_under_a_schema_is_the_same_on_every_path(engine, tiny_dir):
    kw = dict(temperature=0.8, seed=5)
    base = run(engine, tiny_dir, PROMPTS[1], batch=False, **kw)
    assert base.finish_reason == "stop"
    jsonschema.validate(json.loads(base.text), PERSON)
    assert run(engine, tiny_dir, PROMPTS[1], **kw).token_ids == base.token_ids  # batched
    spec = run(engine, tiny_dir, PROMPTS[1], draft="lookup", lookup_ngram=1, **kw)
    assert spec.token_ids == base.token_ids


def test_choices_regex_and_lark(engine, tiny_dir):
    options = ["positive", "negative", "neutral"]
    for p in PROMPTS:
        r = run(engine, tiny_dir, p, schema=options)
        assert r.finish_reason == "stop" and r.text in options and r.value == r.text
    for p in PROMPTS[:3]:
        r = run(engine, tiny_dir, p, schema=Schema.regex(r"[0-9]{3}-[a-z]{2}"))
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", r.text), r.text
        r = run(engine, tiny_dir, p, schema=Schema.lark('start: "ab" ("," "ab")?'))
        assert r.finish_reason == "stop" and r.text in ("ab", "ab,ab"), r.text


def test_stopped_mid_object_keeps_the_text_and_value_says_why(engine, tiny_dir):
    r = run(engine, tiny_dir, PROMPTS[0], max_tokens=6)
    assert r.finish_reason == "length" and r.text.startswith('{"')
    with pytest.raises(IncompleteValue, match=r"ended \(length\) before"):
        _ = r.value


def test_python_types_come_back_typed(engine, tiny_dir):
    r = run(engine, tiny_dir, PROMPTS[2], schema=list[int], max_tokens=80)
    if r.finish_reason == "stop":
        assert isinstance(r.value, list) and all(isinstance(v, int) for v in r.value)
    r = run(engine, tiny_dir, PROMPTS[2], schema=bool)
    assert r.finish_reason == "stop" and r.value in (True, False)


# -- fast paths: forced tokens and choices ----------------------------------------------


def replay(engine, model, schema, token_ids):
    """Walk ``token_ids`` through a fresh grammar state; count the forced ones."""
    lm = engine.registry.get(model)
    c = for_schema(Schema.of(schema), lm.tokenizer, lm.logits_size or lm.vocab_size)
    forced = 0
    for t in token_ids:
        f = c.take_forced()
        if f is None:
            assert c.allowed()[t], t
            c.consume([t])
        else:
            assert f == t  # the job wrote exactly the forced token
            forced += 1
    return forced


def test_forced_tokens_cost_no_pass_of_their_own(engine, tiny_dir):
    for p in PROMPTS[:3]:
        r = run(engine, tiny_dir, p, batch=False)
        forced = replay(engine, tiny_dir, PERSON, r.token_ids)
        assert forced >= 8, forced  # the four keys, at least
        # One pass per sampled token; forced ones ride in front of the next.
        assert r.stats.decode_steps == len(r.token_ids) - forced
    plain = dataclasses.replace(Schema.of(PERSON), fast=False)
    r = run(engine, tiny_dir, PROMPTS[0], batch=False, schema=plain)
    jsonschema.validate(json.loads(r.text), PERSON)
    assert r.stats.decode_steps == len(r.token_ids)  # token by token


def test_a_lone_batch_row_feeds_forced_tokens_in_its_next_pass(engine, tiny_dir):
    # A job submitted alone runs as a one-row batch: its forced tokens must cost no pass
    # there either, with the text of a job decoding alone.
    for p in PROMPTS[:3]:
        r = run(engine, tiny_dir, p)  # batch=True: the batch path
        alone = run(engine, tiny_dir, p, batch=False)
        assert r.token_ids == alone.token_ids and r.text == alone.text
        forced = replay(engine, tiny_dir, PERSON, r.token_ids)
        assert forced >= 8, forced
        # One pass per sampled token (the first feeds the prompt's last token); forced
        # ones ride in front of the next, and the pass after the last is not made.
        assert r.stats.decode_steps == len(r.token_ids) - forced == alone.stats.decode_steps
    plain = dataclasses.replace(Schema.of(PERSON), fast=False)
    r = run(engine, tiny_dir, PROMPTS[0], schema=plain)
    jsonschema.validate(json.loads(r.text), PERSON)
    # Token by token, and the batch's pass after the last token (it cannot know before).
    assert r.stats.decode_steps == len(r.token_ids) + 1


def test_batched_rows_feed_forced_tokens_in_their_next_pass(engine, tiny_dir):
    # Rows sharing steps each feed what their grammar forces in the shared pass (the
    # rows right-padded to the longest), with the texts and passes of jobs alone.
    plain = dataclasses.replace(Schema.of(PERSON), fast=False)
    kinds = [PERSON, None, PERSON, plain]
    alone = [run(engine, tiny_dir, p, batch=False, schema=k) for p, k in zip(PROMPTS, kinds)]
    jobs = engine.submit_many(
        [
            Request(p, model=tiny_dir, chat=False, max_tokens=150, temperature=0,
                    prefill_target_s=30, schema=k)
            for p, k in zip(PROMPTS, kinds)
        ]
    )  # fmt: skip
    rows = [j.result(timeout=120) for j in jobs]
    assert min(r.stats.batch_rows for r in rows) == 4  # every row shared steps
    assert [r.token_ids for r in rows] == [a.token_ids for a in alone]
    for i in (0, 2):
        forced = replay(engine, tiny_dir, PERSON, rows[i].token_ids)
        assert forced >= 8, forced
        # One pass per sampled token, as alone: forced ones rode in the shared passes.
        assert rows[i].stats.decode_steps == len(rows[i].token_ids) - forced
        assert rows[i].stats.decode_steps == alone[i].stats.decode_steps
        # The text of every token masked and fed one by one.
        one_by_one = run(engine, tiny_dir, PROMPTS[i], batch=False, schema=plain)
        assert rows[i].token_ids == one_by_one.token_ids


def test_speculative_jobs_feed_forced_tokens_in_their_next_pass(engine, tiny_dir):
    plain = dataclasses.replace(Schema.of(PERSON), fast=False)
    for p in PROMPTS[:3]:
        one_by_one = run(engine, tiny_dir, p, batch=False, schema=plain)  # every token masked
        forced = replay(engine, tiny_dir, PERSON, one_by_one.token_ids)
        assert forced >= 8, forced
        for kw in (dict(draft="lookup", lookup_ngram=1), dict(draft_kind="suffix")):
            r = run(engine, tiny_dir, p, num_draft_tokens=4, **kw)
            assert r.token_ids == one_by_one.token_ids, kw
            assert r.stats.draft_tokens_proposed > 0, kw
            # A pass per token neither forced nor an accepted draft: at most one per
            # sampled token, exactly that when no draft was taken.
            sampled = len(r.token_ids) - forced
            assert r.stats.decode_steps <= sampled, kw
            if r.stats.draft_tokens_accepted == 0:
                assert r.stats.decode_steps == sampled, kw


OPTIONS = ["positive", "negative", "neutral", "pos", "mixed feelings"]
MASKED = dataclasses.replace(Schema.choice(OPTIONS), fast=False)  # token by token


def test_choice_trie_allows_each_choice_its_own_way(tiny_tokenizer):
    tok = tiny_tokenizer
    width = len(tok.get_vocab())
    eos = list(tok.eos_token_ids)
    seqs = {o: tok.encode(o, add_special_tokens=False) for o in OPTIONS}
    branched = forced = 0
    for option, ids in seqs.items():
        c = ChoiceConstraint(tok, OPTIONS, width, eos)
        assert set(c.allowed().nonzero()[0]) == {s[0] for s in seqs.values()}
        for t in ids:
            f = c.take_forced()
            if f is None:
                assert c.allowed()[t]
                c.consume([t])
                branched += 1
            else:
                assert f == t
                forced += 1
        longer = any(o != option and s[: len(ids)] == ids for o, s in seqs.items())
        if longer:  # "pos" goes on as "positive": it ends by end-of-sequence
            assert not c.stopped and c.allowed()[eos].all()
            c.consume(eos[:1])
        assert c.stopped
    assert branched and forced  # both kinds of position were met


def test_choice_walk_stops_at_a_refused_draft_and_rolls_back(tiny_tokenizer):
    tok = tiny_tokenizer
    c = ChoiceConstraint(tok, OPTIONS, len(tok.get_vocab()), list(tok.eos_token_ids))
    ids = tok.encode("negative", add_special_tokens=False)
    before = c.allowed()
    masks = c.walk([*ids[:2], tok.encode("x", add_special_tokens=False)[0]])
    assert len(masks) == 3 and (c.allowed() == before).all()


def test_choice_jobs_answer_a_choice_the_same_on_every_path(engine, tiny_dir):
    for p in PROMPTS:
        base = run(engine, tiny_dir, p, batch=False, schema=OPTIONS)
        assert base.finish_reason == "stop" and base.text in OPTIONS
        forced = replay(engine, tiny_dir, OPTIONS, base.token_ids)
        assert base.stats.decode_steps == len(base.token_ids) - forced
        batched = run(engine, tiny_dir, p, schema=OPTIONS)
        assert batched.token_ids == base.token_ids
        # A row feeds each token a step after sampling it; its forced ending is free.
        assert batched.stats.decode_steps == base.stats.decode_steps + 1
        spec = run(engine, tiny_dir, p, schema=OPTIONS, draft="lookup", lookup_ngram=1)
        assert spec.token_ids == base.token_ids
        masked = run(engine, tiny_dir, p, batch=False, schema=MASKED)
        assert masked.text in OPTIONS
        assert masked.stats.decode_steps >= base.stats.decode_steps


def test_a_single_choice_is_written_without_a_decode_pass(engine, tiny_dir):
    r = run(engine, tiny_dir, PROMPTS[0], batch=False, schema=["only this"])
    assert r.text == "only this" and r.stats.decode_steps == 0


@pytest.fixture(scope="module")
def gap_dir(tmp_path_factory):
    """A model whose vocabulary has no byte fallback: it cannot write every character."""
    return str(build_tiny_model(tmp_path_factory.mktemp("gap"), all_bytes=False))


def test_a_schema_the_tokenizer_cannot_write_is_refused_in_one_line(engine, gap_dir):
    first = engine.submit(Request("x", model=gap_dir, chat=False, schema=["€", "a"]))
    fin = first.wait(timeout=120)  # not loaded at submit: refused before generating
    assert fin.finish_reason == "error" and "cannot write '€'" in fin.error
    assert fin.stats.generation_tokens == 0
    for schema in (["€", "a"], Schema.regex("ж+"), {"type": "object", "required": ["é€"],
                   "properties": {"é€": {"type": "integer"}}}):  # fmt: skip
        with pytest.raises(ValueError, match="tokenizer cannot write") as err:
            engine.submit(Request("x", model=gap_dir, chat=False, schema=schema))
        assert "\n" not in str(err.value)


def test_a_literal_schema_is_decided_over_its_values_token_sequences(engine, tiny_dir):
    from typing import Literal

    mood = Literal["positive", "negative", "neutral"]
    for p in PROMPTS[:3]:
        r = run(engine, tiny_dir, p, batch=False, schema=mood)
        assert r.finish_reason == "stop" and r.value in ("positive", "negative", "neutral")
        assert r.text == f'"{r.value}"'
        lm = engine.registry.get(tiny_dir)
        c = for_schema(Schema.of(mood), lm.tokenizer, lm.logits_size or lm.vocab_size)
        assert isinstance(c, ChoiceConstraint)
        assert r.stats.decode_steps == len(r.token_ids) - replay(engine, tiny_dir, mood,
                                                                r.token_ids)  # fmt: skip
        assert run(engine, tiny_dir, p, schema=mood).token_ids == r.token_ids  # batched
