"""The Compare view: the first pair streams side by side; later pairs update the figures.

All measuring is done by `mlx_notebook.measure.Comparison`; this module only
renders it, so ``%%generate --compare``, the Panel and ``mlx_notebook.compare``
share one path.
"""

from __future__ import annotations

import html
import re

from ..engine.request import Request
from ..measure.compare import CompareResult, Comparison
from .charts import position_chart, runs_table
from .render import STYLE, ViewState, escape
from .view import LiveView

TAG = re.compile(r"<[^>]+>")


class CompareRenderer:
    """Verdict line, legend, the first pair's two columns, the runs, acceptance by position.

    Args:
        comparison: The comparison being run.
        fmt: Text format of the columns.
        label: How to name the model (default: its spec).
    """

    def __init__(self, comparison: Comparison, fmt: str = "text", label: str | None = None):
        self.comparison = comparison
        req = comparison.request
        self.states = [
            ViewState(
                model=label or req.model,
                mode="normal" if role == "normal" else req.mode,
                k=req.num_draft_tokens,
                fmt=fmt,
                highlight_drafts=role != "normal",
            )
            for _, role in comparison.plan
        ]
        # The first pair, normal on the left whichever ran first.
        first = [i for i, (p, _) in enumerate(comparison.plan) if p == 0]
        self.columns = sorted(first, key=lambda i: comparison.plan[i][1] != "normal")

    def apply_from(self, index: int, ev) -> None:
        """Fold an event of run ``index``."""
        self.states[index].apply(ev)

    def set_stopping(self) -> None:
        """Stop was pressed."""
        for s in self.states:
            s.stopping = True

    def result(self) -> CompareResult:
        """The comparison so far."""
        return self.comparison.result()

    def html(self) -> str:
        """The whole view."""
        res = self.result()
        cols = "".join(
            f'<div class="col">{self.states[i].html(style=False)}</div>' for i in self.columns
        )
        legend = (
            '<div class="legend"><span class="draft">highlighted</span> = draft tokens the '
            "main model accepted</div>"
        )
        extra = ""
        if res.runs:
            extra = f'<div class="cols"><div class="col">{runs_table(res.rows())}</div>'
            if res.proposed:
                extra += f'<div class="col">{position_chart(res.acceptance_by_position)}</div>'
            extra += "</div>"
        return (
            f'{STYLE}<div class="mlxnb mlxnb-compare">{self._verdict(res)}{legend}'
            f'<div class="cols">{cols}</div>{extra}</div>'
        )

    def plain(self) -> str:
        """Verdict, both texts of the first pair and the runs, as text."""
        res = self.result()
        lines = [TAG.sub("", html.unescape(self._verdict(res)))]
        lines += [self.states[i].plain() for i in self.columns]
        lines += [
            f"run {r['run']} (pair {r['pair']}, {r['role']}): {r['decode_tps']:.1f} tok/s, "
            f"{r['e2e_s']:.2f} s end to end, {r['finish_reason']}"
            for r in res.rows()
        ]
        return "\n\n".join(lines)

    def _verdict(self, res: CompareResult) -> str:
        done, total = len(res.runs), sum(p >= 0 for p, _ in self.comparison.plan)
        if done < total and not any(s.stopping for s in self.states):
            progress = f" <span class='legend'>(run {min(done + 1, total)} of {total})</span>"
        elif done < total:
            progress = " <span class='legend'>(stopped; what ran is kept)</span>"
        else:
            progress = ""
        if res.verdict is None:
            line = "Compare: normal and speculative decoding, in interleaved pairs…"
            return f'<div class="verdict">{line}{progress}</div>'
        cls = "ok" if res.identical else ("bad" if res.identical is False else "")
        line = escape(res.verdict_line())
        figures = f'<div class="legend">{escape(res.figures_line())}</div>'
        return f'<div class="verdict"><span class="{cls}"></span>{line}{progress}</div>{figures}'


def compare_cell(magics, args, request: Request) -> None:
    """``%%generate --compare``: the comparison's live view; ``-o`` binds the `CompareRun`.

    Raises:
        UsageError: One line for a bad option or request; nothing runs then.
    """
    from IPython.core.error import UsageError

    route = magics.route(request.model)
    request.model = route.model
    try:
        comparison = Comparison(route.backend, request, args.repeats, args.metric)
        run = CompareRun(comparison, magics.refresh_hz, label=route.label).start()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    run.view.display()
    if args.out:
        magics.shell.user_ns[args.out] = run
    if args.wait:
        try:
            run.wait()
        except KeyboardInterrupt:
            run.stop()
            run.wait()


class CompareRun:
    """A `Comparison` shown in a `LiveView`.

    Args:
        comparison: What to run (not yet started).
        refresh_hz: View refresh rate.
        fmt: Text format of the columns.
        on_done: Called with the final `CompareResult` (on the refresh thread).
        label: How to name the model in the view.
    """

    def __init__(
        self,
        comparison: Comparison,
        refresh_hz: float = 20,
        fmt: str = "text",
        on_done=None,
        label: str | None = None,
    ) -> None:
        self.comparison = comparison
        self.request = comparison.request
        self.renderer = CompareRenderer(self.comparison, fmt, label)
        self._on_done = on_done
        self.view = LiveView(self.renderer, refresh_hz, on_done=self._finish)
        self.widget = self.view.widget

    @property
    def jobs(self):
        """The runs' jobs, in run order."""
        return self.comparison.jobs

    def start(self) -> CompareRun:
        """Check and submit every run (nothing is submitted if one is invalid)."""
        self.comparison.start()
        self.view.attach(*self.comparison.jobs)
        return self

    def _finish(self) -> None:
        res = self.comparison.finalize()  # the logit margin, where texts part
        self.view.invalidate()
        if self._on_done is not None:
            self._on_done(res)

    def stop(self) -> None:
        """Stop every run; what finished is kept."""
        self.view.stop()

    def wait(self, timeout: float | None = None) -> CompareResult:
        """Block until every run ended and the view is final (Ctrl-C stops the runs)."""
        self.comparison.runs.wait(timeout)
        self.view.wait_rendered(timeout)
        return self.comparison.result()
