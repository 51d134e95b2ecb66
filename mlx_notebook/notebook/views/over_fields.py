"""The ``--over --schema`` table: one column per schema field, filling in row by row.

Each row's fields appear as soon as their values are complete in the streamed
JSON (a field still being written stays empty), and the last column says
whether the row's value is valid. Every cell is escaped text: model output
never becomes markup.
"""

from __future__ import annotations

import json

from ...schema import Schema
from ...value_check import check_value
from .markup import escape

LIVE_ROWS = 200  # rows drawn while running; the finished document has them all
CELL_CHARS = 120

_decoder = json.JSONDecoder()


def partial_fields(text: str) -> dict:
    """The complete ``"key": value`` pairs at the top of a one-line JSON object so far.

    ``'{"name": "Ann", "age": 3'`` gives ``{"name": "Ann"}``: ``age`` may still
    grow. A value counts once the separator after it (``,`` or ``}``) arrived.
    """
    out: dict = {}
    s = text.lstrip()
    if not s.startswith("{"):
        return out
    i = 1
    while True:
        try:
            i = _skip(s, i)
            key, i = _decoder.raw_decode(s, i)
            i = _skip(s, i)
            if not isinstance(key, str) or s[i : i + 1] != ":":
                return out
            value, i = _decoder.raw_decode(s, _skip(s, i + 1))
            i = _skip(s, i)
        except (ValueError, IndexError):
            return out
        if i >= len(s) or s[i] not in ",}":
            return out  # a number may go on: not yet complete
        out[key] = value
        if s[i] == "}":
            return out
        i += 1


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def columns(schema: Schema) -> list[str]:
    """The table's value columns: the object's fields, else one ``value`` column."""
    return schema.fields() or ["value"]


def cell(value) -> str:
    """A value as short escaped text: lists joined, objects as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, list):
        text = ", ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False)
    if len(text) > CELL_CHARS:
        text = text[: CELL_CHARS - 1] + "…"
    return escape(text)


def row_values(schema: Schema, state) -> tuple[dict, str, str]:
    """``(fields, status, css class)`` of one row's `ViewState` (running or ended)."""
    f = state.finished
    names = schema.fields()
    if f is None:
        status = "running" if state.tokens else "queued"
        return (partial_fields(state.text) if names else {}), status, "neutral"
    checked = check_value(schema, f.text, f.finish_reason)
    if not checked.valid:
        if f.finish_reason == "error":
            why = f"error: {f.error}"
        elif f.finish_reason != "stop":
            why = f"{f.finish_reason}: incomplete"
        else:  # a server that ignored the schema, or a keyword checked only at the end
            why = f"invalid: {checked.problem}"
        shown = partial_fields(f.text) if names else {}
        return shown, why[:160], "bad"
    if names:
        return json.loads(f.text), "valid", "ok"
    return {"value": f.text if schema.kind != "json" else json.loads(f.text)}, "valid", "ok"


def fields_table(schema: Schema, states: list, live: bool) -> str:
    """The HTML table of every row's fields (at most `LIVE_ROWS` while ``live``)."""
    names = columns(schema)
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    body = []
    shown = states[:LIVE_ROWS] if live else states
    for i, state in enumerate(shown):
        values, status, css = row_values(schema, state)
        cells = "".join(f"<td>{cell(values.get(n))}</td>" for n in names)
        body.append(
            f'<tr><td>{i}</td>{cells}<td><span class="{css}">{escape(status)}</span></td></tr>'
        )
    more = len(states) - len(shown)
    if more:
        body.append(
            f'<tr><td colspan="{len(names) + 2}">… {more} more rows (all of them once done)'
            "</td></tr>"
        )
    return (
        f'<table class="grid fields"><tr><th>#</th>{head}<th>valid</th></tr>{"".join(body)}</table>'
    )
