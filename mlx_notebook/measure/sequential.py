"""When to stop measuring: pairs until the interval answers, or a budget runs out.

Compare runs interleaved pairs and looks at the speed ratio after each one. It
stops when the interval of the ratio lies entirely above 1 ("faster"), entirely
below 1 ("slower"), or entirely inside a practical-equivalence band around 1
("no difference beyond ±5 %"), and otherwise when its budget of pairs or
seconds is spent ("undecided"). Looking after every pair gives chance many
tries at a false verdict, so each look uses a 99% interval: over up to 20 looks
the chance of calling a 1.00x truth "faster" stays under 5% (a Pocock-style
boundary; `tests/measure/test_sequential.py` checks it in simulation).
"""

from __future__ import annotations

from dataclasses import dataclass

from .stats import Ratio, counted, ratio

LOOK_LEVEL = 0.99  # the interval at each look; about 95% over all of them


@dataclass(frozen=True)
class Rule:
    """How long to measure.

    Attributes:
        band: Practical-equivalence band: a ratio within ``1 ± band`` is "no
            difference". Default 0.05.
        max_pairs: Most pairs. Default 20.
        budget_s: Most seconds, counted from the first pair's start. Default 60.
        fixed: Run exactly this many pairs and decide nothing early (None: sequential).
    """

    band: float = 0.05
    max_pairs: int = 20
    budget_s: float = 60.0
    fixed: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.band < 1:
            raise ValueError(f"band: must be between 0 and 1 (got {self.band!r})")
        if not isinstance(self.max_pairs, int) or self.max_pairs < 2:
            raise ValueError(f"max_pairs: must be an integer >= 2 (got {self.max_pairs!r})")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s: must be > 0 (got {self.budget_s!r})")
        if self.fixed is not None and (not isinstance(self.fixed, int) or self.fixed < 1):
            raise ValueError(f"repeats: must be a positive integer (got {self.fixed!r})")

    @property
    def level(self) -> float:
        """Confidence of the interval at each look (plain 95% for a fixed count)."""
        return 0.95 if self.fixed is not None else LOOK_LEVEL

    def describe(self) -> str:
        """The plan in words, for a view's progress line."""
        if self.fixed is not None:
            return counted(self.fixed, "pair")
        return f"until clear, at most {self.max_pairs} pairs or {self.budget_s:g} s"


@dataclass(frozen=True)
class Decision:
    """Why measuring ended.

    Attributes:
        outcome: ``"faster"``, ``"slower"``, ``"same"`` (inside the band),
            ``"nothing accepted"`` or ``"undecided"`` (budget spent).
        limit: For ``"undecided"``: ``"pairs"``, ``"time"`` or ``"fixed"``.
        elapsed_s: Seconds measured when it ended.
    """

    outcome: str
    limit: str | None = None
    elapsed_s: float = 0.0

    @property
    def decided(self) -> bool:
        """Whether the interval gave an answer (faster, slower or the same)."""
        return self.outcome in ("faster", "slower", "same")


def judge(r: Ratio | None, band: float) -> str | None:
    """What an interval says: faster, slower, same (inside ``1 ± band``), or None."""
    if r is None or r.low is None:
        return None
    if r.low > 1:
        return "faster"
    if r.high < 1:
        return "slower"
    if r.low >= 1 - band and r.high <= 1 + band:
        return "same"
    return None


def decide(
    values: list[float],
    rule: Rule,
    elapsed_s: float,
    can_be_faster: bool = True,
    nothing_accepted: bool = False,
) -> Decision | None:
    """Whether to stop after the pairs measured so far.

    Args:
        values: Per-pair speed ratios (speculative / normal).
        rule: The stopping rule.
        elapsed_s: Seconds since the first pair started.
        can_be_faster: False when no draft was accepted: then "faster" is never
            the answer (what looks faster is noise).
        nothing_accepted: Greedy runs accepted no draft at all, so none will:
            stop after two pairs, there is nothing to measure.

    Returns:
        The `Decision`, or None to run another pair.
    """
    n = len(values)
    if rule.fixed is not None:
        return Decision("undecided", "fixed") if n >= rule.fixed else None
    # Nothing accepted is the answer once two pairs agree, or as soon as the budget
    # ends the run (a busy machine may spend it on one pair): "undecided" would hide it.
    spent = n >= rule.max_pairs or elapsed_s >= rule.budget_s
    if nothing_accepted and (n >= 2 or (n >= 1 and spent)):
        return Decision("nothing accepted")
    verdict = judge(ratio(values, rule.level) if n >= 2 else None, rule.band)
    if verdict == "faster" and not can_be_faster:
        verdict = None
    if verdict is not None:
        return Decision(verdict)
    if n >= rule.max_pairs:
        return Decision("undecided", "pairs")
    if elapsed_s >= rule.budget_s:
        return Decision("undecided", "time")
    return None
