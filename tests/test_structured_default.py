"""Structured output on the bundled model (issue 24's acceptance): 50 rows, every path."""

import dataclasses
import json
from typing import Literal

import jsonschema
import pytest

import mlx_notebook
from mlx_notebook.engine import Request
from mlx_notebook.schema import Schema

pytestmark = pytest.mark.slow

NAMES = ["Ann", "Bob", "Cai", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo"]
HOBBIES = ["chess", "tennis", "baking", "hiking", "painting"]
MOODS = ["cheerful", "grumpy", "calm"]
TEXTS = [
    f"{NAMES[i % 10]} is {20 + i} years old, feels {MOODS[i % 3]}, and likes "
    f"{HOBBIES[i % 5]} and {HOBBIES[(i + 2) % 5]}."
    for i in range(50)
]
TEMPLATE = "Extract name, age, mood (pos, neg or neutral) and hobbies as JSON: {text}"
GREEDY = dict(temperature=0, repetition_penalty=1, max_tokens=80)


def person_schema():
    pydantic = pytest.importorskip("pydantic")

    # Bounded, as one bounds a small model's answers: names and hobbies are short.
    Short = pydantic.constr(max_length=16)

    class Person(pydantic.BaseModel):
        name: Short
        age: pydantic.conint(ge=0, le=120)
        mood: Literal["pos", "neg", "neutral"]
        hobbies: pydantic.conlist(Short, max_length=3)

    return Person


@pytest.fixture(scope="module")
def frame():
    pd = pytest.importorskip("pandas")
    return pd.DataFrame({"text": TEXTS}, index=[f"r{i}" for i in range(50)])


@pytest.fixture(scope="module")
def batched(default_engine, frame):
    """The 50 rows through `map`, batched: (the schema, the result)."""
    Person = person_schema()
    res = mlx_notebook.map(frame, TEMPLATE, schema=Person, backend=default_engine, **GREEDY)
    return Person, res


def test_fifty_rows_validate_and_come_back_typed(batched, frame):
    Person, res = batched
    df = res.to_frame()
    schema = Person.model_json_schema()
    finished = [t for t, r in zip(res.texts, res) if r.finish_reason == "stop"]
    assert len(finished) >= 40, res.summary()  # most rows fit in 80 tokens
    for text in finished:
        jsonschema.validate(json.loads(text), schema)
    assert df["valid"].sum() == len(finished)
    assert str(df["age"].dtype) == "Int64" and str(df["name"].dtype) == "string"
    assert str(df["mood"].dtype) == "category" and list(df.index) == list(frame.index)
    assert set(df["mood"].cat.categories) == {"pos", "neg", "neutral"}
    assert all(isinstance(v, Person) for v, ok in zip(res.values, res.valid) if ok)
    # Rows shared steps (how many at once depends on the machine's load: prefill
    # chunks are time-sized, and rows end while others prefill).
    assert max(r.stats.batch_rows for r in res) >= 2


def test_lookup_suffix_and_solo_give_the_batched_texts(default_engine, batched, frame):
    # All 50 rows again, speculated (alone): even rows with --lookup, odd rows with
    # --suffix; and every fifth row alone without drafts: each gives its batched text.
    Person, res = batched
    prompts = [TEMPLATE.format(text=t) for t in frame["text"]]
    runs = [(i, dict(draft_kind=("lookup", "suffix")[i % 2])) for i in range(50)]
    runs += [(i, dict(batch=False)) for i in range(0, 50, 5)]
    for i, extra in runs:
        req = Request(prompts[i], schema=Person, remember=False, **GREEDY, **extra)
        got = default_engine.submit(req).result(timeout=300)
        assert got.text == res[i].text, (i, extra, got.text, res[i].text)


MOOD_LABELS = ["cheerful", "grumpy", "calm", "mixed feelings"]


def test_fifty_rows_classified_with_choices(default_engine, frame):
    # --choice over 50 rows: every answer is one of the choices, the column is a
    # categorical of them, and the choice path takes fewer steps than the mask.
    template = "How does this person feel: cheerful, grumpy, calm or mixed feelings? {text}"
    res = mlx_notebook.map(frame, template, schema=MOOD_LABELS, backend=default_engine, **GREEDY)
    assert all(r.finish_reason == "stop" for r in res), res.summary()
    assert set(res.texts) <= set(MOOD_LABELS)
    col = res.to_frame()["value"]
    assert list(col.cat.categories) == MOOD_LABELS and col.notna().all()
    masked = dataclasses.replace(Schema.choice(MOOD_LABELS), fast=False)
    part = frame.iloc[:10]
    slow = mlx_notebook.map(part, template, schema=masked, backend=default_engine, **GREEDY)
    assert set(slow.texts) <= set(MOOD_LABELS)
    fast_steps = sum(r.stats.decode_steps for r in list(res)[:10])
    assert fast_steps < sum(r.stats.decode_steps for r in slow)
