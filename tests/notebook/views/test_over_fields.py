"""The ``--over --schema`` table: field columns filling in row by row, escaped."""

import json

from mlx_notebook.engine.events import Finished, Stats, Token
from mlx_notebook.mapping.mapper import MapRun
from mlx_notebook.notebook.magics.over import MapRenderer
from mlx_notebook.notebook.views.over_fields import fields_table, partial_fields
from mlx_notebook.notebook.views.render import ViewState
from mlx_notebook.schema import Schema

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def test_partial_fields_keep_only_complete_values():
    assert partial_fields("") == {}
    assert partial_fields('{"na') == {}
    assert partial_fields('{"name": "Al') == {}
    assert partial_fields('{"name": "Al", "age": 3') == {"name": "Al"}  # 3 may grow
    assert partial_fields('{"name": "Al", "age": 31,') == {"name": "Al", "age": 31}
    assert partial_fields('{"name": "A, \\"b\\"", "tags": ["x"') == {"name": 'A, "b"'}
    full = '{"name": "Al", "age": 31, "tags": ["x", "y"]}'
    assert partial_fields(full) == json.loads(full)
    assert partial_fields("not json") == {}


def stream(state: ViewState, text: str, n: int = 4) -> None:
    """Feed ``text`` in pieces of ``n`` characters, as tokens."""
    for i in range(0, len(text), n):
        state.apply(Token(text[i : i + n], 0, False, i // n))


def test_the_table_fills_in_field_by_field_and_escapes_model_text():
    schema = Schema.of(PERSON)
    states = [ViewState(fmt="json") for _ in range(3)]
    hostile = "<img src=x onerror=alert(1)>"
    stream(states[0], '{"name": "' + hostile + '", "age": 4')
    html = fields_table(schema, states, live=True)
    assert "<th>name</th><th>age</th><th>tags</th><th>valid</th>" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img" not in html
    assert "<td></td><td></td>" in html  # age still growing, tags not started
    assert "running" in html and html.count("queued") == 2
    stream(states[0], '2, "tags": ["chess", "go"]}')
    text = '{"name": "' + hostile + '", "age": 42, "tags": ["chess", "go"]}'
    states[0].apply(Finished(text, "stop", stats=Stats()))
    stream(states[1], '{"name": "Bo", "age": 7')
    states[1].apply(Finished('{"name": "Bo", "age": 7', "length", stats=Stats()))
    html = fields_table(schema, states, live=True)
    assert "<td>42</td><td>chess, go</td>" in html and '<span class="ok">valid' in html
    assert "<td>Bo</td>" in html and '<span class="bad">length: incomplete</span>' in html


def test_an_over_run_with_a_schema_ends_as_a_typed_table(engine, tiny_dir):
    from tests.engine.tokens.test_constraint import PERSON as BOUNDED  # a random model finishes it

    run = MapRun(
        engine, [f"Person {i}:" for i in range(4)], model=tiny_dir, chat=False,
        schema=BOUNDED, max_tokens=150, temperature=0,
    ).start()  # fmt: skip
    view = MapRenderer(run, "tiny", "json", [])
    for i, job in enumerate(run.jobs):
        for ev in job.events(timeout=120):
            view.apply_from(i, ev)
    html = view.html()
    assert '<table class="grid fields">' in html and "<th>mood</th>" in html
    assert html.count('<span class="ok">valid</span>') == 4
    for job in run.jobs:
        value = job.result().value
        assert f"<td>{value['age']}</td>" in html
