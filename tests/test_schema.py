"""Schema forms in, one grammar and a typed parse out; bad input is one line."""

import dataclasses
from typing import Literal, TypedDict

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.schema import Schema, SchemaError


class Person(TypedDict):
    name: str
    age: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_every_accepted_form_compiles_and_parses_to_its_type():
    pydantic = pytest.importorskip("pydantic")

    class Review(pydantic.BaseModel):
        stars: int
        mood: Literal["pos", "neg"]

    cases = [
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, '{"a": 3}', {"a": 3}),
        (Review, '{"stars": 4, "mood": "pos"}', Review(stars=4, mood="pos")),
        (int, "42", 42),
        (float, "2.5", 2.5),
        (bool, "true", True),
        (str, '"hi"', "hi"),
        (list[str], '["a", "b"]', ["a", "b"]),
        (Literal["pos", "neg", "neutral"], '"neg"', "neg"),
        (Person, '{"name": "Ann", "age": 3}', {"name": "Ann", "age": 3}),
        (Point, '{"x": 1, "y": 2}', Point(1, 2)),
    ]
    for spec, text, want in cases:
        s = Schema.of(spec)
        assert s.kind == "json" and s.grammar and s.json_schema, spec
        got = s.parse(text)
        assert got == want and type(got) is type(want), spec
    assert Schema.of(Person).fields() == ["name", "age"]
    assert (
        Schema.of(["yes", "no"]).kind == "choice" and Schema.of(["yes", "no"]).parse("no") == "no"
    )
    assert Schema.regex(r"\d{3}-\d{4}").kind == "regex"
    assert Schema.lark('start: "a"+').kind == "lark"
    assert Schema.of(Schema.regex("x")) == Schema.regex("x")  # a Schema passes through


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Schema.of({"type": "bogus"}), "schema: Invalid type: bogus"),
        (lambda: Schema.regex("[a-"), "regex: unclosed character class"),
        (lambda: Schema.choice([]), "choice: give at least one option"),
        (lambda: Schema.choice(["a", "b", "a"]), "choice: duplicated option(s): 'a'"),
        (lambda: Schema.choice(["a", ""]), "choice: options must be non-empty strings"),
        (lambda: Schema.of("a|b"), "schema: a string is ambiguous"),
        (lambda: Schema.of(object()), "schema: cannot make a JSON Schema of"),
        (lambda: Schema.lark("start: nothing"), 'lark: at 1(8): unknown name: "nothing"'),
        (lambda: Schema.of({"default": {1, 2}}), "schema: not JSON-serializable"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(make, message):
    with pytest.raises(SchemaError) as info:
        make()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_request_with_a_bad_schema_is_refused_at_validation():
    with pytest.raises(SchemaError, match="duplicated"):
        Request("x", schema=["a", "a"]).validate()
    req = Request("x", schema=Person)
    req.validate()
    assert req.constraint is req.constraint  # compiled once per schema object


def test_a_lone_enum_is_a_choice_between_its_json_texts():
    assert Schema.of(Literal["pos", "neg"]).choice_texts() == ('"pos"', '"neg"')
    assert Schema.of({"enum": [1, "é", None]}).choice_texts() == ("1", '"é"', "null")
    assert Schema.choice(["a", "b"]).choice_texts() == ("a", "b")
    for other in (int, {"type": "object", "properties": {"m": {"enum": ["x"]}}},
                  {"enum": ["a"], "maxLength": 3}):  # fmt: skip
        assert Schema.of(other).choice_texts() == ()


def test_an_unknown_format_is_an_annotation():
    from mlx_notebook.value_check import check_value

    s = Schema.of({"type": "object", "properties": {"t": {"type": "string", "format": "topic"}}})
    assert s.notes == ("format 'topic' is an annotation here: not enforced, not checked",)
    assert s.json_schema["properties"]["t"]["format"] == "topic"  # validated as written
    assert check_value(s, '{"t": "rivers"}', "stop").valid


def test_one_of_is_generated_as_any_of_and_validated_as_one_of():
    from mlx_notebook.value_check import check_value

    both = {"type": "object", "properties": {"a": {"type": "integer"}}}
    s = Schema.of({"oneOf": [both, {"type": "object", "properties": {"b": {"type": "string"}}}]})
    assert s.notes and "oneOf is generated as anyOf" in s.notes[0]
    ok = check_value(s, '{"a": 1, "b": 2}', "stop")  # only the first branch fits
    assert ok.valid
    twice = check_value(s, '{"a": 1}', "stop")  # fits both branches: not oneOf
    assert not twice.valid and "valid under each of" in twice.problem


@pytest.mark.parametrize(
    ("spec", "good", "bad", "why"),
    [
        (
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "[1, 2]", "[1, 1]", "non-unique",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "dependencies": {"a": ["b"]}},
            '{"a": 1, "b": 2}', '{"a": 1}', "'b' is a dependency of 'a'",
        ),
        ({"type": "integer", "not": {"const": 3}}, "4", "3", "should not be valid"),
    ],
)  # fmt: skip
def test_keys_a_grammar_cannot_enforce_are_refused_or_validated_at_the_end(spec, good, bad, why):
    from mlx_notebook.value_check import check_value

    with pytest.raises(SchemaError, match="cannot be enforced while generating; pass strict"):
        Schema.of(spec)
    s = Schema.of(spec, strict=False)
    assert s.notes and "not enforced while generating" in s.notes[0]
    assert check_value(s, good, "stop").valid
    checked = check_value(s, bad, "stop")
    assert not checked.valid and why in checked.problem
