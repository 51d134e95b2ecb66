"""Evaluate models and prompt variants over the same rows: scored, with intervals.

``evaluate(df, template, models=[...], score=...)`` generates every (row, model,
prompt variant, epoch) through the batched engine, scores each output and returns
an `EvalResult` (`to_frame`, `table`, `summary` with paired verdicts,
`disagreements`). No IPython here: ``%%evaluate`` is a view over the same `EvalRun`.
"""

from __future__ import annotations

from .plan import Plan, build
from .result import EvalResult
from .run import EvalRun, ScorerError
from .scorers import Output, Scorer, choice, exact, includes, json_valid, judge, regex, schema

__all__ = [
    "EvalResult",
    "EvalRun",
    "Output",
    "Plan",
    "Scorer",
    "ScorerError",
    "choice",
    "evaluate",
    "exact",
    "includes",
    "json_valid",
    "judge",
    "plan",
    "regex",
    "schema",
]


def plan(data, template, models=None, score=None, epochs: int = 1, **fields) -> Plan:
    """Check an evaluation and lay out its cells, running nothing (see `evaluate`).

    Raises:
        ValueError: One line naming what is wrong.
    """
    from ..engine.backend import backend_for

    return build(data, template, models, score, epochs, backend_for, **fields)


def evaluate(data, template, models=None, score=None, epochs: int = 1, **fields) -> EvalResult:
    """Every (row, model, prompt variant, epoch) generated, batched, and scored.

    Args:
        data: A DataFrame (``{column}`` in templates), or a list or Series (``{item}``).
        template: A template string, or ``{name: template}`` to compare prompts.
        models: Model specs (local or ``http(s)://…/v1`` servers), run one after
            another, each model's cells batched together. Default: the default model.
        score: A function ``(row, output) -> float | bool | dict`` or a built-in
            (`exact`, `includes`, `regex`, `json_valid`, `schema`, `choice`, `judge`).
        epochs: Repeats of every cell (with a ``seed``, epoch ``e`` uses ``seed + e``).
        **fields: `Request` fields for every generation (``max_tokens``, ``schema``...).

    Returns:
        The `EvalResult`, once every cell ended.

    Raises:
        ValueError: Bad input, in one line, before anything runs.
        ScorerError: The scorer raised on the first row (nothing else ran).
        KeyboardInterrupt: Ctrl-C stops everything, waits, and re-raises.
    """
    return EvalRun(plan(data, template, models, score, epochs, **fields)).start().wait()
