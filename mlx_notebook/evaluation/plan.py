"""What an evaluation will run: its columns (model × prompt variant) and cells, checked.

Everything a user can get wrong is found here, before anything runs, in one line:
a template field that is not a column, an unknown model, a scorer reading a
column that is not there, a `choice` column that is not a list of options, or
`choice` on a server (it needs the model's log-likelihoods).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..engine.job import Job
from ..engine.request import Request
from ..mapping.mapper import fill_rows, rows_of
from .scorers import Scorer, as_scorer


@dataclass(frozen=True)
class Column:
    """One model with one prompt variant: a column of the matrix.

    Attributes:
        model: The model spec as given.
        variant: The prompt variant's name.
        template: Its template.
        label: How tables name it (``model · variant``, shortened when one of the
            two does not vary).
    """

    model: str
    variant: str
    template: str
    label: str


@dataclass
class Cell:
    """One (row, column, epoch): its prompt, its job while it runs, then its outcome.

    Attributes:
        row: The row's index.
        column: The column's index.
        epoch: The repeat (0-based).
        prompt: The filled template.
        job: The generation (None for `choice` cells and before submission).
        text: The output (for `choice`, the chosen option).
        finish_reason: ``"pending"`` until it ends; then as a generation's, or
            ``"skipped"`` for a column stopped before it began.
        error: Why it failed (a generation's or the scorer's error).
        score: The score (None until scored, or when it could not be).
        extra: A scorer's other values (``acc_norm``, a judge's ``reason``).
        stats: The generation's stats (None for `choice` cells).
    """

    row: int
    column: int
    epoch: int
    prompt: str
    job: Job | None = None
    text: str = ""
    finish_reason: str = "pending"
    error: str | None = None
    score: float | None = None
    extra: dict = field(default_factory=dict)
    stats: object = None

    @property
    def ended(self) -> bool:
        """Whether the cell has its outcome (scored or not)."""
        return self.finish_reason != "pending"

    @property
    def live_text(self) -> str:
        """The text so far: the job's while it runs."""
        if not self.ended and self.job is not None:
            return self.job.text
        return self.text


@dataclass
class Plan:
    """Rows, columns and cells of one evaluation, with where each model runs."""

    rows: list[dict]
    names: list[str]
    columns: list[Column]
    cells: list[Cell]
    routes: dict  # model spec -> engine.backend.Route
    scorer: Scorer | None
    fields: dict
    epochs: int
    judge_route: object = None  # where a `judge` scorer's grader runs

    @property
    def models(self) -> list[str]:
        """The models, in the order they run."""
        return list(dict.fromkeys(c.model for c in self.columns))

    def request(self, cell: Cell) -> Request:
        """The `Request` of a cell (its epoch offsets a seed, so repeats differ)."""
        fields = dict(self.fields)
        if fields.get("seed") is not None:
            fields["seed"] = fields["seed"] + cell.epoch
        col = self.columns[cell.column]
        return Request(cell.prompt, model=self.routes[col.model].model, **fields)


def variants_of(template) -> dict[str, str]:
    """``{name: template}`` from one template or a dict of them.

    Raises:
        ValueError: No template, or a name or template that is not a string.
    """
    if isinstance(template, str):
        return {"prompt": template}
    if isinstance(template, dict) and template:
        for name, t in template.items():
            if not isinstance(name, str) or not isinstance(t, str):
                raise ValueError("template: a dict must map names to template strings")
        return dict(template)
    raise ValueError("template: give a template string or a dict {name: template}")


def _short(spec: str) -> str:
    """A model spec as a column heading: a path's last part."""
    if spec.startswith(("http://", "https://")):
        return spec
    return os.path.basename(spec.rstrip("/")) or spec


