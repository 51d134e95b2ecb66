"""A finished structured text against its schema: parsed, validated, or why not.

A generation's text is checked once it ends (`check_value`, never raising) and turned
into its value on request (`value_of`, raising `IncompleteValue` or `InvalidValue`);
a server's reply is validated with ``jsonschema`` where installed (`reply_problem`),
since a server may ignore the schema it was sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .schema import Schema


class IncompleteValue(ValueError):
    """A structured generation that ended before its value was complete."""


class InvalidValue(ValueError):
    """A finished text that does not follow its schema (a server that ignored it)."""


@dataclass(frozen=True)
class ValueCheck:
    """A finished structured text, checked: never raised, always said.

    Attributes:
        value: The parsed value (meaningful when `parsed`).
        parsed: Whether there is a value (a JSON ``null`` is one).
        valid: Whether it is complete and follows the schema.
        problem: When not valid, why, in one line.
    """

    value: Any
    parsed: bool
    valid: bool
    problem: str | None = None


def check_value(schema: Schema | None, text: str, finish_reason: str) -> ValueCheck:
    """Parse and validate a finished text; problems become ``valid=False``, never raise.

    A schema document the validator rejects (e.g. draft-04 ``"required": true`` in a
    property) cannot judge the value: the value (its grammar was enforced) is kept,
    ``valid`` is False and ``problem`` says why.

    Raises:
        ValueError: The request had no schema.
    """
    if schema is None:
        raise ValueError("value: this generation had no schema (pass schema=...)")
    if finish_reason != "stop":
        why = f"it ended ({finish_reason}) before its {schema.kind} value was complete"
        return ValueCheck(None, False, False, why)
    judged = True
    problem = None
    if schema.kind == "json":  # a server may have ignored the schema
        problem, judged = _validate(schema, text)
        if problem and judged:
            return ValueCheck(None, False, False, problem)
    try:
        value = schema.parse(text)
    except Exception as exc:  # noqa: BLE001 - pydantic's and json's errors, as one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ValueCheck(None, False, False, first)
    return ValueCheck(value, True, problem is None, problem)


def value_of(schema: Schema | None, text: str, finish_reason: str):
    """The value of a finished structured generation.

    Raises:
        ValueError: The request had no schema.
        IncompleteValue: It ended (stopped, at max_tokens, in error) before the
            value was complete; ``.text`` keeps the partial text.
        InvalidValue: The text does not follow the schema (a server ignored it, or a
            keyword validated only at the end); `check_value` says it without raising.
    """
    checked = check_value(schema, text, finish_reason)
    if finish_reason != "stop":
        raise IncompleteValue(
            f"value: the generation ended ({finish_reason}) before its {schema.kind} value "
            "was complete; .text keeps the partial text"
        )
    if not checked.parsed:
        raise InvalidValue(f"value: the text does not follow the schema: {checked.problem}")
    return checked.value


def reply_problem(schema: Schema, text: str) -> str | None:
    """Why a finished reply does not follow ``schema``, or None if it does (never raises).

    Checked with ``jsonschema`` when it is installed, else as JSON that parses.
    """
    return _validate(schema, text)[0]


def _validate(schema: Schema, text: str) -> tuple[str | None, bool]:
    """``(problem or None, whether the value itself was judged)``.

    A schema document the validator cannot use is a problem of the schema, not of the
    value: the value was not judged.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc})", True
    try:
        import jsonschema
    except ImportError:
        return None, True
    try:
        jsonschema.validate(value, schema.json_schema, cls=_validator(schema.json_schema))
    except jsonschema.ValidationError as exc:
        return exc.message, True
    except jsonschema.SchemaError as exc:
        why = f"the schema is not valid JSON Schema, so the value was not checked ({exc.message})"
        return why, False
    except Exception as exc:  # noqa: BLE001 - a validator failure is said, never raised
        return f"the value could not be validated ({type(exc).__name__}: {exc})", False
    return None, True


def _validator(doc: dict):
    """The validator class for ``doc``: its ``$schema``'s draft, else the latest.

    Without ``$schema``, a schema written in ``dependencies`` gets draft 7: the latest
    drafts split that key in two and would ignore it.
    """
    import jsonschema

    if "$schema" not in doc and '"dependencies"' in json.dumps(doc):
        return jsonschema.Draft7Validator
    return jsonschema.validators.validator_for(doc, default=jsonschema.Draft202012Validator)
