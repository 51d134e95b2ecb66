"""The evaluation view: a matrix of rows × (model, prompt) that fills as texts arrive.

Each cell shows its text so far (escaped: model output is never markup) and its
score once scored; the header says which model runs; at the end come each
column's mean score with its 95% interval and speed, every paired verdict, and
a chart of the scores with their intervals (inline SVG, theme colours).
"""

from __future__ import annotations

from ...evaluation.result import EvalResult, Summary
from ...evaluation.run import EvalRun
from ..measure_views.charts import BRAND, _svg
from ..views.markup import escape
from ..views.render import STYLE

LIVE_ROWS = 20  # rows drawn while running: each refresh stays small
CELL_CHARS = 240  # text shown per cell (the data keep it all)


class MatrixRenderer:
    """Renders an `EvalRun` (reads its cells; jobs' events only trigger redraws)."""

    def __init__(self, run: EvalRun, label: str = "evaluate") -> None:
        self.run, self.label = run, label
        self.stopping = False

    def apply_from(self, index: int, ev) -> None:
        """Events only mark the view for a redraw: cells read their job's text."""

    def set_stopping(self) -> None:
        """Stop was pressed: every column stops, later models are skipped."""
        self.stopping = True
        self.run.cancel()

    # -- parts ----------------------------------------------------------------------
    def _state(self) -> str:
        run = self.run
        if not run.done:
            if self.stopping:
                return "stopping…"
            return f"running {run.current}" if run.current else "starting"
        if run.error:
            return "ended early"
        reasons = {c.finish_reason for c in run.cells}
        return "stopped" if reasons & {"cancelled", "skipped"} else "done"

    def _figures(self) -> str:
        cells = self.run.cells
        ended = sum(c.ended for c in cells)
        tokens = sum(
            c.stats.generation_tokens if c.stats is not None
            else (c.job.token_count if c.job is not None else 0)
            for c in cells
        )  # fmt: skip
        return f"{ended}/{len(cells)} cells · {tokens} tokens · {self.run.elapsed():.1f} s"

    def _title(self) -> str:
        p = self.run.plan
        bits = [f"{len(p.rows)} rows", f"{len(p.models)} models"]
        variants = {c.variant for c in p.columns}
        if len(variants) > 1:
            bits.append(f"{len(variants)} prompts")
        if p.epochs > 1:
            bits.append(f"{p.epochs} epochs")
        scorer = p.scorer.name if p.scorer else "no scorer"
        return f"{self.label} · {' × '.join(bits)} · {scorer}"

    def _grid(self) -> dict[tuple[int, int], list]:
        """Cells by ``(column, row)``, epochs in order: one pass per render, not per cell."""
        grid: dict[tuple[int, int], list] = {}
        for c in self.run.cells:
            grid.setdefault((c.column, c.row), []).append(c)
        return grid

    @staticmethod
    def _cell(mine: list) -> tuple[str, str]:
        """``(text, score)`` of a matrix cell: epoch 0's text, the mean over epochs."""
        text = mine[0].live_text if mine else ""
        if mine and mine[0].finish_reason == "skipped":
            text = "(skipped)"
        errs = [c.error for c in mine if c.error]
        scores = [c.score for c in mine if c.score is not None]
        score = _num(sum(scores) / len(scores)) if scores else ""
        if errs and not scores:
            score = "error"
        return text, score

    def _matrix(self, live: bool) -> str:
        p = self.run.plan
        cols = p.columns
        n = min(len(p.rows), LIVE_ROWS) if live else len(p.rows)
        head = "".join(f"<th>{escape(c.label)}</th>" for c in cols)
        grid, body = self._grid(), []
        for r in range(n):
            tds = []
            for ci in range(len(cols)):
                text, score = self._cell(grid.get((ci, r), []))
                short = text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"
                badge = f'<div class="legend">score {escape(score)}</div>' if score else ""
                tds.append(f'<td class="text">{escape(short)}{badge}</td>')
            body.append(f"<tr><td>{r}</td>{''.join(tds)}</tr>")
        more = len(p.rows) - n
        tail = f'<div class="legend">… {more} more rows when it ends</div>' if more else ""
        return (
            f'<table class="grid"><colgroup><col style="width:3em"></colgroup><tr><th>#</th>'
            f"{head}</tr>{''.join(body)}</table>{tail}"
        )

    def _summary(self, s: Summary) -> str:
        rows = []
        for c in s.columns:
            m = c.score
            span = "" if m.low is None else f"[{m.low:.3f}, {m.high:.3f}]"
            mean = "" if m.mean is None else f"{m.mean:.3f}"
            norm = "" if c.acc_norm is None or c.acc_norm.mean is None else f"{c.acc_norm.mean:.3f}"
            rows.append(
                f"<tr><td>{escape(c.label)}</td><td>{mean}</td><td>{span}</td><td>{m.n}</td>"
                + (f"<td>{norm}</td>" if s.columns[0].acc_norm is not None else "")
                + f"<td>{c.tps:.1f}</td><td>{c.failed + c.stopped}</td></tr>"
            )
        norm_head = "<th>acc_norm</th>" if s.columns[0].acc_norm is not None else ""
        table = (
            '<table class="grid auto"><tr><th>column</th>'
            f"<th>{escape(s.scorer or 'score')}</th><th>95% interval</th><th>rows</th>"
            f"{norm_head}<th>tok/s</th><th>not scored</th></tr>{''.join(rows)}</table>"
        )
        verdicts = []
        for pr in s.pairs:
            mark = "neutral" if pr.verdict == "within noise" else "ok"
            verdicts.append(f'<div class="{mark}">{escape(str(pr))}</div>')
        return table + score_chart(s) + "".join(verdicts)

    # -- the view -------------------------------------------------------------------------
    def html(self) -> str:
        """Header, progress and the matrix; the summary and chart once it ended."""
        run = self.run
        parts = [
            STYLE,
            '<div class="mlxnb">',
            f'<div class="hdr">{escape(self._title())} · '
            f'<span class="state">{escape(self._state())}</span></div>',
            f'<div class="stats">{escape(self._figures())}</div>',
        ]
        if run.error:
            parts.append(f'<div class="err">{escape(run.error)}</div>')
        parts.append(self._matrix(live=not run.done))
        if run.done:
            parts.append(self._summary(run.result().summary()))
        parts.append("</div>")
        return "".join(parts)

    def plain(self) -> str:
        """The same as text: every cell's text and score, then the summary."""
        run = self.run
        lines = [f"[{self._title()} · {self._state()}]", self._figures()]
        if run.error:
            lines.append(f"error: {run.error}")
        p, grid = run.plan, self._grid()
        for r in range(len(p.rows)):
            for ci, col in enumerate(p.columns):
                text, score = self._cell(grid.get((ci, r), []))
                lines.append(f"--- row {r} · {col.label}" + (f" · score {score}" if score else ""))
                lines.append(text)
        if run.done:
            lines.append(str(run.result().summary()))
        return "\n".join(lines)


