"""A finished structured text against its schema: its value, or one line saying why not."""

import json
from typing import TypedDict

import pytest

from mlx_notebook.schema import Schema
from mlx_notebook.value_check import IncompleteValue, value_of


class Person(TypedDict):
    name: str
    age: int


def test_value_of_a_stopped_generation_is_one_clear_line():
    s = Schema.of(Person)
    assert value_of(s, '{"name": "A", "age": 1}', "stop") == {"name": "A", "age": 1}
    with pytest.raises(IncompleteValue) as info:
        value_of(s, '{"name": "A", "a', "length")
    assert str(info.value) == (
        "value: the generation ended (length) before its json value was complete; "
        ".text keeps the partial text"
    )
    with pytest.raises(ValueError, match="had no schema"):
        value_of(None, "x", "stop")
    json.dumps(s.json_schema)  # the JSON Schema is plain data


def test_an_invalid_schema_document_is_valid_false_never_an_exception():
    # Draft-04 style "required": true inside a property: llguidance compiles it, the
    # JSON Schema validator rejects the document itself. Every accessor says so.
    pd = pytest.importorskip("pandas")
    from mlx_notebook.engine.events import Stats
    from mlx_notebook.engine.job import Result
    from mlx_notebook.mapping.result import MapResult, MapRow
    from mlx_notebook.value_check import check_value

    s = Schema.of({"type": "object", "properties": {"a": {"type": "integer", "required": True}}})
    checked = check_value(s, '{"a": 1}', "stop")
    assert checked.parsed and checked.value == {"a": 1} and not checked.valid
    assert "not valid JSON Schema" in checked.problem and "\n" not in checked.problem
    res = Result('{"a": 1}', "stop", None, None, Stats(), schema=s)
    assert res.value == {"a": 1} and res.valid is False and "not valid" in res.problem
    rows = MapResult([MapRow(0, "p", '{"a": 1}', "stop", stats=Stats())], schema=s)
    assert rows.valid == [False] and rows.values == [{"a": 1}]
    frame = rows.to_frame()
    assert frame["a"].tolist() == [1] and frame["valid"].tolist() == [False]
    assert "not valid JSON Schema" in frame["problem"][0]
    assert isinstance(frame, pd.DataFrame)


def test_a_value_that_breaks_its_schema_is_said_in_one_line():
    from mlx_notebook.value_check import InvalidValue, check_value

    s = Schema.of({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}})
    checked = check_value(s, '{"n": 9}', "stop")
    assert not checked.valid and not checked.parsed and "9 is greater than" in checked.problem
    with pytest.raises(InvalidValue, match="does not follow the schema: 9 is greater"):
        value_of(s, '{"n": 9}', "stop")
    assert check_value(s, '{"n": 2}', "stop") == check_value(s, '{"n": 2}', "stop")
    assert check_value(s, '{"n": 2}', "stop").valid
    assert (
        check_value(s, '{"n": ', "length").problem
        == "it ended (length) before its json value was complete"
    )
