"""Compare: speculative against normal decoding in interleaved pairs, with an honest verdict.

Each pair runs normal and speculative decoding on the same prompt, both
prefilled from scratch; pairs alternate which goes first, so a machine that
speeds up or slows down over time favours neither. `CompareResult` holds the
figures (`compare_result`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..display import LiveDisplay
from ..engine.request import Request
from .compare_result import METRICS, OK, CompareResult, speed
from .runs import PacedRuns, measured_request, timed_spec
from .sequential import Decision, Rule, decide

__all__ = ["METRICS", "OK", "CompareResult", "Comparison", "Rule", "compare", "speed"]


class Comparison(LiveDisplay):
    """A running comparison: its jobs, and the result so far.

    Shown in a notebook while it runs (``compare(..., wait=False)``), it is the
    live view with Stop; once ended, its verdict.

    Pairs run one at a time until the answer is clear (see `sequential`): the
    interval of the speed ratio lies above 1, below 1, or inside ``1 ± band``,
    or the budget (``max_pairs`` pairs or ``budget_s`` seconds) is spent. With
    ``repeats`` set, exactly that many pairs run instead.

    Args:
        backend: Where to run (``check``, ``submit``, optionally ``logit_margin``).
        request: A speculative request (a draft source set).
        repeats: Exactly this many interleaved pairs (None: until clear). Default None.
        metric: ``"e2e"`` or ``"decode"``; what the verdict uses.
        warmup: Run one short untimed pair first (pair -1 in `plan`, left out of
            every figure), so one-off costs do not land on the first measured pair.
        max_pairs: Most pairs when running until clear. Default 20.
        budget_s: Most seconds when running until clear. Default 60.
        band: Practical-equivalence band. Default 0.05 (±5 %).
        clock: Seconds, for the budget (tests inject one).

    Raises:
        ValueError: No draft source, or a bad ``repeats``, ``metric`` or budget.
    """

    WARMUP_TOKENS = 8

    def __init__(
        self,
        backend,
        request: Request,
        repeats: int | None = None,
        metric: str = "e2e",
        warmup: bool = True,
        max_pairs: int = 20,
        budget_s: float = 60.0,
        band: float = 0.05,
        clock=time.monotonic,
    ) -> None:
        if request.mode == "normal":
            raise ValueError("draft: Compare needs a draft source (a draft model or 'lookup')")
        if metric not in METRICS:
            raise ValueError(f"metric: must be one of {', '.join(METRICS)} (got {metric!r})")
        self.rule = Rule(band=band, max_pairs=max_pairs, budget_s=budget_s, fixed=repeats)
        self.backend, self.request, self.metric = backend, request, metric
        self.repeats = repeats
        self.clock = clock
        spec = timed_spec(request)
        self._roles = {"normal": replace(spec, draft=None, draft_kind="none"), "speculative": spec}
        self.plan: list[tuple[int, str]] = []
        first = []
        if warmup:  # pair -1, not measured: one-off costs (first use of a path) land here
            n = min(self.WARMUP_TOKENS, request.max_tokens)
            for role in ("normal", "speculative"):
                self.plan.append((-1, role))
                first.append(replace(self._roles[role], max_tokens=n))
        first += self._pair(0)
        self.runs = PacedRuns(backend, first, self._next_pair)
        self.decision: Decision | None = None
        self.margin: float | None = None
        self.fork: list | None = None
        self._t0: float | None = None

    def _pair(self, p: int) -> list[Request]:
        order = ["normal", "speculative"] if p % 2 == 0 else ["speculative", "normal"]
        self.plan += [(p, role) for role in order]
        return [self._roles[role] for role in order]

    def _next_pair(self) -> list[Request] | None:
        res = self.result()
        values = res.values()
        elapsed = self.clock() - self._t0
        greedy_none = res.greedy and res.drafts_known and not res.accepted
        d = decide(
            values,
            self.rule,
            elapsed,
            can_be_faster=not (res.drafts_known and not res.accepted),
            nothing_accepted=greedy_none and bool(values),
        )
        if d is not None:
            self.decision = replace(d, elapsed_s=elapsed)
            return None
        return self._pair(max(p for p, _ in self.plan) + 1)

    @property
    def jobs(self):
        """The submitted jobs, in run order (more are added while it runs)."""
        return self.runs.jobs

    @property
    def done(self) -> bool:
        """Whether every run has ended and no more will start."""
        return self.runs.done

    def start(self) -> Comparison:
        """Check and submit the first pair; the others follow as the answer requires."""
        self._t0 = self.clock()
        self.runs.start()
        return self

    def result(self) -> CompareResult:
        """The comparison so far (complete once every run has ended)."""
        done = [
            (p, role, r)
            for (p, role), r in zip(self.plan, self.runs.results())
            if r is not None and p >= 0
        ]
        return CompareResult(
            done,
            self.repeats,
            _greedy(self.request, [r for _, _, r in done]),
            self.metric,
            self.request.num_draft_tokens,
            self.margin,
            self.fork,
            self.rule,
            self.decision,
        )

    def finalize(self) -> CompareResult:
        """After the last run: find the logit margin where texts part, if they do."""
        res = self.result()
        at = res.divergence
        if at is None or not res.runs:
            return res
        ids = dict(res._ids())
        ref_label = next(iter(ids))
        ref, other, i = ids[ref_label], ids[at[0]], at[1]
        if isinstance(ref, str):  # a server's text: no token ids to look at
            return res
        fork_of = getattr(self.backend, "fork_point", None)
        margin_of = getattr(self.backend, "logit_margin", None)
        try:
            if fork_of is not None and i < len(ref) and i < len(other):
                self.margin, standing = fork_of(self.request, ref[:i], [ref[i], other[i]])
                self.fork = [(lab, text, prob, rank) for lab, (text, _, prob, rank) in
                             zip((ref_label, at[0]), standing)]  # fmt: skip
            elif margin_of is not None:
                self.margin = margin_of(self.request, ref[:i])
        except Exception:
            self.margin = self.fork = None  # a diagnostic; the comparison stands without it
        res.margin, res.fork = self.margin, self.fork
        return res

    def cancel(self) -> None:
        """Stop every run and submit no more; what finished is kept."""
        self.runs.cancel()

    def wait(self, timeout: float | None = None) -> CompareResult:
        """Block until every run ended (Ctrl-C stops them); return the final result."""
        self.runs.wait(timeout)
        return self.finalize()


def compare(
    prompt,
    *,
    model: str = "default",
    draft: str | None = None,
    num_draft_tokens: int = 4,
    repeats: int | None = None,
    metric: str = "e2e",
    max_pairs: int = 20,
    budget_s: float = 60.0,
    band: float = 0.05,
    backend=None,
    wait: bool = True,
    **fields,
) -> CompareResult | Comparison:
    """Compare speculative with normal decoding on ``prompt``, blocking.

    Args:
        prompt: A string or chat messages.
        model: Main model spec.
        draft: ``"lookup"`` (the default unless ``draft_kind`` is given),
            ``"suffix"`` or a draft model spec.
        num_draft_tokens: Draft tokens per round.
        repeats: Exactly this many interleaved pairs; None (the default) runs
            pairs until the answer is clear or the budget is spent. Each run
            prefills from scratch, after one short untimed warm-up pair.
        metric: ``"e2e"`` (prefill included) or ``"decode"``: what the verdict uses.
        max_pairs: Most pairs when running until clear.
        budget_s: Most seconds when running until clear.
        band: A ratio within ``1 ± band`` counts as no difference.
        backend: Where to run; the process-wide engine by default.
        wait: False: return the running `Comparison` at once (shown in a notebook,
            it is the live view with Stop; ``.wait()`` gives the result).
        **fields: Other `Request` fields (``max_tokens``, ``temperature``, ...).

    Returns:
        The `CompareResult` (Ctrl-C stops the runs and re-raises), or with
        ``wait=False`` the started `Comparison`.
    """
    backend, req = measured_request(
        prompt, model, draft, backend, num_draft_tokens=num_draft_tokens, **fields
    )
    comparison = Comparison(
        backend, req, repeats, metric, max_pairs=max_pairs, budget_s=budget_s, band=band
    ).start()
    return comparison.wait() if wait else comparison


def _greedy(request: Request, results: list) -> bool:
    """Whether the runs sampled greedily: the values in force, once a run says them."""
    from ..engine.request import MIN_TEMPERATURE

    for r in results:
        sampling = getattr(r.stats, "sampling", None)
        if sampling:
            return sampling["temperature"] < MIN_TEMPERATURE
    return request.greedy
