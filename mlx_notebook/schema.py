"""What a structured generation must produce: any schema form in, one grammar and a parser out.

Accepted forms (``Request(schema=...)``, ``%%generate --schema NAME``):

* a JSON Schema (a dict);
* a pydantic model class (values come back as instances of it);
* a Python type: ``int``, ``float``, ``bool``, ``str``, ``list[str]``,
  ``Literal["pos", "neg"]``, a ``TypedDict`` or a dataclass (via pydantic's
  ``TypeAdapter``);
* a list of choices (``Schema.choice``): the text is exactly one of them;
* a regular expression (``Schema.regex``) or a Lark grammar (``Schema.lark``).

Every form becomes an llguidance grammar (`grammar`), checked when the request
is checked, and a `parse` that turns the finished text into the value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class SchemaError(ValueError):
    """A schema that cannot be used (one line naming what is wrong)."""


@dataclass(frozen=True)
class Schema:
    """A normalized output constraint.

    Attributes:
        kind: ``"json"``, ``"choice"``, ``"regex"`` or ``"lark"``.
        grammar: The llguidance grammar.
        json_schema: The JSON Schema, for ``"json"``.
        choices: The choices, for ``"choice"``.
        source: What the user passed (a pydantic class, a type, a dict, ...).
        fast: Take the fast paths: choices decided over their own token
            sequences, and tokens the grammar allows only one way forced (fed in
            one pass when decoding alone). False masks every step with the
            grammar's full set (what `benchmarks/bench_structured.py` compares).
        notes: What of a JSON Schema is not enforced while generating, one line each
            (an unknown ``format``, ``oneOf`` generated as ``anyOf``, keys accepted
            with ``strict=False``); the finished value is validated against it all.
    """

    kind: str
    grammar: str
    json_schema: dict | None = None
    choices: tuple[str, ...] = ()
    source: Any = field(default=None, compare=False, repr=False)
    fast: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)

    # -- construction ---------------------------------------------------------------
    @classmethod
    def of(cls, spec, strict: bool = True) -> Schema:
        """Normalize any accepted form (a `Schema` is returned as it is).

        Args:
            spec: Any accepted form.
            strict: Refuse JSON Schema keys that cannot be enforced while generating
                (``uniqueItems``, ``dependencies``, ``not``...). False accepts them:
                the finished value is validated against them (``valid``, ``problem``).
        """
        if isinstance(spec, Schema):
            return spec
        if isinstance(spec, dict):
            return cls._json(spec, spec, strict)
        if isinstance(spec, (list, tuple)):
            return cls.choice(spec)
        if isinstance(spec, str):
            raise SchemaError(
                "schema: a string is ambiguous; pass Schema.regex(...), Schema.lark(...) or "
                "a list of choices"
            )
        model_schema = getattr(spec, "model_json_schema", None)
        if isinstance(spec, type) and callable(model_schema):  # a pydantic model class
            return cls._json(model_schema(), spec, strict)
        spec = _usable_typeddict(spec)
        try:
            from pydantic import TypeAdapter

            return cls._json(TypeAdapter(spec).json_schema(), spec, strict)
        except SchemaError:
            raise
        except Exception as exc:  # noqa: BLE001 - pydantic's errors are long
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SchemaError(f"schema: cannot make a JSON Schema of {spec!r}: {first}") from None

    @classmethod
    def _json(cls, schema: dict, source, strict: bool = True) -> Schema:
        from llguidance import LLMatcher

        try:
            json.dumps(schema)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"schema: not JSON-serializable: {exc}") from None
        compiled, notes = schema, []
        for _ in range(64):  # each round lifts one thing llguidance refused, or ends
            # One line, as json.dumps writes it: free whitespace lets a model spend its
            # whole budget on newlines. A schema's own "x-guidance" options still win.
            grammar = LLMatcher.grammar_from_json_schema(json.dumps(compiled), defaults=JSON_LAYOUT)
            msg = LLMatcher.validate_grammar(grammar)
            if not msg or msg.startswith("WARNING"):
                break
            compiled, note = _lift(compiled, msg, strict)
            if note is None:
                _check(grammar, "schema")  # refused: one line
            notes.append(note)
        return cls("json", grammar, json_schema=schema, source=source, notes=tuple(notes))

    @classmethod
    def choice(cls, options) -> Schema:
        """The text is exactly one of ``options`` (non-empty, distinct strings)."""
        opts = tuple(options)
        if not opts:
            raise SchemaError("choice: give at least one option")
        if not all(isinstance(o, str) and o for o in opts):
            raise SchemaError(f"choice: options must be non-empty strings (got {list(opts)!r})")
        dup = sorted({o for o in opts if opts.count(o) > 1})
        if dup:
            raise SchemaError(f"choice: duplicated option(s): {', '.join(map(repr, dup))}")
        grammar = cls.lark_text("start: " + " | ".join(json.dumps(o) for o in opts))
        return cls("choice", grammar, choices=opts, source=list(opts))

    @classmethod
    def regex(cls, pattern: str) -> Schema:
        """The text matches ``pattern`` as a whole."""
        from llguidance import LLMatcher

        if not isinstance(pattern, str) or not pattern:
            raise SchemaError(f"regex: give a non-empty pattern (got {pattern!r})")
        grammar = LLMatcher.grammar_from_regex(pattern)
        _check(grammar, "regex")
        return cls("regex", grammar, source=pattern)

    @classmethod
    def lark(cls, grammar: str) -> Schema:
        """The text follows a Lark grammar (llguidance's dialect; ``start`` is the root)."""
        return cls("lark", cls.lark_text(grammar, "lark"), source=grammar)

    @staticmethod
    def lark_text(lark: str, name: str = "choice") -> str:
        """An llguidance grammar of Lark text, checked (``name`` labels the error)."""
        from llguidance import LLMatcher

        grammar = LLMatcher.grammar_from_lark(lark)
        _check(grammar, name)
        return grammar

    # -- values ---------------------------------------------------------------------
    def parse(self, text: str):
        """The value of a finished ``text``: a pydantic instance, a typed value, a dict..."""
        if self.kind != "json":
            return text
        value = json.loads(text)
        src = self.source
        if isinstance(src, type) and hasattr(src, "model_validate"):
            return src.model_validate(value)
        if src is not None and not isinstance(src, dict):
            from pydantic import TypeAdapter

            return TypeAdapter(src).validate_python(value)
        return value

    def choice_texts(self) -> tuple[str, ...]:
        """The exact texts a choice allows: the choices, or a JSON enum's values as JSON.

        ``Literal["pos", "neg"]`` (``{"enum": [...], "type": "string"}``) gives
        ``('"pos"', '"neg"')``. Empty for every other schema.
        """
        if self.kind == "choice":
            return self.choices
        js = self.json_schema or {}
        enum = js.get("enum")
        plain = set(js) <= {"enum", "type", "title", "description"}
        if self.kind != "json" or not plain or not isinstance(enum, list) or not enum:
            return ()
        texts = tuple(json.dumps(v, ensure_ascii=False) for v in enum)
        return texts if len(set(texts)) == len(texts) else ()

    def fields(self) -> list[str]:
        """Top-level property names of an object schema, in order (else empty)."""
        props = (self.json_schema or {}).get("properties")
        return list(props) if isinstance(props, dict) else []

    def describe(self) -> str:
        """One short phrase for headers: ``json (name, age)``, ``choice of 3``..."""
        if self.kind == "choice":
            return f"choice of {len(self.choices)}"
        if self.kind == "json":
            names = self.fields()
            return f"json ({', '.join(names)})" if names else "json"
        return self.kind


def response_format(schema: Schema) -> dict:
    """OpenAI's ``response_format`` for a JSON schema (other kinds have none)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema.json_schema, "strict": True},
    }


def _usable_typeddict(spec):
    # pydantic refuses typing.TypedDict before Python 3.12: rebuild it with
    # typing_extensions' (same fields, same totality).
    import sys

    if sys.version_info >= (3, 12) or not hasattr(spec, "__total__"):
        return spec
    if not isinstance(getattr(spec, "__annotations__", None), dict):
        return spec
    import typing_extensions

    if type(spec) is type(typing_extensions.TypedDict("_T", {})):
        return spec
    return typing_extensions.TypedDict(
        spec.__name__, dict(spec.__annotations__), total=spec.__total__
    )


def _lift(schema: dict, msg: str, strict: bool) -> tuple[dict, str | None]:
    """What to compile instead of ``schema`` that llguidance refused with ``msg``.

    Returns ``(schema to compile, note)``; a None note when nothing can be lifted.

    Raises:
        SchemaError: Keys that cannot be enforced, with ``strict``.
    """
    fmt = re.search(r"Unknown format: (\S+)", msg)
    if fmt:  # JSON Schema makes `format` an annotation unless a validator knows it
        return _without_format(schema, fmt.group(1)), (
            f"format {fmt.group(1)!r} is an annotation here: not enforced, not checked"
        )
    options = dict(schema.get("x-guidance") or {})
    if "coerce_one_of" in msg and not options.get("coerce_one_of"):
        options["coerce_one_of"] = True
        note = "oneOf is generated as anyOf; the finished value is validated against oneOf"
        return {**schema, "x-guidance": options}, note
    keys = re.search(r"Unimplemented keys: \[(.*?)\]", msg)
    if keys and not options.get("lenient"):
        names = keys.group(1).replace('"', "")
        if strict:
            raise SchemaError(
                f"schema: {names} cannot be enforced while generating; pass strict=False "
                "(--no-strict) to accept it, with the finished value validated against it"
            )
        options["lenient"] = True
        note = f"{names} not enforced while generating; the finished value is validated"
        return {**schema, "x-guidance": options}, note
    return schema, None


def _without_format(node, name: str):
    """``node`` with every ``"format": name`` removed (a copy; the rest untouched)."""
    if isinstance(node, dict):
        return {
            k: _without_format(v, name)
            for k, v in node.items()
            if not (k == "format" and v == name)
        }
    if isinstance(node, list):
        return [_without_format(v, name) for v in node]
    return node


def _check(grammar: str, name: str) -> None:
    """Refuse a grammar llguidance cannot compile, in one line."""
    from llguidance import LLMatcher

    msg = LLMatcher.validate_grammar(grammar)
    if msg and not msg.startswith("WARNING"):
        lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
        detail = next((ln for ln in lines if ln.startswith("error:")), lines[0])
        raise SchemaError(f"{name}: {detail.removeprefix('error: ')}")
