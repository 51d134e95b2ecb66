"""Compare: speculative against normal decoding in interleaved pairs, with an honest verdict.

Each pair runs normal and speculative decoding on the same prompt, both
prefilled from scratch; pairs alternate which goes first, so a machine that
speeds up or slows down over time favours neither. `CompareResult` holds the
figures (`compare_result`).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.request import Request
from .compare_result import METRICS, OK, CompareResult, speed
from .runs import RunSet, measured_request

__all__ = ["METRICS", "OK", "CompareResult", "Comparison", "compare", "speed"]


class Comparison:
    """A running comparison: its jobs, and the result so far.

    Args:
        backend: Where to run (``check``, ``submit``, optionally ``logit_margin``).
        request: A speculative request (a draft source set).
        repeats: Interleaved pairs. Default: 3.
        metric: ``"e2e"`` or ``"decode"``; what the verdict uses.
        warmup: Run one short untimed pair first (pair -1 in `plan`, left out of
            every figure), so one-off costs do not land on the first measured pair.

    Raises:
        ValueError: No draft source, or bad ``repeats`` or ``metric``.
    """

    WARMUP_TOKENS = 8

    def __init__(
        self,
        backend,
        request: Request,
        repeats: int = 3,
        metric: str = "e2e",
        warmup: bool = True,
    ) -> None:
        if request.mode == "normal":
            raise ValueError("draft: Compare needs a draft source (a draft model or 'lookup')")
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats: must be a positive integer (got {repeats!r})")
        if metric not in METRICS:
            raise ValueError(f"metric: must be one of {', '.join(METRICS)} (got {metric!r})")
        self.backend, self.request, self.repeats, self.metric = backend, request, repeats, metric
        # Measured runs run alone (never batched with each other) and from scratch.
        spec = replace(request, reuse_cache=False, remember=False, batch=False)
        normal = replace(spec, draft=None, draft_kind="none")
        self.plan: list[tuple[int, str]] = []
        reqs = []
        if warmup:  # pair -1, not measured: one-off costs (first use of a path) land here
            n = min(self.WARMUP_TOKENS, request.max_tokens)
            for role, r in (("normal", normal), ("speculative", spec)):
                self.plan.append((-1, role))
                reqs.append(replace(r, max_tokens=n))
        for p in range(repeats):
            order = [("normal", normal), ("speculative", spec)]
            for role, r in order if p % 2 == 0 else order[::-1]:
                self.plan.append((p, role))
                reqs.append(r)
        self.runs = RunSet(backend, reqs)
        self.margin: float | None = None

    @property
    def jobs(self):
        """The submitted jobs, in run order."""
        return self.runs.jobs

    def start(self) -> Comparison:
        """Check and submit every run (see `RunSet.start`)."""
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
            self.request.greedy,
            self.metric,
            self.request.num_draft_tokens,
            self.margin,
        )

    def finalize(self) -> CompareResult:
        """After the last run: find the logit margin where texts part, if they do."""
        res = self.result()
        at = res.divergence
        margin_of = getattr(self.backend, "logit_margin", None)
        if at is not None and margin_of is not None and res.runs:
            ref = next(r for _, _, r in res.runs if r.finish_reason in OK)
            try:
                self.margin = margin_of(self.request, ref.token_ids[: at[1]])
            except Exception:
                self.margin = None  # a diagnostic; the comparison stands without it
            res.margin = self.margin
        return res

    def cancel(self) -> None:
        """Stop every run; what finished is kept."""
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
    repeats: int = 3,
    metric: str = "e2e",
    backend=None,
    **fields,
) -> CompareResult:
    """Compare speculative with normal decoding on ``prompt``, blocking.

    Args:
        prompt: A string or chat messages.
        model: Main model spec.
        draft: ``"lookup"`` (the default unless ``draft_kind`` is given),
            ``"suffix"`` or a draft model spec.
        num_draft_tokens: Draft tokens per round.
        repeats: Interleaved pairs (each run prefills from scratch), after one
            short untimed warm-up pair.
        metric: ``"e2e"`` (prefill included) or ``"decode"``: what the verdict uses.
        backend: Where to run; the process-wide engine by default.
        **fields: Other `Request` fields (``max_tokens``, ``temperature``, ...).

    Returns:
        The `CompareResult`. Ctrl-C stops the runs and re-raises.
    """
    backend, req = measured_request(
        prompt, model, draft, backend, num_draft_tokens=num_draft_tokens, **fields
    )
    return Comparison(backend, req, repeats, metric).start().wait()
