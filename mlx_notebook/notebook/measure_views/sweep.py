"""The Sweep view: progress per k while it runs, then the verdict and the chart."""

from __future__ import annotations

from ...engine.request import Request
from ...measure.stats import counted
from ...measure.sweep import Sweep, SweepResult
from ..views.render import STYLE, ViewState, escape
from ..views.view import LiveView
from .charts import position_chart, sweep_chart


class SweepRenderer:
    """A line per k (runs done, median speed, speedup and interval), then the chart.

    The chart draws each k's speedup and interval, the figures the best k is
    chosen by, and rings the k the verdict names.

    Args:
        sweep: The sweep being run.
    """

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.states: dict[int, ViewState] = {}
        self.stopping = False

    def apply_from(self, index: int, ev) -> None:
        """Fold an event of run ``index``."""
        if index not in self.states:
            req, k = self.sweep.request, self.sweep.order[index]
            mode = "normal" if k is None else req.mode
            self.states[index] = ViewState(model=req.model, mode=mode, k=k or 0)
        self.states[index].apply(ev)

    def set_stopping(self) -> None:
        """Stop was pressed: no more rounds, and the runs in flight end."""
        self.stopping = True
        self.sweep.cancel()
        for s in self.states.values():
            s.stopping = True

    def result(self) -> SweepResult:
        """The sweep so far."""
        return self.sweep.result()

    def _progress(self, res: SweepResult) -> str:
        done = sum(1 for _, r in res.runs if r is not None)
        total = max(self.sweep.planned(), done)
        if self.stopping:
            return f"stopped after {done} of {counted(total, 'run')}; what ran is kept"
        left = res.estimate_s(total)
        eta = "estimating the time it takes…" if left is None else f"about {_duration(left)} left"
        return f"sweeping k: run {min(done + 1, total)} of {total} · {eta}"

    def _lines(self, res: SweepResult) -> list[str]:
        unit = "tok/s end to end" if res.metric == "e2e" else "tok/s decode"
        base = res.baseline
        lines = [
            res.verdict_line() if self.sweep.runs.done else self._progress(res),
            f"normal decoding: {counted(len(base), 'run')}"
            + (f", median {sorted(base)[len(base) // 2]:.1f} {unit}" if base else ""),
        ]
        for row in res.rows:
            gone = res.dropped.get(row["k"])
            note = "" if gone is None else f" · dropped after round {gone}: clearly worse"
            if row["tps"] is None:
                lines.append(f"k={row['k']}: waiting")
                continue
            if row["speedup"] is None:  # no normal run beside it has finished well yet
                runs = counted(row["runs"], "run")
                lines.append(f"k={row['k']}: {runs}, median {row['tps']:.1f} {unit}")
                continue
            ci = ""
            if row["low"] is not None:
                noise = "" if row["clears"] else ", within noise"
                ci = f" (95% CI {row['low']:.2f}–{row['high']:.2f}×{noise})"
            lines.append(
                f"k={row['k']}: {counted(row['runs'], 'run')}, median {row['tps']:.1f} {unit}, "
                f"{row['speedup']:.2f}× normal{ci}, acceptance {row['acceptance']:.0%}{note}"
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
        live: A widget to draw in (a Panel's); by default its own.
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
        live=None,
    ) -> None:
        self.sweep = Sweep(backend, request, ks, repeats, metric)
        self.renderer = SweepRenderer(self.sweep)
        self._on_done = on_done
        self.view = LiveView(self.renderer, refresh_hz, on_done=self._finish, live=live)
        self.widget = self.view.widget

    @property
    def jobs(self):
        """The runs' jobs, in run order."""
        return self.sweep.jobs

    def start(self) -> SweepRun:
        """Check and submit the first round; later rounds join the view as they start."""
        self.view.follow(self.sweep.runs, self.sweep.start)
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


def _duration(seconds: float) -> str:
    """``"45 s"`` or ``"3 min 20 s"``."""
    s = round(seconds)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"
