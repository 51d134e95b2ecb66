"""``%%generate --over NAME``: the cell as a template over many rows, in one compact view.

``{item}`` takes each element of a list, tuple or pandas Series; for a
DataFrame, ``{column}`` takes that row's column. Other ``{names}`` come from the
user's variables as in any cell. The rows run through `mapping.MapRun` (batched
by the local engine); the view shows rows done, aggregate tok/s, an ETA and a
live preview of a few rows, and one Stop cancels every row still to finish.
It ends as a saved document with every row's text.
"""

from __future__ import annotations

from IPython.core.error import UsageError

from ...engine.events import Event
from ...mapping.mapper import MapResult, MapRun, fill_rows, rows_of
from ...template import cell_body, visible
from ..views.markup import escape
from ..views.over_fields import fields_table
from ..views.render import STYLE, ViewState, stats_line
from ..views.view import LiveView


def over_cell(magics, args, cell: str) -> None:
    """``%%generate --over NAME``: one row per item, one view; ``-o`` binds the `MapResult`.

    Raises:
        UsageError: One line for a bad name, value, option or row; nothing runs then.
    """
    if args.compare:
        raise UsageError("--over and --compare do not go together")
    fields = magics.request_fields(args)
    ns = variables(magics.shell)
    source = over_value(args.over, ns)
    try:
        rows, names = rows_of(source)
    except ValueError as exc:  # not a list, Series or DataFrame, or empty
        raise UsageError(f"--over: {args.over!r} is {exc}") from None
    try:
        prompts = fill_rows(cell_body(cell), rows, names, ns)
    except ValueError as exc:  # a {name} that is neither a column nor a variable
        raise UsageError(f"--over: {exc}") from None
    notices = list(fields["schema"].notes) if fields.get("schema") is not None else []
    route = magics.route(fields.pop("model"))
    try:
        run = MapRun(
            route.backend, prompts, model=route.model, label=route.label, system=args.system,
            chat=not args.raw, **fields,
        ).start()  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    frame = source if type(source).__name__ == "DataFrame" else None
    view, result = show_map(run, route.label, args.format, notices, magics.refresh_hz, frame)
    if args.out:
        magics.shell.user_ns[args.out] = result
    if args.wait:
        wait_map(run, view)


PREVIEW_ROWS = 3
PREVIEW_CHARS = 240


def over_value(name: str, ns: dict):
    """The user's variable ``name`` that ``--over`` names.

    Raises:
        UsageError: No such variable.
    """
    if name not in ns:
        raise UsageError(f"--over: no variable named {name!r}")
    return ns[name]


