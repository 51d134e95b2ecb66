"""The Compare view: the first pair streams side by side; later pairs update the figures.

All measuring is done by `mlx_notebook.measure.Comparison`; this module only
renders it, so ``%%generate --compare``, the Panel and ``mlx_notebook.compare``
share one path.
"""

from __future__ import annotations

import html
import re

from ...engine.request import Request
from ...measure.compare import CompareResult, Comparison
from ..views.render import STYLE, ViewState, escape
from ..views.view import LiveView
from .charts import position_chart, runs_table

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
        self.label, self.fmt = label, fmt
        self.states: dict[int, ViewState] = {}
        self.stopping = False
        # The first pair, normal on the left whichever ran first.
        first = [i for i, (p, _) in enumerate(comparison.plan) if p == 0]
        self.columns = sorted(first, key=lambda i: comparison.plan[i][1] != "normal")

    def state(self, index: int) -> ViewState:
        """The view state of run ``index`` (runs are added as the comparison goes)."""
        if index not in self.states:
            req, role = self.comparison.request, self.comparison.plan[index][1]
            self.states[index] = ViewState(
                model=self.label or req.model,
                mode="normal" if role == "normal" else req.mode,
                k=req.num_draft_tokens,
                fmt=self.fmt,
                highlight_drafts=role != "normal",
            )
            self.states[index].stopping = self.stopping
        return self.states[index]

    def apply_from(self, index: int, ev) -> None:
        """Fold an event of run ``index``."""
        self.state(index).apply(ev)

    def set_stopping(self) -> None:
        """Stop was pressed: no more pairs, and the runs in flight end."""
        self.stopping = True
        self.comparison.cancel()
        for s in self.states.values():
            s.stopping = True

    def result(self) -> CompareResult:
        """The comparison so far."""
        return self.comparison.result()

    def html(self) -> str:
        """The whole view."""
        res = self.result()
        cols = "".join(
            f'<div class="col">{self.state(i).html(style=False)}</div>' for i in self.columns
        )
        legend = (
            '<div class="legend"><span class="draft">highlighted</span> = draft tokens the '
            "main model accepted</div>"
        )
        extra = ""
        if res.runs:
            # The runs' table keeps its width; the chart goes below it where both don't fit.
            extra = f'<div class="cols wraps"><div class="col">{runs_table(res.rows())}</div>'
            if res.proposed:
                extra += f'<div class="col">{position_chart(res.acceptance_by_position)}</div>'
            extra += "</div>"
        return (
            f'{STYLE}<div class="mlxnb mlxnb-compare">{self._verdict(res)}{fork_line(res)}'
            f'{legend}<div class="cols">{cols}</div>{extra}</div>'
        )

    def plain(self) -> str:
        """Verdict, both texts of the first pair and the runs, as text."""
        res = self.result()
        lines = [TAG.sub("", html.unescape(self._verdict(res).replace("</div>", "\n"))).strip()]
        lines += [self.state(i).plain() for i in self.columns]
        lines += [
            f"run {r['run']} (pair {r['pair']}, {r['role']}): {r['decode_tps']:.1f} tok/s, "
            f"{r['e2e_s']:.2f} s end to end, {r['finish_reason']}"
            for r in res.rows()
        ]
        return "\n\n".join(lines)

    def _verdict(self, res: CompareResult) -> str:
        c = self.comparison
        ended = c.runs.done
        if not ended and not self.stopping:
            pair = max((p for p, _ in c.plan), default=0) + 1
            progress = f" <span class='legend'>(pair {pair}; {c.rule.describe()})</span>"
        elif not res.complete:
            progress = " <span class='legend'>(stopped; what ran is kept)</span>"
        else:
            progress = ""
        if res.verdict is None:
            line = "Compare: normal and speculative decoding, in interleaved pairs…"
            return f'<div class="verdict">{line}{progress}</div>'
        # A tick only for a clear "faster" with the texts the same; a cross for
        # "slower" or differing greedy text; otherwise a neutral mark (undecided,
        # no difference, nothing accepted are not successes).
        if res.identical is False and res.greedy:
            cls = "bad"
        elif res.verdict == "faster" and ended:
            cls = "ok"
        elif res.verdict == "slower" and ended:
            cls = "bad"
        else:
            cls = "neutral"
        line = escape(res.verdict_line())
        figures = f'<div class="legend">{escape(res.figures_line())}</div>'
        return f'<div class="verdict"><span class="{cls}"></span>{line}{progress}</div>{figures}'


def fork_line(res: CompareResult) -> str:
    """Where the runs part: each one's token there, tinted by its probability (inspector)."""
    if not res.fork:
        return ""
    from ..views.inspect import CSS, band

    sides = " vs ".join(
        f'{escape(label)}: <span class="tk b{band(prob)}">{escape(text)}</span> '
        f"p {prob:.3f}, rank {rank}"
        for label, text, prob, rank in res.fork
    )
    margin = "" if res.margin is None else f" · top-2 logit margin {res.margin:.3g}"
    return f'{CSS}<div class="legend fork-row">where they part: {sides}{margin}</div>'


def compare_cell(magics, args, request: Request) -> None:
    """``%%generate --compare``: the comparison's live view; ``-o`` binds the `CompareRun`.

    Raises:
        UsageError: One line for a bad option or request; nothing runs then.
    """
    from IPython.core.error import UsageError

    route = magics.route(request.model)
    request.model = route.model
    try:
        comparison = Comparison(
            route.backend,
            request,
            args.repeats,
            args.metric,
            max_pairs=args.max_pairs,
            budget_s=args.budget,
        )
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
            run.stop()  # the pairs so far are kept; the interrupt goes on (Run All stops)
            run.wait()
            raise


class CompareRun:
    """A `Comparison` shown in a `LiveView`.

    Args:
        comparison: What to run (not yet started).
        refresh_hz: View refresh rate.
        fmt: Text format of the columns.
        on_done: Called with the final `CompareResult` (on the refresh thread).
        label: How to name the model in the view.
        live: A widget to draw in (a Panel's); by default its own.
    """

    def __init__(
        self,
        comparison: Comparison,
        refresh_hz: float = 20,
        fmt: str = "text",
        on_done=None,
        label: str | None = None,
        live=None,
    ) -> None:
        self.comparison = comparison
        self.request = comparison.request
        self.renderer = CompareRenderer(self.comparison, fmt, label)
        self._on_done = on_done
        self.view = LiveView(self.renderer, refresh_hz, on_done=self._finish, live=live)
        self.widget = self.view.widget

    @property
    def jobs(self):
        """The runs' jobs, in run order."""
        return self.comparison.jobs

    def start(self) -> CompareRun:
        """Check and submit the first pair (nothing is submitted if it is invalid).

        Later pairs join the view as the comparison submits them.
        """
        self.view.follow(self.comparison.runs, self.comparison.start)
        return self

    def join(self) -> CompareRun:
        """Follow a comparison already started (``compare(..., wait=False)`` shown late)."""
        self.view.join(self.comparison.runs)
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