def build(data, template, models, score, epochs: int, route_for, **fields) -> Plan:
    """Check everything and lay out the cells (column-major: a model's cells together).

    Args:
        data: A DataFrame, or a list or Series (``{item}``).
        template: A template, or ``{name: template}`` prompt variants.
        models: Model specs (local or servers), run in this order.
        score: A scorer, a plain function, or None.
        epochs: Repeats of every cell (sampled outputs differ; a seed moves by one).
        route_for: ``spec -> Route`` (`engine.backend.backend_for`).
        **fields: `Request` fields for every generation.

    Raises:
        ValueError: One line naming what is wrong; nothing has run.
    """
    rows, names = _rows(data)
    variants = variants_of(template)
    if isinstance(models, str):
        models = [models]
    models = list(models or ["default"])
    if len(set(models)) != len(models):
        raise ValueError("models: a model is listed twice")
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs: must be a whole number >= 1 (got {epochs!r})")
    scorer = as_scorer(score)
    missing = [c for c in (scorer.columns if scorer else ()) if c not in names]
    if missing:
        raise ValueError(
            f"score: {scorer.name} reads the column {missing[0]!r}, which the data does "
            f"not have; the columns are {', '.join(names)}"
        )
    prompts = {}
    for name, t in variants.items():
        try:
            prompts[name] = fill_rows(t, rows, names)
        except ValueError as exc:
            raise ValueError(f"template {name!r}: {exc}") from None
    if scorer is not None and scorer.kind == "choice":
        _check_options(rows, scorer.options)
        epochs = 1  # a likelihood is the same every time
    routes = {m: route_for(m) for m in models}
    columns = [
        Column(m, v, t, _label(m, v, len(models), len(variants)))
        for m in models
        for v, t in variants.items()
    ]
    cells = [
        Cell(r, ci, e, prompts[col.variant][r])
        for ci, col in enumerate(columns)
        for e in range(epochs)
        for r in range(len(rows))
    ]
    plan = Plan(rows, names, columns, cells, routes, scorer, fields, epochs)
    if scorer is not None and scorer.kind == "judge":
        plan.judge_route = route_for(scorer.judge_model)
    _check_requests(plan)
    return plan


def _rows(data) -> tuple[list[dict], list[str]]:
    """Rows from a DataFrame, a list of dicts (records), or a list or Series (``item``)."""
    if isinstance(data, (list, tuple)) and data and all(isinstance(r, dict) for r in data):
        names = list(dict.fromkeys(str(k) for r in data for k in r))
        return [{str(k): v for k, v in r.items()} for r in data], names
    try:
        return rows_of(data)
    except ValueError as exc:
        raise ValueError(f"data: {exc}") from None


def _label(model: str, variant: str, n_models: int, n_variants: int) -> str:
    if n_variants == 1:
        return _short(model)
    if n_models == 1:
        return variant
    return f"{_short(model)} · {variant}"


def _check_options(rows: list[dict], column: str) -> None:
    for i, row in enumerate(rows):
        opts = row[column]
        if hasattr(opts, "tolist"):
            opts = row[column] = opts.tolist()
        ok = isinstance(opts, (list, tuple)) and len(opts) >= 2
        if not ok or not all(isinstance(o, str) and o for o in opts):
            raise ValueError(
                f"choice: row {i}'s {column!r} must be a list of at least two option "
                f"strings (got {opts!r:.80})"
            )


def _check_requests(plan: Plan) -> None:
    """One request per column checked as the backend would (model, fields, prompt)."""
    first = {}
    for cell in plan.cells:
        first.setdefault(cell.column, cell)
    for ci, cell in first.items():
        col = plan.columns[ci]
        route = plan.routes[col.model]
        if plan.scorer is not None and plan.scorer.kind == "choice":
            if getattr(route.backend, "option_logprobs", None) is None:
                raise ValueError(
                    f"choice: scores options by their log-likelihood under a local model; "
                    f"{route.label} is a server, which does not send them for a given text"
                )
        try:
            route.backend.check(plan.request(cell))
        except ValueError as exc:
            raise ValueError(f"{col.label}: {exc}") from None
    if plan.judge_route is not None:
        from .scorers import VERDICT

        judge = plan.judge_route
        try:
            judge.backend.check(Request("grade", model=judge.model, schema=VERDICT))
        except ValueError as exc:
            raise ValueError(f"judge: {exc}") from None
