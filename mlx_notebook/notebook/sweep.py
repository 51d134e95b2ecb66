"""The Sweep view: progress per k while it runs, then the verdict and the chart."""

from __future__ import annotations

from ..engine.request import Request
from ..measure.sweep import Sweep, SweepResult
from .charts import position_chart, sweep_chart
from .render import STYLE, ViewState, escape
from .view import LiveView


class SweepRenderer:
    """A line per k (runs done, median speed, speedup and interval), then the chart.

    Args:
        sweep: The sweep being run.
    """

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        req = sweep.request
        self.states = [
            ViewState(model=req.model, mode="normal" if k is None else req.mode, k=k or 0)
            for k in sweep.order
        ]

    def apply_from(self, index: int, ev) -> None:
        """Fold an event of run ``index``."""
        self.states[index].apply(ev)

    def set_stopping(self) -> None:
        """Stop was pressed."""
        for s in self.states:
            s.stopping = True

    def result(self) -> SweepResult:
        """The sweep so far."""
        return self.sweep.result()

    def _lines(self, res: SweepResult) -> list[str]:
        done = sum(1 for _, r in res.runs if r is not None)
        total = len(res.runs)
        unit = "tok/s end to end" if res.metric == "e2e" else "tok/s decode"
        base = res.baseline
        lines = [
            f"{res.verdict_line()}" if done == total else f"sweeping k: run {done + 1} of {total}",
            f"normal decoding: {len(base)} runs"
            + (f", median {sorted(base)[len(base) // 2]:.1f} {unit}" if base else ""),
        ]
        for row in res.rows:
            if row["tps"] is None:
                lines.append(f"k={row['k']}: waiting")
                continue
            ci = f" (95% CI {row['low']:.2f}–{row['high']:.2f}×)" if row["low"] is not None else ""
            lines.append(
                f"k={row['k']}: {row['runs']} runs, median {row['tps']:.1f} {unit}, "
                f"{row['speedup']:.2f}× normal{ci}, acceptance {row['acceptance']:.0%}"
            )
        return lines

    def html(self) -> str:
        """The whole view."""
        res = self.result()
        lines = self._lines(res)
        head, rest = lines[0], lines[1:]
        parts = [
            STYLE,
            '<div class="mlxnb mlxnb-sweep">',
            f'<div class="verdict">{escape(head)}</div>',
            *(f"<div>{escape(x)}</div>" for x in rest),
        ]
        if any(r["tps"] is not None for r in res.rows):
            unit = "tok/s, end to end" if res.metric == "e2e" else "tok/s, decode"
            parts.append(sweep_chart(res.rows, res.baseline, res.best_k, unit))
            show = next((r for r in res.rows if r["k"] == res.best_k), None)
            show = show or max((r for r in res.rows if r["runs"]), key=lambda r: r["k"])
            if show["accepted"]:
                parts.append(f"<div>k = {show['k']}:</div>{position_chart(show['by_position'])}")
        parts.append("</div>")
        return "".join(parts)

    def plain(self) -> str:
        """The lines as text."""
        return "\n".join(self._lines(self.result()))


class SweepRun:
    """A `Sweep` shown in a `LiveView`.

    Args:
        backend: Where to run.
        request: A speculative request; ``num_draft_tokens`` varies.
        ks: The k values.
        repeats: Runs per k.
        metric: ``"e2e"`` or ``"decode"``.
        refresh_hz: View refresh rate.
        on_done: Called with the final `SweepResult` (on the refresh thread).
    """

    def __init__(
        self,
        backend,
        request: Request,
        ks,
        repeats: int = 3,
        metric: str = "e2e",
        refresh_hz: float = 20,
        on_done=None,
    ) -> None:
        self.sweep = Sweep(backend, request, ks, repeats, metric)
        self.renderer = SweepRenderer(self.sweep)
        self._on_done = on_done
        self.view = LiveView(self.renderer, refresh_hz, on_done=self._finish)
        self.widget = self.view.widget

    @property
    def jobs(self):
        """The runs' jobs, in run order."""
        return self.sweep.jobs

    def start(self) -> SweepRun:
        """Check and submit every run."""
        self.sweep.start()
        self.view.attach(*self.sweep.jobs)
        return self

    def _finish(self) -> None:
        if self._on_done is not None:
            self._on_done(self.sweep.result())

    def stop(self) -> None:
        """Stop every run; what finished is kept."""
        self.view.stop()

    def wait(self, timeout: float | None = None) -> SweepResult:
        """Block until every run ended and the view is final."""
        self.sweep.runs.wait(timeout)
        self.view.wait_rendered(timeout)
        return self.sweep.result()
