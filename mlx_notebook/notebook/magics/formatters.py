"""Rich displays of results made in Python: a notebook shows their view, not a repr.

Registered with IPython by type name when the extension loads, so nothing heavy is
imported until such a value is shown: a `Result` (`mlx_notebook.generate`) as the
document a ``%%generate`` cell ends as, `mlx_notebook.score`'s `TokenTable` as the
token inspector, an evaluation (`EvalResult`, or the `EvalRun` that ``%%evaluate -o``
binds) as its matrix, summary and chart, a `MapResult` (`mlx_notebook.map`) as its
table, a `CompareResult` (`mlx_notebook.compare`) as its verdict and runs, a
`SweepResult` as its lines and chart. Model output is escaped in every one. A value
still running (``wait=False``) is shown live instead (`live_for`).
"""

from __future__ import annotations


def table_html(table) -> str:
    """A `TokenTable` (from `mlx_notebook.score`) as the token inspector."""
    from ..views.inspect import inspect_html

    title = (
        f"{len(table)} tokens · mean logprob {table.mean_logprob:.3f} · "
        f"perplexity {table.perplexity:.2f}"
    )
    return inspect_html(table, title)


def result_html(res) -> str:
    """A finished `Result` as the document a ``%%generate`` cell ends as."""
    from ...engine.events import Finished, Started, Token
    from ..views.render import ViewState
    from .handle import view_format

    model = (res.stats.model or {}).get("name") or "generation"
    state = ViewState(model=model, fmt=view_format(res.schema))
    done = Finished(res.text, res.finish_reason, res.matched_stop, res.error, res.stats)
    for ev in (Started(), Token(res.text, 0, False, 0, reasoning=res.reasoning), done):
        state.apply(ev)
    return state.html()


def evaluation_html(value) -> str:
    """An `EvalResult` or `EvalRun` as its matrix (and, once ended, summary and chart)."""
    from ..evaluate.matrix import matrix_html

    return matrix_html(value)


def map_html(res) -> str:
    """A `MapResult` as its table: the rows as they stand (a running map does not block)."""
    from ..views.render import STYLE, escape

    now = res.snapshot()
    head = f'<div class="hdr">map · {escape(now.summary())}</div>'
    try:  # pandas escapes every cell (model output is text, never markup)
        table = now.to_frame().to_html(max_rows=60, escape=True, border=0)
    except ImportError:  # pandas is optional: the texts alone
        cells = "".join(
            f"<tr><td>{escape(str(r.prompt))}</td><td>{escape(r.text)}</td>"
            f"<td>{escape(str(r.finish_reason))}</td></tr>"
            for r in now.rows
        )
        table = f"<table><tr><th>prompt</th><th>text</th><th>finish</th></tr>{cells}</table>"
    return f'{STYLE}<div class="mlxnb">{head}{table}</div>'


def compare_html(res) -> str:
    """A `CompareResult` as its verdict, figures, where the runs part, runs and acceptance."""
    from ..measure_views.charts import position_chart, runs_table
    from ..measure_views.compare import fork_line
    from ..views.render import STYLE, escape

    line = escape(res.verdict_line()) if res.verdict is not None else "Compare: no pair ended"
    parts = [
        f'<div class="verdict">{line}</div>',
        f'<div class="legend">{escape(res.figures_line())}</div>',
        fork_line(res),
    ]
    if res.runs:
        parts.append(runs_table(res.rows()))
    if res.proposed:
        parts.append(position_chart(res.acceptance_by_position))
    return f'{STYLE}<div class="mlxnb mlxnb-compare">{"".join(parts)}</div>'


def comparison_html(comparison) -> str:
    """A `Comparison` (``compare(..., wait=False)``): its result so far, final once ended."""
    return compare_html(comparison.finalize() if comparison.done else comparison.result())


def sweep_html(sweep) -> str:
    """A `Sweep` (``sweep(..., wait=False)``): its lines and chart."""
    from ..measure_views.sweep import SweepRenderer

    return SweepRenderer(sweep).html()


class _EndedSweep:
    """A `SweepResult` as `SweepRenderer` reads a `Sweep` that has ended."""

    class runs:  # noqa: N801 - read as ``sweep.runs.done``
        done = True

    def __init__(self, result) -> None:
        self._result = result

    def result(self):
        return self._result


def sweep_result_html(res) -> str:
    """A `SweepResult` (``sweep(...)``): its verdict, lines and chart."""
    return sweep_html(_EndedSweep(res))


FORMATTERS = {
    ("mlx_notebook.engine.job", "Result"): result_html,
    ("mlx_notebook.engine.token_records", "TokenTable"): table_html,
    ("mlx_notebook.evaluation.result", "EvalResult"): evaluation_html,
    ("mlx_notebook.evaluation.run", "EvalRun"): evaluation_html,
    ("mlx_notebook.mapping.result", "MapResult"): map_html,
    ("mlx_notebook.measure.compare_result", "CompareResult"): compare_html,
    ("mlx_notebook.measure.compare", "Comparison"): comparison_html,
    ("mlx_notebook.measure.sweep", "Sweep"): sweep_html,
    ("mlx_notebook.measure.sweep", "SweepResult"): sweep_result_html,
}


def html_for(value) -> str:
    """The view of ``value``, one of the types in `FORMATTERS` (or a subclass)."""
    for cls in type(value).__mro__:
        fn = FORMATTERS.get((cls.__module__, cls.__name__))
        if fn is not None:
            return fn(value)
    raise TypeError(f"no view for {type(value).__name__}")


def live_for(value, marimo: bool):
    """Show a running value as its live view (IPython), or return the view's widget (marimo).

    ``value``: a `MapResult` future (``map(..., wait=False)``), a started `Comparison`
    (``compare(..., wait=False)``) or `Sweep` (``sweep(..., wait=False)``).
    """
    from ..views.view import LiveView

    kind = type(value).__name__
    if kind == "Comparison":
        from ..measure_views.compare import CompareRun

        view = CompareRun(value).view
    elif kind == "Sweep":
        from ..measure_views.sweep import SweepRenderer

        view = LiveView(SweepRenderer(value))
    else:
        from .over import map_view

        run = value.run  # once: an earlier view of it may settle it meanwhile
        if run is None:
            return None  # ended: the static table
        view = map_view(run, run.label, "text", [], on_done=value._settle)
    if not marimo:
        view.display()
    if kind == "MapResult":
        view.attach(*run.jobs)
    else:  # paced runs: those so far, then each new one
        view.join(value.runs)
    return view.widget


def install(ipython) -> None:
    """Register every formatter for ``text/html`` (by name: nothing is imported)."""
    html = ipython.display_formatter.formatters["text/html"]
    for (module, name), fn in FORMATTERS.items():
        html.for_type_by_name(module, name, fn)


def uninstall(ipython) -> None:
    """Remove them (also those already resolved to their types)."""
    html = ipython.display_formatter.formatters["text/html"]
    mine = set(FORMATTERS.values())
    for key in FORMATTERS:
        html.deferred_printers.pop(key, None)
    for typ in [t for t, f in html.type_printers.items() if f in mine]:
        html.type_printers.pop(typ)
