"""Scorers: how good one output is for one row, as a number.

A scorer is a plain function ``(row, output) -> float | bool | dict``: ``row`` is
the row's values (a dict of its columns), ``output`` an `Output` (the text, its
parsed value with a schema, its finish reason). A bool counts as 1 or 0; a dict
gives its ``"score"`` as the score and its other keys as extra columns. The
built-ins are small factories that return such functions, as mlx-lm's samplers
are: `exact`, `includes`, `regex`, `json_valid`, `schema`; and two that change
how a cell is made: `choice` (no generation: the option the model finds most
likely, by log-likelihood, as lm-evaluation-harness scores multiple choice) and
`judge` (a local model grades each output with a schema-enforced verdict).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Output:
    """What a scorer is given about one cell.

    Attributes:
        text: The generated text (for `choice`, the chosen option).
        finish_reason: ``"stop"``, ``"length"``, ``"cancelled"`` or ``"error"``.
        value: The parsed value when the request had a schema, else None.
        prompt: The prompt the template made for this row.
        model: The model's spec.
        variant: The prompt variant's name.
        epoch: The repeat (0-based).
    """

    text: str
    finish_reason: str = "stop"
    value: Any = None
    prompt: str = ""
    model: str = ""
    variant: str = ""
    epoch: int = 0


@dataclass(frozen=True)
class Scorer:
    """A named scoring function and how its cells are made.

    Attributes:
        name: The score's name in tables (``"exact"``, ``"includes"``, ...).
        fn: ``(row, output) -> float | bool | dict``.
        kind: ``"text"`` (score a generated text), ``"choice"`` (log-likelihood
            of each option, no generation) or ``"judge"`` (a model grades).
        columns: The row columns it reads (checked before anything runs).
        options: For `choice`: the column holding each row's options.
        judge_model: For `judge`: the grading model's spec.
        rubric: For `judge`: what the grader is told a good answer is.
    """

    name: str
    fn: Callable[[dict, Output], Any] | None = None
    kind: str = "text"
    columns: tuple[str, ...] = ()
    options: str | None = None
    judge_model: str | None = None
    rubric: str = ""
    extra: dict = field(default_factory=dict)

    def __call__(self, row: dict, out: Output):
        """Score ``out`` for ``row``."""
        return self.fn(row, out)


def as_scorer(score) -> Scorer | None:
    """A `Scorer` from a built-in, a plain function, or None (no scoring).

    Raises:
        ValueError: Something that is not callable.
    """
    if score is None or isinstance(score, Scorer):
        return score
    if not callable(score):
        raise ValueError(f"score: must be a function (row, output) -> number (got {score!r})")
    return Scorer(getattr(score, "__name__", "score"), score)


def normalize(value) -> tuple[float | None, dict]:
    """A scorer's return as ``(score, extra columns)``.

    Raises:
        ValueError: Neither a number, a bool, None nor a dict with numbers.
    """
    if value is None:
        return None, {}
    if isinstance(value, bool):
        return float(value), {}
    if isinstance(value, (int, float)):
        return float(value), {}
    if isinstance(value, dict):
        extra = {k: v for k, v in value.items() if k != "score"}
        main = value.get("score")
        if main is None:
            nums = [v for v in value.values() if isinstance(v, (int, float))]
            main = nums[0] if nums else None
        return (None if main is None else float(main)), extra
    raise ValueError(
        f"a scorer returned {type(value).__name__} ({value!r:.60}); "
        "it must return a number, a bool or a dict with a 'score'"
    )


def _text(value) -> str:
    return "" if value is None else str(value)


def exact(column: str = "answer", *, ignore_case: bool = False, strip: bool = True) -> Scorer:
    """1 when the output equals the row's ``column`` (stripped; case kept unless asked)."""

    def fn(row, out):
        a, b = out.text, _text(row[column])
        if strip:
            a, b = a.strip(), b.strip()
        if ignore_case:
            a, b = a.lower(), b.lower()
        return a == b

    return Scorer("exact", fn, columns=(column,))


def includes(column: str = "answer", *, ignore_case: bool = True) -> Scorer:
    """1 when the output contains the row's ``column`` (case ignored unless asked)."""

    def fn(row, out):
        want, text = _text(row[column]).strip(), out.text
        if ignore_case:
            want, text = want.lower(), text.lower()
        return bool(want) and want in text

    return Scorer("includes", fn, columns=(column,))