class _Ended:
    """An `EvalResult` read as the run that made it, for `MatrixRenderer`."""

    def __init__(self, res: EvalResult) -> None:
        self.plan, self.cells, self.error, self._res = res.plan, res.cells, res.error, res
        self.done, self.current = True, None

    def elapsed(self) -> float:
        return self._res.elapsed_s

    def result(self) -> EvalResult:
        return self._res


def matrix_html(value: EvalRun | EvalResult) -> str:
    """An evaluation's view as static HTML: the run as it stands, or a result's end."""
    run = value if isinstance(value, EvalRun) else _Ended(value)
    return MatrixRenderer(run).html()


def _num(v: float) -> str:
    return f"{v:.0f}" if v == int(v) else f"{v:.2f}"


def score_chart(s: Summary, width: int = 420) -> str:
    """Each column's mean score as a bar with its 95% interval as a whisker (SVG)."""
    cols = [c for c in s.columns if c.score.mean is not None]
    if not cols:
        return ""
    top = max([1.0] + [c.score.high or c.score.mean for c in cols])
    low = min([0.0] + [c.score.low if c.score.low is not None else c.score.mean for c in cols])
    left, right, row_h = 150, width - 20, 22
    height = row_h * len(cols) + 24

    def x(v):
        return left + (v - low) / ((top - low) or 1) * (right - left)

    body = []
    for i, c in enumerate(cols):
        y = 6 + i * row_h
        m = c.score
        body.append(
            f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{escape(c.label[:24])}</text>'
            f'<rect x="{x(min(0.0, m.mean)):.1f}" y="{y + 3}" '
            f'width="{abs(x(m.mean) - x(0.0)):.1f}" height="{row_h - 8}" fill="{BRAND}" '
            f'fill-opacity="0.55"/>'
        )
        if m.low is not None:
            body.append(
                f'<line x1="{x(m.low):.1f}" x2="{x(m.high):.1f}" y1="{y + 9}" y2="{y + 9}" '
                f'stroke="currentColor" stroke-width="1.5"/>'
                f'<line x1="{x(m.low):.1f}" x2="{x(m.low):.1f}" y1="{y + 4}" y2="{y + 14}" '
                f'stroke="currentColor"/><line x1="{x(m.high):.1f}" x2="{x(m.high):.1f}" '
                f'y1="{y + 4}" y2="{y + 14}" stroke="currentColor"/>'
            )
    base = height - 14
    body.append(
        f'<line x1="{left}" x2="{right}" y1="{base}" y2="{base}" stroke="currentColor" '
        f'stroke-opacity="0.4"/><text x="{left}" y="{height - 2}">{_num(low)}</text>'
        f'<text x="{right}" y="{height - 2}" text-anchor="end">{_num(top)}</text>'
    )
    return _svg(width, height, body, "mean score per column with its 95% interval")