class MapRenderer:
    """Folds every row's events; renders progress, a preview, then every row.

    Args:
        run: The rows.
        label: Model name for the header.
        fmt: Rows' format (text is always escaped).
        notices: Warning lines.
    """

    def __init__(self, run: MapRun, label: str, fmt: str, notices: list[str]) -> None:
        self.run, self.label, self.notices = run, label, notices
        self.states = [ViewState(model=label, fmt=fmt) for _ in run.prompts]
        self.stopping = False
        self._done_at: float | None = None

    def apply_from(self, index: int, ev: Event) -> None:
        """Fold an event of row ``index``."""
        self.states[index].apply(ev)

    def set_stopping(self) -> None:
        """Stop was pressed."""
        self.stopping = True
        for s in self.states:
            s.stopping = True

    def _state(self, done: int, total: int) -> str:
        if done < total:
            return "stopping…" if self.stopping else "generating"
        reasons = {s.finished.finish_reason for s in self.states if s.finished}
        if "error" in reasons:
            return "done, with errors"
        return "stopped" if "cancelled" in reasons else "done"

    def _figures(self) -> tuple[int, int, str]:
        finished = sum(s.finished is not None for s in self.states)
        total = len(self.states)
        _, _, tokens, tps, eta = self.run.progress()
        bits = [f"{finished}/{total} rows", f"{tokens} tokens", f"{tps:.1f} tok/s aggregate"]
        if eta is not None and finished < total and not self.stopping:
            bits.append(f"ETA {eta:.0f} s")
        return finished, total, " · ".join(bits)

    def html(self) -> str:
        """Header, progress bar and preview while running; every row once done."""
        done, total, figures = self._figures()
        parts = [
            STYLE,
            '<div class="mlxnb">',
            f'<div class="hdr">{escape(self.label)} · map over {total} rows · '
            f'<span class="state">{escape(self._state(done, total))}</span></div>',
        ]
        parts += [f'<div class="note">{escape(n)}</div>' for n in self.notices]
        pct = 100 * done / max(total, 1)
        parts.append(
            f'<div class="prog"><span class="bar"><div style="width:{pct:.1f}%"></div></span>'
            f"{escape(figures)}</div>"
        )
        if self.run.schema is not None:  # the schema's fields, filling in row by row
            parts.append(fields_table(self.run.schema, self.states, live=done < total))
        elif done < total:
            live = [i for i, s in enumerate(self.states) if s.finished is None and s.tokens]
            for i in live[:PREVIEW_ROWS]:
                tail = self.states[i].text[-PREVIEW_CHARS:]
                parts.append(
                    f'<div class="legend">row {i}</div><pre class="txt">{escape(tail)}</pre>'
                )
        else:
            parts.append(self._table())
        parts.append("</div>")
        return "".join(parts)

    def _table(self) -> str:
        head = (
            '<colgroup><col style="width:3em"><col style="width:25%"><col>'
            '<col style="width:9em"></colgroup><tr><th>#</th><th>prompt</th><th>text</th>'
            "<th>finish</th></tr>"
        )
        body = []
        for i, (p, s) in enumerate(zip(self.run.prompts, self.states)):
            f = s.finished
            end = "" if f is None else (f.error or "error") if f.finish_reason == "error" else (
                stats_line(f).rsplit(" · ", 1)[-1]
            )  # fmt: skip
            prompt = p if isinstance(p, str) else str(p)
            body.append(
                f"<tr><td>{i}</td><td>{escape(prompt[:80])}</td>"
                f'<td class="text">{escape(s.text)}</td><td>{escape(end)}</td></tr>'
            )
        return f'<table class="grid">{head}{"".join(body)}</table>'

    def plain(self) -> str:
        """Every row's exact text, with its outcome."""
        done, total, figures = self._figures()
        lines = [f"[{self.label} · map over {total} rows · {self._state(done, total)}]", figures]
        lines += [f"warning: {n}" for n in self.notices]
        for i, s in enumerate(self.states):
            f = s.finished
            word = "running" if f is None else f.finish_reason
            err = f" ({f.error})" if f is not None and f.error else ""
            lines += [f"--- row {i} [{word}{err}]", s.text]
        return "\n".join(lines)


def show_map(
    run: MapRun, label: str, fmt: str, notices, refresh_hz: float, source=None
) -> tuple[LiveView, MapResult]:
    """Display the live view of ``run`` (started); return it and its `MapResult`.

    The result (what ``-o NAME`` binds) is a future: its final values wait for
    the rows, and it is completed in place when the last row ends.
    """
    result = run.future(source)
    view = map_view(run, label, fmt, notices, refresh_hz, on_done=result._settle)
    view.display().attach(*run.jobs)
    return view, result


def map_view(run: MapRun, label: str, fmt: str, notices, refresh_hz: float = 20, on_done=None):
    """The live view of ``run`` (not yet shown or attached); ``on_done`` once every row ended.

    ``on_done`` is not called when the view ends early (its refresh thread stopped
    with rows still running): it settles a `MapResult`, which would wait.
    """

    def complete() -> None:
        if run.done and on_done is not None:
            on_done()  # every row ended: no waiting

    return LiveView(MapRenderer(run, label, fmt, list(notices)), refresh_hz, on_done=complete)


def wait_map(run: MapRun, view: LiveView) -> None:
    """Block until every row ended (Ctrl-C stops them) and the final view was sent."""
    try:
        run.wait()  # on ■ the rows are cancelled and waited for, then it re-raises
    finally:
        view.wait_rendered(5.0)  # the result is complete and the document sent


def variables(shell) -> dict:
    """The user's variables a template may use."""
    return visible(shell.user_ns, shell.user_ns_hidden) if shell is not None else {}
