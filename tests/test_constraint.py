"""Constrained decoding on every job path: alone, batched, speculative; same greedy text."""

import json
import re

import jsonschema
import pytest

from mlx_notebook.engine import Request
from mlx_notebook.schema import IncompleteValue, Schema
from mlx_notebook.testing import build_tiny_model

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


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("cdraft"), seed=1, num_hidden_layers=1))


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
    jobs = [
        engine.submit(
            Request(
                p,
                model=tiny_dir,
                chat=False,
                max_tokens=150,
                temperature=0,
                schema=PERSON if i % 2 == 0 else None,
            )
        )  # fmt: skip
        for i, p in enumerate(PROMPTS)
    ]
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
