"""Compare mode: normal and speculative decoding on the same prompt, side by side."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace

from ..engine.job import Job, Result
from ..engine.request import Request
from ..engine.worker import Engine
from .render import STYLE, ViewState, escape
from .view import LiveView, StatesRenderer

TAG = re.compile(r"<[^>]+>")


@dataclass
class CompareResult:
    """Outcome of one comparison; either side may be None if it never ran."""

    normal: Result | None
    speculative: Result | None
    greedy: bool
    margin: float | None = None

    @property
    def complete(self) -> bool:
        """Both runs ended normally (not cancelled or failed)."""
        ok = ("stop", "length")
        return bool(
            self.normal
            and self.speculative
            and self.normal.finish_reason in ok
            and self.speculative.finish_reason in ok
        )

    @property
    def speedup(self) -> float | None:
        """Speculative generation tok/s over normal generation tok/s."""
        if not self.complete or not self.normal.stats.generation_tps:
            return None
        return self.speculative.stats.generation_tps / self.normal.stats.generation_tps

    @property
    def identical(self) -> bool | None:
        """Whether both runs produced the same tokens (None until both complete)."""
        if not self.complete:
            return None
        return self.normal.token_ids == self.speculative.token_ids

    @property
    def diverged_at(self) -> int | None:
        """Index of the first differing token, if any."""
        if not self.complete or self.identical:
            return None
        a, b = self.normal.token_ids, self.speculative.token_ids
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    def summary(self) -> str:
        """One line for logs and notebooks."""
        if not self.complete:
            return "comparison incomplete (stopped or failed)"
        acc = self.speculative.stats.acceptance_rate
        same = "identical text" if self.identical else f"texts differ at token {self.diverged_at}"
        return (
            f"normal {self.normal.stats.generation_tps:.1f} tok/s, speculative "
            f"{self.speculative.stats.generation_tps:.1f} tok/s -> {self.speedup:.2f}x; "
            f"acceptance {acc or 0:.0%}; {same}"
        )


def compare_requests(request: Request) -> tuple[Request, Request]:
    """The normal and speculative requests; both prefill from scratch for fair timing."""
    if request.mode == "normal":
        raise ValueError("draft: Compare needs a draft model or 'lookup'")
    return (replace(request, draft=None, reuse_cache=False), replace(request, reuse_cache=False))


class CompareRenderer(StatesRenderer):
    """Two columns (normal, speculative) plus a verdict row."""

    def __init__(self, request: Request, fmt: str = "text") -> None:
        super().__init__(
            [
                ViewState(model=request.model, mode="normal", fmt=fmt),
                ViewState(
                    model=request.model,
                    mode=request.mode,
                    k=request.num_draft_tokens,
                    fmt=fmt,
                    highlight_drafts=True,
                ),
            ]
        )
        self.request = request
        self.result: CompareResult | None = None

    def html(self) -> str:
        """Both columns in one HTML string."""
        cols = "".join(f'<div class="col">{s.html(style=False)}</div>' for s in self.states)
        legend = (
            '<div class="legend"><span class="draft">highlighted</span> = draft tokens the '
            "main model accepted</div>"
        )
        return (
            f'{STYLE}<div class="mlxnb mlxnb-compare">{self._verdict()}{legend}'
            f'<div class="cols">{cols}</div></div>'
        )

    def plain(self) -> str:
        """The verdict and both texts as plain text."""
        head = TAG.sub("", self._verdict())
        return "\n\n".join([html.unescape(head), *(s.plain() for s in self.states)])

    def _verdict(self) -> str:
        r = self.result
        if r is None:
            return '<div class="verdict">Compare: normal, then speculative…</div>'
        if not r.complete:
            return '<div class="verdict">Compare stopped; what ran is kept.</div>'
        acc = r.speculative.stats.acceptance_rate or 0
        if r.identical:
            same = '<span class="ok">identical text</span>'
        else:
            margin = "" if r.margin is None else f", top-2 logit margin there {r.margin:.3g}"
            why = (
                "with greedy sampling this means a bug unless the margin is a near-tie"
                if r.greedy
                else "expected with sampling"
            )
            same = (
                f'<span class="bad">texts differ at token {r.diverged_at}{margin} '
                f"({escape(why)})</span>"
            )
        return (
            f'<div class="verdict">speedup {r.speedup:.2f}× · acceptance {acc:.0%} · {same}</div>'
        )


class CompareRun:
    """Submits the two jobs and shows them in a `LiveView`.

    Args:
        engine: Where to run.
        request: A speculative request (draft model or lookup).
        refresh_hz: View refresh rate.
        fmt: Text format of the columns.
        on_done: Called (on the refresh thread) once both finished and rendered.
    """

    def __init__(
        self,
        engine: Engine,
        request: Request,
        refresh_hz: float = 20,
        fmt: str = "text",
        on_done=None,
    ) -> None:
        self.engine = engine
        self.request = request
        self.renderer = CompareRenderer(request, fmt)
        self._on_done = on_done
        self.view = LiveView(self.renderer, refresh_hz, on_done=self._finish)
        self.widget = self.view.widget
        self.jobs: list[Job] = []

    def start(self) -> CompareRun:
        """Queue normal then speculative: FIFO keeps their timings apart.

        Both requests are checked before either is submitted, so a bad one leaves
        no orphan job behind.
        """
        normal, spec = compare_requests(self.request)
        for r in (normal, spec):
            self.engine.check(r)
        self.jobs = [self.engine.submit(normal), self.engine.submit(spec)]
        self.view.attach(*self.jobs)
        return self

    def _result(self) -> CompareResult:
        results = [j.result(raise_on_error=False) if j.done else None for j in self.jobs]
        return CompareResult(results[0], results[1], greedy=self.request.temperature == 0)

    def _finish(self) -> None:
        res = self._result()
        if res.complete and not res.identical:
            res.margin = self._margin(res)
        self.renderer.result = res
        self.view._dirty = True  # the verdict is not an event
        self.view.refresh()
        if self._on_done is not None:
            self._on_done(res)

    def _margin(self, res: CompareResult) -> float | None:
        try:
            return self.engine.logit_margin(self.request, res.normal.token_ids[: res.diverged_at])
        except Exception:
            return None

    def stop(self) -> None:
        """Cancel both; whatever finished is kept."""
        self.view.stop()

    def wait(self, timeout: float | None = None) -> CompareResult:
        """Block until both jobs ended and the view is final."""
        for j in self.jobs:
            j.wait(timeout)
        self.view.wait_rendered(timeout)
        return self.renderer.result or self._result()