def regex(pattern: str, column: str | None = None, *, flags: int = 0) -> Scorer:
    """1 when ``pattern`` matches (with ``column``: when its first group equals it).

    Without a group, the whole match is compared with the row's ``column``.

    Raises:
        ValueError: A pattern that does not compile (before anything runs).
    """
    try:
        rx = re.compile(pattern, flags)
    except re.error as exc:
        raise ValueError(f"regex: {pattern!r} does not compile ({exc})") from None

    def fn(row, out):
        m = rx.search(out.text)
        if column is None:
            return m is not None
        if m is None:
            return False
        got = m.group(1) if rx.groups else m.group(0)
        return got.strip() == _text(row[column]).strip()

    return Scorer("regex", fn, columns=(column,) if column else ())


def json_valid() -> Scorer:
    """1 when the output parses as JSON."""

    def fn(row, out):
        try:
            json.loads(out.text)
        except ValueError:
            return False
        return True

    return Scorer("json_valid", fn)


def schema(spec) -> Scorer:
    """1 when the output is JSON that follows ``spec`` (a JSON Schema or pydantic model).

    Raises:
        ValueError: A spec that is not a JSON schema.
    """
    from ..schema import Schema
    from ..value_check import reply_problem

    s = Schema.of(spec)
    if s.kind != "json":
        raise ValueError("schema: give a JSON Schema (dict) or a pydantic model")

    def fn(row, out):
        return not reply_problem(s, out.text)

    return Scorer("schema", fn)


def choice(options: str = "options", answer: str = "answer") -> Scorer:
    """Multiple choice by log-likelihood, without generating (lm-evaluation-harness's way).

    Each option is scored as the reply to the row's prompt: the sum of its tokens'
    log-probabilities. The cell's text is the most likely option; its score is
    ``acc`` (1 when that is the row's ``answer``), and ``acc_norm`` ranks by the
    sum divided by the option's length in characters. ``answer`` may be the
    option's text or its index.

    Args:
        options: The column holding each row's options (a list of strings).
        answer: The column holding the right option.
    """

    def fn(row, out):  # called with out.value = the options' log-likelihoods
        opts = list(row[options])
        lls = out.value
        want = row[answer]
        right = want if isinstance(want, int) and not isinstance(want, bool) else None
        if right is None:
            right = opts.index(_text(want)) if _text(want) in opts else -1
        best = max(range(len(opts)), key=lambda i: lls[i])
        norm = max(range(len(opts)), key=lambda i: lls[i] / max(len(opts[i]), 1))
        return {"score": float(best == right), "acc_norm": float(norm == right)}

    return Scorer("choice", fn, kind="choice", columns=(options, answer), options=options)


VERDICT = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
        "reason": {"type": "string", "maxLength": 300},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}

JUDGE_PROMPT = (
    "You grade answers. Rubric: {rubric}\n\nQuestion:\n{prompt}\n\n"
    "{reference}Answer to grade:\n{answer}\n\n"
    "Give a score from 1 (bad) to 5 (excellent) and a short reason, as JSON."
)


def judge(
    model: str = "default", rubric: str = "correct, complete and concise", reference=None
) -> Scorer:
    """A local model grades each output: ``{"score": 1-5, "reason": str}``, schema-enforced.

    The grader's verdict is generated under a JSON schema (never free text read by a
    pattern); its ``score`` is the cell's score and its ``reason`` an extra column.

    Args:
        model: The grading model (a local spec or a server).
        rubric: What a good answer is.
        reference: A column with a reference answer, shown to the grader.
    """

    def fn(row, out):  # called with out.value = the grader's parsed verdict
        v = out.value
        return {"score": float(v["score"]), "reason": v["reason"]}

    cols = (reference,) if reference else ()
    return Scorer(
        "judge", fn, kind="judge", columns=cols, judge_model=model, rubric=rubric,
        extra={"reference": reference},
    )  # fmt: skip


def judge_prompt(scorer: Scorer, row: dict, out: Output) -> str:
    """What the grader is asked about one output."""
    from ..template import fill

    ref = scorer.extra.get("reference")
    reference = f"Reference answer:\n{_text(row[ref])}\n\n" if ref else ""
    text, _ = fill(
        JUDGE_PROMPT,
        {"rubric": scorer.rubric, "prompt": out.prompt, "reference": reference,
         "answer": out.text},
    )  # fmt: skip
    return text
