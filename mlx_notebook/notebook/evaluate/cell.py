"""``%%evaluate --over DATA``: the cell's prompt variants × models, scored, in one view.

The cell body is the template; several variants are written under ``--- name``
lines. ``-m a,b`` lists the models (run one after another), ``--score`` a
built-in (``exact:COLUMN``, ``includes:COLUMN``, ``regex:PATTERN``, ``json_valid``,
``schema``, ``choice:OPTIONS,ANSWER``, ``judge:MODEL``) or a variable holding a
scoring function. The view streams the matrix, Stop ends everything and each
column has its own Stop; ``-o NAME`` binds the `EvalRun` (``.summary()``,
``.to_frame()``, ``.table()``, ``.disagreements()`` wait for the end).
"""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ...evaluation import scorers
from ...evaluation.plan import build
from ...evaluation.run import EvalRun, ScorerError
from ..magics.options import generation_options, in_flags, parse
from ..magics.over import over_value, variables
from ..views.view import LiveView
from .matrix import MatrixRenderer

MAX_COLUMN_BUTTONS = 8  # more columns than this: only the Stop for everything


def variants_of_cell(body: str) -> str | dict[str, str]:
    """The template, or ``{name: template}`` when the body has ``--- name`` lines.

    Raises:
        UsageError: Text before the first ``--- name`` line, or a name given twice.
    """
    lines = body.splitlines()
    if not any(line.startswith("--- ") for line in lines):
        return body
    out: dict[str, list[str]] = {}
    name = None
    for line in lines:
        if line.startswith("--- "):
            name = line[4:].strip()
            if not name or name in out:
                raise UsageError(f"%%evaluate: the variant name {name!r} is empty or repeated")
            out[name] = []
        elif name is None:
            if line.strip():
                raise UsageError("%%evaluate: text before the first '--- name' line")
        else:
            out[name].append(line)
    return {k: "\n".join(v).strip("\n") for k, v in out.items()}


def scorer_of(spec: str | None, ns: dict, schema=None):
    """A scorer from ``--score``: a built-in with its argument, or a variable.

    Raises:
        UsageError: An unknown name, or a built-in without what it needs.
    """
    if spec is None:
        return None
    name, _, arg = spec.partition(":")
    try:
        if name in ("exact", "includes"):
            return getattr(scorers, name)(arg or "answer")
        if name == "regex":
            if not arg:
                raise UsageError("--score regex:PATTERN needs a pattern")
            return scorers.regex(arg)
        if name == "json_valid":
            return scorers.json_valid()
        if name == "schema":
            if schema is None:
                raise UsageError("--score schema needs --schema NAME (the schema to check)")
            return scorers.schema(schema)
        if name == "choice":
            opts, _, ans = arg.partition(",")
            return scorers.choice(opts or "options", ans or "answer")
        if name == "judge":
            return scorers.judge(arg or "default")
    except ValueError as exc:
        raise UsageError(f"--score: {exc}") from None
    if spec in ns and callable(ns[spec]):
        return ns[spec]
    raise UsageError(
        f"--score: {spec!r} is neither a built-in (exact:COL, includes:COL, regex:PATTERN, "
        "json_valid, schema, choice:OPTIONS,ANSWER, judge:MODEL) nor a function variable"
    )


@magics_class
class EvaluateMagics(Magics):
    """``%%evaluate``.

    Args:
        shell: The IPython shell.
        settings: The `MLXNotebook` magics: defaults, routing and refresh rate.
    """

    def __init__(self, shell, settings) -> None:
        super().__init__(shell=shell)
        self.settings = settings

    @magic_arguments()
    @generation_options
    @argument("--over", required=True, help="a DataFrame, list or Series: one row each")
    @argument("--score", default=None, help="exact:COL, includes:COL, choice, judge:M, or a fn")
    @argument("-e", "--epochs", type=int, default=1, help="repeats of every cell")
    @argument("-s", "--system", default=None, help="system prompt")
    @argument("--raw", action="store_true", help="no chat template")
    @cell_magic
    def evaluate(self, line: str, cell: str):
        """Models (``-m a,b``) × prompt variants (``--- name`` lines) over ``--over``, scored."""
        args = parse(self.evaluate, line)
        fields = self.settings.request_fields(args)
        models = [m.strip() for m in fields.pop("model").split(",") if m.strip()]
        ns = variables(self.shell)
        source = over_value(args.over, ns)
        template = variants_of_cell(cell)
        scorer = scorer_of(args.score, ns, fields.get("schema"))
        try:
            plan = build(
                source, template, models, scorer, args.epochs, self.settings.route,
                system=args.system, chat=not args.raw, **fields,
            )  # fmt: skip
        except ValueError as exc:
            raise UsageError(f"%%evaluate: {in_flags(str(exc))}") from None
        run = EvalRun(plan)
        view = self._view(run)
        if args.out:
            self.shell.user_ns[args.out] = run
        try:
            run.start()
        except ScorerError as exc:
            view.wait_rendered(5.0)
            raise UsageError(f"%%evaluate: {exc}") from None
        if args.wait:
            try:
                run.wait()
            finally:
                view.wait_rendered(5.0)  # the final matrix and summary are sent

    def _view(self, run: EvalRun) -> LiveView:
        view = LiveView(MatrixRenderer(run), self.settings.refresh_hz)
        run.on_submit = view.add

        def changed() -> None:
            view.touch()
            if run.done:
                view.seal()

        run.on_change = changed
        cols = run.plan.columns
        if 1 < len(cols) <= MAX_COLUMN_BUTTONS:
            # A row of its own above the view (gone when the run ends): the header
            # keeps its line, and the Stop for everything keeps its top right place.
            live = view.live
            buttons = []
            for i, col in enumerate(cols):
                name = f"column {i}"
                tip = f"Stop the column {col.label} (the others go on)"
                buttons.append([name, f"■ {col.label[:28]}", tip])

                def stop_column(i=i, name=name) -> None:
                    run.cancel_column(i)
                    live.pressed = [*live.pressed, name]

                live.on_click(name, stop_column)
            live.row = {"label": "Stop one column:", "buttons": buttons}
        view.display().attach(sealed=False)
        return view
